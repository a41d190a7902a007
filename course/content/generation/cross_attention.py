"""Notebook 03 of `generation`: cross-attention (queries from one sequence, keys and values from another)."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "03_cross_attention"

HINTS = {
    "CrossAttention.__init__": (
        "d_context defaults to d_model; W_k and W_v read d_context features, W_q and W_o d_model.",
        "d_context 默认等于 d_model；W_k 和 W_v 读入 d_context 个特征，W_q 和 W_o 读入 d_model 个。",
    ),
    "CrossAttention.forward": (
        "queries from x, keys and values from the context, each split into heads; scores\n"
        "[B, H, S_q, S_k]; the [B, S_k] context mask as [B, 1, 1, S_k]; no causal mask.",
        "查询来自 x，键和值来自上下文，各自拆分成多头；分数为\n"
        "[B, H, S_q, S_k]；[B, S_k] 的上下文掩码变形为 [B, 1, 1, S_k]；不加因果掩码。",
    ),
}

# The Chinese docstrings of the solution class and its methods (the build puts them in the Chinese edition's stubs).
DOCSTRINGS_ZH = {
    "CrossAttention": """从序列 x（查询）到另一个序列，即上下文（键和值）的多头注意力。""",
    "CrossAttention.forward": """x [B, S_q, d_model]，context [B, S_k, d_context]，context_mask [B, S_k]（True = 真实 token）-> [B, S_q, d_model]。""",
}


def cells():
    return [
        md(r"""
        # 03 · Cross-attention: reading another sequence

        In self-attention, queries, keys and values all come from one sequence. In **cross-attention** the
        queries come from the sequence being built (`x`) and the keys and values from another one, the
        **context**:

        - the decoder of a translation model reads the encoder's output (the source sentence) at every
          layer: that is the original Transformer's second attention block;
        - an image generator's features read the embeddings of the text prompt;
        - a speech recogniser's text decoder reads the audio encoder's output.

        The context can be longer or shorter than `x`, and its vectors can have another width
        `d_context`, since they come from another network.

        | part | what you write |
        |---|---|
        | `cross_attention` | `class CrossAttention(nn.Module)` |
        """, r"""
        # 03 · 交叉注意力：读取另一个序列

        在自注意力里，查询、键和值都来自同一个序列。在**交叉注意力**里，查询来自正在构建的序列（`x`），键和值则来自另一个序列，即**上下文**（context）：

        - 翻译模型的解码器在每一层都读取编码器的输出（源语言句子）：这就是最初 Transformer 中的第二个注意力模块；
        - 图像生成模型的特征读取文本提示词的嵌入；
        - 语音识别模型的文本解码器读取音频编码器的输出。

        上下文可以比 `x` 长，也可以比它短；由于它来自另一个网络，它的向量还可以有另一个宽度 `d_context`。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `cross_attention` | `class CrossAttention(nn.Module)` |
        """),
        setup(),
        md(r"""
        ## 1. Shapes: a rectangular score matrix

        | tensor | shape | from |
        |---|---|---|
        | `x` | `[B, S_q, d_model]` | the sequence that asks |
        | `context` | `[B, S_k, d_context]` | the sequence that is read |
        | `Q = W_q(x)` | `[B, S_q, d_model]` | `W_q: d_model -> d_model` |
        | `K = W_k(context)`, `V = W_v(context)` | `[B, S_k, d_model]` | `W_k, W_v: d_context -> d_model` |
        | split into `H` heads | `[B, H, S_q, head_dim]`, `[B, H, S_k, head_dim]` | `head_dim = d_model // H` |
        | scores `Q K^T / sqrt(head_dim)` | `[B, H, S_q, S_k]` | one row per query, one column per context token |
        | softmax over the context, `@ V`, merge, `W_o` | `[B, S_q, d_model]` | one output per query |

        `W_k` and `W_v` bring the context into the model's width, so that keys meet queries in the same
        space. The output has one row per *query*: `x` keeps its length, whatever the context's.

        **No causal mask.** The context is complete before `x` reads it (the source sentence is known
        before the translation starts), so every query may look at every context token. A causal mask here
        would hide part of the source from the first words of the translation.
        """, r"""
        ## 1. 张量形状：分数矩阵不再是方阵

        | 张量 | 形状 | 来源 |
        |---|---|---|
        | `x` | `[B, S_q, d_model]` | 发出查询的序列 |
        | `context` | `[B, S_k, d_context]` | 被读取的序列 |
        | `Q = W_q(x)` | `[B, S_q, d_model]` | `W_q: d_model -> d_model` |
        | `K = W_k(context)`, `V = W_v(context)` | `[B, S_k, d_model]` | `W_k, W_v: d_context -> d_model` |
        | 拆分成 `H` 个头 | `[B, H, S_q, head_dim]`, `[B, H, S_k, head_dim]` | `head_dim = d_model // H` |
        | 分数 `Q K^T / sqrt(head_dim)` | `[B, H, S_q, S_k]` | 每个查询一行，每个上下文 token 一列 |
        | 对上下文做 softmax，`@ V`，合并多头，`W_o` | `[B, S_q, d_model]` | 每个查询一个输出 |

        `W_k` 和 `W_v` 把上下文变换到模型的宽度，这样键和查询才处在同一个空间里。输出每个*查询*一行：无论上下文有多长，`x` 的长度都保持不变。

        **没有因果掩码。** 在 `x` 读取上下文之前，上下文就已经是完整的了（翻译开始之前，源语言句子就已知），所以每个查询都可以看所有上下文 token。在这里加因果掩码，会让译文的前几个词看不到源句的一部分。
        """),
        demo("""
        torch.manual_seed(0)
        B, S_q, S_k, d_model, d_context, H = 2, 3, 7, 16, 10, 4
        x, context = torch.randn(B, S_q, d_model), torch.randn(B, S_k, d_context)
        W_q, W_k = nn.Linear(d_model, d_model, bias=False), nn.Linear(d_context, d_model, bias=False)
        Q = W_q(x).view(B, S_q, H, d_model // H).transpose(1, 2)  # [B, H, S_q, head_dim]
        K = W_k(context).view(B, S_k, H, d_model // H).transpose(1, 2)  # [B, H, S_k, head_dim]
        print("x", list(x.shape), " context", list(context.shape))
        print("Q", list(Q.shape), " K", list(K.shape), " scores", list((Q @ K.transpose(-2, -1)).shape))
        try:
            nn.Linear(d_model, d_model, bias=False)(context)  # a key projection that ignores d_context
        except RuntimeError as error:
            print("W_k with d_model inputs on the context:", str(error).split(" (")[0])
        """),
        md(r"""
        ## 2. The context padding mask, three conventions

        A batch of contexts is right-padded to one length, so a `[B, S_k]` mask marks the real context
        tokens; padded ones must get weight 0 from every query, so they become `-inf` in every row of the
        scores: the mask lines up with the **last** axis, as `[B, 1, 1, S_k]` against `[B, H, S_q, S_k]`.
        It is never applied to the queries (`x` may have its own padding, but a padded query's output is
        simply ignored later).

        The three boolean conventions you meet, side by side (this course's, `nn.MultiheadAttention`'s
        `key_padding_mask`, SDPA's `attn_mask`):
        """, r"""
        ## 2. 上下文的填充掩码，三种约定

        一个批次里的上下文会在右侧填充到同一长度，所以用一个 `[B, S_k]` 的掩码标出真实的上下文 token；填充的 token 必须从每个查询那里得到权重 0，因此它们在分数的每一行中都要变成 `-inf`：掩码对齐的是**最后一个**维度，即用 `[B, 1, 1, S_k]` 对上 `[B, H, S_q, S_k]`。它从不作用于查询（`x` 可以有自己的填充，但填充位置上查询的输出之后会被直接忽略）。

        你会遇到的三种布尔约定，并排列出（本课程的、`nn.MultiheadAttention` 的 `key_padding_mask`、SDPA 的 `attn_mask`）：
        """),
        demo("""
        lengths = torch.tensor([5, 2])  # two contexts of 5 and 2 real tokens, padded to S_k = 5
        ours = torch.arange(5)[None, :] < lengths[:, None]  # [B, S_k], True = real token
        print("ours, True = real token:                   ", ours.int().tolist())
        print("nn.MultiheadAttention key_padding_mask, True = ignore:", (~ours).int().tolist())
        print("SDPA attn_mask [B, 1, 1, S_k], True = may attend:     ", ours[:, None, None, :].int().flatten(1).tolist(),
              list(ours[:, None, None, :].shape))
        """),
        md(r"""
        ## 3. The module

        `CrossAttention(d_model, num_heads, d_context=None)` owns four bias-free layers: `W_q`
        (`d_model -> d_model`), `W_k` and `W_v` (`d_context -> d_model`; `d_context` defaults to
        `d_model`) and `W_o` (`d_model -> d_model`). `forward(x, context, context_mask=None)` follows the
        table of section 1, with `-inf` at the padded context tokens. `F.scaled_dot_product_attention` is a
        fair tool here; handing the work to `nn.MultiheadAttention` is not: the autograder gives this part
        nothing for it (section 4 compares with it, outside your module).
        """, r"""
        ## 3. 模块

        `CrossAttention(d_model, num_heads, d_context=None)` 有四个不带偏置的层：`W_q`（`d_model -> d_model`）、`W_k` 和 `W_v`（`d_context -> d_model`；`d_context` 默认等于 `d_model`），以及 `W_o`（`d_model -> d_model`）。`forward(x, context, context_mask=None)` 按第 1 节的表格计算，在填充的上下文 token 处填 `-inf`。这里可以用 `F.scaled_dot_product_attention`，但不能把整个计算交给 `nn.MultiheadAttention`：那样这一部分在自动评分器里得 0 分（第 4 节会在你的模块之外拿它来对比）。
        """),
        solution("CrossAttention", HINTS),
        check("check_cross_attention(CrossAttention)", "check_cross_attention"),
        graded_cell("cross_attention"),
        md(r"""
        ## 4. Same numbers as `nn.MultiheadAttention(kdim=..., vdim=...)`

        `nn.MultiheadAttention(d_model, H, kdim=d_context, vdim=d_context, bias=False, batch_first=True)` is
        PyTorch's cross-attention. When `kdim` and `vdim` equal `d_model` it packs the three input projections
        into one `in_proj_weight` (rows q, k, v, as in the first assignment); when they differ it cannot,
        and keeps three separate matrices. The cell lists its parameters in both cases.
        """, r"""
        ## 4. 与 `nn.MultiheadAttention(kdim=..., vdim=...)` 结果一致

        `nn.MultiheadAttention(d_model, H, kdim=d_context, vdim=d_context, bias=False, batch_first=True)` 就是 PyTorch 的交叉注意力。当 `kdim` 和 `vdim` 等于 `d_model` 时，它把三个输入投影打包成一个 `in_proj_weight`（行依次是 q、k、v，和第一个作业一样）；两者不相等时就没法打包，只能保留三个独立的矩阵。这个单元格列出两种情况下它的参数。
        """),
        demo("""
        for kdim in (10, 16):
            official = nn.MultiheadAttention(16, 4, kdim=kdim, vdim=kdim, bias=False, batch_first=True)
            print(f"kdim = vdim = {kdim}:", ", ".join(f"{name} {list(p.shape)}" for name, p in official.named_parameters()))
        """),
        md(r"""
        So parity means copying `W_q`, `W_k`, `W_v` into `q_proj_weight`, `k_proj_weight`, `v_proj_weight`
        (and `W_o` into `out_proj.weight`) and passing `key_padding_mask = ~context_mask`. The cell compares
        your module with it on a padded batch and shows the official module's attention weights: every
        query of the second sample gives zero weight to its three padded context tokens.
        """, r"""
        所以要让结果一致，就要把 `W_q`、`W_k`、`W_v` 复制到 `q_proj_weight`、`k_proj_weight`、`v_proj_weight`（把 `W_o` 复制到 `out_proj.weight`），并传入 `key_padding_mask = ~context_mask`。这个单元格在一个带填充的批次上把你的模块与它做比较，并画出官方模块的注意力权重：第二个样本的每个查询，对它的三个填充上下文 token 的权重都是零。
        """),
        demo("""
        import matplotlib.pyplot as plt

        torch.manual_seed(1)
        B, S_q, S_k, d_model, d_context, H = 2, 4, 6, 16, 10, 4
        with uses_your_code():
            ours = CrossAttention(d_model, H, d_context).eval()
            official = nn.MultiheadAttention(d_model, H, kdim=d_context, vdim=d_context, bias=False,
                                             batch_first=True).eval()
            with torch.no_grad():
                official.q_proj_weight.copy_(ours.W_q.weight)
                official.k_proj_weight.copy_(ours.W_k.weight)
                official.v_proj_weight.copy_(ours.W_v.weight)
                official.out_proj.weight.copy_(ours.W_o.weight)
                x, context = torch.randn(B, S_q, d_model), torch.randn(B, S_k, d_context)
                keep = torch.arange(S_k)[None, :] < torch.tensor([6, 3])[:, None]  # True = real context token
                mine = ours(x, context, keep)
                theirs, weights = official(x, context, context, key_padding_mask=~keep, need_weights=True,
                                           average_attn_weights=False)
            print(f"largest difference from nn.MultiheadAttention: {(mine - theirs).abs().max().item():.1e}")
            print("weights", list(weights.shape), "- sample 1, weight on its padded tokens:",
                  f"{weights[1, :, :, 3:].abs().max().item():.1f}")
            fig, axes = plt.subplots(1, H, figsize=(12, 2.8))
            for h, ax in enumerate(axes):
                ax.imshow(weights[1, h], cmap="viridis", vmin=0, vmax=1)
                ax.set(title=f"head {h}, sample 1", xlabel="context token (3 real)", ylabel="query")
            plt.tight_layout()
            plt.show()
        """),
        md(r"""
        ## 5. Cross-attention while generating

        When a decoder generates, its new token's query reads the *same* context at every step: the
        context's keys and values do not change, so a model computes `W_k(context)` and `W_v(context)` once
        per layer and keeps them, a second, fixed cache next to the growing self-attention cache of notebook
        02. And since no mask connects the queries, running the queries one at a time gives the same rows as
        running them together; the cell checks it with your module.
        """, r"""
        ## 5. 生成时的交叉注意力

        解码器生成时，新 token 的查询在每一步读取的都是*同一个*上下文：上下文的键和值不会变，所以模型在每一层只计算一次 `W_k(context)` 和 `W_v(context)` 并保存下来，这是第二个、固定不变的缓存，与 notebook 02 中不断增长的自注意力缓存并存。而且因为查询之间没有掩码相连，把查询一个一个地算和一起算得到的行是一样的；这个单元格用你的模块验证这一点。
        """),
        demo("""
        torch.manual_seed(2)
        with uses_your_code():
            layer = CrossAttention(16, 4, d_context=10).eval()
            x, context = torch.randn(1, 5, 16), torch.randn(1, 8, 10)
            with torch.no_grad():
                together = layer(x, context)
                one_by_one = torch.cat([layer(x[:, i : i + 1], context) for i in range(5)], dim=1)
            print(f"queries one at a time vs together: largest difference {(one_by_one - together).abs().max().item():.1e}")
        """),
        md(r"""
        ## 6. Pitfalls and how to debug them

        - **Keys from the wrong sequence**: `W_k(x)` instead of `W_k(context)` runs silently whenever `x`
          and the context happen to have the same length and width. Test with `S_q != S_k` and
          `d_context != d_model`.
        - **Widths**: `W_k` and `W_v` map `d_context -> d_model`; `W_q` and `W_o` stay in `d_model`.
        - **Mask axis and sense**: the context mask hides columns (the last axis), True = real token here,
          True = ignore in `key_padding_mask`, True = may attend in SDPA.
        - **No causal mask** in cross-attention.
        - **Parity**: with `kdim != d_model`, `nn.MultiheadAttention` has `q_proj_weight`, `k_proj_weight`,
          `v_proj_weight`, not `in_proj_weight`.
        """, r"""
        ## 6. 常见错误与调试方法

        - **键来自错误的序列**：只要 `x` 和上下文碰巧长度、宽度都相同，把 `W_k(context)` 写成 `W_k(x)` 也能悄无声息地跑通。测试时要用 `S_q != S_k` 和 `d_context != d_model`。
        - **宽度**：`W_k` 和 `W_v` 映射 `d_context -> d_model`；`W_q` 和 `W_o` 保持在 `d_model`。
        - **掩码的维度和含义**：上下文掩码遮住的是列（最后一个维度）；这里 True = 真实 token，`key_padding_mask` 中 True = 忽略，SDPA 中 True = 可以关注。
        - 交叉注意力里**没有因果掩码**。
        - **一致性**：当 `kdim != d_model` 时，`nn.MultiheadAttention` 的参数是 `q_proj_weight`、`k_proj_weight`、`v_proj_weight`，而不是 `in_proj_weight`。
        """),
    ]

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    '" context"': '" 上下文 context"',
    '" scores"': '" 分数"',
    "# a key projection that ignores d_context": "# 一个忽略了 d_context 的键投影",
    '"W_k with d_model inputs on the context:"': '"输入宽度为 d_model 的 W_k 作用在上下文上："',
    "# two contexts of 5 and 2 real tokens, padded to S_k = 5": "# 两段上下文，分别有 5 个和 2 个真实 token，填充到 S_k = 5",
    "# [B, S_k], True = real token": "# [B, S_k]，True = 真实 token",
    '"ours, True = real token:                   "': '"本课程，True = 真实 token：                    "',
    '"nn.MultiheadAttention key_padding_mask, True = ignore:"': '"nn.MultiheadAttention 的 key_padding_mask，True = 忽略："',
    '"SDPA attn_mask [B, 1, 1, S_k], True = may attend:     "': '"SDPA 的 attn_mask [B, 1, 1, S_k]，True = 可以关注：     "',
    "# True = real context token": "# True = 真实的上下文 token",
    'f"largest difference from nn.MultiheadAttention: {': 'f"与 nn.MultiheadAttention 的最大差值：{',
    '"weights", list(weights.shape), "- sample 1, weight on its padded tokens:"': '"权重", list(weights.shape), "- 样本 1 在它的填充 token 上的权重："',
    'ax.set(title=f"head {h}, sample 1", xlabel="context token (3 real)", ylabel="query")':
        'ax.set(title=f"头 {h}，样本 1", xlabel="上下文 token（3 个真实）", ylabel="查询")',
    'f"queries one at a time vs together: largest difference {': 'f"逐个输入查询与一起输入相比：最大差值 {',
}
