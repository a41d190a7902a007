"""Notebook 01 of `generation`: positions (sinusoidal encodings and RoPE)."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "01_positions"

HINTS = {
    "sinusoidal_positions": (
        "angles [S, d_model / 2] = positions [S, 1] times one frequency per pair [1, d_model / 2];\n"
        "then fill the even features with sin and the odd ones with cos. Return float32.",
        "角度 [S, d_model / 2] = 位置 [S, 1] 乘以每对一个的频率 [1, d_model / 2]；\n"
        "然后偶数特征填 sin，奇数特征填 cos。返回 float32。",
    ),
    "apply_rope": (
        "take the two members of every pair as two [..., S, head_dim / 2] tensors, rotate them with\n"
        "cos/sin of angles [S, head_dim / 2] (they broadcast over the leading axes), then put each pair back in place.\n"
        "Positions [B, S] give angles [B, S, head_dim / 2]: for x [B, H, S, head_dim] add a head axis.",
        "把每一对的两个成员取成两个 [..., S, head_dim / 2] 张量，用角度 [S, head_dim / 2] 的 cos/sin\n"
        "旋转它们（角度会在前面的维度上广播），再把每一对放回原位。\n"
        "positions 为 [B, S] 时角度是 [B, S, head_dim / 2]：x 为 [B, H, S, head_dim] 时要补一个头的维度。",
    ),
}

# The Chinese docstrings of the solution functions (the build puts them in the Chinese edition's stubs).
DOCSTRINGS_ZH = {
    "sinusoidal_positions": """[seq_len, d_model] float32：PE[p, 2i] = sin(p / 10000^(2i / d_model))，PE[p, 2i + 1] = cos(同一角度)。""",
    "apply_rope": """x [..., S, head_dim]，positions [S] 或 [B, S] -> 形状和 dtype 都不变：第 (2i, 2i + 1) 对旋转 positions * base^(-2i / head_dim) 的角度。""",
}


def cells():
    return [
        md(r"""
        # 01 · Positions: sinusoidal encodings and rotary embeddings (RoPE)

        This is the first notebook of the second assignment, **attention at generation time**. The first
        assignment built attention; this one asks what a real model needs around it: how it knows *where*
        each token is (this notebook), how it generates text one token at a time without recomputing
        everything (`02_kv_cache`), and how it reads another sequence (`03_cross_attention`).

        | part | functions | what it does |
        |---|---|---|
        | `positions` | `sinusoidal_positions`, `apply_rope` | fixed position vectors added to the input; rotations of queries and keys |

        As in the first assignment: fill in the *solution* cells (keep the signature and the docstring,
        replace `raise NotImplementedError()`), run the locked check cell after each one, and leave the
        graded cells to the hidden autograder. Solution cells hold whole `def` / `class` definitions; the
        grader gives them `math`, `torch`, `nn` and `F` and nothing else. Demo cells that need a function
        you have not written yet say so in one line.
        """, r"""
        # 01 · 位置：正弦位置编码与旋转位置编码（RoPE）

        这是第二个作业 **生成阶段的注意力** 的第一个 notebook。第一个作业实现了注意力本身；这个作业关心的是，一个真实的模型在注意力之外还需要什么：它怎样知道每个 token 位于*哪里*（本 notebook），怎样一次生成一个 token 而不必把所有东西重算一遍（`02_kv_cache`），以及怎样读取另一个序列（`03_cross_attention`）。

        | 评分部分 | 函数 | 作用 |
        |---|---|---|
        | `positions` | `sinusoidal_positions`, `apply_rope` | 加到输入上的固定位置向量；对查询和键做旋转 |

        和第一个作业一样：填写 *solution* 单元格（保留函数签名和 docstring，替换掉 `raise NotImplementedError()`），每写完一个就运行它后面那个锁定的检查单元格，评分单元格留给隐藏的自动评分器。solution 单元格里写的是完整的 `def` / `class` 定义；自动评分器只给它们提供 `math`、`torch`、`nn` 和 `F`，别的一概没有。演示单元格如果用到了你还没写的函数，会用一行话告诉你。
        """),
        setup(),
        md(r"""
        ### Glossary

        The terms of this assignment in both editions (`generation` and `generation_zh`), with the symbols
        and names of the code (the first assignment's glossary, in its notebook 01, has the basic ones):

        | 中文 | English | symbol / code |
        |---|---|---|
        | 位置编码 | position encoding | added to the input: `x + PE[:S]` |
        | 正弦位置编码 | sinusoidal position encoding | `sinusoidal_positions(seq_len, d_model)`, `[S, d_model]` |
        | 置换等变性 | permutation equivariance | shuffled input, output shuffled the same way |
        | 旋转位置编码 | rotary position embedding (RoPE) | `apply_rope(x, positions)`, angle $m \cdot \theta_i$ |
        | 交错配对 / 前后半配对 | interleaved / half-split pairing | $(x_{2i}, x_{2i+1})$ / $(x_i, x_{i + \text{head\_dim}/2})$, `rotate_half` |
        | 自回归生成、解码 | autoregressive generation, decoding | one new token per step |
        | 预填充 | prefill | the prompt in one pass, filling the cache |
        | KV 缓存（键值缓存） | KV cache (key/value cache) | `KVCache`, `[B, H_kv, S, head_dim]` per layer |
        | 右下对齐 / 左上对齐 | bottom-right / top-left alignment (of a causal mask) | `decode_causal_mask(S_q, S_k)` / `is_causal=True` |
        | 分组查询注意力 | grouped-query attention (GQA) | `H` query heads, `H_kv < H` key/value heads, `repeat_kv` |
        | 多查询注意力 | multi-query attention (MQA) | `H_kv = 1` |
        | 交叉注意力 | cross-attention | queries from `x`, keys and values from `context` |
        | 上下文、上下文掩码 | context, context mask | `context [B, S_k, d_context]`, `context_mask [B, S_k]` |
        | 编码器 / 解码器 | encoder / decoder | the sequence that is read / the one that writes |
        """, r"""
        ### 术语表

        本作业两个版本（`generation` 和 `generation_zh`）共用的术语，以及代码里对应的符号和名字（基础术语见第一个作业 notebook 01 的术语表）：

        | 中文 | English | 符号 / 代码 |
        |---|---|---|
        | 位置编码 | position encoding | 加到输入上：`x + PE[:S]` |
        | 正弦位置编码 | sinusoidal position encoding | `sinusoidal_positions(seq_len, d_model)`，`[S, d_model]` |
        | 置换等变性 | permutation equivariance | 输入打乱，输出按同样方式打乱 |
        | 旋转位置编码 | rotary position embedding (RoPE) | `apply_rope(x, positions)`，角度 $m \cdot \theta_i$ |
        | 交错配对 / 前后半配对 | interleaved / half-split pairing | $(x_{2i}, x_{2i+1})$ / $(x_i, x_{i + \text{head\_dim}/2})$，`rotate_half` |
        | 自回归生成、解码 | autoregressive generation, decoding | 每一步生成一个新 token |
        | 预填充 | prefill | 一次处理整段提示词，同时填满缓存 |
        | KV 缓存（键值缓存） | KV cache (key/value cache) | `KVCache`，每层 `[B, H_kv, S, head_dim]` |
        | 右下对齐 / 左上对齐 | bottom-right / top-left alignment（因果掩码的） | `decode_causal_mask(S_q, S_k)` / `is_causal=True` |
        | 分组查询注意力 | grouped-query attention (GQA) | `H` 个查询头，`H_kv < H` 个键/值头，`repeat_kv` |
        | 多查询注意力 | multi-query attention (MQA) | `H_kv = 1` |
        | 交叉注意力 | cross-attention | 查询来自 `x`，键和值来自 `context` |
        | 上下文、上下文掩码 | context, context mask | `context [B, S_k, d_context]`，`context_mask [B, S_k]` |
        | 编码器 / 解码器 | encoder / decoder | 被读取的序列 / 负责生成的序列 |
        """),
        md(r"""
        ## 1. Attention does not see order

        A score is a dot product between a query and a key, and both are computed from a token's vector
        alone. Nothing in `softmax(Q K^T / sqrt(d)) V` refers to *where* a token sits. Shuffle the tokens
        and every query still meets the same keys, with the same scores, only in another order: the outputs
        come out shuffled the same way. This property is called **permutation equivariance**. For a
        language model it is a disaster: "the dog bit the man" and "the man bit the dog" contain the same
        tokens, and attention alone would give each token the same output in both sentences.

        The cell below shuffles six token vectors, runs PyTorch's own multi-head attention on both orders
        and compares.
        """, r"""
        ## 1. 注意力看不到顺序

        注意力分数是一个查询和一个键的点积，而查询和键都只由该 token 自己的向量算出。`softmax(Q K^T / sqrt(d)) V` 里没有任何一项涉及 token 位于*哪里*。把 token 打乱，每个查询遇到的仍是同样的键、同样的分数，只是顺序变了：输出也按同样的方式被打乱。这个性质叫作**置换等变性**（permutation equivariance）。对语言模型来说这是灾难："the dog bit the man"（狗咬了人）和 "the man bit the dog"（人咬了狗）包含的 token 完全相同，只靠注意力的话，每个 token 在这两句话里得到的输出都一样。

        下面的单元格把六个 token 向量打乱，用 PyTorch 自带的多头注意力分别处理原顺序和打乱后的顺序，再做比较。
        """),
        demo("""
        torch.manual_seed(0)
        attention = nn.MultiheadAttention(16, 4, bias=False, batch_first=True).eval()
        x = torch.randn(1, 6, 16)  # one sequence of 6 token vectors [B, S, d_model]
        perm = torch.tensor([3, 0, 5, 1, 4, 2])  # a shuffle of the six positions
        with torch.no_grad():
            out, _ = attention(x, x, x, need_weights=False)
            out_shuffled, _ = attention(x[:, perm], x[:, perm], x[:, perm], need_weights=False)
        print("shuffle:", perm.tolist())
        print(f"{(out_shuffled - out[:, perm]).abs().max().item():>8.1e}  largest |attention(shuffled x) - shuffled attention(x)|")
        print(f"{(out_shuffled - out).abs().max().item():>8.2f}  largest |attention(shuffled x) - attention(x)|")
        print(f"{out.abs().max().item():>8.2f}  largest |attention(x)|, for scale")

        # A causal mask (a decoder) breaks the symmetry a little: token i sees i + 1 tokens.
        causal = torch.ones(6, 6, dtype=torch.bool).triu(1)  # True = may NOT attend, in nn.MultiheadAttention
        with torch.no_grad():
            c_out, _ = attention(x, x, x, attn_mask=causal, need_weights=False)
            c_shuffled, _ = attention(x[:, perm], x[:, perm], x[:, perm], attn_mask=causal, need_weights=False)
        print(f"{(c_shuffled - c_out[:, perm]).abs().max().item():>8.2f}  with a causal mask, largest |shuffled - shuffled original|")
        """),
        md(r"""
        Without a mask the first difference is zero up to rounding: the output of a token depends on
        *what* the other tokens are, never on *where* they are. (A causal mask lets a token count how many
        tokens it sees, a weak signal of its position; models still add explicit positions.)

        There are two families of fixes, both in this notebook:

        1. **add** a vector that depends on the position to each token's input (sinusoidal encodings, the
           original Transformer; learned position embeddings, GPT-2);
        2. **rotate** the queries and keys by an angle that depends on the position (RoPE, used by LLaMA,
           Mistral, Qwen and most recent language models).

        ## 2. Sinusoidal position encodings

        The original Transformer adds to the embedding of the token at position $p$ a fixed vector
        $PE_p$ of the same width $d_\text{model}$. Its features come in pairs $(2i, 2i+1)$, and pair $i$
        holds the sine and the cosine of one angle:

        $$PE[p, 2i] = \sin\!\left(\frac{p}{10000^{2i/d_\text{model}}}\right), \qquad
          PE[p, 2i+1] = \cos\!\left(\frac{p}{10000^{2i/d_\text{model}}}\right)$$

        Read pair $i$ as the hand of a clock: as $p$ grows by one, the hand turns by the angle
        $\omega_i = 10000^{-2i/d_\text{model}}$ (radians). Pair 0 turns fast (one radian per position), the
        last pair very slowly, so the pairs together tell positions apart at every scale, like the hands
        of a clock that show seconds, minutes and hours. The cell below prints each pair's speed for
        $d_\text{model} = 8$.
        """, r"""
        不加掩码时，第一个差值在舍入误差范围内为零：一个 token 的输出取决于其他 token *是什么*，而与它们 *在哪里*无关。（因果掩码让一个 token 能数出自己看到了多少个 token，这是关于它位置的一个微弱信号；模型仍然会显式地加入位置信息。）

        解决办法有两大类，本 notebook 都会讲到：

        1. 给每个 token 的输入**加上**一个依赖于位置的向量（正弦位置编码，来自最初的 Transformer；可学习的位置嵌入，GPT-2）；
        2. 按依赖于位置的角度**旋转**查询和键（RoPE，LLaMA、Mistral、Qwen 以及大多数近期的语言模型都在用）。

        ## 2. 正弦位置编码

        最初的 Transformer 给位置 $p$ 上 token 的嵌入加上一个固定向量 $PE_p$，宽度同样是 $d_\text{model}$。它的特征两两成对 $(2i, 2i+1)$，第 $i$ 对存放同一个角度的正弦和余弦：

        $$PE[p, 2i] = \sin\!\left(\frac{p}{10000^{2i/d_\text{model}}}\right), \qquad
          PE[p, 2i+1] = \cos\!\left(\frac{p}{10000^{2i/d_\text{model}}}\right)$$

        可以把第 $i$ 对看成时钟的一根指针：$p$ 每增加一，指针就转过角度 $\omega_i = 10000^{-2i/d_\text{model}}$（弧度）。第 0 对转得快（每个位置转一弧度），最后一对转得很慢，所以这些对合在一起能在各个尺度上区分位置，就像时钟上分别显示秒、分、时的几根指针。下面的单元格打印 $d_\text{model} = 8$ 时每一对的转速。
        """),
        demo("""
        d_model = 8
        for i in range(d_model // 2):
            omega = 10000 ** (-2 * i / d_model)  # radians per position
            print(f"pair {i} (features {2 * i}, {2 * i + 1}): angle = p x {omega:<7.4g} "
                  f"-> one full turn every {2 * math.pi / omega:>9,.1f} positions")
        """),
        md(r"""
        Why a sine *and* a cosine? Moving $k$ positions further turns every hand by $k \omega_i$, and a
        turn is a linear map of the pair $(\sin, \cos)$. So $PE_{p+k}$ is a fixed linear function of $PE_p$
        for every $p$, which lets a layer learn to look "three tokens back" wherever it is.

        Shapes, for `seq_len = S`:

        | tensor | shape |
        |---|---|
        | positions `p` | `[S, 1]` |
        | one angle speed per pair $\omega_i$ | `[1, d_model / 2]` |
        | angles `p * omega` (broadcast) | `[S, d_model / 2]` |
        | `PE`: sines in the even columns, cosines in the odd ones | `[S, d_model]`, float32 |

        The encoding is added to the token embeddings before the first layer: `x = embed(tokens) + PE[:S]`.
        """, r"""
        为什么既要正弦*又要*余弦？再往后移 $k$ 个位置，每根指针都多转 $k \omega_i$，而旋转是对 $(\sin, \cos)$ 这一对的线性映射。所以对每个 $p$，$PE_{p+k}$ 都是 $PE_p$ 的同一个固定线性函数，这让一层网络可以学会不论身处何处都"往回看三个 token"。

        `seq_len = S` 时的张量形状：

        | 张量 | 形状 |
        |---|---|
        | 位置 `p` | `[S, 1]` |
        | 每对一个角速度 $\omega_i$ | `[1, d_model / 2]` |
        | 角度 `p * omega`（广播） | `[S, d_model / 2]` |
        | `PE`：偶数列放正弦，奇数列放余弦 | `[S, d_model]`，float32 |

        位置编码在第一层之前加到 token 嵌入上：`x = embed(tokens) + PE[:S]`。
        """),
        solution("sinusoidal_positions", HINTS),
        check("check_sinusoidal_positions(sinusoidal_positions)", "check_sinusoidal_positions"),
        md(r"""
        The heatmap shows your `PE` for 64 positions and 64 features: fast stripes on the left (the fast
        pairs), slow waves on the right. The curve on its right is the dot product $PE_{p} \cdot PE_{q}$
        of position $p = 20$ with every other position $q$. Since
        $\sin a \sin b + \cos a \cos b = \cos(a - b)$, it is a sum of cosines of $(p - q)\,\omega_i$: it
        depends only on the offset $p - q$, and it is largest at $q = p$. The cell also prints two dot
        products with the same offset.
        """, r"""
        热力图展示了你的 `PE` 在 64 个位置、64 个特征上的取值：左边是快速变化的条纹（转得快的那些对），右边是缓慢的波。右侧的曲线是位置 $p = 20$ 与其他每个位置 $q$ 的点积 $PE_{p} \cdot PE_{q}$。由于 $\sin a \sin b + \cos a \cos b = \cos(a - b)$，它是若干个 $(p - q)\,\omega_i$ 的余弦之和：只取决于偏移 $p - q$，并在 $q = p$ 处最大。这个单元格还会打印两个偏移相同的点积。
        """),
        demo("""
        import matplotlib.pyplot as plt

        with uses_your_code():
            pe = sinusoidal_positions(64, 64)
            print(f"PE[10] . PE[13] = {(pe[10] @ pe[13]).item():.4f}")
            print(f"PE[40] . PE[43] = {(pe[40] @ pe[43]).item():.4f}   (same offset, same value)")
            fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.2, 1]})
            image = ax0.imshow(pe, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
            ax0.set(title="sinusoidal PE [64 positions, 64 features]", xlabel="feature", ylabel="position p")
            fig.colorbar(image, ax=ax0)
            ax1.plot(range(64), (pe @ pe[20]).tolist(), marker=".")
            ax1.axvline(20, color="grey", lw=0.8)
            ax1.set(title="PE[20] . PE[q]", xlabel="position q", ylabel="dot product")
            plt.tight_layout()
            plt.show()
        """),
        md(r"""
        ## 3. Rotary position embeddings (RoPE)

        Added encodings mix position into the token vectors, and the projections $W_q$, $W_k$ then mix
        them further: a score ends up with content-content, content-position and position-position terms.
        RoPE (Su et al., RoFormer, 2021) puts the position where it matters, into the score itself, and
        makes it *relative*.

        **Rotating a pair.** Rotating the 2-D vector $(a, b)$ by the angle $t$ gives

        $$(a, b) \;\longmapsto\; (a \cos t - b \sin t,\; a \sin t + b \cos t).$$

        A rotation keeps lengths, and the dot product of two rotated vectors depends only on the
        *difference* of their angles: rotating $u$ by $\alpha$ and $v$ by $\beta$ gives the same dot product
        as leaving $u$ alone and rotating $v$ by $\beta - \alpha$. The next cell checks both facts with a
        single pair.
        """, r"""
        ## 3. 旋转位置编码（RoPE）

        加性的位置编码把位置混进了 token 向量，投影 $W_q$、$W_k$ 又把它们进一步混在一起：最终一个分数里既有内容-内容项，也有内容-位置项和位置-位置项。RoPE（Su et al.，RoFormer，2021）把位置放到真正起作用的地方，也就是分数本身，并且让它成为*相对*位置。

        **旋转一对特征。** 把二维向量 $(a, b)$ 旋转角度 $t$ 得到

        $$(a, b) \;\longmapsto\; (a \cos t - b \sin t,\; a \sin t + b \cos t).$$

        旋转不改变长度，而且两个旋转后的向量的点积只取决于它们角度之*差*：把 $u$ 转 $\alpha$、把 $v$ 转 $\beta$，得到的点积与 $u$ 不动、把 $v$ 转 $\beta - \alpha$ 相同。下一个单元格用一对特征验证这两个事实。
        """),
        demo("""
        def rotate_pair(vec, t):
            # one 2-D vector (a, b) turned by the angle t (radians)
            a, b = vec
            return torch.stack([a * math.cos(t) - b * math.sin(t), a * math.sin(t) + b * math.cos(t)])


        u, v = torch.tensor([1.0, 0.0]), torch.tensor([0.6, 0.8])
        print("(1, 0) turned by 90 degrees:", [round(c, 6) for c in rotate_pair(u, math.pi / 2).tolist()])
        theta = 0.5  # radians per position
        for m, n in ((3, 1), (13, 11), (1, 3)):
            score = rotate_pair(u, m * theta) @ rotate_pair(v, n * theta)
            print(f"query at m={m:>2}, key at n={n:>2} (m - n = {m - n:>2}): score {score.item():+.4f}")
        """),
        md(r"""
        The first two scores are equal (same offset $m - n = 2$), the third differs (offset $-2$): the
        score knows the offset *and its sign*, so "two tokens back" is not "two tokens ahead".

        **RoPE** applies this to every head: cut the query (and the key) of the token at position $m$ into
        `head_dim / 2` pairs of neighbouring features $(x_{2i}, x_{2i+1})$, and turn pair $i$ by the angle

        $$t = m \cdot \theta_i, \qquad \theta_i = \text{base}^{-2i/\text{head\_dim}}$$

        with `base = 10000` by default, the `base` argument of `apply_rope` (Llama 3 uses 500000; notebook
        04 says why it matters). With the default base this is the sinusoidal encoding's formula with `head_dim` in place of `d_model`, so the speeds are not
        the same: a head is narrower than the model, and every pair but the first turns faster than its
        namesake in the sinusoidal encoding; the next cell prints pair 1 for both. The score of a query at $m$ and a key at $n$ is a sum
        over pairs of dot products of rotated pairs, so it depends on the positions only through $m - n$.
        The values are *not* rotated: positions shape who attends to whom, not what is passed along.

        | step | shape |
        |---|---|
        | `x` (queries or keys of one or more heads) | `[..., S, head_dim]` |
        | the two members of every pair | two `[..., S, head_dim / 2]` |
        | angles `positions[..., None] * theta` | `[S, head_dim / 2]`, broadcast over `...`; `[B, S, head_dim / 2]` for positions `[B, S]` |
        | rotated members, put back in place | `[..., S, head_dim]`, the dtype of `x` |

        `positions` is a LongTensor `[S]`: `0, 1, ..., S - 1` for a whole sequence, but
        `len(cache), len(cache) + 1, ...` for the new tokens of a generating model (notebook 02). It may
        also be `[B, S]`, one row per sequence of a batch (a batch whose sequences start at different
        places, notebook 04): then the angles are `[B, S, head_dim / 2]`, and for `x` `[B, H, S, head_dim]`
        they need a head axis, `[B, 1, S, head_dim / 2]`, to reach every head. In a
        model, RoPE is applied to the queries and keys *after* the projections and the split into heads,
        right before the scores.

        **Which features form a pair.** This course pairs *neighbours*, $(x_{2i}, x_{2i+1})$, as the paper
        does. Much code you will find online (GPT-NeoX, Hugging Face's `rotate_half`) pairs the first half
        with the second half instead, $(x_i, x_{i + \text{head\_dim}/2})$: the *half-split* pairing of §4.
        It is just as valid a RoPE, but it is not this one, and the checks tell them apart.

        Compute the angles in float32 (or float64 for float64 input) even when `x` is float16, and convert
        the result back to `x`'s dtype. float16 cannot hold large positions exactly:
        """, r"""
        前两个分数相等（偏移相同，$m - n = 2$），第三个不同（偏移为 $-2$）：分数既知道偏移，*也知道它的符号*，所以"往前两个 token"不等于"往后两个 token"。

        **RoPE** 把这一点用到每个头上：把位置 $m$ 上 token 的查询（以及键）切成 `head_dim / 2` 对相邻特征 $(x_{2i}, x_{2i+1})$，第 $i$ 对旋转角度

        $$t = m \cdot \theta_i, \qquad \theta_i = \text{base}^{-2i/\text{head\_dim}}$$

        其中 `base` 默认为 10000，即 `apply_rope` 的 `base` 参数（Llama 3 用 500000；notebook 04 会讲它为什么重要）。用默认底数时，公式与正弦位置编码相同，只是用 `head_dim` 代替了 `d_model`，所以转速并不相同：一个头比整个模型窄，除第 0 对以外，每一对都比正弦位置编码中同编号的那一对转得快；下一个单元格打印两者第 1 对的转速。位置 $m$ 的查询与位置 $n$ 的键之间的分数，是各对旋转后点积之和，因此它只通过 $m - n$ 依赖于位置。值*不*旋转：位置决定的是谁关注谁，而不是传递什么内容。

        | 步骤 | 形状 |
        |---|---|
        | `x`（一个或多个头的查询或键） | `[..., S, head_dim]` |
        | 每一对的两个成员 | 两个 `[..., S, head_dim / 2]` |
        | 角度 `positions[..., None] * theta` | `[S, head_dim / 2]`，在 `...` 上广播；positions 为 `[B, S]` 时是 `[B, S, head_dim / 2]` |
        | 旋转后的成员，放回原位 | `[..., S, head_dim]`，dtype 与 `x` 相同 |

        `positions` 是一个 LongTensor `[S]`：对整条序列是 `0, 1, ..., S - 1`，而对正在生成的模型的新 token 则是 `len(cache), len(cache) + 1, ...`（notebook 02）。它也可以是 `[B, S]`，批次里每条序列一行（各条序列起点不同的批次，见 notebook 04）：这时角度是 `[B, S, head_dim / 2]`，而 `x` 为 `[B, H, S, head_dim]` 时还要补一个头的维度，变成 `[B, 1, S, head_dim / 2]`，才能作用到每个头上。在模型里，RoPE 作用于查询和键，时机是在投影和拆分成多头*之后*、计算分数之前。

        **哪些特征配成一对。** 本课程和论文一样，把*相邻*特征配成一对：$(x_{2i}, x_{2i+1})$。网上能找到的很多代码（GPT-NeoX、Hugging Face 的 `rotate_half`）则把前一半和后一半配对：$(x_i, x_{i + \text{head\_dim}/2})$，也就是 §4 里的*前后半配对*。它同样是合格的 RoPE，但不是本课程要求的这一种，检查会把两者区分开。

        即使 `x` 是 float16，也要用 float32 计算角度（float64 输入则用 float64），最后再把结果转回 `x` 的 dtype。float16 无法精确表示较大的位置：
        """),
        demo("""
        for width in (64, 512):  # pair 1's speed: head_dim = 64 (RoPE) and d_model = 512 (sinusoidal)
            print(f"10000 ** (-2 * 1 / {width}) = {10000 ** (-2 * 1 / width):.2f} rad per position")
        for position in (1000, 2049, 4097, 40001):
            stored = torch.tensor(float(position), dtype=torch.float16).item()
            print(f"position {position:>6} stored as float16: {stored:>8.0f}  "
                  f"-> pair 0's angle is off by {abs(stored - position):.0f} rad")
        """),
        solution("apply_rope", HINTS),
        check("check_apply_rope(apply_rope)", "check_apply_rope"),
        md(r"""
        The heatmap shows the score between one query vector placed at position $m$ and one key vector
        placed at position $n$, for all $m, n < 32$, with your `apply_rope`. Every diagonal ($m - n$
        constant) has a single colour: the score sees only the offset.
        """, r"""
        热力图展示了用你的 `apply_rope` 时，放在位置 $m$ 的一个查询向量与放在位置 $n$ 的一个键向量之间的分数，$m, n < 32$ 全部画出。每条对角线（$m - n$ 为常数）只有一种颜色：分数只看得到偏移。
        """),
        demo("""
        import matplotlib.pyplot as plt

        torch.manual_seed(1)
        q, k = torch.randn(1, 16), torch.randn(1, 16)  # one query and one key vector, head_dim = 16
        n_pos = 32
        with uses_your_code():
            q_at = apply_rope(q.repeat(n_pos, 1), torch.arange(n_pos))  # row m: q placed at position m
            k_at = apply_rope(k.repeat(n_pos, 1), torch.arange(n_pos))  # row n: k placed at position n
            scores = q_at @ k_at.T  # [m, n]
            print(f"score(m=5, n=3)     = {scores[5, 3].item():+.4f}")
            print(f"score(m=25, n=23)   = {scores[25, 23].item():+.4f}   (same offset)")
            print(f"score(m=3, n=5)     = {scores[3, 5].item():+.4f}   (opposite offset)")
            print(f"spread of every diagonal: {max((scores.diagonal(d).max() - scores.diagonal(d).min()).item() for d in range(-31, 32)):.1e}")
            plt.figure(figsize=(4.6, 3.8))
            plt.imshow(scores, cmap="RdBu")
            plt.colorbar()
            plt.title("RoPE score of q at m and k at n")
            plt.xlabel("key position n")
            plt.ylabel("query position m")
            plt.show()
        """),
        graded_cell("positions"),
        md(r"""
        ## 4. One idea, two pairings: interleaved and half-split

        RoPE only needs *some* split of the features into pairs. The paper and Meta's original LLaMA code
        pair neighbours, $(x_{2i}, x_{2i+1})$ (this course's convention, often written with complex
        numbers). GPT-NeoX and the Hugging Face `transformers` code pair each feature of the first half with
        its partner in the second half, $(x_i, x_{i + \text{head\_dim}/2})$, rotated by a helper called
        `rotate_half`. Both give scores that depend only on $m - n$.

        But a trained model's $W_q$ and $W_k$ were trained with *one* pairing. Rotate its queries and keys
        with the other and features that were never meant to turn together do: the scores change, and the
        model's output becomes nonsense, without any error message. Converting a checkpoint from one code
        base to the other therefore permutes the rows of $W_q$ and $W_k$ (the Hugging Face conversion
        script for LLaMA does exactly that).

        The cell builds the half-split pairing from *your* `apply_rope` by reordering features (half-split
        pairs $(i, i + \text{head\_dim}/2)$ become neighbours after the permutation `perm`), then takes
        queries and keys "trained" for the half-split pairing and rotates them both ways.
        """, r"""
        ## 4. 同一个思路，两种配对：交错配对与前后半配对

        RoPE 只要求把特征*以某种方式*分成对。论文和 Meta 最初的 LLaMA 代码把相邻特征配成一对，$(x_{2i}, x_{2i+1})$（也就是本课程的约定，常用复数来写）。GPT-NeoX 和 Hugging Face `transformers` 的代码则把前一半的每个特征与后一半中对应的特征配对，$(x_i, x_{i + \text{head\_dim}/2})$，用一个叫 `rotate_half` 的辅助函数来旋转。两种方式得到的分数都只取决于 $m - n$。

        但一个训练好的模型，它的 $W_q$ 和 $W_k$ 是按*其中一种*配对训练出来的。用另一种配对去旋转它的查询和键，那些本不该一起转的特征就会被一起转：分数变了，模型的输出变成一堆乱码，却没有任何报错。所以把 checkpoint 从一套代码转换到另一套时，要对 $W_q$ 和 $W_k$ 的行做置换（Hugging Face 的 LLaMA 转换脚本正是这样做的）。

        这个单元格通过重排特征，用*你的* `apply_rope` 构造出前后半配对（经过置换 `perm` 之后，前后半配对 $(i, i + \text{head\_dim}/2)$ 就成了相邻特征），然后取一组按前后半配对"训练"出来的查询和键，用两种方式分别旋转。
        """),
        demo("""
        torch.manual_seed(2)
        head_dim, S = 8, 6
        half = head_dim // 2
        perm = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()  # 0, 4, 1, 5, 2, 6, 3, 7
        inverse = torch.argsort(perm)
        print("perm puts half-split partners next to each other:", perm.tolist())


        def rope_half_split(x, positions):
            # the rotate_half convention, from your interleaved apply_rope: reorder, rotate, reorder back
            return apply_rope(x[..., perm], positions)[..., inverse]


        # one query vector and one key vector of a checkpoint trained with half-split RoPE, placed at every position
        q, k = torch.randn(1, head_dim).repeat(S, 1), torch.randn(1, head_dim).repeat(S, 1)
        positions = torch.arange(S)
        with uses_your_code():
            right = rope_half_split(q, positions) @ rope_half_split(k, positions).T  # what the model was trained with
            wrong = apply_rope(q, positions) @ apply_rope(k, positions).T  # the other pairing, same weights
            fixed = apply_rope(q[..., perm], positions) @ apply_rope(k[..., perm], positions).T  # weights permuted
            print(f"scores with the other pairing:        off by up to {(wrong - right).abs().max().item():.3f}")
            print(f"scores with permuted W_q, W_k:        off by up to {(fixed - right).abs().max().item():.1e}")
            print(f"scores the model was trained with:    largest |score| {right.abs().max().item():.3f}")
            diagonals = [wrong.diagonal(d) for d in range(-S + 1, S)]
            print("the wrong pairing is still relative:", all(torch.allclose(d, d[0].expand_as(d), atol=1e-5) for d in diagonals))
        """),
        md(r"""
        The wrong pairing is still a perfectly good RoPE, just not the one this model learned; this is why
        the mistake produces no error.

        ## 5. Pitfalls and how to debug them

        - **Pairing**: this course pairs neighbours, `x[..., 0::2]` with `x[..., 1::2]`; code copied from a
          `rotate_half` implementation pairs halves. Check one pair's length before and after: a rotation
          keeps it.
        - **Frequencies**: $\theta_i = \text{base}^{-2i/\text{head\_dim}}$, with the `base` argument (not the
          number 10000), `head_dim` (the width of one head), not `d_model`, and $i$ counting pairs (not
          $\text{base}^{-i/\text{head\_dim}}$).
        - **Positions `[B, S]`**: one row per sequence; add a head axis to the angles for `x` `[B, H, S, head_dim]`.
        - **Positions after a cache**: the new token of a generating model is at position `len(cache)`, not 0.
        - **dtype**: compute the angles in float32 or float64, return `x`'s dtype.
        - **Where**: queries and keys, after the projections and the split into heads; never the values.
        - **Sinusoidal encodings**: added once to the input, `[S, d_model]`, float32; sines on even features.
        """, r"""
        错误的配对本身仍然是一个完全合格的 RoPE，只不过不是这个模型学到的那一种；这就是为什么这个错误不会引发任何报错。

        ## 5. 常见错误与调试方法

        - **配对**：本课程的约定是相邻特征配对，`x[..., 0::2]` 与 `x[..., 1::2]`；从 `rotate_half` 实现里抄来的代码配对的是前后两半。检查某一对在旋转前后的长度：旋转不改变长度。
        - **频率**：$\theta_i = \text{base}^{-2i/\text{head\_dim}}$，用的是 `base` 参数（而不是写死的 10000）、`head_dim`（一个头的宽度）而不是 `d_model`，$i$ 数的是对（不是 $\text{base}^{-i/\text{head\_dim}}$）。
        - **`[B, S]` 的位置**：每条序列一行；`x` 为 `[B, H, S, head_dim]` 时给角度补一个头的维度。
        - **有缓存时的位置**：生成模型的新 token 位于位置 `len(cache)`，而不是 0。
        - **dtype**：角度用 float32 或 float64 计算，返回 `x` 的 dtype。
        - **作用在哪里**：查询和键，在投影和拆分成多头之后；绝不作用于值。
        - **正弦位置编码**：在输入处加一次，`[S, d_model]`，float32；正弦放在偶数特征上。
        """),
    ]

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# one sequence of 6 token vectors [B, S, d_model]": "# 一个由 6 个 token 向量组成的序列 [B, S, d_model]",
    "# a shuffle of the six positions": "# 六个位置的一种打乱方式",
    '"shuffle:"': '"打乱顺序："',
    '  largest |attention(shuffled x) - shuffled attention(x)|"': '  最大的 |attention(打乱的 x) - 打乱的 attention(x)|"',
    '  largest |attention(shuffled x) - attention(x)|"': '  最大的 |attention(打乱的 x) - attention(x)|"',
    '  largest |attention(x)|, for scale"': '  最大的 |attention(x)|，作为量级参考"',
    "# A causal mask (a decoder) breaks the symmetry a little: token i sees i + 1 tokens.":
        "# 因果掩码（解码器）稍稍打破了这种对称：token i 能看到 i + 1 个 token。",
    "# True = may NOT attend, in nn.MultiheadAttention": "# 在 nn.MultiheadAttention 中 True = 不能关注",
    '  with a causal mask, largest |shuffled - shuffled original|"': '  加因果掩码时，最大的 |打乱后的输出 - 打乱的原输出|"',
    "# radians per position": "# 每个位置转过的弧度",
    'f"pair {i} (features {2 * i}, {2 * i + 1}): angle = p x {omega:<7.4g} "': 'f"第 {i} 对（特征 {2 * i}、{2 * i + 1}）：角度 = p x {omega:<7.4g} "',
    'f"-> one full turn every {2 * math.pi / omega:>9,.1f} positions"': 'f"-> 每 {2 * math.pi / omega:>9,.1f} 个位置转一整圈"',
    ':.4f}   (same offset, same value)"': ':.4f}   （偏移相同，值也相同）"',
    'title="sinusoidal PE [64 positions, 64 features]", xlabel="feature", ylabel="position p"':
        'title="正弦位置编码 PE [64 个位置, 64 个特征]", xlabel="特征", ylabel="位置 p"',
    'xlabel="position q", ylabel="dot product"': 'xlabel="位置 q", ylabel="点积"',
    "# one 2-D vector (a, b) turned by the angle t (radians)": "# 把一个二维向量 (a, b) 旋转角度 t（弧度）",
    '"(1, 0) turned by 90 degrees:"': '"(1, 0) 旋转 90 度："',
    'f"query at m={m:>2}, key at n={n:>2} (m - n = {m - n:>2}): score {score.item():+.4f}"':
        'f"查询在 m={m:>2}，键在 n={n:>2}（m - n = {m - n:>2}）：分数 {score.item():+.4f}"',
    "# pair 1's speed: head_dim = 64 (RoPE) and d_model = 512 (sinusoidal)": "# 第 1 对的转速：head_dim = 64（RoPE）与 d_model = 512（正弦位置编码）",
    ':.2f} rad per position"': ':.2f} 弧度/位置"',
    'f"position {position:>6} stored as float16: {stored:>8.0f}  "': 'f"位置 {position:>6} 存成 float16：{stored:>8.0f}  "',
    'f"-> pair 0\'s angle is off by {abs(stored - position):.0f} rad"': 'f"-> 第 0 对的角度偏差 {abs(stored - position):.0f} 弧度"',
    "# one query and one key vector, head_dim = 16": "# 一个查询向量和一个键向量，head_dim = 16",
    "# row m: q placed at position m": "# 第 m 行：q 放在位置 m",
    "# row n: k placed at position n": "# 第 n 行：k 放在位置 n",
    ':+.4f}   (same offset)"': ':+.4f}   （偏移相同）"',
    ':+.4f}   (opposite offset)"': ':+.4f}   （偏移相反）"',
    'f"spread of every diagonal: {': 'f"每条对角线上的最大差值：{',
    'plt.title("RoPE score of q at m and k at n")': 'plt.title("q 在位置 m、k 在位置 n 时的 RoPE 分数")',
    'plt.xlabel("key position n")': 'plt.xlabel("键的位置 n")',
    'plt.ylabel("query position m")': 'plt.ylabel("查询的位置 m")',
    '"perm puts half-split partners next to each other:"': '"perm 把前后半配对的两个成员放到相邻位置："',
    "# the rotate_half convention, from your interleaved apply_rope: reorder, rotate, reorder back":
        "# rotate_half 的约定，由你的交错配对 apply_rope 得到：重排、旋转、再排回去",
    "# one query vector and one key vector of a checkpoint trained with half-split RoPE, placed at every position":
        "# 一个按前后半配对 RoPE 训练的 checkpoint 的一个查询向量和一个键向量，放到每个位置上",
    "# what the model was trained with": "# 模型训练时用的方式",
    "# the other pairing, same weights": "# 另一种配对，同样的权重",
    "# weights permuted": "# 置换过的权重",
    'f"scores with the other pairing:        off by up to {': 'f"用另一种配对的分数：        最多相差 {',
    'f"scores with permuted W_q, W_k:        off by up to {': 'f"用置换后的 W_q、W_k 的分数：最多相差 {',
    'f"scores the model was trained with:    largest |score| {': 'f"模型训练时用的分数：        最大 |分数| 为 {',
    '"the wrong pairing is still relative:"': '"错误的配对仍然只依赖相对位置："',
}
