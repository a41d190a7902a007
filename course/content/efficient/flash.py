"""Notebook 01 of `efficient`: FlashAttention's algorithm on the CPU (online softmax, tiles, lse, merging)."""
from course.cells import check, demo, graded_cell, md, setup, solution
from course.content.written import written_cells

NAME = "01_flash"

HINTS = {
    "flash_attention": (
        "online softmax per query row: a running max, a running sum and an unnormalised output,\n"
        "the old ones rescaled whenever the max grows (guiding questions are folded above this cell).",
        "对每个查询行做在线 softmax：维护当前最大值、累加和、未归一化的输出，\n"
        "最大值变大时把旧的量重新缩放（引导问题折叠在本单元格上方）。",
    ),
    "merge_attention": (
        "each side's lse is the log of its softmax denominator: weigh each side by its share of the total\n"
        "(guiding questions are folded above this cell).",
        "每一侧的 lse 是它 softmax 分母的对数：按各自占总和的份额给两侧加权（引导问题折叠在本单元格上方）。",
    ),
}

DOCSTRINGS_ZH = {
    "flash_attention": "q [B, H, S_q, D]，k [B, H, S_k, D]，v [B, H, S_k, D_v] -> (out [B, H, S_q, D_v]，与 q 同 dtype；"
                       "lse [B, H, S_q]，float32)，每次只计算一个 (block_q x block_k) 的分数块。",
    "merge_attention": "由两组键各自的注意力结果，精确合并出对两组键一起做注意力的 (out [B, H, S_q, D_v], lse [B, H, S_q])。",
}


# The Chinese edition's comments in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# exp(1000) is inf in float32": "# 在 float32 下 exp(1000) 是 inf",
    "# running max, running sum of exp(s - m)": "# 当前最大值，exp(s - m) 的累加和",
    "# rescale the old sum, add the new terms": "# 先重新缩放旧的和，再加上新的项",
    "# causal, S_q == S_k": "# 因果，S_q == S_k",
    "# [query blocks, key blocks]": "# [查询块, 键块]",
    "# 0 skipped, 1 cut, 2 full": "# 0 跳过，1 被切开，2 完全可见",
    "# torch.profiler's C++ side logs its start and stop on stderr: drop those two lines":
        "# torch.profiler 的 C++ 部分会在 stderr 上记下开始和结束：丢掉这两行",
    "# (the kernel SDPA ran, MiB it allocated and freed inside it)": "# （SDPA 运行的内核，它在内部分配又释放的 MiB）",
    "# S = 2048, the last length measured": "# S = 2048，最后测量的长度",
    "# section 1's loop, with m and l kept in `dtype`": "# 第 1 节的循环，m 和 l 以 `dtype` 保存",
    "# one query that weighs n keys almost evenly": "# 一个查询，对 n 个键的权重几乎相等",
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

        其实不必。把分数分块读入，对已经读过的部分维护**当前最大值** $m$ 和 $e^{s_j - m}$ 的**累加和** $\ell$。当新的一块把最大值抬高到 $m_\text{new}$ 时，此前累加的每一项都差了同一个因子，因为

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
        $\ell$ once, at the end. That is the whole algorithm; what follows is how to organise it.

        ## 2. Tiles

        FlashAttention applies this to a block of `block_q` queries at once, reading the keys in blocks of
        `block_k`: each step computes one **tile** of scores `[block_q, block_k]` per head, updates the running
        max, sum and output of the block's query rows, and throws the tile away. Memory: one tile, plus
        the running quantities (`block_q` numbers for $m$ and $\ell$, `block_q x D_v` for $o$).

        This loop order, query blocks outside and key blocks inside, is FlashAttention-2's (Dao, 2023), and
        flash-attn's forward kernel: a query block's $m$, $\ell$ and $o$ stay in fast memory until it is done,
        and the query blocks run in parallel. FlashAttention-1's forward (Algorithm 1 of the 2022 paper) had
        the key blocks outside: after each key block it wrote every query row's $m$, $\ell$ and $o$ back to
        main memory and read them again for the next. Same numbers, more traffic: the cell's last line counts
        it.

        With `causal=True` the mask is **bottom-right aligned** (query $i$ sees keys $j \le i + S_k - S_q$,
        as in decoding with a cache). A tile can then be entirely visible, entirely in the future (it is
        **skipped**: never computed), or cut by the diagonal (computed, then masked). The cell draws the
        (query block, key block) grid for `S = 512` and blocks of 64, from the causal mask itself, and
        counts each kind.
        """, r"""
        输出是加权和 $\sum_j p_j v_j$，其中 $p_j = e^{s_j - m} / \ell$：把它保持为**未归一化**的 $o = \sum_j e^{s_j - m} v_j$，用与 $\ell$ 相同的 $e^{m - m_\text{new}}$ 重新缩放，只在最后除以一次 $\ell$。算法的全部就是这些；下面讲的是怎样把它组织起来。

        ## 2. 分块

        FlashAttention 一次处理一块 `block_q` 个查询，按每块 `block_k` 个读入键：每一步对每个头计算一个 `[block_q, block_k]` 的分数**块**（tile），更新这块查询行的当前最大值、累加和与累加输出，然后把这块分数丢掉。内存：一个分数块，加上这些累计量（$m$ 和 $\ell$ 各 `block_q` 个数，$o$ 为 `block_q x D_v`）。

        这种循环顺序（查询块在外层、键块在内层）是 FlashAttention-2（Dao，2023）和 flash-attn 前向内核的做法：一个查询块的 $m$、$\ell$ 和 $o$ 在它算完之前一直留在高速内存里，各个查询块并行计算。FlashAttention-1 的前向（2022 年论文的算法 1）把键块放在外层：每处理完一个键块，就把每个查询行的 $m$、$\ell$ 和 $o$ 写回主存，下一个键块再读回来。结果一样，访存更多：单元格最后一行统计了这部分访存。

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
        D = 64  # one head of width 64, float32: m, l and o of one query row are 2 + D numbers
        key_blocks, row_bytes = S // block, (2 + D) * 4
        print(say("m, l and o of {S} query rows moved to and from main memory: key blocks outside (FlashAttention-1) "
                  "{fa1:.1f} MiB, query blocks outside (FlashAttention-2, yours) {fa2:.2f} MiB", S=S,
                  fa1=2 * key_blocks * S * row_bytes / 2**20, fa2=S * row_bytes / 2**20))
        """),
        md(r"""
        ## 3. The log-sum-exp, and why kernels return it

        Besides the output, your function returns for each query row

        $$\text{lse}_i = \log \sum_j e^{s_{ij}} = m_i + \log \ell_i$$

        in float32 (for every query: $m$ and $\ell$ are exactly what you kept). FlashAttention-2 and flash-attn
        return it (FlashAttention-1 stored $m$ and $\ell$ apart) for two reasons: the backward pass recomputes each tile's weights as $e^{s_{ij} - \text{lse}_i}$
        instead of storing the $S^2$ weights, and two attentions over different keys can be **merged**
        exactly (section 4). A query that sees no key at all (causal with $S_q > S_k$) gets `lse = -inf`
        and an output of zeros.

        Your `flash_attention(q, k, v, causal=False, block_q=64, block_k=64)`:

        | what | shape, dtype |
        |---|---|
        | `q`, `k`, `v` | `[B, H, S_q, D]`, `[B, H, S_k, D]`, `[B, H, S_k, D_v]` |
        | scores of one tile | `[B, H, block_q, block_k]` (the last blocks may be shorter) |
        | running `m`, `l` / `o` | `[B, H, block_q]` / `[B, H, block_q, D_v]`, float32 (float64 for float64 inputs) |
        | returns `out`, `lse` | `[B, H, S_q, D_v]` in `q`'s dtype, `[B, H, S_q]` float32 (also for float64 inputs: convert it when you write it) |

        Scale the scores by $1/\sqrt{D}$; skip the key blocks a causal query block cannot see.
        """, r"""
        ## 3. 对数求和指数（log-sum-exp，lse），以及内核为什么返回它

        除了输出，你的函数还要为每个查询行返回

        $$\text{lse}_i = \log \sum_j e^{s_{ij}} = m_i + \log \ell_i$$

        （float32；对每个查询，$m$ 和 $\ell$ 正是你维护的那两个量）。FlashAttention-2 和 flash-attn 返回它（FlashAttention-1 把 $m$ 和 $\ell$ 分开保存），有两个原因：反向传播时用 $e^{s_{ij} - \text{lse}_i}$ 重新算出每个分块的权重，而不必存下 $S^2$ 个权重；另外，对不同键做的两次注意力可以据此**精确合并**（第 4 节）。一个键都看不到的查询（因果且 $S_q > S_k$ 时）得到 `lse = -inf`，输出为零。

        你的 `flash_attention(q, k, v, causal=False, block_q=64, block_k=64)`：

        | 内容 | 形状、dtype |
        |---|---|
        | `q`、`k`、`v` | `[B, H, S_q, D]`、`[B, H, S_k, D]`、`[B, H, S_k, D_v]` |
        | 一个分块的分数 | `[B, H, block_q, block_k]`（最后的块可能更短） |
        | 累计量 `m`、`l` / `o` | `[B, H, block_q]` / `[B, H, block_q, D_v]`，float32（输入为 float64 时用 float64） |
        | 返回 `out`、`lse` | `[B, H, S_q, D_v]`，与 `q` 同 dtype；`[B, H, S_q]`，float32（输入为 float64 时也是：写入时转换） |

        分数要乘以 $1/\sqrt{D}$；因果时跳过查询块看不到的键块。
        """),
        md(r"""
        <details><summary>Guiding questions (open them if you are stuck)</summary>

        Work on one block of queries `q[:, :, i0:i1]` at a time and answer, in order:

        1. What must each query row of the block remember from one key block to the next? Three quantities:
           what are their shapes, their dtype (look at the table), and their values before any key is read?
        2. With `causal=True`, which key blocks can this query block see at all? The last query of the block,
           `i1 - 1`, sees keys up to `i1 - 1 + S_k - S_q`: where does your loop over key blocks stop? Which tiles
           are cut by the diagonal, and what do you write in their hidden places so that they weigh nothing?
        3. After one tile of scores: what is each row's new maximum? Everything summed so far was summed with
           $e^{s - m_\text{old}}$: by which factor do you bring it to $e^{s - m_\text{new}}$, and which of the
           three quantities does that factor multiply?
        4. A row that has seen no key yet still has the maximum $-\infty$. What is $-\infty - (-\infty)$, and
           what could you subtract instead without changing any result?
        5. After the last key block: what do you divide the output by, what is lse in terms of $m$ and $\ell$,
           and what should a row that saw no key return?

        <details><summary>Still stuck: one tile, step by step</summary>

        For a tile of scores $s$ (scaled by $1/\sqrt{D}$, masked with $-\infty$ where the diagonal cuts it):
        $m_\text{new} = \max(m, \max_j s_j)$ per row; $\alpha = e^{m - m_\text{new}}$; $p = e^{s - m_\text{new}}$
        (where $m_\text{new} = -\infty$, use 0 in its place in both); $\ell \leftarrow \alpha \ell + \sum_j p_j$;
        $o \leftarrow \alpha o + p\,v_\text{block}$; $m \leftarrow m_\text{new}$. At the end,
        $\text{out} = o / \ell$ (0 where $\ell = 0$) and $\text{lse} = m + \log \ell$.
        </details>
        </details>
        """, r"""
        <details><summary>引导问题（卡住时再打开）</summary>

        每次处理一块查询 `q[:, :, i0:i1]`，按顺序回答：

        1. 这块里的每个查询行，从一个键块到下一个键块之间必须记住什么？三个量：它们的形状、dtype（看上面的表）是什么？在读入任何键之前，它们的初值是什么？
        2. `causal=True` 时，这块查询究竟能看到哪些键块？块里最后一个查询 `i1 - 1` 能看到直到 `i1 - 1 + S_k - S_q` 的键：你对键块的循环应该在哪里停下？哪些分块被对角线切开？被遮住的位置填什么，才能让它们的权重为零？
        3. 算完一个分块的分数后，每一行新的最大值是多少？此前累加的都是 $e^{s - m_\text{old}}$：乘以什么因子才能把它们变成 $e^{s - m_\text{new}}$？这个因子要乘到三个量中的哪几个上？
        4. 一个还没看到任何键的行，最大值仍是 $-\infty$。$-\infty - (-\infty)$ 等于什么？减去什么可以不改变任何结果？
        5. 最后一个键块之后：输出要除以什么？lse 怎样用 $m$ 和 $\ell$ 表示？一个键都没看到的行应该返回什么？

        <details><summary>还是卡住：一个分块，一步一步来</summary>

        对一个分数块 $s$（乘以 $1/\sqrt{D}$，被对角线切开处填 $-\infty$）：每行 $m_\text{new} = \max(m, \max_j s_j)$；$\alpha = e^{m - m_\text{new}}$；$p = e^{s - m_\text{new}}$（$m_\text{new} = -\infty$ 处，两式中都用 0 代替它）；$\ell \leftarrow \alpha \ell + \sum_j p_j$；$o \leftarrow \alpha o + p\,v_\text{块}$；$m \leftarrow m_\text{new}$。最后 $\text{out} = o / \ell$（$\ell = 0$ 处为 0），$\text{lse} = m + \log \ell$。
        </details>
        </details>
        """),
        solution("flash_attention", HINTS),
        check("check_flash_attention(flash_attention)", "check_flash_attention"),
        md(r"""
        The cell compares your function with PyTorch's fused attention (SDPA) at sizes that are not multiples
        of the blocks, with and without the causal mask (SDPA's `is_causal=True` is top-left aligned, so the
        cell passes the bottom-right mask explicitly), and your `lse` with `torch.logsumexp` of the scaled
        scores; each error is printed next to the largest value compared, its scale. SDPA chooses its kernel
        from the inputs: on the CPU its flash kernel needs keys and values of the same width, so at this
        cell's $D = 16$, $D_v = 8$ it runs its math kernel (plain attention). The last line asks
        `torch.profiler` which kernel ran, at these widths and at $D = D_v$.
        """, r"""
        下面的单元格在不是块大小整数倍的尺寸上，把你的函数与 PyTorch 的融合注意力（SDPA）比较，分别在有无因果掩码时比较（SDPA 的 `is_causal=True` 是左上对齐的，所以单元格显式传入右下对齐的掩码），并把你的 `lse` 与缩放后分数的 `torch.logsumexp` 比较；每个误差旁边都打印出参与比较的最大值，作为它的量级。SDPA 根据输入选择内核：在 CPU 上，它的 flash 内核要求键和值的宽度相同，所以在本单元格的 $D = 16$、$D_v = 8$ 下，它运行的是 math 内核（朴素注意力）。最后一行用 `torch.profiler` 查看实际运行的内核：在这两个宽度下，以及 $D = D_v$ 时。
        """),
        demo("""
        import contextlib
        import os
        from torch.profiler import profile


        @contextlib.contextmanager
        def quiet_stderr():  # torch.profiler's C++ side logs its start and stop on stderr: drop those two lines
            saved = os.dup(2)
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)


        def sdpa_kernel_seen(*args, **kwargs):  # (the kernel SDPA ran, MiB it allocated and freed inside it)
            with quiet_stderr(), profile(profile_memory=True) as prof:
                F.scaled_dot_product_attention(*args, **kwargs)
            kernel = next(e for e in prof.key_averages() if e.key.startswith("aten::_scaled_dot_product"))
            return kernel.key, -kernel.self_cpu_memory_usage / 2**20


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
                want_lse = torch.logsumexp(scores, -1)
                print(say("causal={causal}: out vs SDPA {gap:.1e} (largest |out| {scale:.2f}), lse vs torch.logsumexp "
                          "{lse_gap:.1e} (largest |lse| {lse_scale:.2f})", causal=causal,
                          gap=(out - official).abs().max().item(), scale=official.abs().max().item(),
                          lse_gap=(lse - want_lse).abs().max().item(), lse_scale=want_lse.abs().max().item()))
        print(say("SDPA's kernel at D = {D}, D_v = {D_v}: {kernel}; at D = D_v = {D}: {same}", D=D, D_v=D_v,
                  kernel=sdpa_kernel_seen(q, k, v, attn_mask=bottom_right)[0],
                  same=sdpa_kernel_seen(q, k, torch.randn(B, H, S_k, D), attn_mask=bottom_right)[0]))
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
        <details><summary>Guiding questions (open them if you are stuck)</summary>

        1. $e^{\text{lse}_A}$ is side A's softmax denominator. What is the denominator of all the keys together,
           and so the merged lse? Which torch function computes $\log(e^a + e^b)$ without overflowing?
        2. What share of that denominator comes from side A? Write it as $e^{\text{something}}$ so that it can
           never exceed 1, whatever the size of the lse.
        3. Each side's `out` is already normalised over its own keys: how do the two shares combine them? Over
           which axis must a share `[B, H, S_q]` broadcast?
        4. A side that saw no key has $\text{lse} = -\infty$: what is its share? If its `out` holds NaN, what is
           $0 \cdot \text{NaN}$, and how do you make that side add exactly nothing?
        5. If both sides are $-\infty$: what should `out` and `lse` be, and what keeps your formula from computing
           $-\infty - (-\infty)$? In which dtype do you compute, and in which do you return `out`?

        <details><summary>Still stuck: the formulas</summary>

        $m = \max(\text{lse}_A, \text{lse}_B)$ (0 where both are $-\infty$); $w_A = e^{\text{lse}_A - m}$,
        $w_B = e^{\text{lse}_B - m}$; $\text{lse} = m + \log(w_A + w_B)$;
        $\text{out} = (w_A\,\text{out}_A + w_B\,\text{out}_B) / (w_A + w_B)$, a side of weight 0 replaced by 0
        (`torch.where`), in float32, `out` returned in `out_a`'s dtype.
        </details>
        </details>
        """, r"""
        <details><summary>引导问题（卡住时再打开）</summary>

        1. $e^{\text{lse}_A}$ 是 A 一侧的 softmax 分母。所有键合在一起的分母是什么？合并后的 lse 因此是什么？哪个 torch 函数能计算 $\log(e^a + e^b)$ 而不溢出？
        2. 这个分母中有多大份额来自 A 一侧？把它写成 $e^{\text{某个量}}$ 的形式，使它无论 lse 多大都不超过 1。
        3. 每一侧的 `out` 已经在它自己的键上归一化了：两个份额怎样把它们组合起来？形状为 `[B, H, S_q]` 的份额要沿哪一维广播？
        4. 一个键都没看到的一侧 $\text{lse} = -\infty$：它的份额是多少？如果它的 `out` 里是 NaN，$0 \cdot \text{NaN}$ 等于什么？怎样让这一侧恰好什么都不加？
        5. 如果两侧都是 $-\infty$：`out` 和 `lse` 应该是什么？什么能防止你的公式去算 $-\infty - (-\infty)$？用什么 dtype 计算，`out` 又以什么 dtype 返回？

        <details><summary>还是卡住：公式</summary>

        $m = \max(\text{lse}_A, \text{lse}_B)$（两者都为 $-\infty$ 时取 0）；$w_A = e^{\text{lse}_A - m}$，$w_B = e^{\text{lse}_B - m}$；$\text{lse} = m + \log(w_A + w_B)$；$\text{out} = (w_A\,\text{out}_A + w_B\,\text{out}_B) / (w_A + w_B)$，权重为 0 的一侧用 0 代替（`torch.where`），用 float32 计算，`out` 以 `out_a` 的 dtype 返回。
        </details>
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
            print(say("4 shards merged vs the whole cache: out {gap:.1e} (largest |out| {scale:.2f}), lse {lse_gap:.1e} "
                      "(largest |lse| {lse_scale:.2f})", gap=(out - whole).abs().max().item(),
                      scale=whole.abs().max().item(), lse_gap=(lse - whole_lse).abs().max().item(),
                      lse_scale=whole_lse.abs().max().item()))
        """),
        md(r"""
        ## 5. What it saves: peak memory as S grows

        `LiveMemoryMeter` (in `memory_meter.py`, next to this notebook) records the peak total size of the
        **new** tensors alive at once inside its `with` block: the inputs are not counted, nor are views of them
        (a slice, a transpose), since they allocate nothing. The cell measures plain attention (the whole score
        matrix), PyTorch's SDPA (a fused kernel on the CPU) and your `flash_attention` with blocks of 128, for
        one batch of 4 heads of width 32, and plots the peaks. Plain attention grows as $S^2$; the tiled
        versions grow as $S$: the output itself, plus a few tiles whose size does not depend on $S$.

        The meter sees the tensors that PyTorch's operators return, not what any single operator allocates
        inside itself while it runs: `torch.logsumexp` of a 64 MiB tensor makes a 64 MiB temporary inside, and
        the meter sees only its 0.06 MiB result (the next cell's last lines print both). SDPA's flash kernel
        takes a work buffer the same way (its size depends on the number of threads). The cell asks
        `torch.profiler` for it, so that SDPA's figure can be compared like with like.
        """, r"""
        ## 5. 它省下了什么：峰值内存随 S 的变化

        `LiveMemoryMeter`（在本 notebook 旁边的 `memory_meter.py` 中）记录在它的 `with` 块内同一时刻存活的**新**张量的最大总大小：输入不计，输入的视图（切片、转置）也不计，因为它们不分配内存。下面的单元格测量朴素注意力（整个分数矩阵）、PyTorch 的 SDPA（在 CPU 上是融合内核）和你的 `flash_attention`（块大小 128），取 1 个批次、4 个头、头宽 32，并画出峰值。朴素注意力按 $S^2$ 增长；分块的版本按 $S$ 增长：输出本身，再加上几个大小与 $S$ 无关的分块。

        内存计看到的是 PyTorch 算子返回的张量，看不到任何单个算子在运行时自己内部分配的内存：对一个 64 MiB 的张量做 `torch.logsumexp`，内部会产生一个 64 MiB 的临时张量，而内存计只看到它 0.06 MiB 的结果（下一个单元格的最后几行把两者都打印出来）。SDPA 的 flash 内核也是这样申请一块工作缓冲区的（大小取决于线程数）。单元格用 `torch.profiler` 查出这块缓冲区，这样 SDPA 的数字才能和其他两个同等比较。
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
            kernel, buffer = sdpa_kernel_seen(q, k, v)  # S = 2048, the last length measured
            print(say("SDPA at S = {S}: the meter sees {seen:.2f} MiB (its output and lse); inside {kernel}, "
                      "torch.profiler sees a work buffer of {buffer:.2f} MiB more (torch threads: {threads}): {total:.2f} "
                      "MiB in all", S=S, seen=peaks["SDPA"][-1], kernel=kernel, buffer=buffer,
                      threads=torch.get_num_threads(), total=peaks["SDPA"][-1] + buffer))
            x = torch.randn(16, 1024, 1024)  # 64 MiB
            with quiet_stderr(), profile(profile_memory=True) as prof:
                torch.logsumexp(x, dim=-1)
            inside = max(e.self_cpu_memory_usage for e in prof.key_averages() if e.key != "aten::logsumexp") / 2**20
            print(say("torch.logsumexp of a {size:.0f} MiB tensor: the meter sees {seen:.2f} MiB, torch.profiler a "
                      "temporary of {inside:.0f} MiB inside it", size=x.nbytes / 2**20,
                      seen=peak_mib(torch.logsumexp, x, dim=-1), inside=inside))
        """),
        md(r"""
        Your version saves the memory but not the time: a Python loop over tiles is slow, and it computes
        every visible tile in full (only the tiles above the causal diagonal are skipped, as in the real
        kernels). The real kernels save time too. On a GPU, plain attention's time goes mostly to its
        elementwise passes over the $S^2$ matrix (scale, mask, softmax, dropout): each reads every score from
        the slow main memory (HBM) and writes it back for a handful of operations, so memory traffic, not
        arithmetic, sets their speed (they are **memory-bound**). Its two matrix products do about $D$ operations
        per byte they move in float16, fifty times more (the cell prints both; at $D = 64$ even they stay below
        what an H100 needs to be busy, one more reason to keep the $S^2$ matrix out of main memory).
        FlashAttention keeps each tile in fast on-chip memory (SRAM), so the $S^2$ traffic of all of them
        disappears, which is where its first speed-up comes from. What is left is limited by arithmetic, and FlashAttention-2 (Dao, 2023) gained its
        next factor of about 2 there: fewer operations outside the matrix products (the output is divided by
        $\ell$ once, at the end, as here) and the work split better across the GPU's threads.
        """, r"""
        你的版本省下了内存，但没有省下时间：对分块的 Python 循环很慢，而且每个可见的分块都完整计算（只有因果对角线以上的分块被跳过，真正的内核也是这样）。真正的内核也能省时间。在 GPU 上，朴素注意力的时间主要花在对 $S^2$ 矩阵逐元素处理的那几遍上（缩放、掩码、softmax、dropout）：每一遍都要把每个分数从慢速的主存（HBM）读出来、做寥寥几次运算、再写回去，所以决定它们速度的是访存而不是算力（它们是**访存受限**的）。它的两次矩阵乘法在 float16 下每搬运一个字节大约做 $D$ 次运算，是前者的五十倍（单元格把两者都打印出来；$D = 64$ 时连它们也达不到 H100 满负荷所需的运算量，这也是不该让 $S^2$ 矩阵进出主存的又一个理由）。FlashAttention 把每个分块留在高速的片上内存（SRAM）里，这些 $S^2$ 的访存就全都没有了，这是它第一份加速的来源。剩下的部分受算力限制；FlashAttention-2（Dao，2023）又在这一侧快了大约 2 倍：减少矩阵乘法以外的运算（和这里一样，输出只在最后除以一次 $\ell$），并把工作更好地分配到 GPU 的线程上。
        """),
        demo("""
        S, D, number = 4096, 64, 2  # one head, float16: 2 bytes a number
        product = 2 * S * S * D / (number * (2 * S * D + S * S))  # Q K^T: reads Q and K, writes the S x S scores
        softmax = 5 * S * S / (number * 2 * S * S)  # max, subtract, exp, sum, divide: reads and writes each score
        print(say("operations per byte of main memory, S = {S}, D = {D}, float16: Q K^T {product:.0f}, softmax "
                  "{softmax:.2f}; an H100 SXM does about {ridge:.0f} float16 operations in the time it moves one byte "
                  "(989 TFLOP/s, 3.35 TB/s on its data sheet)", S=S, D=D, product=product, softmax=softmax,
                  ridge=989e12 / 3.35e12))
        """),
        md(r"""
        ## 6. Half precision: range and precision

        float16 keeps 11 significant binary digits (about 3 decimal digits) and its largest number is 65504.
        bfloat16 keeps float32's range (up to about $3.4 \times 10^{38}$) but only 8 binary digits (about 2
        decimal digits). In the online softmax every term $e^{s_j - m}$ is at most 1, so the running sum
        $\ell$ is at most the number of keys read. Kept in float16, $\ell$ becomes `inf` once more than 65504
        keys weigh about evenly, and then lse $=$ `inf` and out $= o / \ell$ is 0 while $o$ stays finite (values
        of both signs cancel in it) but NaN, `inf / inf`, where $o$ overflows too (values of one sign); kept in
        bfloat16 it never overflows but carries two or three digits. Kernels therefore read float16 or bfloat16 tiles, keep $m$,
        $\ell$ and $o$ in float32, and convert the output once, at the end.

        The cell prints each type's range and step, the float16 sum that stops at 2048, then section 1's loop
        over one row of nearly equal scores with $m$ and $\ell$ kept in each type, for 3,000 and 70,000 keys,
        and $o / \ell$ over 70,000 equal scores kept in float16. The last lines are your function on float16
        inputs against float64 attention of **the same float16 inputs**, next to the error of rounding that
        exact output to float16 (the floor: the best any float16 output can do), then against float64
        attention of the float32 inputs before they were rounded: most of that larger gap is the rounding of
        the inputs, which no kernel can undo.
        """, r"""
        ## 6. 半精度：范围与精度

        float16 有 11 位二进制有效数字（大约 3 位十进制有效数字），能表示的最大数是 65504。bfloat16 保留了 float32 的范围（最大约 $3.4 \times 10^{38}$），但只有 8 位二进制有效数字（大约 2 位十进制有效数字）。在线 softmax 中每一项 $e^{s_j - m}$ 都不超过 1，所以累加和 $\ell$ 不超过已读的键数。用 float16 保存时，只要超过 65504 个键的权重大致相当，$\ell$ 就会变成 `inf`，于是 lse $=$ `inf`；out $= o / \ell$ 在 $o$ 仍有限时为 0（正负号不同的值在 $o$ 里相互抵消），在 $o$ 也溢出时（值的符号相同）则是 `inf / inf`，即 NaN；用 bfloat16 保存时它不会溢出，但只有两三位有效数字。所以内核读入 float16 或 bfloat16 的分块，但用 float32 保存 $m$、$\ell$ 和 $o$，只在最后把输出转换一次。

        下面的单元格打印每种类型的范围和步长、停在 2048 的 float16 求和，再用第 1 节的循环处理一行几乎相等的分数，分别以三种类型保存 $m$ 和 $\ell$，键数为 3,000 和 70,000；再以 float16 保存，对 70,000 个相等的分数计算 $o / \ell$。最后两行先把你的函数在 float16 输入上的结果与**同样这些 float16 输入**的 float64 注意力比较，旁边是把这个精确输出舍入到 float16 本身带来的误差（下限：任何 float16 输出都不可能比它更好）；再与舍入之前的 float32 输入的 float64 注意力比较：这个更大的差距大部分来自输入的舍入，任何内核都无法挽回。
        """),
        demo("""
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            info = torch.finfo(dtype)
            print(say("{dtype}: largest {largest:.4g}, step after 1 {step:.2g} (about {digits} significant decimal digits)",
                      dtype=str(dtype).removeprefix("torch."), largest=info.max, step=info.eps,
                      digits=round(-math.log10(info.eps))))
        total16, total32 = torch.tensor(0.0, dtype=torch.float16), torch.tensor(0.0)
        for _ in range(4096):
            total16, total32 = total16 + 1, total32 + 1
        print(say("4096 additions of 1: float16 gives {half}, float32 gives {single}",
                  half=total16.item(), single=total32.item()))


        def online_lse(scores, dtype, block=1024):  # section 1's loop, with m and l kept in `dtype`
            m, l = torch.tensor(float("-inf"), dtype=dtype), torch.tensor(0.0, dtype=dtype)
            for start in range(0, len(scores), block):
                chunk = scores[start : start + block].to(dtype)
                m_new = torch.maximum(m, chunk.max())
                l = l * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()
                m = m_new
            return (m.float() + torch.log(l.float())).item()


        torch.manual_seed(3)
        for n in (3_000, 70_000):
            scores = torch.randn(n) * 0.01  # one query that weighs n keys almost evenly
            exact = torch.logsumexp(scores.double(), 0).item()
            print(say("{n:>6} keys: lse {exact:.4f}; m and l kept in float16 {half:.4f}, bfloat16 {bf16:.4f}, float32 "
                      "{single:.4f}", n=n, exact=exact, half=online_lse(scores, torch.float16),
                      bf16=online_lse(scores, torch.bfloat16), single=online_lse(scores, torch.float32)))

        values = {"both signs": torch.randn(70_000), "all 1": torch.ones(70_000)}  # each key's value, equal weights
        ell, o = torch.tensor(0.0, dtype=torch.float16), {name: torch.tensor(0.0, dtype=torch.float16) for name in values}
        for start in range(0, 70_000, 1024):  # o and l kept in float16; every e^(s - m) is 1
            ell = ell + min(1024, 70_000 - start)
            o = {name: o[name] + v[start : start + 1024].half().sum() for name, v in values.items()}
        print(say("70,000 equal scores, o and l kept in float16: l = {ell}; o / l = {mixed} for values of both signs "
                  "(o = {o_mixed:.1f}), {same} for values all 1 (o = {o_same})", ell=ell.item(),
                  mixed=(o["both signs"] / ell).item(), o_mixed=o["both signs"].item(),
                  same=(o["all 1"] / ell).item(), o_same=o["all 1"].item()))

        q, k, v = (torch.randn(1, 2, 3000, 16) for _ in range(3))
        q16, k16, v16 = q.half(), k.half(), v.half()
        reference = F.scaled_dot_product_attention(q16.double(), k16.double(), v16.double())  # the float16 inputs, exactly
        unrounded = F.scaled_dot_product_attention(q.double(), k.double(), v.double())  # the float32 inputs, exactly
        with uses_your_code():
            out, lse = flash_attention(q16, k16, v16, block_q=256, block_k=256)
            print(say("float16 inputs: out is {out_dtype}, lse is {lse_dtype}; largest error vs float64 attention of the "
                      "same float16 inputs {gap:.1e}, rounding that exact output to float16 alone {rounding:.1e} (the "
                      "floor; largest |out| {scale:.2f})",
                      out_dtype=out.dtype, lse_dtype=lse.dtype, gap=(out.double() - reference).abs().max().item(),
                      rounding=(reference.half().double() - reference).abs().max().item(),
                      scale=reference.abs().max().item()))
            print(say("vs float64 attention of the float32 inputs before rounding: {gap:.1e}, of which the rounding of "
                      "the inputs alone accounts for {inputs:.1e}", gap=(out.double() - unrounded).abs().max().item(),
                      inputs=(reference - unrounded).abs().max().item()))
        """),
        graded_cell("flash"),
        md(r"""
        ## 7. Pitfalls

        - **No rescaling**: adding new terms to $\ell$ and $o$ without multiplying the old ones by
          $e^{m - m_\text{new}}$ gives a wrong answer whenever a later block holds a larger score.
        - **lse without the max**: $\log \ell$ alone is $\text{lse} - m$.
        - **Top-left causal**: with $S_q \ne S_k$ the queries are the *last* positions; `tril()` of the
          rectangle is the bug of decoding.
        - **Skipping from the wrong place**: a query block $[i_0, i_1)$ needs every key block that starts at or
          before $i_1 - 1 + S_k - S_q$; forget the offset, or stop one key early, and some rows lose keys.
        - **The wrong width in the scale**: $1/\sqrt{D}$, the width of `q` and `k`, not of `v`.
        - **Fully masked rows**: $m = -\infty$ makes $e^{m - m}$ NaN; use 0 in place of $-\infty$ there.
        - **Building the whole matrix anyway** (e.g. a mask `[S_q, S_k]`, the full scores "just for the max",
          or a block of queries against every key at once): the numbers are right, the memory is not; the
          checks measure it.
        - **Half precision**: a running sum kept in float16 overflows past 65504; accumulate in float32,
          convert at the end.
        """, r"""
        ## 7. 常见错误

        - **没有重新缩放**：往 $\ell$ 和 $o$ 里加新项时，不把旧的量乘以 $e^{m - m_\text{new}}$，只要后面的块里出现更大的分数，结果就错了。
        - **lse 少了最大值**：单独的 $\log \ell$ 等于 $\text{lse} - m$。
        - **左上对齐的因果掩码**：当 $S_q \ne S_k$ 时，查询是*最后*几个位置；对长方形取 `tril()` 正是解码时的那个 bug。
        - **从错误的位置开始跳过**：查询块 $[i_0, i_1)$ 需要起点不超过 $i_1 - 1 + S_k - S_q$ 的每一个键块；忘了这个偏移，或者提前一个键停下，都会让某些行少看到键。
        - **缩放用错了宽度**：是 $1/\sqrt{D}$，即 `q` 和 `k` 的宽度，不是 `v` 的宽度。
        - **整行都被遮住**：$m = -\infty$ 会让 $e^{m - m}$ 变成 NaN；在这些位置用 0 代替 $-\infty$。
        - **还是构造了整个矩阵**（比如一个 `[S_q, S_k]` 的掩码，"只是为了求最大值"而算出的全部分数，或者一次让一块查询对所有键计算）：数值对了，内存却不对；检查会测量它。
        - **半精度**：用 float16 保存的累加和超过 65504 就会溢出；用 float32 累加，最后再转换。
        """),
    ]
