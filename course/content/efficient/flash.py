"""Notebook 01 of `efficient`: FlashAttention's algorithm on the CPU (online softmax, tiles, lse, merging)."""
from course.cells import check, demo, graded_cell, md, setup, solution
from course.content.written import written_cells

NAME = "01_flash"

HINTS = {
    "flash_attention": (
        "online softmax per query row: a running max, a running sum and an unnormalised output,\n"
        "the old ones rescaled whenever the max grows (the recipe is folded above this cell).",
        "对每个查询行做在线 softmax：运行最大值、运行和、未归一化的输出，\n"
        "最大值变大时把旧的量重新缩放（具体做法折叠在本单元格上方）。",
    ),
    "merge_attention": (
        "each side's lse is the log of its softmax denominator: weigh each side by its share of the total\n"
        "(the recipe is folded above this cell).",
        "每一侧的 lse 是它 softmax 分母的对数：按各自占总和的份额给两侧加权（具体做法折叠在本单元格上方）。",
    ),
}

DOCSTRINGS_ZH = {
    "flash_attention": "q [B, H, S_q, D]，k [B, H, S_k, D]，v [B, H, S_k, D_v] -> (out [B, H, S_q, D_v]，与 q 同 dtype；"
                       "lse [B, H, S_q]，float32)，每次只计算一个 (block_q x block_k) 的分数块。",
    "merge_attention": "由两组键各自的注意力结果，精确合并出对两组键一起做注意力的 (out [B, H, S_q, D_v], lse [B, H, S_q])。",
}


def cells():
    return [
        md(r"""
        # 01 · FlashAttention's algorithm, exactly, on the CPU

        Plain attention builds the whole score matrix `[B, H, S_q, S_k]` before the softmax: its memory
        grows as $S^2$. FlashAttention (Dao et al., 2022) computes **exactly the same output** while holding
        only one small tile of scores at a time. Its trick is not a GPU trick but an algebraic one, the
        **online softmax**, and you will write it here in plain PyTorch, then measure what it saves.

        | part | what you write |
        |---|---|
        | `flash` | `flash_attention(q, k, v, causal, block_q, block_k) -> (out, lse)`, `merge_attention(...)` |

        Per-head tensors are `[B, H, S, D]`; values may have their own width `D_v`. Your code may use
        `torch` but not `F.scaled_dot_product_attention` or `flex_attention`: the point is to build it.
        """, r"""
        # 01 · 在 CPU 上精确实现 FlashAttention 的算法

        朴素注意力在做 softmax 之前要先把整个分数矩阵 `[B, H, S_q, S_k]` 构造出来：它的内存按 $S^2$ 增长。FlashAttention（Dao 等，2022）算出的输出**完全相同**，但任何时刻只保留一小块分数。它的诀窍不是 GPU 上的技巧，而是一个代数技巧——**在线 softmax**。你会在这里用普通的 PyTorch 把它写出来，再测量它省下了多少内存。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `flash` | `flash_attention(q, k, v, causal, block_q, block_k) -> (out, lse)`、`merge_attention(...)` |

        每个头的张量形状是 `[B, H, S, D]`；值可以有自己的宽度 `D_v`。你的代码可以用 `torch`，但不能用 `F.scaled_dot_product_attention` 或 `flex_attention`：重点是亲手把它搭出来。
        """),
        setup(),
        md(r"""
        ## 1. Online softmax on one row

        For one query, softmax over scores $s_1 \dots s_n$ needs two numbers from the **whole** row: the
        maximum $m$ (subtracted for stability, so that no $e^{s}$ overflows) and the sum
        $\ell = \sum_j e^{s_j - m}$. It looks as if all scores must be known first.

        They need not. Read the scores in blocks and keep a **running maximum** $m$ and a **running sum**
        $\ell$ of $e^{s_j - m}$ over what you have read. When a new block raises the maximum to
        $m_\text{new}$, every term summed so far is off by the same factor, because

        $$e^{s_j - m_\text{new}} = e^{s_j - m} \cdot e^{m - m_\text{new}},$$

        so $\ell \leftarrow \ell \, e^{m - m_\text{new}} + \sum_{\text{new } j} e^{s_j - m_\text{new}}$. Nothing is
        approximated: the rescaling is exact. The cell streams a row of 12 scores (some of them near 1000,
        where $e^{s}$ alone is `inf` in float32) in blocks of 4, printing $m$ and $\ell$ after each block,
        then compares $m + \log \ell$ with `torch.logsumexp` of the whole row.
        """, r"""
        ## 1. 单行上的在线 softmax

        对一个查询而言，在分数 $s_1 \dots s_n$ 上做 softmax 需要**整行**的两个数：最大值 $m$（减去它是为了数值稳定，使任何 $e^{s}$ 都不会溢出）以及和 $\ell = \sum_j e^{s_j - m}$。看起来必须先知道所有分数。

        其实不必。把分数分块读入，并对已读部分维护一个**运行最大值** $m$ 和 $e^{s_j - m}$ 的**运行和** $\ell$。当新的一块把最大值抬高到 $m_\text{new}$ 时，此前累加的每一项都差了同一个因子，因为

        $$e^{s_j - m_\text{new}} = e^{s_j - m} \cdot e^{m - m_\text{new}},$$

        所以 $\ell \leftarrow \ell \, e^{m - m_\text{new}} + \sum_{\text{新的 } j} e^{s_j - m_\text{new}}$。这里没有任何近似：重新缩放是精确的。下面的单元格把一行 12 个分数（其中有些接近 1000，在 float32 下单独算 $e^{s}$ 就是 `inf`）按每块 4 个流式读入，每读完一块打印 $m$ 和 $\ell$，最后把 $m + \log \ell$ 和整行的 `torch.logsumexp` 比较。
        """),
        demo("""
        torch.manual_seed(0)
        scores = torch.randn(12) * 3
        scores[5], scores[9] = 996.0, 1000.0  # exp(1000) is inf in float32
        print(say("exp of the largest score alone: {value}", value=torch.exp(scores.max()).item()))

        m, l = torch.tensor(float("-inf")), torch.tensor(0.0)  # running max, running sum of exp(s - m)
        for start in range(0, 12, 4):
            block = scores[start : start + 4]
            m_new = torch.maximum(m, block.max())
            l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum()  # rescale the old sum, add the new terms
            m = m_new
            print(say("after scores {first}..{last}: running max {m:8.2f}, running sum {l:.6f}",
                      first=start, last=start + 3, m=m.item(), l=l.item()))
        print(say("m + log(l) = {online:.6f}; torch.logsumexp of the whole row = {whole:.6f}",
                  online=(m + torch.log(l)).item(), whole=torch.logsumexp(scores, 0).item()))
        """),
        *written_cells("written_online_rescale"),
        md(r"""
        The output is a weighted sum $\sum_j p_j v_j$ with $p_j = e^{s_j - m} / \ell$: keep it **unnormalised**,
        $o = \sum_j e^{s_j - m} v_j$, rescale it by the same $e^{m - m_\text{new}}$ as $\ell$, and divide by
        $\ell$ once, at the end. That is the whole algorithm; the rest is bookkeeping.

        ## 2. Tiles

        FlashAttention applies this to a block of `block_q` queries at once, reading the keys in blocks of
        `block_k`: each step computes one **tile** of scores `[block_q, block_k]` per head, updates the running
        max, sum and output of the block's query rows, and throws the tile away. Memory: one tile, plus
        the running quantities (`block_q` numbers for $m$ and $\ell$, `block_q x D_v` for $o$).

        With `causal=True` the mask is **bottom-right aligned** (query $i$ sees keys $j \le i + S_k - S_q$,
        as in decoding with a cache). A tile can then be entirely visible, entirely in the future (it is
        **skipped**: never computed), or cut by the diagonal (computed, then masked). The cell draws the
        (query block, key block) grid for `S = 512` and blocks of 64, from the causal mask itself, and
        counts each kind.
        """, r"""
        输出是加权和 $\sum_j p_j v_j$，其中 $p_j = e^{s_j - m} / \ell$：把它保持为**未归一化**的 $o = \sum_j e^{s_j - m} v_j$，用与 $\ell$ 相同的 $e^{m - m_\text{new}}$ 重新缩放，只在最后除以一次 $\ell$。整个算法就是这些；剩下的只是记账。

        ## 2. 分块

        FlashAttention 一次处理一块 `block_q` 个查询，按每块 `block_k` 个读入键：每一步对每个头计算一个 `[block_q, block_k]` 的分数**块**（tile），更新这块查询行的运行最大值、运行和与运行输出，然后把这块分数丢掉。内存：一个分数块，加上运行量（$m$ 和 $\ell$ 各 `block_q` 个数，$o$ 为 `block_q x D_v`）。

        当 `causal=True` 时，掩码是**右下对齐**的（查询 $i$ 看到键 $j \le i + S_k - S_q$，和带缓存的解码一样）。于是一个分块要么完全可见，要么完全在未来（它会被**跳过**：根本不计算），要么被对角线切开（先计算，再加掩码）。下面的单元格根据因果掩码本身，画出 `S = 512`、块大小 64 时的（查询块，键块）网格，并统计每一类的个数。
        """),
        demo("""
        import matplotlib.pyplot as plt
        from matplotlib.colors import ListedColormap

        S, block = 512, 64
        visible = torch.ones(S, S, dtype=torch.bool).tril()  # causal, S_q == S_k
        seen = visible.reshape(S // block, block, S // block, block).sum(dim=(1, 3))  # [query blocks, key blocks]
        kind = torch.where(seen == 0, 0, torch.where(seen == block * block, 2, 1))  # 0 skipped, 1 cut, 2 full
        counts = [(kind == c).sum().item() for c in range(3)]
        print(say("{n} tiles: {full} fully visible, {cut} cut by the diagonal, {skipped} skipped "
                  "({share:.0%} of the work saved)", n=kind.numel(), full=counts[2], cut=counts[1],
                  skipped=counts[0], share=counts[0] / kind.numel()))
        fig, ax = plt.subplots(figsize=(4.2, 4.2))
        ax.imshow(kind, cmap=ListedColormap(["#eeeeee", "#f4a261", "#2a9d8f"]), vmin=0, vmax=2)
        ax.set(title=say("causal tiles: skipped (grey), cut (orange), full (green)"),
               xlabel=say("key block"), ylabel=say("query block"))
        plt.show()
        """),
        md(r"""
        ## 3. The log-sum-exp, and why kernels return it

        Besides the output, your function returns for each query row

        $$\text{lse}_i = \log \sum_j e^{s_{ij}} = m_i + \log \ell_i$$

        in float32 (for every query: $m$ and $\ell$ are exactly what you kept). FlashAttention kernels return
        it for two reasons: the backward pass recomputes each tile's weights as $e^{s_{ij} - \text{lse}_i}$
        instead of storing the $S^2$ weights, and two attentions over different keys can be **merged**
        exactly (section 4). A query that sees no key at all (causal with $S_q > S_k$) gets `lse = -inf`
        and an output of zeros.

        Your `flash_attention(q, k, v, causal=False, block_q=64, block_k=64)`:

        | what | shape, dtype |
        |---|---|
        | `q`, `k`, `v` | `[B, H, S_q, D]`, `[B, H, S_k, D]`, `[B, H, S_k, D_v]` |
        | scores of one tile | `[B, H, block_q, block_k]` (the last blocks may be shorter) |
        | running `m`, `l` / `o` | `[B, H, block_q]` / `[B, H, block_q, D_v]`, float32 (float64 for float64 inputs) |
        | returns `out`, `lse` | `[B, H, S_q, D_v]` in `q`'s dtype, `[B, H, S_q]` float32 |

        Scale the scores by $1/\sqrt{D}$; skip the key blocks a causal query block cannot see.
        """, r"""
        ## 3. 对数和指数 lse，以及内核为什么返回它

        除了输出，你的函数还要为每个查询行返回

        $$\text{lse}_i = \log \sum_j e^{s_{ij}} = m_i + \log \ell_i$$

        （float32；对每个查询，$m$ 和 $\ell$ 正是你维护的那两个量）。FlashAttention 内核返回它有两个原因：反向传播时用 $e^{s_{ij} - \text{lse}_i}$ 重新算出每个分块的权重，而不必存下 $S^2$ 个权重；另外，对不同键做的两次注意力可以据此**精确合并**（第 4 节）。一个一个键都看不到的查询（因果且 $S_q > S_k$ 时）得到 `lse = -inf`，输出为零。

        你的 `flash_attention(q, k, v, causal=False, block_q=64, block_k=64)`：

        | 内容 | 形状、dtype |
        |---|---|
        | `q`、`k`、`v` | `[B, H, S_q, D]`、`[B, H, S_k, D]`、`[B, H, S_k, D_v]` |
        | 一个分块的分数 | `[B, H, block_q, block_k]`（最后的块可能更短） |
        | 运行量 `m`、`l` / `o` | `[B, H, block_q]` / `[B, H, block_q, D_v]`，float32（输入为 float64 时用 float64） |
        | 返回 `out`、`lse` | `[B, H, S_q, D_v]`，与 `q` 同 dtype；`[B, H, S_q]`，float32 |

        分数要乘以 $1/\sqrt{D}$；因果时跳过查询块看不到的键块。
        """),
        md(r"""
        <details><summary>Recipe (open it if you are stuck)</summary>

        For each query block `q[:, :, i0:i1]`: `m = -inf`, `l = 0`, `o = 0` (float32). For each key block it can see:
        `s = q_blk @ k_blk^T * scale` (masked with `-inf` above the bottom-right diagonal when the tile crosses it);
        `m_new = max(m, s.amax(-1))`; `alpha = exp(m - m_new)`; `p = exp(s - m_new[..., None])`;
        `l = alpha * l + p.sum(-1)`; `o = alpha[..., None] * o + p @ v_blk`; `m = m_new`.
        At the end `out = o / l[..., None]` (0 where `l == 0`) and `lse = m + log(l)`. Where `m_new` is still `-inf`
        (no key seen yet), subtract 0 instead, or `-inf - (-inf)` gives NaN.
        </details>
        """, r"""
        <details><summary>具体做法（卡住时再打开）</summary>

        对每个查询块 `q[:, :, i0:i1]`：`m = -inf`，`l = 0`，`o = 0`（float32）。对它能看到的每个键块：`s = q_blk @ k_blk^T * scale`（分块跨过右下对齐的对角线时，在对角线以上填 `-inf`）；`m_new = max(m, s.amax(-1))`；`alpha = exp(m - m_new)`；`p = exp(s - m_new[..., None])`；`l = alpha * l + p.sum(-1)`；`o = alpha[..., None] * o + p @ v_blk`；`m = m_new`。最后 `out = o / l[..., None]`（`l == 0` 处为 0），`lse = m + log(l)`。当 `m_new` 仍为 `-inf`（还没看到任何键）时，改为减 0，否则 `-inf - (-inf)` 会得到 NaN。
        </details>
        """),
        solution("flash_attention", HINTS),
        check("check_flash_attention(flash_attention)", "check_flash_attention"),
        md(r"""
        The cell compares your function with PyTorch's fused attention (SDPA, which on a CPU runs a
        flash-style kernel itself) at sizes that are not multiples of the blocks, with and without the
        causal mask (SDPA's `is_causal=True` is top-left aligned, so the cell passes the bottom-right mask
        explicitly), and your `lse` with `torch.logsumexp` of the scaled scores.
        """, r"""
        下面的单元格在不是块大小整数倍的尺寸上，把你的函数与 PyTorch 的融合注意力（SDPA，它在 CPU 上本身就运行一个 flash 风格的内核）比较，分别在有无因果掩码时比较（SDPA 的 `is_causal=True` 是左上对齐的，所以单元格显式传入右下对齐的掩码），并把你的 `lse` 与缩放后分数的 `torch.logsumexp` 比较。
        """),
        demo("""
        torch.manual_seed(1)
        B, H, S_q, S_k, D, D_v = 2, 3, 100, 130, 16, 8
        q, k, v = torch.randn(B, H, S_q, D), torch.randn(B, H, S_k, D), torch.randn(B, H, S_k, D_v)
        bottom_right = torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=S_k - S_q)
        with uses_your_code():
            for causal in (False, True):
                out, lse = flash_attention(q, k, v, causal=causal, block_q=32, block_k=48)
                mask = bottom_right if causal else None
                official = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # [B, H, S_q, S_k]
                if causal:
                    scores = scores.masked_fill(~bottom_right, float("-inf"))
                print(say("causal={causal}: out vs SDPA {gap:.1e}, lse vs torch.logsumexp {lse_gap:.1e}",
                          causal=causal, gap=(out - official).abs().max().item(),
                          lse_gap=(lse - torch.logsumexp(scores, -1)).abs().max().item()))
        """),
        md(r"""
        ## 4. Merging two partial results

        Split the keys into two disjoint sets $A$ and $B$ and attend over each: $(o_A, \text{lse}_A)$ and
        $(o_B, \text{lse}_B)$. The attention over all the keys is a weighted average of the two outputs,
        each weighted by its share of the softmax denominator:

        $$o = \frac{e^{\text{lse}_A} o_A + e^{\text{lse}_B} o_B}{e^{\text{lse}_A} + e^{\text{lse}_B}}, \qquad
        \text{lse} = \log\left(e^{\text{lse}_A} + e^{\text{lse}_B}\right).$$

        This one step is **split-KV decoding** (FlashDecoding: a long cache cut into chunks attended in
        parallel, then merged) and **ring attention** (each device holds a slice of the keys; partial results
        travel around a ring and are merged). Two cautions: scores are large in practice, and
        $e^{\text{lse}}$ overflows long before the formula does (subtract the larger lse first, as in section 1);
        and a side that saw no key has $\text{lse} = -\infty$: it must contribute nothing, even if its output
        holds NaN. The cell shows the overflow.
        """, r"""
        ## 4. 合并两个部分结果

        把键分成两个不相交的集合 $A$ 和 $B$，分别做注意力：$(o_A, \text{lse}_A)$ 和 $(o_B, \text{lse}_B)$。对全部键的注意力就是两个输出的加权平均，权重是各自在 softmax 分母中所占的份额：

        $$o = \frac{e^{\text{lse}_A} o_A + e^{\text{lse}_B} o_B}{e^{\text{lse}_A} + e^{\text{lse}_B}}, \qquad
        \text{lse} = \log\left(e^{\text{lse}_A} + e^{\text{lse}_B}\right).$$

        这一步就是 **split-KV 解码**（FlashDecoding：把很长的缓存切成若干段并行做注意力，再合并）和**环形注意力**（ring attention：每个设备持有一段键，部分结果沿环传递并合并）的核心。有两点要小心：实际的分数往往很大，$e^{\text{lse}}$ 早在公式本身出问题之前就会溢出（像第 1 节那样先减去较大的 lse）；另外，一个键都没看到的一侧 $\text{lse} = -\infty$：它必须不贡献任何东西，即使它的输出里是 NaN。下面的单元格展示这种溢出。
        """),
        demo("""
        lse_a, lse_b = torch.tensor([95.0]), torch.tensor([101.0])
        print(say("exp(lse_a) = {a}, exp(lse_b) = {b} in float32: the plain formula gives inf / inf",
                  a=torch.exp(lse_a).item(), b=torch.exp(lse_b).item()))
        print(say("after subtracting the larger lse: weights {a:.6f} and {b:.6f}",
                  a=torch.exp(lse_a - lse_b).item(), b=torch.exp(lse_b - lse_b).item()))
        """),
        md(r"""
        <details><summary>Recipe (open it if you are stuck)</summary>

        `m = max(lse_a, lse_b)`, with 0 where both are `-inf`; `w_a = exp(lse_a - m)`, `w_b = exp(lse_b - m)`
        (each at most 1); `out = (w_a * out_a + w_b * out_b) / (w_a + w_b)` with the weights broadcast over `D_v`,
        a side of weight 0 replaced by 0 (`torch.where`), so that its NaN cannot leak; `lse = m + log(w_a + w_b)`.
        Compute in float32, return `out` in `out_a`'s dtype.
        </details>
        """, r"""
        <details><summary>具体做法（卡住时再打开）</summary>

        `m = max(lse_a, lse_b)`，两者都为 `-inf` 时取 0；`w_a = exp(lse_a - m)`，`w_b = exp(lse_b - m)`（都不超过 1）；`out = (w_a * out_a + w_b * out_b) / (w_a + w_b)`，权重在 `D_v` 维上广播，权重为 0 的一侧用 0 代替（`torch.where`），这样它的 NaN 就不会漏进来；`lse = m + log(w_a + w_b)`。用 float32 计算，`out` 以 `out_a` 的 dtype 返回。
        </details>
        """),
        solution("merge_attention", HINTS),
        check("check_merge_attention(merge_attention)", "check_merge_attention"),
        md(r"""
        Split-KV decoding with your two functions: one new query attends over a cache of 1000 keys cut into
        four shards of 250; each shard is attended separately (in a real kernel, in parallel), the four
        partial results are merged two by two, and the result is compared with attention over the whole
        cache.
        """, r"""
        用你的两个函数做 split-KV 解码：一个新查询对 1000 个键的缓存做注意力，缓存切成 4 段，每段 250 个；每段单独做注意力（真实内核里是并行的），4 个部分结果两两合并，再与对整个缓存做的注意力比较。
        """),
        demo("""
        torch.manual_seed(2)
        q, k, v = torch.randn(1, 4, 1, 32), torch.randn(1, 4, 1000, 32), torch.randn(1, 4, 1000, 32)
        with uses_your_code():
            shards = [flash_attention(q, k[:, :, i : i + 250], v[:, :, i : i + 250]) for i in range(0, 1000, 250)]
            left, right = merge_attention(*shards[0], *shards[1]), merge_attention(*shards[2], *shards[3])
            out, lse = merge_attention(*left, *right)
            whole, whole_lse = flash_attention(q, k, v)
            print(say("4 shards merged vs the whole cache: out {gap:.1e}, lse {lse_gap:.1e}",
                      gap=(out - whole).abs().max().item(), lse_gap=(lse - whole_lse).abs().max().item()))
        """),
        md(r"""
        ## 5. What it saves: peak memory as S grows

        `LiveMemoryMeter` (in `memory_meter.py`, next to this notebook) records the peak total size of the
        tensors alive at once inside its `with` block (the inputs do not count). The cell measures plain
        attention (the whole score matrix), PyTorch's SDPA (a fused kernel on the CPU) and your
        `flash_attention` with blocks of 128, for one batch of 4 heads of width 32, and plots the peaks.
        Plain attention grows as $S^2$; the tiled versions grow as $S$ (the output itself).
        """, r"""
        ## 5. 它省下了什么：峰值内存随 S 的变化

        `LiveMemoryMeter`（在本 notebook 旁边的 `memory_meter.py` 中）记录在它的 `with` 块内同一时刻存活的张量的最大总大小（输入不计）。下面的单元格测量朴素注意力（整个分数矩阵）、PyTorch 的 SDPA（在 CPU 上是融合内核）和你的 `flash_attention`（块大小 128），取 1 个批次、4 个头、头宽 32，并画出峰值。朴素注意力按 $S^2$ 增长；分块的版本按 $S$ 增长（也就是输出本身的大小）。
        """),
        *written_cells("written_memory_prediction"),
        demo("""
        import matplotlib.pyplot as plt


        def peak_mib(fn, *args, **kwargs):
            with LiveMemoryMeter() as meter:
                fn(*args, **kwargs)
            return meter.peak_bytes / 2**20


        def plain(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


        lengths, peaks = [256, 512, 1024, 2048], {}
        with uses_your_code():
            for S in lengths:
                q, k, v = (torch.randn(1, 4, S, 32) for _ in range(3))
                row = {say("plain attention"): peak_mib(plain, q, k, v),
                       "SDPA": peak_mib(F.scaled_dot_product_attention, q, k, v),
                       "flash_attention": peak_mib(flash_attention, q, k, v, block_q=128, block_k=128)}
                for name, mib in row.items():
                    peaks.setdefault(name, []).append(mib)
                print(say("S = {S:>5}: ", S=S) + ", ".join(f"{name} {mib:7.2f} MiB" for name, mib in row.items()))
            fig, ax = plt.subplots(figsize=(5.5, 3.6))
            for name, values in peaks.items():
                ax.plot(lengths, values, marker="o", label=name)
            ax.set(xscale="log", yscale="log", xlabel=say("sequence length S"), ylabel=say("peak memory (MiB)"),
                   title=say("B = 1, H = 4, D = 32, float32"))
            ax.set_xticks(lengths, [str(s) for s in lengths])
            ax.minorticks_off()
            ax.legend()
            plt.show()
        """),
        md(r"""
        Your version saves the memory but not the time: a Python loop over tiles is slow, and it still
        does every multiplication. The real kernels save time too, because on a GPU the tile lives in fast
        on-chip memory (SRAM) and the $S^2$ matrix never travels to and from the slow main memory (HBM):
        attention is limited by memory traffic, not by arithmetic.

        ## 6. Half precision: accumulate in float32

        float16 has 11 significant bits: above 2048, adding 1 changes nothing. A running sum of thousands
        of exponentials, or a running output, kept in float16 stops growing or drifts. Kernels therefore
        read float16 or bfloat16 tiles but keep $m$, $\ell$ and $o$ in float32, and convert the output
        once, at the end. The first line shows the float16 sum that stops; the second your function on
        float16 inputs against a float64 reference.
        """, r"""
        你的版本省下了内存，但没有省下时间：对分块的 Python 循环很慢，而且每一次乘法仍然都要做。真正的内核也能省时间，因为在 GPU 上分块存放在高速的片上内存（SRAM）里，$S^2$ 的矩阵从不在慢速的主存（HBM）中来回搬运：注意力的瓶颈是访存，而不是算术。

        ## 6. 半精度：用 float32 累加

        float16 只有 11 位有效数字：超过 2048 以后，加 1 不会改变任何东西。用 float16 保存的几千个指数的运行和，或者运行输出，会停止增长或逐渐漂移。所以内核读入 float16 或 bfloat16 的分块，但用 float32 保存 $m$、$\ell$ 和 $o$，只在最后把输出转换一次。第一行显示停止增长的 float16 求和；第二行把你的函数在 float16 输入上的结果与 float64 参考比较。
        """),
        demo("""
        total16, total32 = torch.tensor(0.0, dtype=torch.float16), torch.tensor(0.0)
        for _ in range(4096):
            total16, total32 = total16 + 1, total32 + 1
        print(say("4096 additions of 1: float16 gives {half}, float32 gives {single}",
                  half=total16.item(), single=total32.item()))
        torch.manual_seed(3)
        q, k, v = (torch.randn(1, 2, 3000, 16) for _ in range(3))
        reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
        with uses_your_code():
            out, lse = flash_attention(q.half(), k.half(), v.half(), block_q=256, block_k=256)
            print(say("float16 inputs: out is {out_dtype}, lse is {lse_dtype}; largest error vs float64 {gap:.1e}",
                      out_dtype=out.dtype, lse_dtype=lse.dtype, gap=(out.double() - reference).abs().max().item()))
        """),
        graded_cell("flash"),
        md(r"""
        ## 7. Pitfalls

        - **No rescaling**: adding new terms to $\ell$ and $o$ without multiplying the old ones by
          $e^{m - m_\text{new}}$ gives a wrong answer whenever a later block holds a larger score.
        - **lse without the max**: $\log \ell$ alone is $\text{lse} - m$.
        - **Top-left causal**: with $S_q \ne S_k$ the queries are the *last* positions; `tril()` of the
          rectangle is the bug of decoding.
        - **Fully masked rows**: $m = -\infty$ makes $e^{m - m}$ NaN; use 0 in place of $-\infty$ there.
        - **Building the whole matrix anyway** (e.g. a mask `[S_q, S_k]` or the full scores "just for the
          max"): the numbers are right, the memory is not; the hidden checks measure it.
        - **Half precision**: accumulate in float32, convert at the end.
        """, r"""
        ## 7. 常见错误

        - **没有重新缩放**：往 $\ell$ 和 $o$ 里加新项时，不把旧的量乘以 $e^{m - m_\text{new}}$，只要后面的块里出现更大的分数，结果就错了。
        - **lse 少了最大值**：单独的 $\log \ell$ 等于 $\text{lse} - m$。
        - **左上对齐的因果掩码**：当 $S_q \ne S_k$ 时，查询是*最后*几个位置；对长方形取 `tril()` 正是解码时的那个 bug。
        - **整行都被遮住**：$m = -\infty$ 会让 $e^{m - m}$ 变成 NaN；在这些位置用 0 代替 $-\infty$。
        - **还是构造了整个矩阵**（比如一个 `[S_q, S_k]` 的掩码，或者"只是为了求最大值"而算出的全部分数）：数值对了，内存却不对；隐藏检查会测量它。
        - **半精度**：用 float32 累加，最后再转换。
        """),
    ]
