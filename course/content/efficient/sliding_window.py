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
        "small rectangle (the recipe is folded above this cell).",
        "一块查询只读取它的第一个和最后一个查询能看到的键；在这个小长方形里把其余位置遮住\n"
        "（具体做法折叠在本单元格上方）。",
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
        window**. The score matrix becomes a band of width `window` around the diagonal, so the work and the
        memory grow as $S \times \text{window}$ instead of $S^2$, and the model still carries information
        further than the window, layer by layer.

        | part | what you write |
        |---|---|
        | `sliding_window` | `sliding_window_mask(S, window)`, `sliding_window_attention(q, k, v, window, chunk_size)` |

        Per-head tensors are `[B, H, S, D]` (here `S_q = S_k = S`, self-attention). No
        `F.scaled_dot_product_attention` or `flex_attention` in this part.
        """, r"""
        # 02 · 滑动窗口注意力

        Mistral 7B 让每个 token 只关注最近的 4096 个 token（包括它自己）：这就是**滑动窗口**。分数矩阵变成对角线附近宽为 `window` 的一条带，于是计算量和内存按 $S \times \text{window}$ 增长，而不是 $S^2$；模型仍然可以一层一层地把信息传到窗口之外。

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
        """, r"""
        ## 1. 带状掩码

        当满足

        $$i - \text{window} < j \le i$$

        时，查询 $i$ 能看到键 $j$：即它自己以及它之前的 `window - 1` 个键。这是因果的，并且每行最多 `window` 个键。`window = 1` 时每个 token 只能看到自己；`window >= S` 时掩码就是普通的因果掩码。`sliding_window_mask(S, window)` 返回这个 `[S, S]` 的布尔掩码（True = 可以关注）。
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
            print(say("layers | farthest key seen by the last token | L x (window - 1)"))
            for layers in range(1, 7):
                farthest = S - 1 - int(reach[-1].nonzero().min())
                print(f"{layers:>6} | {farthest:>36} | {layers * (window - 1):>16}")
                reach = ((reach @ step) > 0).float()  # one more layer
        print(say("Mistral 7B: 32 layers x (4096 - 1) = {tokens:,} tokens of reach", tokens=32 * 4095))
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
        <details><summary>Recipe (open it if you are stuck)</summary>

        For `i0` in `range(0, S, chunk_size)`: `i1 = min(i0 + chunk_size, S)`, `j0 = max(0, i0 - window + 1)`;
        scores `q[:, :, i0:i1] @ k[:, :, j0:i1]^T * scale`; positions `query = arange(i0, i1)[:, None]`,
        `key = arange(j0, i1)[None, :]`; fill `-inf` where not `(key <= query) & (key > query - window)`; softmax
        over the last axis; `out[:, :, i0:i1] = weights @ v[:, :, j0:i1]`.
        </details>
        """, r"""
        <details><summary>具体做法（卡住时再打开）</summary>

        对 `range(0, S, chunk_size)` 中的每个 `i0`：`i1 = min(i0 + chunk_size, S)`，`j0 = max(0, i0 - window + 1)`；分数 `q[:, :, i0:i1] @ k[:, :, j0:i1]^T * scale`；位置 `query = arange(i0, i1)[:, None]`，`key = arange(j0, i1)[None, :]`；在不满足 `(key <= query) & (key > query - window)` 处填 `-inf`；对最后一维做 softmax；`out[:, :, i0:i1] = weights @ v[:, :, j0:i1]`。
        </details>
        """),
        solution("sliding_window_attention", HINTS),
        check("check_sliding_window_attention(sliding_window_attention)", "check_sliding_window_attention"),
        md(r"""
        ## 4. Memory: S x window, not S^2

        The cell measures, with the course's `LiveMemoryMeter`, plain attention masked with your band mask
        and your chunked version (`window = 64`, `chunk_size = 128`), as S grows, and plots both. Then, at a
        fixed S, it doubles the window: the chunked version's peak follows the window, not S.
        """, r"""
        ## 4. 内存：S x window，而不是 S^2

        下面的单元格用课程的 `LiveMemoryMeter` 测量随 S 增长时，用你的带状掩码遮住的朴素注意力和你的分块版本（`window = 64`，`chunk_size = 128`）的峰值内存，并把两者画出来。然后在固定的 S 下把窗口加倍：分块版本的峰值随窗口变化，而不是随 S 变化。
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


        lengths, window = [512, 1024, 2048, 4096], 64
        with uses_your_code():
            plain_peaks, chunked_peaks = [], []
            for S in lengths:
                q, k, v = (torch.randn(1, 2, S, 16) for _ in range(3))
                plain_peaks.append(peak_mib(masked_plain, q, k, v, window))
                chunked_peaks.append(peak_mib(sliding_window_attention, q, k, v, window, chunk_size=128))
                print(say("S = {S:>5}: masked full attention {plain:8.2f} MiB, chunked {chunked:6.2f} MiB",
                          S=S, plain=plain_peaks[-1], chunked=chunked_peaks[-1]))
            S = 4096
            q, k, v = (torch.randn(1, 2, S, 16) for _ in range(3))
            for w in (32, 64, 128, 256):
                print(say("S = {S}, window = {window:>3}: chunked peak {peak:.2f} MiB",
                          S=S, window=w, peak=peak_mib(sliding_window_attention, q, k, v, w, chunk_size=128)))
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
        - With a KV cache, a sliding window also bounds the cache: only the last `window` keys are ever read
          again (Mistral's rolling buffer cache).
        """, r"""
        ## 5. 常见错误

        - **窗口差一**：`window` 把查询自己也算在内；是 `j > i - window`，不是 `j >= i - window`。
        - **一块的键从它自己的第一个查询开始**：这块前面几个查询会丢掉块之前的键；应当从 `i0 - window + 1` 开始。
        - **最后一块**：`S` 不一定是 `chunk_size` 的整数倍。
        - **对完整矩阵加掩码**：数值对，内存却是 $S^2$；隐藏检查会测量峰值。
        - 有 KV 缓存时，滑动窗口也限制了缓存：只有最近的 `window` 个键会再被读到（Mistral 的滚动缓冲缓存）。
        """),
    ]
