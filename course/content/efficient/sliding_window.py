"""Notebook 02 of `efficient`: sliding-window attention (the band mask, the receptive field, chunked computation)."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "02_sliding_window"

HINTS = {
    "sliding_window_mask": (
        "compare a column of query positions with a row of key positions (broadcasting), two conditions.",
        "用广播把一列查询位置和一行键位置比较，两个条件同时成立。",
    ),
    "sliding_window_attention": (
        "a chunk of queries reads only the keys its first and last query can see; mask the rest of that\n"
        "small rectangle (questions that lead there are folded above this cell).",
        "一块查询只读取它的第一个和最后一个查询能看到的键；在这个小长方形里把其余位置遮住\n"
        "（引导你的几个问题折叠在本单元格上方）。",
    ),
}

DOCSTRINGS_ZH = {
    "sliding_window_mask": "BoolTensor [S, S]：i - window < j <= i 处为 True（每个查询看到自己和它之前的 window - 1 个键）。",
    "sliding_window_attention": "q, k, v [B, H, S, D] -> [B, H, S, D_v]：窗口内的注意力，每次只处理一块查询和它能看到的键。",
}


def cells():
    return [
        md(r"""
        # 02 · Sliding-window attention

        Mistral 7B lets each token attend only to the last 4096 tokens, itself included: a **sliding
        window**. The score matrix becomes a band of width `window` around the diagonal, so the work grows as
        $S \times \text{window}$ instead of $S^2$, while the memory of a chunked version, beyond the output every
        attention returns, stays flat as $S$ grows: it holds one chunk's scores at a time (section 4 prints
        both). The model still carries information further than the window, layer by layer.

        | part | what you write |
        |---|---|
        | `sliding_window` | `sliding_window_mask(S, window)`, `sliding_window_attention(q, k, v, window, chunk_size)` |

        Per-head tensors are `[B, H, S, D]` (here `S_q = S_k = S`, self-attention). No
        `F.scaled_dot_product_attention` or `flex_attention` in this part.
        """, r"""
        # 02 · 滑动窗口注意力

        Mistral 7B 让每个 token 只关注最近的 4096 个 token（包括它自己）：这就是**滑动窗口**。分数矩阵变成对角线附近宽为 `window` 的一条带，于是计算量按 $S \times \text{window}$ 增长，而不是 $S^2$；而分块版本的内存，除了任何注意力都要返回的输出之外，不随 $S$ 增长：它一次只保存一块的分数（第 4 节把两者都打印出来）。模型仍然可以一层一层地把信息传到窗口之外。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `sliding_window` | `sliding_window_mask(S, window)`、`sliding_window_attention(q, k, v, window, chunk_size)` |

        每个头的张量形状是 `[B, H, S, D]`（这里 `S_q = S_k = S`，即自注意力）。本部分不能用 `F.scaled_dot_product_attention` 或 `flex_attention`。
        """),
        setup(),
        md(r"""
        ## 1. The band mask

        Query $i$ sees key $j$ when

        $$i - \text{window} < j \le i,$$

        itself and the `window - 1` keys before it: causal, and at most `window` keys per row. With
        `window = 1` each token sees only itself; with `window >= S` the mask is the usual causal mask.
        `sliding_window_mask(S, window)` returns this `[S, S]` boolean mask (True = may attend).

        **Which window: the paper's or the code's?** The Mistral 7B paper says that position $i$ attends to
        the positions from $i - W$ to $i$, with $W = 4096$: counted that way, $W$ keys before the query and
        $W + 1$ positions in all. Mistral's released code and configuration (`sliding_window = 4096`, passed to
        FlashAttention as `window_size = (4096 - 1, 0)`, "the 4095 keys before the query, and none after")
        let a query see itself and the 4095 keys before it: 4096 positions. The course follows the code:
        `window` counts the query itself, so the paper's $W$ is our `window - 1`, and its "$W$ tokens further
        per layer" is our `window - 1`. The cell of section 2 prints the reach both ways.
        """, r"""
        ## 1. 带状掩码

        当满足

        $$i - \text{window} < j \le i$$

        时，查询 $i$ 能看到键 $j$：即它自己以及它之前的 `window - 1` 个键。这是因果的，并且每行最多 `window` 个键。`window = 1` 时每个 token 只能看到自己；`window >= S` 时掩码就是普通的因果掩码。`sliding_window_mask(S, window)` 返回这个 `[S, S]` 的布尔掩码（True = 可以关注）。

        **窗口按论文算还是按代码算？** Mistral 7B 的论文写的是：位置 $i$ 关注从 $i - W$ 到 $i$ 的位置，$W = 4096$。这样数，查询之前有 $W$ 个键，连同查询自己一共 $W + 1$ 个位置。而 Mistral 发布的代码和配置（`sliding_window = 4096`，传给 FlashAttention 时是 `window_size = (4096 - 1, 0)`，即"查询之前的 4095 个键，之后一个也不看"）让查询看到自己和它之前的 4095 个键，一共 4096 个位置。本课程与代码一致：`window` 把查询自己也算在内，所以论文里的 $W$ 相当于这里的 `window - 1`，论文说的"每层向前多传 $W$ 个 token"也就是这里的 `window - 1`。第 2 节的单元格会按两种算法分别打印感受野。
        """),
        solution("sliding_window_mask", HINTS),
        check("check_sliding_window_mask(sliding_window_mask)", "check_sliding_window_mask"),
        demo("""
        with uses_your_code():
            mask = sliding_window_mask(8, 3)
            print(say("sliding_window_mask(8, 3), 1 = may attend:"))
            print(mask.int())
            print(say("keys per query: {counts}", counts=mask.sum(-1).tolist()))
        """),
        md(r"""
        ## 2. The receptive field grows with depth

        One layer moves information at most `window - 1` positions forward. But the output of layer 1 at
        position $j$ already mixes positions $j - \text{window} + 1 \dots j$, so layer 2 at position $i$
        reaches back $2(\text{window} - 1)$ positions, and $L$ layers reach $L(\text{window} - 1)$. The cell
        composes your mask with itself layer by layer (a boolean matrix product: $i$ reaches $j$ in $L$ layers
        when a path of $L$ allowed steps exists) and prints how far back the last token of 64 reaches.
        """, r"""
        ## 2. 感受野随深度增长

        一层最多把信息向前传 `window - 1` 个位置。但第 1 层在位置 $j$ 的输出已经混合了位置 $j - \text{window} + 1 \dots j$，所以第 2 层在位置 $i$ 能回溯 $2(\text{window} - 1)$ 个位置，$L$ 层能回溯 $L(\text{window} - 1)$ 个。下面的单元格把你的掩码一层层地与自身复合（布尔矩阵乘法：如果存在一条由 $L$ 步允许的连接组成的路径，$i$ 在 $L$ 层内就能到达 $j$），并打印 64 个 token 中最后一个能回溯多远。
        """),
        demo("""
        S, window = 64, 4
        with uses_your_code():
            step = sliding_window_mask(S, window).float()
            reach = step.clone()
            for layers in range(1, 7):
                farthest = S - 1 - int(reach[-1].nonzero().min())
                print(say("L = {layers}: the last token reaches {farthest:>2} positions back; L x (window - 1) = {bound:>2}",
                          layers=layers, farthest=farthest, bound=layers * (window - 1)))
                reach = ((reach @ step) > 0).float()  # one more layer
        print(say("Mistral 7B: 32 layers x (4096 - 1) = {tokens:,} tokens of reach", tokens=32 * 4095))
        print(say("the paper's count (W = 4096 keys before the query, one more than the code's): 32 x 4096 = {tokens:,}",
                  tokens=32 * 4096))
        """),
        md(r"""
        ## 3. Computing only the band

        Masking the full `[S, S]` scores gives the right numbers but builds the whole matrix. Instead, cut the
        queries into chunks of `chunk_size`. The chunk of queries $i_0 \dots i_1 - 1$ can only see keys from
        $\max(0, i_0 - \text{window} + 1)$ (what its first query sees) up to $i_1 - 1$ (its last query):
        a rectangle of at most `chunk_size x (chunk_size + window - 1)` scores per head. Inside it, mask
        what each query may not see, softmax, multiply by those values, and write the chunk's rows of the
        output. The picture shows the band for `S = 48, window = 8, chunk_size = 16` and the rectangle each
        chunk reads.
        """, r"""
        ## 3. 只计算这条带

        对完整的 `[S, S]` 分数加掩码，数值是对的，但构造了整个矩阵。换一种做法：把查询切成大小为 `chunk_size` 的块。查询 $i_0 \dots i_1 - 1$ 这一块只可能看到从 $\max(0, i_0 - \text{window} + 1)$（第一个查询看到的最早的键）到 $i_1 - 1$（最后一个查询）的键：每个头最多是 `chunk_size x (chunk_size + window - 1)` 个分数的一个长方形。在其中遮住每个查询不能看的位置，做 softmax，乘以对应的值，写入输出中这一块的行。图中画出 `S = 48, window = 8, chunk_size = 16` 时的带，以及每一块读取的长方形。
        """),
        demo("""
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle

        S, window, chunk = 48, 8, 16
        i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
        fig, ax = plt.subplots(figsize=(4.2, 4.2))
        ax.imshow(((j <= i) & (j > i - window)).int(), cmap="Greens")  # the band, drawn from the formula above
        for i0 in range(0, S, chunk):
            j0 = max(0, i0 - window + 1)
            ax.add_patch(Rectangle((j0 - 0.5, i0 - 0.5), i0 + chunk - j0, chunk, fill=False, color="#e76f51", lw=2))
            print(say("queries {i0}..{i1}: keys {j0}..{i1}, {n} scores instead of {full}",
                      i0=i0, i1=i0 + chunk - 1, j0=j0, n=chunk * (i0 + chunk - j0), full=chunk * S))
        ax.set(title=say("the band and the rectangle of each chunk"), xlabel=say("key position j"),
               ylabel=say("query position i"))
        plt.show()
        """),
        md(r"""
        <details><summary>Questions that lead to <code>sliding_window_attention</code> (open them if the hint is not enough)</summary>

        - The chunk that starts at query `i0`: which queries does it hold, and where does it stop when `S` is
          not a multiple of `chunk_size`?
        - Which is the earliest key its **first** query may see, and the latest key its **last** query may see?
          So which slice of `k` and `v` does the chunk need, and why never more?
        - Inside that rectangle of scores, which (query, key) pairs are still outside the band? Write the
          condition on the **absolute** positions of the rectangle's rows and columns (not on 0, 1, 2, ... inside
          the chunk), and say what a score outside it must become before the softmax.
        - After the softmax over the keys the chunk read, which values multiply the weights, and which rows of
          the output receive the result?

        <details><summary>Still stuck: the steps in words</summary>

        1. Make an output `[B, H, S, D_v]` to fill.
        2. Walk the query chunks: `i0` from 0 in steps of `chunk_size`, the chunk ending at the smaller of
           `i0 + chunk_size` and `S`; its first readable key is `i0 - window + 1`, but never below 0.
        3. Score the chunk's queries against the keys from that first key up to the chunk's last query, with the
           usual 1/√D.
        4. Build the positions: the chunk's query positions as a column, the keys' positions as a row; a pair is
           in the band when the key is not after the query and less than `window` before it. Put −∞ elsewhere.
        5. Softmax over the keys, multiply by the same slice of `v`, write the chunk's rows of the output.
        </details>
        </details>
        """, r"""
        <details><summary>引导你写出 <code>sliding_window_attention</code> 的几个问题（提示不够用时再打开）</summary>

        - 从查询 `i0` 开始的这一块包含哪些查询？当 `S` 不是 `chunk_size` 的整数倍时，它在哪里结束？
        - 这一块的**第一个**查询最早能看到哪个键？**最后一个**查询最晚能看到哪个键？所以这一块需要 `k` 和 `v` 的哪一段？为什么不需要更多？
        - 在这个分数长方形里，哪些（查询，键）对仍然在带外？用长方形行和列的**绝对**位置写出条件（不是块内的 0, 1, 2, ...），并说明带外的分数在 softmax 之前应该变成什么。
        - 对这一块读到的键做完 softmax 之后，权重要乘以哪些值？结果写进输出的哪些行？

        <details><summary>还是卡住：用文字写出的步骤</summary>

        1. 准备一个要逐块填满的输出 `[B, H, S, D_v]`。
        2. 逐块遍历查询：`i0` 从 0 开始，步长为 `chunk_size`，这一块结束于 `i0 + chunk_size` 与 `S` 中较小的那个；它能读的第一个键是 `i0 - window + 1`，但不能小于 0。
        3. 用通常的 1/√D 缩放，计算这一块的查询与"从那个第一个键到这一块最后一个查询"之间的键的分数。
        4. 构造位置：这一块查询的位置排成一列，键的位置排成一行；键不在查询之后、并且在查询之前不到 `window` 个位置时，这一对在带内。其余位置填 −∞。
        5. 对键做 softmax，乘以 `v` 的同一段，写入输出中这一块的行。
        </details>
        </details>
        """),
        solution("sliding_window_attention", HINTS),
        check("check_sliding_window_attention(sliding_window_attention)", "check_sliding_window_attention"),
        md(r"""
        ## 4. What grows with what

        The cell measures, with the course's `LiveMemoryMeter` (it counts the tensors a function creates, its
        intermediates and its output, never its inputs or views of them), plain attention masked with your band
        mask and your chunked version (`window = 64`, `chunk_size = 128`) as S grows, and plots both. It splits
        the chunked peak in two: the output `[B, H, S, D_v]`, which every attention returns and which grows with
        S, and **the rest**, the work of one chunk at a time (its scores, their mask and softmax), which depends
        on `chunk_size x (chunk_size + window - 1)` per head and not on S. Then, at a fixed S, it grows the
        window: the rest follows `chunk_size + window - 1`. The **work**, the number of scores computed, grows
        roughly as S x (`chunk_size + window - 1`) (the first chunk has fewer keys before it): the last lines
        print these ratios.
        """, r"""
        ## 4. 什么随什么增长

        下面的单元格用课程的 `LiveMemoryMeter`（它统计函数新建的张量，即中间结果和输出，从不统计输入或输入的视图）测量随 S 增长时，用你的带状掩码遮住的朴素注意力和你的分块版本（`window = 64`，`chunk_size = 128`）的峰值内存，并把两者画出来。它把分块版本的峰值分成两部分：输出 `[B, H, S, D_v]`，任何注意力都要返回它，它随 S 增长；以及**其余部分**，即一次一块的工作（这一块的分数、掩码和 softmax），每个头取决于 `chunk_size x (chunk_size + window - 1)`，与 S 无关。然后在固定的 S 下增大窗口：其余部分随 `chunk_size + window - 1` 增长。**计算量**，即算出的分数个数，大致按 S x (`chunk_size + window - 1`) 增长（第一块之前的键较少）：最后几行打印这些比值。
        """),
        demo("""
        import matplotlib.pyplot as plt


        def peak_mib(fn, *args, **kwargs):
            with LiveMemoryMeter() as meter:
                fn(*args, **kwargs)
            return meter.peak_bytes / 2**20


        def masked_plain(q, k, v, window):
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S, S]
            scores = scores.masked_fill(~sliding_window_mask(q.shape[-2], window), float("-inf"))
            return torch.softmax(scores, dim=-1) @ v


        def scores_computed(S, window, chunk):  # the rectangles of section 3, summed
            return sum((min(i0 + chunk, S) - i0) * (min(i0 + chunk, S) - max(0, i0 - window + 1)) for i0 in range(0, S, chunk))


        B, H, D, chunk = 1, 2, 16, 128
        lengths, window = [512, 1024, 2048, 4096], 64
        with uses_your_code():
            plain_peaks, chunked_peaks, rests = [], [], []
            for S in lengths:
                q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
                plain_peaks.append(peak_mib(masked_plain, q, k, v, window))
                chunked_peaks.append(peak_mib(sliding_window_attention, q, k, v, window, chunk_size=chunk))
                output = B * H * S * D * 4 / 2**20  # the [B, H, S, D_v] result in float32
                rests.append(chunked_peaks[-1] - output)
                print(say("S = {S:>5}: masked full attention {plain:8.2f} MiB, chunked {chunked:6.2f} MiB = output {output:5.2f} + the rest {rest:5.2f}",
                          S=S, plain=plain_peaks[-1], chunked=chunked_peaks[-1], output=output, rest=rests[-1]))
            S, windows = 4096, (32, 64, 128, 256, 512)
            q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
            output = B * H * S * D * 4 / 2**20
            window_rests = []
            for w in windows:
                window_rests.append(peak_mib(sliding_window_attention, q, k, v, w, chunk_size=chunk) - output)
                print(say("S = {S}, window = {window:>3}: the rest {rest:5.2f} MiB; one chunk's scores, chunk_size x (chunk_size + window - 1): {scores:5.2f} MiB",
                          S=S, window=w, rest=window_rests[-1], scores=B * H * chunk * (chunk + w - 1) * 4 / 2**20))
            print(say("S x {n}: masked full attention x {plain:.1f}, chunked x {chunked:.2f}: its output x {n}, the rest x {rest:.2f}",
                      n=lengths[-1] // lengths[0], plain=plain_peaks[-1] / plain_peaks[0],
                      chunked=chunked_peaks[-1] / chunked_peaks[0], rest=rests[-1] / rests[0]))
            print(say("window x {n}: the rest x {rest:.2f}, chunk_size + window - 1 x {keys:.2f}",
                      n=windows[-1] // windows[0], rest=window_rests[-1] / window_rests[0],
                      keys=(chunk + windows[-1] - 1) / (chunk + windows[0] - 1)))
            print(say("scores computed: S x {n} gives x {s_ratio:.2f}, window x {m} gives x {w_ratio:.2f}; the full matrix at S = {S} holds {full:,}, the chunks compute {chunked:,}",
                      n=lengths[-1] // lengths[0], m=windows[-1] // windows[0],
                      s_ratio=scores_computed(lengths[-1], window, chunk) / scores_computed(lengths[0], window, chunk),
                      w_ratio=scores_computed(S, windows[-1], chunk) / scores_computed(S, windows[0], chunk),
                      S=S, full=S * S, chunked=scores_computed(S, window, chunk)))
            fig, ax = plt.subplots(figsize=(5.5, 3.6))
            ax.plot(lengths, plain_peaks, marker="o", label=say("masked full attention"))
            ax.plot(lengths, chunked_peaks, marker="o", label=say("chunked, window 64"))
            ax.set(xscale="log", yscale="log", xlabel=say("sequence length S"), ylabel=say("peak memory (MiB)"),
                   title=say("B = 1, H = 2, D = 16, float32"))
            ax.set_xticks(lengths, [str(s) for s in lengths])
            ax.minorticks_off()
            ax.legend()
            plt.show()
        """),
        graded_cell("sliding_window"),
        md(r"""
        ## 5. Pitfalls

        - **Window off by one**: `window` counts the query itself; `j > i - window`, not `j >= i - window`.
        - **A chunk that starts its keys at its own first query**: its first queries lose the keys before the
          chunk; start at `i0 - window + 1`.
        - **The last chunk**: `S` need not be a multiple of `chunk_size`.
        - **Masking the full matrix**: right numbers, $S^2$ memory; the hidden checks measure the peak.
        - **Calling `sliding_window_mask(S, window)` inside the chunk loop** and slicing the chunk's rectangle out of
          it: right numbers, but an `[S, S]` mask, built again for every chunk. Build the chunk's own mask from
          its query and key positions.
        - With a KV cache, a sliding window also bounds the cache: only the last `window` keys are ever read
          again (Mistral's rolling buffer cache).
        """, r"""
        ## 5. 常见错误

        - **窗口差一**：`window` 把查询自己也算在内；是 `j > i - window`，不是 `j >= i - window`。
        - **一块的键从它自己的第一个查询开始**：这块前面几个查询会丢掉块之前的键；应当从 `i0 - window + 1` 开始。
        - **最后一块**：`S` 不一定是 `chunk_size` 的整数倍。
        - **对完整矩阵加掩码**：数值对，内存却是 $S^2$；隐藏检查会测量峰值。
        - **在分块循环里调用 `sliding_window_mask(S, window)`**，再从中切出这一块的长方形：数值对，但每一块都要重新构造一个 `[S, S]` 的掩码。应当用这一块查询和键的位置只构造它自己的掩码。
        - 有 KV 缓存时，滑动窗口也限制了缓存：只有最近的 `window` 个键会再被读到（Mistral 的滚动缓冲缓存）。
        """),
    ]


DEMO_ZH = {
    "# one more layer": "# 再多一层",
    "# the band, drawn from the formula above": "# 按上面的公式画出的带",
    "# the rectangles of section 3, summed": "# 第 3 节各个长方形里的分数个数之和",
    "# the [B, H, S, D_v] result in float32": "# 输出 [B, H, S, D_v]，float32",
}
