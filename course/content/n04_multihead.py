"""Notebook 04: multi-head self-attention."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "04_multihead"

HINTS = {
    "split_heads": ("view each token's features as [H, head_dim] first, then bring the head axis forward.",
                    "先把每个 token 的特征 view 成 [H, head_dim]，再把头的维度移到前面。"),
    "merge_heads": ("undo split_heads in reverse order. After a transpose the memory is no longer in order:\n"
                    "view may refuse, reshape copies when it must.",
                    "按相反的顺序撤销 split_heads。转置之后内存不再按顺序排列：\n"
                    "view 可能会拒绝，reshape 在必要时会复制。"),
    "MultiHeadSelfAttention.__init__": ("one nn.Linear for q, k and v together. (A d_model that num_heads does not divide\n"
                                        "cannot be cut into heads: raising a ValueError says so early; not graded.)",
                                        "q、k、v 共用一个 nn.Linear。（num_heads 不能整除 d_model 时无法切分成多个头：\n"
                                        "及早抛出 ValueError 能说明原因；不计分。）"),
    "MultiHeadSelfAttention.forward": ("cut the projection into q, k, v (in that order), split each into heads, scale by\n"
                                       "sqrt(head_dim); a [B, S] padding mask becomes [B, 1, 1, S]; merge the heads before W_o.",
                                       "把投影结果按 q、k、v 的顺序切开，各自拆分成多个头，用 sqrt(head_dim) 缩放；\n"
                                       "[B, S] 的填充掩码变成 [B, 1, 1, S]；在 W_o 之前合并各个头。"),
}


def cells():
    return [
        md(r"""
        # 04 · Multi-head self-attention

        One attention distribution per query is a single "way of looking". Multi-head attention runs
        `H` attentions side by side. The input is projected once, as before, to queries, keys and values
        of width `d_model`; then the `d_model` features of each **projected** query, key and value are
        cut into `H` blocks of `head_dim = d_model // H`, and head `h` attends with block `h` only. Each
        head computes its own weights, so one head can follow one relation between positions while
        another follows a different one (notebook 03 showed a single head learning a single pattern).

        What does it cost, compared with one head of width `d_model`?

        - **Arithmetic: the same.** The projections are the same matrices. The scores of one head take
          `S x S x head_dim` multiply-adds, and `H` heads take `S x S x d_model`, exactly what one wide
          head takes.
        - **Parameters: the same.** The projections are the same four `d_model x d_model` matrices,
          whatever `H` is.
        - **Memory of the attention-weight matrices: `H` times more.** Every head has its own `[S, S]`
          table of attention weights, so that tensor is `[B, H, S, S]` instead of `[B, S, S]`. This is
          the `B * H * S^2` of notebook 05. The elementwise work on the scores (scale, mask, softmax)
          grows with `H` too, since it touches every entry of those tables.

        The cell below measures all three with PyTorch's own `nn.MultiheadAttention`: its FLOP count
        (PyTorch's `FlopCounterMode` counts the matrix products only), its number of parameters, and the
        shape of the per-head attention weights it returns.

        Part `multihead`: `split_heads`, `merge_heads`, `class MultiHeadSelfAttention`.
        """, r"""
        # 04 · 多头自注意力

        每个查询一个注意力分布，只是一种"看法"。多头注意力让 `H` 个注意力并排运行。输入和以前一样只投影一次，得到宽度为 `d_model` 的查询、键和值；然后把每个**投影后**的查询、键和值的 `d_model` 个特征切成 `H` 块，每块 `head_dim = d_model // H`，第 `h` 个头只用第 `h` 块做注意力。每个头计算自己的权重，所以一个头可以追踪位置之间的一种关系，另一个头追踪另一种（notebook 03 展示了单个头学会单一模式）。

        和一个宽度为 `d_model` 的单头相比，代价是什么？

        - **计算量：相同。** 投影是同样的矩阵。一个头的分数需要 `S x S x head_dim` 次乘加，`H` 个头需要 `S x S x d_model` 次，与一个宽的单头完全一样。
        - **参数量：相同。** 不管 `H` 是多少，投影都是同样四个 `d_model x d_model` 的矩阵。
        - **注意力权重矩阵的内存：变为原来的 `H` 倍。** 每个头都有自己的一张 `[S, S]` 注意力权重表，所以这个张量是 `[B, H, S, S]`，而不是 `[B, S, S]`。这就是 notebook 05 中的 `B * H * S^2`。对分数逐元素进行的运算（缩放、掩码、softmax）也随 `H` 增长，因为它们要处理这些表中的每一个元素。

        下面的单元格用 PyTorch 自带的 `nn.MultiheadAttention` 把这三点都测出来：它的 FLOP 数（PyTorch 的 `FlopCounterMode` 只统计矩阵乘法）、参数个数，以及它返回的按头划分的注意力权重的形状。

        评分部分 `multihead`：`split_heads`、`merge_heads`、`class MultiHeadSelfAttention`。
        """),
        setup(),
        demo("""
        from torch.utils.flop_counter import FlopCounterMode

        torch.manual_seed(0)
        B, S, d_model = 2, 64, 32
        x = torch.randn(B, S, d_model)
        for H in (1, 4, 8):
            mha = nn.MultiheadAttention(d_model, H, bias=False, batch_first=True)
            with FlopCounterMode(display=False) as counter:
                _, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)
            parameters = sum(p.numel() for p in mha.parameters())
            print(f"H = {H}: head_dim {d_model // H:>2}, {counter.get_total_flops():,} FLOPs, {parameters:,} parameters, "
                  f"attention weights {list(weights.shape)} = {weights.numel():,} numbers")
        """),
        md(r"""
        ## 1. Splitting into heads: view first, then permute

        `x` is `[B, S, d_model]`. In memory, the features of token 0 come first, then those of token 1,
        and so on. We want `[B, H, S, head_dim]` where head `h` of token `s` holds features
        `h * head_dim ... (h + 1) * head_dim - 1` of that token.

        | step | code | shape |
        |---|---|---|
        | cut each token's features into H blocks | `x.view(B, S, H, head_dim)` | `[B, S, H, head_dim]` |
        | bring heads before tokens | `.transpose(1, 2)` (or `.permute(0, 2, 1, 3)`) | `[B, H, S, head_dim]` |

        `view` never moves data: it only reinterprets the flat memory with a new shape. Cutting the last
        axis into `[H, head_dim]` keeps each block inside one token, which is what we want.

        Two shortcuts give the right shape and wrong heads:

        - **no transpose at all**, `x.view(B, H, S, head_dim)`: a common one, and silent. It cuts each
          sequence's memory into `H` consecutive pieces, so head 0 gets the first features of token 0,
          then the rest of token 0, and so on, instead of feature block 0 of every token;
        - **permute first**, to `[B, d_model, S]`, then view as `[B, H, S, head_dim]`. Written with
          `.view`, this usually raises (`view size is not compatible with input tensor's size and
          stride`): after the permute the memory is no longer in order. It runs only when `S` happens to
          equal `head_dim`, and whenever `.reshape` or `.contiguous().view` is used, which copy instead
          of refusing; then it is silent, and the heads regroup numbers that belong to *different
          tokens*.

        The first cell below tries `.view` after the permute; the grid then labels every number
        `t<token>f<feature>` and shows what each head receives all three ways (the permute-first way
        written with `.reshape`, the form that runs).
        """, r"""
        ## 1. 拆分成多个头：先 view，再 permute

        `x` 是 `[B, S, d_model]`。在内存中，先是 token 0 的特征，然后是 token 1 的，依此类推。我们想要 `[B, H, S, head_dim]`，其中 token `s` 的第 `h` 个头存放该 token 的第 `h * head_dim ... (h + 1) * head_dim - 1` 个特征。

        | 步骤 | 代码 | 形状 |
        |---|---|---|
        | 把每个 token 的特征切成 H 块 | `x.view(B, S, H, head_dim)` | `[B, S, H, head_dim]` |
        | 把头的维度移到 token 前面 | `.transpose(1, 2)`（或 `.permute(0, 2, 1, 3)`） | `[B, H, S, head_dim]` |

        `view` 从不移动数据：它只是用新的形状重新解释同一块连续内存。把最后一个维度切成 `[H, head_dim]`，每一块都留在同一个 token 内部，这正是我们想要的。

        有两条捷径能得到正确的形状、错误的头：

        - **完全不转置**，`x.view(B, H, S, head_dim)`：很常见，而且不报错。它把每个序列的内存切成 `H` 段连续的片段，于是第 0 个头拿到的是 token 0 的前一部分特征，然后是 token 0 的其余部分，依此类推，而不是每个 token 的第 0 块特征；
        - **先 permute**，变成 `[B, d_model, S]`，再 view 成 `[B, H, S, head_dim]`。用 `.view` 写，通常会报错（`view size is not compatible with input tensor's size and stride`）：permute 之后内存不再按顺序排列。只有 `S` 恰好等于 `head_dim` 时它才能运行；改用 `.reshape` 或 `.contiguous().view` 时也能运行，因为它们会复制数据而不是拒绝。这时它不报错，而各个头拿到的是属于*不同 token* 的数。

        下面第一个单元格在 permute 之后调用 `.view`；接着的网格用 `t<token>f<feature>` 标记每个数，展示三种做法下每个头分别拿到了什么（先 permute 的做法用能运行的 `.reshape` 写）。
        """),
        demo("""
        for B, S, d_model, H in ((2, 5, 16, 4), (2, 4, 16, 4)):
            x = torch.randn(B, S, d_model)
            try:
                x.permute(0, 2, 1).view(B, H, S, d_model // H)  # permute, then view
                print(f"x {list(x.shape)}, H = {H} (S = head_dim = {S}): the view runs, and mixes tokens silently")
            except RuntimeError as error:
                print(f"x {list(x.shape)}, H = {H} (S = {S}, head_dim = {d_model // H}): RuntimeError: {str(error).split(' (')[0]}")
        """),
        demo("""
        B, S, d_model, H = 1, 3, 8, 2
        head_dim = d_model // H
        labels = [[f"t{t}f{f}" for f in range(d_model)] for t in range(S)]
        x = torch.arange(S * d_model).reshape(B, S, d_model)  # number n stands for labels[n // d_model][n % d_model]

        def show(heads, title):
            print(title)
            for h in range(H):
                rows = ["  ".join(labels[n // d_model][n % d_model] for n in heads[0, h, s].tolist()) for s in range(S)]
                print(f"  head {h}: " + "\\n          ".join(rows))

        right = x.view(B, S, H, head_dim).permute(0, 2, 1, 3)  # view, then permute
        no_transpose = x.view(B, H, S, head_dim)  # no permute at all: cuts the flat memory
        permute_first = x.permute(0, 2, 1).reshape(B, H, S, head_dim)  # permute, then view (reshape): mixes tokens
        show(right, "view then permute (each row is one token's own features):")
        show(no_transpose, "view as [B, H, S, head_dim], no transpose (rows are pieces of the flat memory):")
        show(permute_first, "permute then view (rows mix tokens t0, t1, t2):")
        """),
        demo("""
        import matplotlib.pyplot as plt

        B, S, d_model, H = 1, 4, 8, 2
        head_dim = d_model // H
        token_of = torch.arange(S)[:, None].repeat(1, d_model).reshape(1, S, d_model)  # which token each number is from
        variants = {
            "view -> permute": token_of.view(B, S, H, head_dim).permute(0, 2, 1, 3),
            "view, no transpose": token_of.view(B, H, S, head_dim),
            "permute -> view": token_of.permute(0, 2, 1).reshape(B, H, S, head_dim),
        }
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
        for ax, (title, heads) in zip(axes, variants.items()):
            grid = torch.cat([heads[0, h] for h in range(H)], dim=1)  # [S, H * head_dim]
            ax.imshow(grid, cmap="tab10", vmin=0, vmax=9)
            for s in range(S):
                for c in range(H * head_dim):
                    ax.text(c, s, f"t{grid[s, c].item()}", ha="center", va="center", fontsize=8)
            ax.axvline(head_dim - 0.5, color="white", lw=3)
            ax.set(title=title, xlabel="head 0 | head 1 (features)", ylabel="row s")
        fig.suptitle("which token each number of each head comes from")
        plt.tight_layout()
        plt.show()
        """),
        md(r"""
        In the left picture every row of a head holds numbers from one token only. In the middle one, head
        0 holds tokens 0 and 1 only, and head 1 tokens 2 and 3. In the right one, rows mix tokens: head 0's
        "token 0" is made of pieces of tokens 0 to 3.

        Merging is the inverse: transpose `[B, H, S, head_dim]` back to `[B, S, H, head_dim]` and flatten
        the last two axes. After a transpose the tensor is not *contiguous* (its memory order no longer
        matches its shape), so `view` raises; `reshape` (or `.contiguous().view(...)`) works:
        """, r"""
        在左图中，一个头的每一行只包含来自同一个 token 的数。在中间的图中，第 0 个头只包含 token 0 和 1，第 1 个头只包含 token 2 和 3。在右图中，各行混合了不同的 token：第 0 个头的"token 0"是由 token 0 到 3 的碎片拼成的。

        合并是拆分的逆过程：把 `[B, H, S, head_dim]` 转置回 `[B, S, H, head_dim]`，再把最后两个维度展平。转置之后张量不再是 *连续的*（它的内存顺序与形状不再对应），所以 `view` 会报错；`reshape`（或 `.contiguous().view(...)`）可以：
        """),
        demo("""
        heads = torch.randn(2, 4, 3, 5)  # [B, H, S, head_dim]
        moved = heads.transpose(1, 2)  # [B, S, H, head_dim], not contiguous
        try:
            moved.view(2, 3, 20)
        except RuntimeError as error:
            print("view after transpose:", str(error).split(".")[0])
        print("reshape works:", list(moved.reshape(2, 3, 20).shape))
        """),
        solution("split_heads", HINTS),
        check("check_split_heads(split_heads)", "check_split_heads"),
        solution("merge_heads", HINTS),
        check("check_merge_heads(merge_heads)", "check_merge_heads"),
        md(r"""
        ## 2. The module

        `MultiHeadSelfAttention(d_model, num_heads, dropout=0.0)` uses one projection
        `W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)` for queries, keys and values at once: one
        matrix product instead of three, with the same numbers. Its output rows are ordered q, k, v,
        the same layout as `nn.MultiheadAttention.in_proj_weight`, so the weights can be copied across
        as they are.

        | step | shape (`B=2, S=5, d_model=16, H=4, head_dim=4`) |
        |---|---|
        | `W_qkv(x)` | `[2, 5, 48]` |
        | cut into q, k, v along the last axis | three `[2, 5, 16]` |
        | `split_heads` | three `[2, 4, 5, 4]` |
        | scores `Q K^T / sqrt(head_dim)` | `[2, 4, 5, 5]` |
        | padding mask `[B, S]` viewed as `[B, 1, 1, S]`; causal `[S, S]` | broadcast to `[2, 4, 5, 5]` |
        | softmax over keys, dropout, `@ V` | `[2, 4, 5, 4]` |
        | `merge_heads`, then `W_o` | `[2, 5, 16]` |

        Note the scale: each head's dot products have `head_dim` terms, so the scale is
        $1/\sqrt{\text{head\_dim}}$, not $1/\sqrt{d_\text{model}}$.
        """, r"""
        ## 2. 模块

        `MultiHeadSelfAttention(d_model, num_heads, dropout=0.0)` 用一个投影 `W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)` 同时得到查询、键和值：一次矩阵乘法代替三次，数值完全相同。它的输出各行按 q、k、v 排列，与 `nn.MultiheadAttention.in_proj_weight` 的布局相同，所以权重可以原样复制过去。

        | 步骤 | 形状（`B=2, S=5, d_model=16, H=4, head_dim=4`） |
        |---|---|
        | `W_qkv(x)` | `[2, 5, 48]` |
        | 沿最后一个维度切成 q、k、v | 三个 `[2, 5, 16]` |
        | `split_heads` | 三个 `[2, 4, 5, 4]` |
        | 分数 `Q K^T / sqrt(head_dim)` | `[2, 4, 5, 5]` |
        | 填充掩码 `[B, S]` 视作 `[B, 1, 1, S]`；因果掩码 `[S, S]` | 广播到 `[2, 4, 5, 5]` |
        | 在键上做 softmax、dropout、`@ V` | `[2, 4, 5, 4]` |
        | `merge_heads`，再经过 `W_o` | `[2, 5, 16]` |

        注意缩放因子：每个头的点积有 `head_dim` 项，所以缩放是 $1/\sqrt{\text{head\_dim}}$，而不是 $1/\sqrt{d_\text{model}}$。
        """),
        solution("MultiHeadSelfAttention", HINTS),
        check("check_multihead(MultiHeadSelfAttention)", "check_multihead"),
        graded_cell("multihead"),
        md(r"""
        ## 3. Same numbers as `nn.MultiheadAttention`, head by head

        Because `W_qkv.weight` has the layout of `in_proj_weight`, parity needs no reshuffling. The
        official module can also return the weights of every head (`average_attn_weights=False`): the
        heatmaps show that the four heads look at the sequence differently.
        """, r"""
        ## 3. 与 `nn.MultiheadAttention` 数值一致，逐个头对照

        因为 `W_qkv.weight` 的布局与 `in_proj_weight` 相同，对齐时不需要重新排列。官方模块还可以返回每个头的权重（`average_attn_weights=False`）：热力图显示四个头看序列的方式各不相同。
        """),
        demo("""
        import matplotlib.pyplot as plt

        with uses_your_code():
            torch.manual_seed(0)
            B, S, d_model, H = 2, 6, 16, 4
            ours = MultiHeadSelfAttention(d_model, H).eval()
            official = nn.MultiheadAttention(d_model, H, bias=False, batch_first=True).eval()
            with torch.no_grad():
                official.in_proj_weight.copy_(ours.W_qkv.weight)
                official.out_proj.weight.copy_(ours.W_o.weight)
                x = torch.randn(B, S, d_model)
                keep = torch.arange(S)[None, :] < torch.tensor([6, 4])[:, None]  # True = real token
                mine = ours(x, keep)
                theirs, per_head = official(x, x, x, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
            print("largest difference with padding:", f"{(mine - theirs).abs().max().item():.1e}")
            print("per-head weights", list(per_head.shape))

            fig, axes = plt.subplots(1, H, figsize=(12, 3))
            for h, ax in enumerate(axes):
                ax.imshow(per_head[1, h], cmap="viridis", vmin=0, vmax=1)
                ax.set(title=f"head {h} (sequence 1, length 4)", xlabel="key j", ylabel="query i")
            plt.tight_layout()
            plt.show()
        """),
        md(r"""
        ## 4. Pitfalls and how to debug them

        - **`The size of tensor a (16) must match the size of tensor b (8) at non-singleton dimension 3`**:
          almost always a split/merge problem. Print the shape after every `view`, `transpose` and
          `reshape`, and write the expected shape as a comment next to each line.
        - **Wrong heads, no error**: `x.view(B, H, S, head_dim)` with no transpose, or permute first and
          then `.reshape` (`.view` there raises, unless `S == head_dim`). Test `split_heads` on
          `torch.arange` input as the visible check does, and check `merge_heads(split_heads(x, H)) == x`.
        - **`view size is not compatible with input tensor's size and stride`**: `view` after a transpose
          or permute. In `merge_heads`, where the transpose is right, use `reshape`; in `split_heads` it
          usually means the permute came before the view: swap them rather than switching to `reshape`.
        - **Mask shape**: single-head scores need `[B, 1, S]`, multi-head scores `[B, 1, 1, S]`.
        - **Scale**: `sqrt(head_dim)`, not `sqrt(d_model)`.
        """, r"""
        ## 4. 常见陷阱与调试方法

        - **`The size of tensor a (16) must match the size of tensor b (8) at non-singleton dimension 3`**：几乎总是拆分/合并出了问题。在每次 `view`、`transpose` 和 `reshape` 之后打印形状，并在每行旁边用注释写下预期的形状。
        - **头错了却不报错**：不转置直接 `x.view(B, H, S, head_dim)`，或者先 permute 再 `.reshape`（这里用 `.view` 会报错，除非 `S == head_dim`）。像可见检查那样用 `torch.arange` 作为输入测试 `split_heads`，并检查 `merge_heads(split_heads(x, H)) == x`。
        - **`view size is not compatible with input tensor's size and stride`**：在转置或 permute 之后用了 `view`。在 `merge_heads` 里（转置本身没错）改用 `reshape`；在 `split_heads` 里，它通常说明 permute 放在了 view 前面：把两者对调，而不是改用 `reshape`。
        - **掩码形状**：单头分数需要 `[B, 1, S]`，多头分数需要 `[B, 1, 1, S]`。
        - **缩放**：`sqrt(head_dim)`，而不是 `sqrt(d_model)`。
        """),
    ]


# The Chinese docstrings of the solution cells (the build puts them in the Chinese edition).
DOCSTRINGS_ZH = {
    "split_heads": "[B, S, d_model] -> [B, H, S, head_dim]：先 view，再把头的维度移到前面。",
    "merge_heads": "[B, H, S, head_dim] -> [B, S, H * head_dim]：split_heads 的逆操作。",
    "MultiHeadSelfAttention": "H 个宽度为 head_dim = d_model // H 的头，并行计算。",
    "MultiHeadSelfAttention.forward": "x [B, S, d_model]，mask [B, S]（True = 真实 token）-> [B, S, d_model]。",
}

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    'f"H = {H}: head_dim {d_model // H:>2}, {counter.get_total_flops():,} FLOPs, {parameters:,} parameters, "':
        'f"H = {H}：head_dim {d_model // H:>2}，{counter.get_total_flops():,} 次浮点运算，{parameters:,} 个参数，"',
    'f"attention weights {list(weights.shape)} = {weights.numel():,} numbers"':
        'f"注意力权重 {list(weights.shape)} = {weights.numel():,} 个数"',
    "# permute, then view": "# 先 permute，再 view",
    ', H = {H} (S = head_dim = {S}): the view runs, and mixes tokens silently"': '，H = {H}（S = head_dim = {S}）：view 能运行，并且悄悄地混合了 token"',
    ', H = {H} (S = {S}, head_dim = {d_model // H}): RuntimeError:': '，H = {H}（S = {S}，head_dim = {d_model // H}）：RuntimeError：',
    "# number n stands for labels[n // d_model][n % d_model]": "# 数 n 代表 labels[n // d_model][n % d_model]",
    'f"  head {h}: "': 'f"  头 {h}："',
    '"\\n          "': '"\\n        "',
    "# view, then permute": "# 先 view，再 permute",
    "# no permute at all: cuts the flat memory": "# 完全不 permute：直接切分连续内存",
    "# permute, then view (reshape): mixes tokens": "# 先 permute，再 view（reshape）：混合了 token",
    '"view then permute (each row is one token\'s own features):"': '"先 view 再 permute（每一行都是同一个 token 自己的特征）："',
    '"view as [B, H, S, head_dim], no transpose (rows are pieces of the flat memory):"':
        '"直接 view 成 [B, H, S, head_dim]，不转置（每一行是连续内存的一段）："',
    '"permute then view (rows mix tokens t0, t1, t2):"': '"先 permute 再 view（每一行混合了 t0、t1、t2 几个 token）："',
    "# which token each number is from": "# 每个数来自哪个 token",
    '"view -> permute"': '"先 view 再 permute"',
    '"view, no transpose"': '"只 view，不转置"',
    '"permute -> view"': '"先 permute 再 view"',
    'xlabel="head 0 | head 1 (features)", ylabel="row s"': 'xlabel="头 0 | 头 1（特征）", ylabel="行 s"',
    '"which token each number of each head comes from"': '"每个头中的每个数来自哪个 token"',
    "# [B, S, H, head_dim], not contiguous": "# [B, S, H, head_dim]，内存不连续",
    '"view after transpose:"': '"转置之后 view："',
    '"reshape works:"': '"reshape 可以："',
    "# True = real token": "# True = 真实 token",
    '"largest difference with padding:"': '"有填充时的最大差值："',
    '"per-head weights"': '"按头划分的权重"',
    'ax.set(title=f"head {h} (sequence 1, length 4)", xlabel="key j", ylabel="query i")':
        'ax.set(title=f"头 {h}（序列 1，长度 4）", xlabel="键 j", ylabel="查询 i")',
}
