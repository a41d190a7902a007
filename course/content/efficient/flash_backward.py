"""Notebook 05 of `efficient`: FlashAttention's backward pass (the gradient of attention, P recomputed from the lse,
an autograd.Function that saves O(S), what autograd keeps, a training step)."""
from course.cells import Cell, check, demo, graded_cell, md, setup, solution, solution_source
from course.content.efficient import flash_backward_next
from course.content.written import written_cells

NAME = "05_flash_backward"

# What FlashAttentionFunction calls from notebook 01: nbgrader grades this notebook alone, so the class's solution
# cell holds it too (a stub in the release: paste your own), as 04_decoder of `generation` does.
PIECES = ("flash_attention",)

HINTS = {
    "flash_attention": (
        "paste your own from 01_flash (the graded version is graded there; this copy only serves\n"
        "FlashAttentionFunction here, since this notebook is graded on its own).",
        "把你在 01_flash 里写好的版本粘贴过来（那边的版本在那边评分；这份拷贝只供这里的\n"
        "FlashAttentionFunction 使用，因为这个 notebook 是单独评分的）。",
    ),
    "flash_attention_backward": (
        "the same tiles as the forward, P recomputed from the lse instead of a running max; one delta per query\n"
        "(the recipe is folded above this cell).",
        "与前向相同的分块，P 用 lse 重算，不再需要维护当前最大值；每个查询一个 delta（具体做法折叠在本单元格上方）。",
    ),
    "FlashAttentionFunction.forward": (
        "run flash_attention, keep only what backward needs with ctx.save_for_backward, remember causal on ctx.",
        "调用 flash_attention，只用 ctx.save_for_backward 保存反向传播需要的量，把 causal 记在 ctx 上。",
    ),
    "FlashAttentionFunction.backward": (
        "one gradient per input of forward, in the same order; causal gets None.",
        "forward 的每个输入对应一个梯度，顺序相同；causal 对应 None。",
    ),
}

DOCSTRINGS_ZH = {
    "flash_attention": "q [B, H, S_q, D]，k [B, H, S_k, D]，v [B, H, S_k, D_v] -> (out [B, H, S_q, D_v]，与 q 同 dtype；"
                       "lse [B, H, S_q]，float32)，每次只计算一个 (block_q x block_k) 的分数块。",
    "flash_attention_backward": "flash_attention 的 out 对 q、k、v 的梯度 (grad_q, grad_k, grad_v)，每个分块的概率由 q、k 和 lse "
                                "重新算出：从不构造 [S_q, S_k] 的矩阵。",
    "FlashAttentionFunction": "前向是 flash_attention、反向是 flash_attention_backward 的注意力：只保存 q、k、v、out、lse，"
                              "从不保存概率矩阵。",
}


def solution_cell() -> Cell:
    """The class's solution cell: flash_attention (a stub to paste into), then FlashAttentionFunction."""
    meta = {"solution": True, "grade": False, "locked": False, "grade_id": "solution_FlashAttentionFunction",
            "schema_version": 3}

    def source(lang):
        return "\n\n\n".join(solution_source(name, HINTS, lang) for name in (*PIECES, "FlashAttentionFunction"))

    return Cell("code", source("en"), role="solution", nbgrader=meta, zh=source("zh"))


# The Chinese edition's comments in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# autograd: q.grad, k.grad, v.grad": "# autograd 给出 q.grad、k.grad、v.grad",
    "# [1, 1, 8, 12], scale 1 / sqrt(4)": "# [1, 1, 8, 12]，缩放 1 / sqrt(4)",
    "# [1, 1, 8]: what flash_attention returns": "# [1, 1, 8]：flash_attention 返回的量",
    "# [1, 1, 8, 12]: what plain attention keeps for backward": "# [1, 1, 8, 12]：朴素注意力为反向传播保存的量",
    "# [1, 1, 4, 4]: queries 0..3, keys 4..7": "# [1, 1, 4, 4]：查询 0..3，键 4..7",
    "# 3 x 4 tiles of 4": "# 3 x 4 个分块，每块 4 个",
    "# a view is kept with the tensor it views": "# 视图和它所引用的张量一起被保存",
    "# each [B, H, S, D]": "# 每个都是 [B, H, S, D]",
    "# tiles this small: one thread, no waiting for the others": "# 分块这么小：单线程，不用等其他线程",
    **flash_backward_next.DEMO_ZH,
}


def cells():
    return [
        md(r"""
        # 05 · FlashAttention's backward pass: recompute, don't store

        In `01_flash` your `flash_attention` returned, besides the output, the log-sum-exp of each query row,
        "for the backward pass". Here is that backward pass. Training needs the gradients of the loss with
        respect to `q`, `k` and `v`; plain attention gets them from autograd, which **stores** the
        `[S_q, S_k]` probabilities of every layer until the backward pass reads them: at $S$ = 16k that is a
        gigabyte per head and per layer. FlashAttention stores $O(S)$ instead, besides `out`: FlashAttention 1
        each row's maximum $m$ and sum $\ell$, FlashAttention 2 the single number $\text{lse} = m + \log \ell$
        (what your `flash_attention` returns), and both **recompute** the probabilities tile by tile during the
        backward pass. This is why long-context training fits in memory.

        | part | what you write |
        |---|---|
        | `flash_backward` | `flash_attention_backward(q, k, v, out, lse, grad_out, causal, block_q, block_k)`, `class FlashAttentionFunction` |

        This notebook follows `01_flash` and uses your `flash_attention` (paste it into section 4's cell). As there: per-head
        tensors `[B, H, S, D]`, values of width `D_v`, no `F.scaled_dot_product_attention` or `flex_attention`
        in your code.
        """, r"""
        # 05 · FlashAttention 的反向传播：重算，而不是存储

        在 `01_flash` 里，你的 `flash_attention` 除了输出，还返回了每个查询行的 log-sum-exp（lse），说是"反向传播要用"。这里就是那个反向传播。训练需要损失对 `q`、`k`、`v` 的梯度；朴素注意力靠 autograd 得到它们，而 autograd 会把每一层 `[S_q, S_k]` 的概率矩阵**存下来**，直到反向传播读取：$S$ = 16k 时，每个头、每一层就是 1 GB。FlashAttention 除了 `out` 只存 $O(S)$ 的量：FlashAttention 1 存每一行的最大值 $m$ 和累加和 $\ell$，FlashAttention 2 只存一个数 $\text{lse} = m + \log \ell$（也就是你的 `flash_attention` 返回的量）；两者都在反向传播时逐块**重算**概率。长上下文训练之所以放得进内存，靠的就是这一点。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `flash_backward` | `flash_attention_backward(q, k, v, out, lse, grad_out, causal, block_q, block_k)`、`class FlashAttentionFunction` |

        本 notebook 接着 `01_flash`，要用到你的 `flash_attention`（粘贴到第 4 节的单元格里）。约定和那里一样：每个头的张量形状是 `[B, H, S, D]`，值的宽度为 `D_v`，你的代码里不能用 `F.scaled_dot_product_attention` 或 `flex_attention`。
        """),
        setup(),
        md(r"""
        ## 1. The gradient of softmax attention

        For one head, with $S = q k^\top \cdot \text{scale}$ ($\text{scale} = 1/\sqrt{D}$), $P = \text{softmax}(S)$
        row by row and $O = P V$, let $dO$ be the gradient of the loss with respect to $O$ (`grad_out`). In this
        notebook $S$ always holds the scale already (it is the softmax's input), and the lse is that of these
        scaled scores, as `flash_attention` returns it. The chain rule, one matrix product at a time:

        $$dV = P^\top dO, \qquad dP = dO\, V^\top,$$

        $$dS = P \circ (dP - \delta), \qquad \delta_i = \sum_j P_{ij}\, dP_{ij},$$

        $$dQ = dS\, K \cdot \text{scale}, \qquad dK = dS^\top Q \cdot \text{scale}.$$

        The only non-obvious line is the softmax's: row $i$ of $P$ sums to 1, so raising one score takes weight
        from all the others, and $\partial P_{ij} / \partial S_{ik} = P_{ij}(\mathbb{1}_{j=k} - P_{ik})$; summed
        against $dP$ this gives $P_{ik}(dP_{ik} - \delta_i)$. And $\delta$ needs no $P$ at all:

        $$\delta_i = \sum_j P_{ij} \sum_d dO_{id} V_{jd} = \sum_d dO_{id} \sum_j P_{ij} V_{jd} = \sum_d dO_{id}\, O_{id},$$

        the row sums of $dO \circ O$: one number per query, from two `[S_q, D_v]` tensors. The cell writes the
        six lines for a tiny case with the whole $P$ (small enough to hold) and compares them with autograd,
        then computes $\delta$ both ways.
        """, r"""
        ## 1. softmax 注意力的梯度

        对一个头，记 $S = q k^\top \cdot \text{scale}$（$\text{scale} = 1/\sqrt{D}$），$P$ 是逐行的 $\text{softmax}(S)$，$O = P V$；$dO$ 是损失对 $O$ 的梯度（即 `grad_out`）。本 notebook 里的 $S$ 始终已经乘过缩放（它就是 softmax 的输入），lse 也是这些缩放后分数的 lse，和 `flash_attention` 返回的一样。用链式法则，一次一个矩阵乘法：

        $$dV = P^\top dO, \qquad dP = dO\, V^\top,$$

        $$dS = P \circ (dP - \delta), \qquad \delta_i = \sum_j P_{ij}\, dP_{ij},$$

        $$dQ = dS\, K \cdot \text{scale}, \qquad dK = dS^\top Q \cdot \text{scale}.$$

        唯一不那么直观的是 softmax 那一行：$P$ 的第 $i$ 行和为 1，抬高一个分数就会从其他所有位置拿走权重，$\partial P_{ij} / \partial S_{ik} = P_{ij}(\mathbb{1}_{j=k} - P_{ik})$；再按 $dP$ 加权求和，就得到 $P_{ik}(dP_{ik} - \delta_i)$。而 $\delta$ 根本不需要 $P$：

        $$\delta_i = \sum_j P_{ij} \sum_d dO_{id} V_{jd} = \sum_d dO_{id} \sum_j P_{ij} V_{jd} = \sum_d dO_{id}\, O_{id},$$

        也就是 $dO \circ O$ 的行和：每个查询一个数，只用两个 `[S_q, D_v]` 的张量就能算出。下面的单元格在一个很小的例子上（小到可以放下整个 $P$）写出这六行，与 autograd 比较，再用两种方式计算 $\delta$。
        """),
        demo("""
        torch.manual_seed(0)
        B, H, S_q, S_k, D, D_v = 2, 3, 5, 7, 4, 6
        q, k, v = (torch.randn(B, H, n, d, dtype=torch.float64, requires_grad=True)
                   for n, d in ((S_q, D), (S_k, D), (S_k, D_v)))
        scale = 1 / math.sqrt(D)
        P = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)  # [B, H, S_q, S_k]
        O = P @ v  # [B, H, S_q, D_v]
        dO = torch.randn_like(O)
        O.backward(dO)  # autograd: q.grad, k.grad, v.grad
        with torch.no_grad():
            dV = P.transpose(-2, -1) @ dO  # [B, H, S_k, D_v]
            dP = dO @ v.transpose(-2, -1)  # [B, H, S_q, S_k]
            delta = (dO * O).sum(dim=-1, keepdim=True)  # [B, H, S_q, 1]
            dS = P * (dP - delta)  # [B, H, S_q, S_k]
            dQ, dK = dS @ k * scale, dS.transpose(-2, -1) @ q * scale  # [B, H, S_q, D], [B, H, S_k, D]
            print(say("the six lines vs autograd, largest gap: dq {dq:.1e}, dk {dk:.1e}, dv {dv:.1e} (largest |gradient| "
                      "{scale:.2f})", dq=(dQ - q.grad).abs().max().item(), dk=(dK - k.grad).abs().max().item(),
                      dv=(dV - v.grad).abs().max().item(),
                      scale=max(g.abs().max().item() for g in (q.grad, k.grad, v.grad))))
            print(say("delta = rowsum(dO * O) vs rowsum(P * dP): largest gap {gap:.1e} (largest |delta| {scale:.2f})",
                      gap=(delta - (P * dP).sum(dim=-1, keepdim=True)).abs().max().item(),
                      scale=delta.abs().max().item()))
        """),
        md(r"""
        ## 2. Recomputing $P$ from the log-sum-exp

        Every line above reads $P$, and $P$ is the `[S_q, S_k]` matrix the forward pass refused to build.
        But the forward returned $\text{lse}_i = \log \sum_j e^{S_{ij}}$, the log of row $i$'s softmax
        denominator, so any **tile** of $P$ comes back from $q$, $k$ and the lse alone:

        $$P_{ij} = e^{S_{ij} - \text{lse}_i}.$$

        No running maximum, no rescaling: the lse already holds the whole row's normalisation. What does
        **not** work is a softmax of the tile by itself: it normalises each row of the tile over the tile's
        keys only. The cell takes the tile (queries 0..3, keys 4..7) of a `[8, 12]` score matrix both ways.
        """, r"""
        ## 2. 用 log-sum-exp（lse）重算 $P$

        上面每一行都要读 $P$，而 $P$ 正是前向从头到尾都没有构造的那个 `[S_q, S_k]` 矩阵。不过前向返回了 $\text{lse}_i = \log \sum_j e^{S_{ij}}$，即第 $i$ 行 softmax 分母的对数，所以 $P$ 的任意一个**分块**都能只用 $q$、$k$ 和 lse 重新算出来：

        $$P_{ij} = e^{S_{ij} - \text{lse}_i}.$$

        不需要维护当前最大值，也不需要重新缩放：lse 已经包含了整行的归一化。**不**可行的做法是对分块单独做 softmax：那样每一行只在这个分块的键上归一化。下面的单元格从一个 `[8, 12]` 的分数矩阵里取出分块（查询 0..3，键 4..7），用两种方式计算。
        """),
        demo("""
        torch.manual_seed(1)
        q, k = torch.randn(1, 1, 8, 4), torch.randn(1, 1, 12, 4)
        s = q @ k.transpose(-2, -1) / 2  # [1, 1, 8, 12], scale 1 / sqrt(4)
        lse = torch.logsumexp(s, dim=-1)  # [1, 1, 8]: what flash_attention returns
        P = torch.softmax(s, dim=-1)  # [1, 1, 8, 12]: what plain attention keeps for backward
        tile = s[:, :, 0:4, 4:8]  # [1, 1, 4, 4]: queries 0..3, keys 4..7
        from_lse = torch.exp(tile - lse[:, :, 0:4, None])
        own_softmax = torch.softmax(tile, dim=-1)
        print(say("tile of P from exp(s - lse): largest gap {gap:.1e} (largest P in the tile {scale:.2f})",
                  gap=(from_lse - P[:, :, 0:4, 4:8]).abs().max().item(), scale=P[:, :, 0:4, 4:8].max().item()))
        print(say("tile of P from a softmax of the tile alone: largest gap {gap:.1e} (each row sums to 1 over 4 keys)",
                  gap=(own_softmax - P[:, :, 0:4, 4:8]).abs().max().item()))
        """),
        md(r"""
        ## 3. The tiled backward

        The backward visits the same tiles as the forward. For a query block $i$ and a key block $j$:

        1. recompute the tile's scores $S = Q_i K_j^\top \cdot \text{scale}$ and $P = e^{S - \text{lse}}$, the
           scale once (the lse is that of the scaled scores; masked above the bottom-right diagonal, as in the
           forward);
        2. add its share to three accumulators: $dV_j \mathrel{+}= P^\top dO_i$,
           $dQ_i \mathrel{+}= dS\, K_j \cdot \text{scale}$, $dK_j \mathrel{+}= dS^\top Q_i \cdot \text{scale}$,
           with $dS = P \circ (dO_i V_j^\top - \delta_i)$.

        $\delta$ is computed once, before the loop, from `grad_out` and `out`. A query that sees no key (causal,
        $S_q > S_k$) has `lse = -inf`: $e^{S - \text{lse}}$ would be $e^{-\infty + \infty}$, NaN; its
        probabilities must be 0, so it adds nothing to any gradient.

        With `causal=True`, a tile entirely above the diagonal has $P = 0$ and adds nothing: skipping it, as
        the forward does, saves work (about half of it when $S_q = S_k$) and is what the real kernels do. As in
        `01_flash`, it is not graded: a loop that computes and masks every tile gets the same gradients and full
        marks.

        | what | shape, dtype |
        |---|---|
        | `q`, `k`, `v`, `out`, `grad_out` | `[B, H, S_q, D]`, `[B, H, S_k, D]`, `[B, H, S_k, D_v]`, `[B, H, S_q, D_v]`, `[B, H, S_q, D_v]` |
        | `lse`, `delta` | `[B, H, S_q]` |
        | `P`, `dP`, `dS` of one tile | `[B, H, block_q, block_k]` |
        | accumulators `grad_q`, `grad_k`, `grad_v` | like `q`, `k`, `v`, float32 (float64 for float64 inputs) |
        | returns | `(grad_q, grad_k, grad_v)`, each in its input's dtype |
        """, r"""
        ## 3. 分块的反向传播

        反向传播访问与前向相同的分块。对查询块 $i$ 和键块 $j$：

        1. 重算这个分块的分数 $S = Q_i K_j^\top \cdot \text{scale}$ 和 $P = e^{S - \text{lse}}$，缩放只乘一次（lse 是缩放后分数的 lse；和前向一样，在右下对齐的对角线以上加掩码）；
        2. 把它的贡献加到三个累加器上：$dV_j \mathrel{+}= P^\top dO_i$，$dQ_i \mathrel{+}= dS\, K_j \cdot \text{scale}$，$dK_j \mathrel{+}= dS^\top Q_i \cdot \text{scale}$，其中 $dS = P \circ (dO_i V_j^\top - \delta_i)$。

        $\delta$ 在循环之前由 `grad_out` 和 `out` 算一次。一个看不到任何键的查询（因果且 $S_q > S_k$）的 `lse = -inf`：$e^{S - \text{lse}}$ 会变成 $e^{-\infty + \infty}$，也就是 NaN；它的概率必须是 0，因此对任何梯度都没有贡献。

        当 `causal=True` 时，完全位于对角线以上的分块 $P = 0$，没有任何贡献：像前向一样跳过它们可以省下计算（$S_q = S_k$ 时约省一半），真实的内核也是这样做的。和 `01_flash` 一样，这一点不评分：对每个分块都先计算再加掩码的循环，得到的梯度相同，也拿满分。

        | 内容 | 形状、dtype |
        |---|---|
        | `q`、`k`、`v`、`out`、`grad_out` | `[B, H, S_q, D]`、`[B, H, S_k, D]`、`[B, H, S_k, D_v]`、`[B, H, S_q, D_v]`、`[B, H, S_q, D_v]` |
        | `lse`、`delta` | `[B, H, S_q]` |
        | 一个分块的 `P`、`dP`、`dS` | `[B, H, block_q, block_k]` |
        | 累加器 `grad_q`、`grad_k`、`grad_v` | 与 `q`、`k`、`v` 同形状，float32（输入为 float64 时用 float64） |
        | 返回 | `(grad_q, grad_k, grad_v)`，各自与对应输入同 dtype |
        """),
        md(r"""
        <details><summary>Recipe (open it if you are stuck)</summary>

        - Which loops? The forward's: query blocks outside, the key blocks each can see inside (section 8 shows
          the other order, the one GPU kernels use). Where does a causal query block `[i0, i1)` stop reading keys?
        - What must exist before the loops? Three zero accumulators (in which dtype?), `delta` (from which two
          tensors?), and an lse that turns `-inf` into something for which `exp(s - lse)` is exactly 0.
        - Inside a tile: which five matrix products, and which of them needs `scale`?
        - At the end: which dtype does each gradient go back to?

        <details><summary>Still stuck: one tile, line by line</summary>

        `s = q_blk @ k_blk^T * scale` (masked with `-inf` where key `j > i + S_k - S_q` when causal);
        `p = exp(s - lse_blk[..., None])` (`s` holds the scale already: not `s * scale` again); `grad_v[j0:j1] += p^T @ do_blk`; `dp = do_blk @ v_blk^T`;
        `ds = p * (dp - delta_blk[..., None])`; `grad_q[i0:i1] += ds @ k_blk * scale`;
        `grad_k[j0:j1] += ds^T @ q_blk * scale`. An lse of `-inf` replaced by `+inf` gives `p = 0`.
        </details>
        </details>
        """, r"""
        <details><summary>具体做法（卡住时再打开）</summary>

        - 用哪几层循环？和前向一样：外层是查询块，内层是它能看到的键块（第 8 节介绍另一种顺序，也就是 GPU 内核用的顺序）。因果时，查询块 `[i0, i1)` 读到哪个键为止？
        - 循环之前要准备什么？三个全零的累加器（用什么 dtype？）、`delta`（由哪两个张量算出？），以及一个把 `-inf` 换掉、使 `exp(s - lse)` 恰好为 0 的 lse。
        - 在一个分块里：要做哪五次矩阵乘法？其中哪几次要乘 `scale`？
        - 最后：每个梯度要转回哪个 dtype？

        <details><summary>还是卡住：一个分块，逐行写出</summary>

        `s = q_blk @ k_blk^T * scale`（因果时在键 `j > i + S_k - S_q` 处填 `-inf`）；`p = exp(s - lse_blk[..., None])`（`s` 已经乘过缩放，不要再乘一次 `scale`）；`grad_v[j0:j1] += p^T @ do_blk`；`dp = do_blk @ v_blk^T`；`ds = p * (dp - delta_blk[..., None])`；`grad_q[i0:i1] += ds @ k_blk * scale`；`grad_k[j0:j1] += ds^T @ q_blk * scale`。把 `-inf` 的 lse 换成 `+inf`，就得到 `p = 0`。
        </details>
        </details>
        """),
        solution("flash_attention_backward", HINTS),
        check("check_flash_attention_backward(flash_attention_backward)", "check_flash_attention_backward"),
        md(r"""
        ## 4. `FlashAttentionFunction`: teaching autograd the shortcut

        A `torch.autograd.Function` has two static methods. `forward(ctx, q, k, v, causal)` computes the output
        and keeps what backward will need, with `ctx.save_for_backward(...)` for tensors (plain attributes of
        `ctx` for the rest, such as `causal`). `backward(ctx, grad_out)` reads `ctx.saved_tensors` and returns
        one gradient per input of `forward`, in order (`None` for `causal`). `FlashAttentionFunction.apply(q, k,
        v, causal)` then behaves like any differentiable operation.

        Yours: the forward runs your `flash_attention` (default blocks) and saves **only** `q, k, v, out, lse`;
        the backward calls your `flash_attention_backward`. The cell starts with a stub of `flash_attention`:
        paste there the one you wrote in `01_flash` (it is graded there; this notebook is graded on its own
        and needs it). The cell after the check runs
        `torch.autograd.gradcheck`, which compares the backward with finite differences of the forward on a tiny
        float64 case.
        """, r"""
        ## 4. `FlashAttentionFunction`：把捷径教给 autograd

        `torch.autograd.Function` 有两个静态方法。`forward(ctx, q, k, v, causal)` 计算输出，并保存反向传播需要的量：张量用 `ctx.save_for_backward(...)`，其余的（比如 `causal`）直接作为 `ctx` 的属性。`backward(ctx, grad_out)` 读取 `ctx.saved_tensors`，按顺序为 `forward` 的每个输入返回一个梯度（`causal` 对应 `None`）。这样 `FlashAttentionFunction.apply(q, k, v, causal)` 就和任何可微运算一样使用。

        你的版本：前向调用你的 `flash_attention`（默认分块），**只**保存 `q, k, v, out, lse`；反向调用你的 `flash_attention_backward`。这个单元格开头是 `flash_attention` 的空壳：把你在 `01_flash` 里写好的版本粘贴进去（它在那边评分；这个 notebook 单独评分，需要用到它）。检查之后的单元格运行 `torch.autograd.gradcheck`，它在一个很小的 float64 例子上，把反向传播与前向的有限差分比较。
        """),
        solution_cell(),
        check("check_flash_attention_function(FlashAttentionFunction)", "check_flash_attention_function"),
        demo("""
        torch.manual_seed(3)
        q, k, v = (torch.randn(1, 2, n, 3, dtype=torch.float64, requires_grad=True) for n in (5, 7, 7))
        with uses_your_code():
            passed = torch.autograd.gradcheck(lambda q, k, v: FlashAttentionFunction.apply(q, k, v, True), (q, k, v))
            print(say("torch.autograd.gradcheck (float64, 5 queries, 7 keys, causal): {passed}", passed=passed))
        """),
        md(r"""
        **The price of recomputing.** Per tile the forward does 2 matrix products ($S = QK^\top$, $PV$); the
        backward does 4 ($P^\top dO$, $dO V^\top$, $dS K$, $dS^\top Q$) plus 1 to recompute $S$. The cell counts
        the matrix products your two functions run on a 3 x 4 grid of tiles (PyTorch's dispatcher sees each
        `@` as one `bmm`), per tile. One extra product in seven is what buys $O(S)$ memory; on a GPU it also
        costs less time than reading a stored $P$ back from main memory ($S_q \times S_k$ numbers per head),
        since the recomputed tile never leaves on-chip memory.
        """, r"""
        **重算的代价。** 每个分块上，前向做 2 次矩阵乘法（$S = QK^\top$、$PV$）；反向做 4 次（$P^\top dO$、$dO V^\top$、$dS K$、$dS^\top Q$），再加 1 次重算 $S$。下面的单元格在 3 x 4 个分块的网格上，数出你的两个函数做了多少次矩阵乘法（PyTorch 的分发器把每个 `@` 看作一次 `bmm`），并折算到每个分块。七次里多出的这一次，换来了 $O(S)$ 的内存；在 GPU 上它花的时间也比从显存主存里把存下的 $P$（每个头 $S_q \times S_k$ 个数）读回来更少，因为重算的分块始终留在片上存储里。
        """),
        demo("""
        from torch.utils._python_dispatch import TorchDispatchMode


        class CountMatmuls(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.count = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.count += func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm)
                return func(*args, **(kwargs or {}))


        torch.manual_seed(2)
        q, k, v = torch.randn(1, 2, 12, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)  # 3 x 4 tiles of 4
        tiles = 3 * 4
        with uses_your_code():
            with CountMatmuls() as forward:
                out, lse = flash_attention(q, k, v, block_q=4, block_k=4)
            with CountMatmuls() as backward:
                flash_attention_backward(q, k, v, out, lse, torch.randn_like(out), block_q=4, block_k=4)
            print(say("matrix products per tile: forward {f:g}, backward {b:g}",
                      f=forward.count / tiles, b=backward.count / tiles))
        """),
        md(r"""
        ## 5. What autograd keeps until the backward pass

        `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` calls `pack` on every tensor that autograd
        saves for the backward pass. The cell adds up their sizes (a view counts as the tensor it views) for
        plain attention, $\text{softmax}(QK^\top/\sqrt{D})\,V$, and for your `FlashAttentionFunction`, causal,
        at one sequence of 2 heads of width 32. Plain attention runs on the `meta` device, which computes
        shapes without memory: at $S$ = 16k its saved tensors would not fit comfortably in this machine. Your
        function runs for real, up to $S$ = 4096 (a few seconds: its Python loop visits thousands of tiles;
        at 16k it would be tens of thousands). The cell sets torch to one thread, here and for the rest of the
        notebook: on tiles this small several threads gain nothing, and on a busy machine they wait for each
        other.
        """, r"""
        ## 5. autograd 为反向传播保留了什么

        `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` 会对 autograd 为反向传播保存的每个张量调用 `pack`。下面的单元格把它们的大小加起来（视图按它所属的张量计），分别测量朴素注意力 $\text{softmax}(QK^\top/\sqrt{D})\,V$ 和你的 `FlashAttentionFunction`（因果），取 1 条序列、2 个头、头宽 32。朴素注意力在 `meta` 设备上运行，它只计算形状、不占内存：$S$ = 16k 时它保存的张量在这台机器上很难放得下。你的函数是真正运行的，最大到 $S$ = 4096（需要几秒钟：它的 Python 循环要访问几千个分块；到 16k 就是几万个）。这个单元格把 torch 设为单线程，本节和之后的所有单元格都是如此：分块这么小时，多线程没有任何好处，在繁忙的机器上线程之间还会互相等待。
        """),
        demo("""
        def kept_mib(fn, *args):
            saved = {}

            def pack(t):
                base = t if t._base is None else t._base  # a view is kept with the tensor it views
                saved[id(base)] = base.numel() * base.element_size()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                fn(*args)
            return sum(saved.values()) / 2**20


        def plain(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


        torch.set_num_threads(1)  # tiles this small: one thread, no waiting for the others
        with uses_your_code():
            for S in (1024, 2048, 4096):
                meta = [torch.empty(1, 2, S, 32, device="meta", requires_grad=True) for _ in range(3)]
                real = [torch.randn(1, 2, S, 32, requires_grad=True) for _ in range(3)]
                flash = kept_mib(lambda q, k, v: FlashAttentionFunction.apply(q, k, v, True), *real)
                print(say("S = {S:>5}: plain attention keeps {plain:8.2f} MiB, FlashAttentionFunction {flash:6.2f} MiB",
                          S=S, plain=kept_mib(plain, *meta), flash=flash))
            S, blocks = 16384, 16384 // 64
            meta = [torch.empty(1, 2, S, 32, device="meta", requires_grad=True) for _ in range(3)]
            print(say("S = {S}: plain attention keeps {plain:8.2f} MiB; FlashAttentionFunction not run ({tiles:,} "
                      "causal tiles of 64 x 64 in a Python loop)", S=S, plain=kept_mib(plain, *meta),
                      tiles=blocks * (blocks + 1) // 2))
        """),
        *written_cells("written_recompute"),
        md(r"""
        ## 6. One training step, two ways

        The same one-layer model (a projection to `q, k, v` with 4 heads, causal attention, an output
        projection) is built twice with the same weights: once with plain attention, once with your
        `FlashAttentionFunction`. Each takes one SGD step on the same batch; the cell prints the two losses and
        the largest difference between the weights after the step.
        """, r"""
        ## 6. 一步训练，两种做法

        同一个单层模型（投影到 4 个头的 `q, k, v`、因果注意力、输出投影）用相同的权重构造两份：一份用朴素注意力，一份用你的 `FlashAttentionFunction`。两者在同一个批次上各做一步 SGD；下面的单元格打印两个损失，以及这一步之后两份权重之间的最大差距。
        """),
        demo("""
        import copy


        class OneLayer(nn.Module):
            def __init__(self, d_model, H, attend):
                super().__init__()
                self.H, self.attend = H, attend
                self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
                self.W_o = nn.Linear(d_model, d_model, bias=False)

            def forward(self, x):  # x [B, S, d_model]
                B, S, d_model = x.shape
                qkv = self.W_qkv(x).view(B, S, 3, self.H, d_model // self.H)  # [B, S, 3, H, D]
                q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [B, H, S, D]
                out = self.attend(q, k, v)  # [B, H, S, D]
                return self.W_o(out.transpose(1, 2).reshape(B, S, d_model))  # [B, S, d_model]


        def plain_causal(q, k, v):
            S = q.shape[-2]
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S, S]
            scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
            return torch.softmax(scores, dim=-1) @ v


        torch.manual_seed(4)
        x, target = torch.randn(3, 100, 32), torch.randn(3, 100, 32)  # B = 3, S = 100, d_model = 32
        plain_model = OneLayer(32, 4, plain_causal)
        flash_model = copy.deepcopy(plain_model)
        flash_model.attend = lambda q, k, v: FlashAttentionFunction.apply(q, k, v, True)
        with uses_your_code():
            losses = []
            for model in (plain_model, flash_model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
                loss = F.mse_loss(model(x), target)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            gap = max((a - b).abs().max().item() for a, b in zip(plain_model.parameters(), flash_model.parameters()))
            print(say("loss: plain attention {plain:.6f}, FlashAttentionFunction {flash:.6f}; weights after the step "
                      "differ by at most {gap:.1e}", plain=losses[0], flash=losses[1], gap=gap))
        """),
        graded_cell("flash_backward"),
        md(r"""
        ## 7. Pitfalls

        - **No $\delta$**: $dS = P \circ dP$ forgets that a softmax row sums to 1.
        - **The scale on one gradient only**: both $dQ$ and $dK$ carry $1/\sqrt{D}$ (the scores are
          $QK^\top/\sqrt{D}$); $dV$ does not.
        - **The scale twice, or not at all, in $P$**: `s = q_blk @ k_blk^T * scale` already holds it, so
          $P$ = `exp(s - lse)`; `exp(s * scale - lse)` scales twice, `exp(q_blk @ k_blk^T - lse)` not at all.
        - **$P$ as the softmax of the tile**: only the lse of the whole row normalises a tile correctly.
        - **Top-left causal**: the backward's mask must be the forward's, bottom-right.
        - **NaN from queries that see no key**: $e^{-\infty - (-\infty)}$; such rows add nothing.
        - **Tiles that no query of the block can see**: skipping them saves work and is not graded (as in
          `01_flash`); skipping a tile that a *later* query of the block can see loses its gradients.
        - **Saving $P$ in `ctx`**: the numbers stay right and the memory goes back to $S^2$; the hidden checks
          measure what the forward keeps.
        """, r"""
        ## 7. 常见错误

        - **漏掉 $\delta$**：$dS = P \circ dP$ 忘了 softmax 的每一行和为 1。
        - **只有一个梯度乘了缩放**：$dQ$ 和 $dK$ 都带 $1/\sqrt{D}$（分数是 $QK^\top/\sqrt{D}$）；$dV$ 不带。
        - **$P$ 里的缩放乘了两次，或者一次也没乘**：`s = q_blk @ k_blk^T * scale` 已经带着缩放，所以 $P$ = `exp(s - lse)`；`exp(s * scale - lse)` 乘了两次，`exp(q_blk @ k_blk^T - lse)` 一次也没乘。
        - **把 $P$ 当成分块的 softmax**：只有整行的 lse 才能正确地归一化一个分块。
        - **左上对齐的因果掩码**：反向的掩码必须和前向一样，右下对齐。
        - **看不到任何键的查询产生 NaN**：$e^{-\infty - (-\infty)}$；这样的行没有任何贡献。
        - **块内没有任何查询能看到的分块**：跳过它们能省下计算，但不评分（和 `01_flash` 一样）；若跳过了块内*后面的*查询能看到的分块，就会丢掉它们的梯度。
        - **把 $P$ 存进 `ctx`**：数值依然正确，内存却回到了 $S^2$；隐藏检查会测量前向保留了多少。
        """),
        *flash_backward_next.cells(),
    ]
