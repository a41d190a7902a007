"""Notebook 03 of `efficient`: linear attention (the kernel trick, causal sums, the recurrent form)."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "03_linear"

HINTS = {
    "elu_feature_map": (
        "torch has elu; shift it so that it never reaches 0.",
        "torch 里有 elu；把它平移，使它永远不会到 0。",
    ),
    "linear_attention": (
        "sum over the keys first (phi(K)^T V and the sum of phi(K)), then meet the queries;\n"
        "when causal, go chunk by chunk: the keys of earlier chunks through those two sums, the chunk's own\n"
        "keys through a small masked block (questions that lead there are folded above this cell).",
        "先对键求和（phi(K)^T V 和 phi(K) 的和），再与查询相乘；\n"
        "因果时逐块计算：前面各块的键通过这两个和进入，本块自己的键通过一个加了掩码的小方块进入\n"
        "（引导你的几个问题折叠在本单元格上方）。",
    ),
    "linear_attention_step": (
        "the state is the two running sums; add this step's key to them, then read them with this step's query.",
        "状态就是那两个累加和；把这一步的键加进去，再用这一步的查询去读它们。",
    ),
}

DOCSTRINGS_ZH = {
    "elu_feature_map": "phi(x) = elu(x) + 1：处处为正，因此权重 phi(q) . phi(k) 也处处为正。",
    "linear_attention": "q, k [B, H, S, D]，v [B, H, S, D_v] -> [B, H, S, D_v]：phi(q_i) . sum_j phi(k_j) v_j^T / "
                        "(phi(q_i) . sum_j phi(k_j) + eps)，不构造任何 [S, S] 张量。",
    "linear_attention_step": "因果线性注意力的一步：q_t, k_t [B, H, D]，v_t [B, H, D_v] -> (out_t [B, H, D_v]，"
                             "状态 (sum phi(k) v^T [B, H, D, D_v]，sum phi(k) [B, H, D]))。",
}


def cells():
    return [
        md(r"""
        # 03 · Linear attention: the kernel trick, and attention as an RNN

        Softmax attention weighs key $j$ for query $i$ by $e^{q_i \cdot k_j}$ and must look at every pair:
        $S^2$ work. **Linear attention** (Katharopoulos et al., 2020, "Transformers are RNNs") replaces
        $e^{q \cdot k}$ by $\phi(q) \cdot \phi(k)$ for a positive **feature map** $\phi$. Then the order of the
        matrix products can change, the cost becomes linear in $S$, and causal generation needs a state of
        fixed size instead of a growing KV cache. The price: the weights are no longer softmax's.

        | part | what you write |
        |---|---|
        | `linear` | `elu_feature_map(x)`, `linear_attention(q, k, v, causal, eps)`, `linear_attention_step(state, q_t, k_t, v_t, eps)` |

        No `F.scaled_dot_product_attention` or `flex_attention` in this part.
        """, r"""
        # 03 · 线性注意力：核技巧，以及作为 RNN 的注意力

        softmax 注意力用 $e^{q_i \cdot k_j}$ 给查询 $i$ 的键 $j$ 加权，必须看遍每一对：计算量 $S^2$。**线性注意力**（Katharopoulos 等，2020，"Transformers are RNNs"）用一个取正值的**特征映射** $\phi$，把 $e^{q \cdot k}$ 换成 $\phi(q) \cdot \phi(k)$。于是矩阵乘法的顺序可以改变，代价变成关于 $S$ 线性；因果生成只需要一个固定大小的状态，而不是不断增长的 KV 缓存。代价是：权重不再是 softmax 的权重。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `linear` | `elu_feature_map(x)`、`linear_attention(q, k, v, causal, eps)`、`linear_attention_step(state, q_t, k_t, v_t, eps)` |

        本部分不能用 `F.scaled_dot_product_attention` 或 `flex_attention`。
        """),
        setup(),
        md(r"""
        ## 1. Associativity: the whole trick

        With weights $\phi(q_i) \cdot \phi(k_j)$ the output is

        $$o_i = \frac{\sum_j (\phi(q_i) \cdot \phi(k_j))\, v_j}{\sum_j \phi(q_i) \cdot \phi(k_j)}
              = \frac{\phi(q_i)^\top \left(\sum_j \phi(k_j) v_j^\top\right)}{\phi(q_i)^\top \sum_j \phi(k_j)}.$$

        In matrices the numerator is $(\phi(Q)\phi(K)^\top) V$, an `[S, S]` matrix times `[S, D_v]`; but matrix
        products are associative, so it equals $\phi(Q) (\phi(K)^\top V)$, where $\phi(K)^\top V$ is only
        `[D, D_v]`, whatever S. (Softmax forbids this: $e^{q \cdot k}$ does not split into a product of a
        function of $q$ and a function of $k$ with a finite width.) The cell checks the two orders on random
        matrices and counts their multiplications.
        """, r"""
        ## 1. 结合律：全部的诀窍

        当权重为 $\phi(q_i) \cdot \phi(k_j)$ 时，输出是

        $$o_i = \frac{\sum_j (\phi(q_i) \cdot \phi(k_j))\, v_j}{\sum_j \phi(q_i) \cdot \phi(k_j)}
              = \frac{\phi(q_i)^\top \left(\sum_j \phi(k_j) v_j^\top\right)}{\phi(q_i)^\top \sum_j \phi(k_j)}.$$

        写成矩阵，分子是 $(\phi(Q)\phi(K)^\top) V$：一个 `[S, S]` 矩阵乘以 `[S, D_v]`；但矩阵乘法满足结合律，所以它等于 $\phi(Q) (\phi(K)^\top V)$，而 $\phi(K)^\top V$ 只有 `[D, D_v]`，与 S 无关。（softmax 不允许这样做：$e^{q \cdot k}$ 不能拆成一个只依赖 $q$ 的有限维函数与一个只依赖 $k$ 的函数的乘积。）下面的单元格在随机矩阵上验证两种顺序，并统计各自的乘法次数。
        """),
        demo("""
        torch.manual_seed(0)
        S, D, D_v = 4096, 64, 64
        A, Bt, C = torch.rand(S, D, dtype=torch.float64), torch.rand(D, S, dtype=torch.float64), torch.randn(S, D_v, dtype=torch.float64)
        left, right = (A @ Bt) @ C, A @ (Bt @ C)  # [S, S] @ [S, D_v]  vs  [S, D] @ [D, D_v]
        print(say("(A B) C vs A (B C): largest difference {gap:.1e}", gap=(left - right).abs().max().item()))
        left_count, right_count = S * D * S + S * S * D_v, D * S * D_v + S * D * D_v  # multiply-adds of each order
        print(say("multiplications at S = {S}: (A B) C {left:,}, A (B C) {right:,}: {ratio:.0f}x fewer",
                  S=S, left=left_count, right=right_count, ratio=left_count / right_count))
        """),
        md(r"""
        ## 2. A positive feature map

        The weights must be positive, or the denominator can be 0 or negative. Katharopoulos et al. use

        $$\phi(x) = \operatorname{elu}(x) + 1 = \begin{cases} x + 1 & x > 0 \\ e^{x} & x \le 0 \end{cases}$$

        applied to each feature: smooth, positive, and close to linear for large inputs.
        """, r"""
        ## 2. 取正值的特征映射

        权重必须为正，否则分母可能为 0 甚至为负。Katharopoulos 等人使用

        $$\phi(x) = \operatorname{elu}(x) + 1 = \begin{cases} x + 1 & x > 0 \\ e^{x} & x \le 0 \end{cases}$$

        逐个特征地作用：光滑、为正，并且对大的输入接近线性。
        """),
        solution("elu_feature_map", HINTS),
        check("check_elu_feature_map(elu_feature_map)", "check_elu_feature_map"),
        md(r"""
        ## 3. Linear attention, non-causal and causal

        `linear_attention(q, k, v, causal=False, eps=1e-6)` with `q, k [B, H, S, D]`, `v [B, H, S, D_v]`:

        - **non-causal**: `kv = phi(K)^T V` `[B, H, D, D_v]` and `z = sum_j phi(k_j)` `[B, H, D]`, then
          `out_i = phi(q_i) kv / (phi(q_i) . z + eps)`;
        - **causal**: query $i$ sums over $j \le i$ only. The direct way keeps the **running sums at every
          position**, `kv_i = sum_{j<=i} phi(k_j) v_j^T` (a `torch.cumsum` over `[B, H, S, D, D_v]`): linear in S,
          but $D \times D_v$ numbers per position, which at real head widths ($D = D_v = 64$: 4096 per position)
          is more than softmax's $S$ scores per query until $S$ passes $D \times D_v$. The cell after your
          function measures it.
        - **causal, chunkwise** (what real linear-attention kernels do): cut the sequence into chunks of $C$
          positions. For the queries of one chunk, every key of the **earlier chunks** is summed up in the two
          running sums as they stood after the previous chunk (one `[D, D_v]` matrix and one `[D]` vector, the
          state of section 5); the keys **inside the chunk** go through a small `[C, C]` matrix of weights
          $\phi(q_i) \cdot \phi(k_j)$, masked to $j \le i$: quadratic, but only in $C$. Then the chunk's keys
          join the sums. Memory: $C^2 + D \times D_v$ per head at a time, plus the output.

        No `[S, S]` tensor anywhere (the hidden checks measure it). There is no $1/\sqrt{D}$ scale: $\phi$
        replaces the exponential, and with it the temperature that $1/\sqrt{D}$ sets in softmax.
        """, r"""
        ## 3. 线性注意力：非因果与因果

        `linear_attention(q, k, v, causal=False, eps=1e-6)`，其中 `q, k [B, H, S, D]`，`v [B, H, S, D_v]`：

        - **非因果**：`kv = phi(K)^T V` `[B, H, D, D_v]`，`z = sum_j phi(k_j)` `[B, H, D]`，然后 `out_i = phi(q_i) kv / (phi(q_i) . z + eps)`；
        - **因果**：查询 $i$ 只对 $j \le i$ 求和。最直接的做法是保留**每个位置的累加和** `kv_i = sum_{j<=i} phi(k_j) v_j^T`（对 `[B, H, S, D, D_v]` 做 `torch.cumsum`）：关于 S 是线性的，但每个位置要存 $D \times D_v$ 个数；在实际的头宽下（$D = D_v = 64$：每个位置 4096 个数），只要 $S$ 还没超过 $D \times D_v$，它就比 softmax 每个查询的 $S$ 个分数还多。你的函数后面的单元格会测量它。
        - **因果，分块计算**（实际的线性注意力内核就是这样做的）：把序列切成每块 $C$ 个位置。对一块里的查询来说，**前面各块**的所有键都已经汇总在"上一块结束时"的两个累加和里（一个 `[D, D_v]` 矩阵和一个 `[D]` 向量，也就是第 5 节的状态）；**本块内部**的键则通过一个 `[C, C]` 的小权重矩阵 $\phi(q_i) \cdot \phi(k_j)$ 进入，并遮住 $j > i$ 的部分：它是平方级的，但只是关于 $C$。然后把本块的键加进这两个和。内存：每个头一次只需要 $C^2 + D \times D_v$，再加上输出。

        任何地方都不能出现 `[S, S]` 张量（隐藏检查会测量）。这里没有 $1/\sqrt{D}$ 的缩放：$\phi$ 取代了指数函数，也就取代了 $1/\sqrt{D}$ 在 softmax 里设定的温度。
        """),
        md(r"""
        <details><summary>Questions that lead to <code>linear_attention</code> (open them if the hint is not enough)</summary>

        - Non-causal: which `[D, D_v]` matrix and which `[D]` vector sum up **all** the keys and values, whatever
          S is? How does one query turn them into its numerator and its denominator, and where does `eps` go?
        - Causal, for the queries of one chunk: what do they need from the keys of the **earlier** chunks? Are
          the same two sums enough, taken over those chunks only?
        - And from the keys **inside** the chunk: which small matrix of weights do they need, and which of its
          entries must be zero so that query $i$ never uses a key $j > i$? Does query $i$ use its own key?
        - How do the two sums change once a chunk is done, and what should they be before the first chunk?
        - Where do the parts from the earlier chunks and from the chunk itself meet, in the numerator and in
          the denominator?

        <details><summary>Still stuck: the steps in words</summary>

        1. Apply the feature map to q and k. Non-causal: the two sums over every key, then each query's numerator
           and denominator from them, then the division with `eps`.
        2. Causal: start both sums at zero and prepare the numerator `[B, H, S, D_v]` and denominator `[B, H, S]`.
        3. For each chunk of positions: the `[C, C]` weights between the chunk's queries and keys, keeping the
           lower triangle (the diagonal included); the numerator is what the queries read from the sums plus
           those weights times the chunk's values; the denominator is the same with the sum of the features and
           the row sums of the weights.
        4. Only then add the chunk's keys to the sums (its outer products of features and values, and its
           features), for the next chunk.
        5. Divide, with `eps` in the denominator.
        </details>
        </details>
        """, r"""
        <details><summary>引导你写出 <code>linear_attention</code> 的几个问题（提示不够用时再打开）</summary>

        - 非因果：哪个 `[D, D_v]` 矩阵和哪个 `[D]` 向量能把**所有**键和值汇总起来，而与 S 无关？一个查询怎样由它们得到自己的分子和分母？`eps` 加在哪里？
        - 因果，对一块里的查询来说：它们需要从**前面各块**的键那里得到什么？同样的两个和、只在那些块上求，够不够？
        - 对**本块内部**的键：需要哪个小权重矩阵？它的哪些元素必须为零，才能保证查询 $i$ 永远不用到键 $j > i$？查询 $i$ 用不用它自己的键？
        - 一块做完之后，这两个和怎样变化？在第一块之前它们应该是什么？
        - 来自前面各块的部分和来自本块的部分，在分子和分母中是在哪里相加的？

        <details><summary>还是卡住：用文字写出的步骤</summary>

        1. 对 q 和 k 作用特征映射。非因果：在所有键上求这两个和，由它们得到每个查询的分子和分母，再加上 `eps` 做除法。
        2. 因果：两个和都从零开始，并准备好分子 `[B, H, S, D_v]` 和分母 `[B, H, S]`。
        3. 对每一块位置：算出这一块的查询与键之间的 `[C, C]` 权重，保留下三角（包括对角线）；分子是查询从两个和中读出的部分，加上这些权重乘以本块的值；分母同理，用特征之和以及权重的行和。
        4. 然后才把本块的键加进这两个和（特征与值的外积，以及特征本身），留给下一块。
        5. 做除法，分母里加上 `eps`。
        </details>
        </details>
        """),
        solution("linear_attention", HINTS),
        check("check_linear_attention(linear_attention)", "check_linear_attention"),
        md(r"""
        The cell measures with `LiveMemoryMeter` (the tensors a function creates: intermediates and output) the
        peak memory of softmax attention, of your linear attention (non-causal and causal), and of the running
        sums kept at every position, the `[B, H, S, D, D_v]` tensor of the direct causal form, as S grows, at a
        small head width (`D = 16`) and at a real one (`D = 64`). It then prints, for each width, up to which S
        those per-position sums cost more than softmax's whole score matrix.
        """, r"""
        下面的单元格用 `LiveMemoryMeter`（统计函数新建的张量：中间结果和输出）测量随 S 增长时 softmax 注意力、你的线性注意力（非因果与因果）、以及直接的因果形式在每个位置保留的累加和（`[B, H, S, D, D_v]` 张量）的峰值内存，头宽分别取小的（`D = 16`）和实际的（`D = 64`）。然后对每种头宽打印：S 小于多少时，这些逐位置的累加和比 softmax 的整个分数矩阵还要占内存。
        """),
        demo("""
        def peak_mib(fn, *args, **kwargs):
            with LiveMemoryMeter() as meter:
                fn(*args, **kwargs)
            return meter.peak_bytes / 2**20


        def softmax_attention(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


        def sums_at_every_position(k, v):  # what the direct causal form keeps: one [D, D_v] matrix per position
            return torch.cumsum(k[..., :, None] * v[..., None, :], dim=2)  # [B, H, S, D, D_v]


        with uses_your_code():
            for D in (16, 64):
                for S in (512, 1024, 2048, 4096):
                    q, k, v = (torch.randn(1, 2, S, D) for _ in range(3))
                    print(say("D = {D}, S = {S:>4}: softmax {soft:6.2f} MiB, linear {linear:5.2f} MiB, linear causal {causal:5.2f} MiB; sums at every position {sums:6.2f} MiB",
                              D=D, S=S, soft=peak_mib(softmax_attention, q, k, v), linear=peak_mib(linear_attention, q, k, v),
                              causal=peak_mib(linear_attention, q, k, v, causal=True), sums=peak_mib(sums_at_every_position, k, v)))
                print(say("D = D_v = {D}: the sums at every position hold D x D_v = {n} numbers per position, softmax's scores S per query: they cost more while S < {n}",
                          D=D, n=D * D))
        """),
        md(r"""
        ## 4. What is lost: these are not softmax's weights

        $\phi(q) \cdot \phi(k)$ is a different similarity from $e^{q \cdot k}$, and a weaker one: it grows
        linearly, not exponentially, with the match, so linear attention cannot focus sharply on one key.
        The cell takes one query that matches key 3 much better than the others and prints the weights
        softmax gives and the weights linear attention gives (`phi(q) . phi(k_j)` normalised), then the
        largest gap between the two outputs.
        """, r"""
        ## 4. 失去了什么：这不是 softmax 的权重

        $\phi(q) \cdot \phi(k)$ 是一个与 $e^{q \cdot k}$ 不同的相似度，而且更弱：它随匹配程度线性增长，而不是指数增长，所以线性注意力无法把注意力集中到某一个键上。下面的单元格取一个与键 3 匹配得远比其他键好的查询，打印 softmax 给出的权重和线性注意力给出的权重（归一化后的 `phi(q) . phi(k_j)`），再打印两种输出之间的最大差异。
        """),
        demo("""
        torch.manual_seed(5)
        D = 8
        k = torch.randn(6, D)
        q = 2 * k[3]  # a query that matches key 3 best
        softmax_weights = torch.softmax(k @ q / math.sqrt(D), dim=0)
        with uses_your_code():
            similarity = elu_feature_map(k) @ elu_feature_map(q)  # [6], positive
            linear_weights = similarity / similarity.sum()
            print(say("softmax weights: {weights}", weights=[round(w, 3) for w in softmax_weights.tolist()]))
            print(say("linear weights:  {weights}", weights=[round(w, 3) for w in linear_weights.tolist()]))
            v = torch.randn(6, 4)
            print(say("largest weight: softmax {soft:.3f}, linear {linear:.3f}; outputs differ by up to {gap:.2f}",
                      soft=softmax_weights.max().item(), linear=linear_weights.max().item(),
                      gap=(softmax_weights @ v - linear_weights @ v).abs().max().item()))
        """),
        md(r"""
        ## 5. The recurrent form: attention as an RNN

        Causal linear attention at step $t$ needs only two running sums,

        $$S_t = S_{t-1} + \phi(k_t) v_t^\top \;\; [D, D_v], \qquad z_t = z_{t-1} + \phi(k_t) \;\; [D],
        \qquad o_t = \frac{\phi(q_t)^\top S_t}{\phi(q_t) \cdot z_t + \epsilon}.$$

        That is an RNN: the **state** $(S_t, z_t)$ has the same size at every step. A softmax decoder instead
        keeps every past key and value (the KV cache of `generation`), which grows by one row per token.
        `linear_attention_step(state, q_t, k_t, v_t)` takes `q_t, k_t [B, H, D]`, `v_t [B, H, D_v]` and the
        state (`None` at the first step, then what it returned), and returns `(out_t, new_state)`.
        """, r"""
        ## 5. 循环形式：作为 RNN 的注意力

        因果线性注意力在第 $t$ 步只需要两个累加和：

        $$S_t = S_{t-1} + \phi(k_t) v_t^\top \;\; [D, D_v], \qquad z_t = z_{t-1} + \phi(k_t) \;\; [D],
        \qquad o_t = \frac{\phi(q_t)^\top S_t}{\phi(q_t) \cdot z_t + \epsilon}.$$

        这就是一个 RNN：**状态** $(S_t, z_t)$ 在每一步都一样大。而 softmax 解码器要保留过去所有的键和值（`generation` 中的 KV 缓存），每个 token 增加一行。`linear_attention_step(state, q_t, k_t, v_t)` 接收 `q_t, k_t [B, H, D]`、`v_t [B, H, D_v]` 和状态（第一步为 `None`，之后是它上一次返回的状态），返回 `(out_t, new_state)`。
        """),
        solution("linear_attention_step", HINTS),
        check("check_linear_attention_step(linear_attention_step)", "check_linear_attention_step"),
        md(r"""
        The first cell runs your recurrence over 50 tokens and compares it with your
        `linear_attention(causal=True)`. The second plots the memory each generated token needs: the
        recurrent state (the size of what your function returns) against a KV cache of the same heads,
        as in `generation`.
        """, r"""
        第一个单元格让你的递推跑 50 个 token，并与你的 `linear_attention(causal=True)` 比较。第二个单元格画出每生成一个 token 所需的内存：循环状态（你的函数返回的内容的大小）与相同头数的 KV 缓存对比，和 `generation` 中一样。
        """),
        demo("""
        torch.manual_seed(5)
        B, H, S, D, D_v = 2, 4, 50, 16, 16
        q, k, v = torch.randn(B, H, S, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D_v)
        with uses_your_code():
            state, outs = None, []
            for t in range(S):
                out_t, state = linear_attention_step(state, q[:, :, t], k[:, :, t], v[:, :, t])
                outs.append(out_t)
            gap = (torch.stack(outs, dim=2) - linear_attention(q, k, v, causal=True)).abs().max().item()
            print(say("{S} steps of the recurrence vs linear_attention(causal=True): largest difference {gap:.1e}",
                      S=S, gap=gap))
        """),
        demo("""
        import matplotlib.pyplot as plt

        B, H, D, D_v = 1, 32, 128, 128  # one layer of a 7B-sized model, float32
        with uses_your_code():
            state = None
            for _ in range(3):
                _out, state = linear_attention_step(state, torch.randn(B, H, D), torch.randn(B, H, D), torch.randn(B, H, D_v))
            state_bytes = sum(t.numel() * t.element_size() for t in state)
            tokens = [2**p for p in range(6, 18)]
            cache = [2 * B * H * t * D * 4 for t in tokens]  # keys and values of every past token
            for t, c in zip(tokens[::3], cache[::3]):
                print(say("{t:>7,} tokens: KV cache {cache:9.2f} MiB, recurrent state {state:.2f} MiB",
                          t=t, cache=c / 2**20, state=state_bytes / 2**20))
            fig, ax = plt.subplots(figsize=(5.5, 3.6))
            ax.plot(tokens, [c / 2**20 for c in cache], marker="o", label=say("KV cache (softmax attention)"))
            ax.plot(tokens, [state_bytes / 2**20] * len(tokens), marker="o", label=say("state (linear attention)"))
            ax.set(xscale="log", yscale="log", xlabel=say("tokens generated"), ylabel=say("memory of one layer (MiB)"),
                   title=say("H = 32, D = 128, float32, batch 1"))
            ax.legend()
            plt.show()
        """),
        graded_cell("linear"),
        md(r"""
        ## 6. Pitfalls

        - **A feature map that is not positive** (`elu(x)` without `+ 1`, or the identity): weights of either
          sign, a denominator near 0, NaN.
        - **No normaliser**: `phi(Q) (phi(K)^T V)` alone is not an average; divide by `phi(q_i) . z`.
        - **Causal with the total sums**: query $i$ must use the sums up to $i$, not over the whole sequence.
        - **A recurrence that forgets its state**: start from the state you were given, not from zeros.
        - **A step that reads the state before adding its own key**: query $t$ sees key $t$ (j <= t); add
          $\phi(k_t) v_t^\top$ and $\phi(k_t)$ first, then read.
        - **A $1/\sqrt{D}$ before $\phi$**: that is softmax's temperature; linear attention has none.
        - **Chunks that do not carry the sums**: right for a sequence shorter than one chunk, wrong after it.
        - **Building `phi(Q) phi(K)^T`**: the right numbers at $S^2$ memory, which is what linear attention
          removes.
        """, r"""
        ## 6. 常见错误

        - **特征映射不为正**（`elu(x)` 少了 `+ 1`，或者直接用恒等映射）：权重有正有负，分母接近 0，出现 NaN。
        - **没有归一化**：单独的 `phi(Q) (phi(K)^T V)` 不是加权平均；要除以 `phi(q_i) . z`。
        - **因果时用了整个序列的和**：查询 $i$ 只能用到位置 $i$ 为止的和。
        - **递推忘了状态**：要从传进来的状态出发，而不是从零开始。
        - **一步里先读状态、再加入这一步的键**：查询 $t$ 能看到键 $t$（j <= t）；要先加上 $\phi(k_t) v_t^\top$ 和 $\phi(k_t)$，再读。
        - **在 $\phi$ 之前除以 $\sqrt{D}$**：那是 softmax 的温度；线性注意力没有这个缩放。
        - **分块时没有把两个和带到下一块**：序列短于一块时结果对，超过一块就错了。
        - **构造了 `phi(Q) phi(K)^T`**：数值对，内存却是 $S^2$，而这正是线性注意力要去掉的。
        """),
    ]


DEMO_ZH = {
    "# [S, S] @ [S, D_v]  vs  [S, D] @ [D, D_v]": "# [S, S] @ [S, D_v]  对比  [S, D] @ [D, D_v]",
    "# multiply-adds of each order": "# 两种顺序各自的乘加次数",
    "# a query that matches key 3 best": "# 一个与键 3 最匹配的查询",
    "# [6], positive": "# [6]，全为正",
    "# one layer of a 7B-sized model, float32": "# 7B 规模模型的一层，float32",
    "# keys and values of every past token": "# 过去每个 token 的键和值",
    "# what the direct causal form keeps: one [D, D_v] matrix per position": "# 直接的因果形式要保留的：每个位置一个 [D, D_v] 矩阵",
}
