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
        "when causal, running sums along the sequence (the recipe is folded above this cell).",
        "先对键求和（phi(K)^T V 和 phi(K) 的和），再与查询相乘；\n"
        "因果时沿序列做累加和（具体做法折叠在本单元格上方）。",
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
        - **causal**: query $i$ sums over $j \le i$ only, so `kv` and `z` become **running sums** along the
          sequence: `kv_i = sum_{j<=i} phi(k_j) v_j^T`, one `[D, D_v]` matrix per position.

        No `[S, S]` tensor anywhere (the hidden checks measure it). There is no $1/\sqrt{D}$ scale: $\phi$
        replaces the exponential.
        """, r"""
        ## 3. 线性注意力：非因果与因果

        `linear_attention(q, k, v, causal=False, eps=1e-6)`，其中 `q, k [B, H, S, D]`，`v [B, H, S, D_v]`：

        - **非因果**：`kv = phi(K)^T V` `[B, H, D, D_v]`，`z = sum_j phi(k_j)` `[B, H, D]`，然后 `out_i = phi(q_i) kv / (phi(q_i) . z + eps)`；
        - **因果**：查询 $i$ 只对 $j \le i$ 求和，所以 `kv` 和 `z` 变成沿序列的**累加和**：`kv_i = sum_{j<=i} phi(k_j) v_j^T`，每个位置一个 `[D, D_v]` 矩阵。

        任何地方都不能出现 `[S, S]` 张量（隐藏检查会测量）。这里没有 $1/\sqrt{D}$ 的缩放：$\phi$ 取代了指数函数。
        """),
        md(r"""
        <details><summary>Recipe (open it if you are stuck)</summary>

        `phi_q, phi_k = elu(q) + 1, elu(k) + 1`. Non-causal: `kv = phi_k.transpose(-2, -1) @ v`, `z = phi_k.sum(-2)`,
        `num = phi_q @ kv`, `den = (phi_q * z[..., None, :]).sum(-1)`. Causal: `kv = cumsum(phi_k[..., :, None] *
        v[..., None, :], dim=2)` `[B, H, S, D, D_v]`, `z = cumsum(phi_k, dim=2)`, `num = (phi_q[..., :, None] * kv).sum(-2)`,
        `den = (phi_q * z).sum(-1)`. Then `num / (den[..., None] + eps)`.
        </details>
        """, r"""
        <details><summary>具体做法（卡住时再打开）</summary>

        `phi_q, phi_k = elu(q) + 1, elu(k) + 1`。非因果：`kv = phi_k.transpose(-2, -1) @ v`，`z = phi_k.sum(-2)`，`num = phi_q @ kv`，`den = (phi_q * z[..., None, :]).sum(-1)`。因果：`kv = cumsum(phi_k[..., :, None] * v[..., None, :], dim=2)` `[B, H, S, D, D_v]`，`z = cumsum(phi_k, dim=2)`，`num = (phi_q[..., :, None] * kv).sum(-2)`，`den = (phi_q * z).sum(-1)`。然后 `num / (den[..., None] + eps)`。
        </details>
        """),
        solution("linear_attention", HINTS),
        check("check_linear_attention(linear_attention)", "check_linear_attention"),
        md(r"""
        The cell measures the peak memory of softmax attention and of your linear attention (non-causal and
        causal) as S grows, with `LiveMemoryMeter`. The causal version keeps one `[D, D_v]` state per
        position (that is still linear in S; section 5 keeps only the last one).
        """, r"""
        下面的单元格用 `LiveMemoryMeter` 测量随 S 增长时 softmax 注意力和你的线性注意力（非因果与因果）的峰值内存。因果版本每个位置保留一个 `[D, D_v]` 的状态（这仍然关于 S 线性；第 5 节只保留最后一个）。
        """),
        demo("""
        def peak_mib(fn, *args, **kwargs):
            with LiveMemoryMeter() as meter:
                fn(*args, **kwargs)
            return meter.peak_bytes / 2**20


        def softmax_attention(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


        with uses_your_code():
            for S in (512, 1024, 2048, 4096):
                q, k, v = (torch.randn(1, 2, S, 16) for _ in range(3))
                print(say("S = {S:>5}: softmax {soft:7.2f} MiB, linear {linear:5.2f} MiB, linear causal {causal:5.2f} MiB",
                          S=S, soft=peak_mib(softmax_attention, q, k, v), linear=peak_mib(linear_attention, q, k, v),
                          causal=peak_mib(linear_attention, q, k, v, causal=True)))
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
        - **Building `phi(Q) phi(K)^T`**: the right numbers at $S^2$ memory, which is what linear attention
          removes.
        """, r"""
        ## 6. 常见错误

        - **特征映射不为正**（`elu(x)` 少了 `+ 1`，或者直接用恒等映射）：权重有正有负，分母接近 0，出现 NaN。
        - **没有归一化**：单独的 `phi(Q) (phi(K)^T V)` 不是加权平均；要除以 `phi(q_i) . z`。
        - **因果时用了整个序列的和**：查询 $i$ 只能用到位置 $i$ 为止的和。
        - **递推忘了状态**：要从传进来的状态出发，而不是从零开始。
        - **构造了 `phi(Q) phi(K)^T`**：数值对，内存却是 $S^2$，而这正是线性注意力要去掉的。
        """),
    ]
