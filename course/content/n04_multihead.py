"""Notebook 04: multi-head self-attention."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "04_multihead"

HINTS = {
    "split_heads": "view each token's features as [H, head_dim] first, then bring the head axis forward.",
    "merge_heads": "undo split_heads in reverse order. After a transpose the memory is no longer in order:\n"
    "view may refuse, reshape copies when it must.",
    "MultiHeadSelfAttention.__init__": "reject a d_model that num_heads does not divide; one nn.Linear for q, k and v together.",
    "MultiHeadSelfAttention.forward": "cut the projection into q, k, v (in that order), split each into heads, scale by\n"
    "sqrt(head_dim); a [B, S] padding mask becomes [B, 1, 1, S]; merge the heads before W_o.",
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
        - **Memory of the weights: `H` times more.** Every head has its own `[S, S]` table of weights, so
          the weights tensor is `[B, H, S, S]` instead of `[B, S, S]`. This is the `B * H * S^2` of
          notebook 05.

        The cell below measures both with PyTorch's own `nn.MultiheadAttention`: its FLOP count (PyTorch's
        `FlopCounterMode` counts the matrix products) and the shape of the per-head weights it returns.

        Part `multihead`: `split_heads`, `merge_heads`, `class MultiHeadSelfAttention`.
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
            print(f"H = {H}: head_dim {d_model // H:>2}, {counter.get_total_flops():,} FLOPs, "
                  f"weights {list(weights.shape)} = {weights.numel():,} numbers")
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

        Two shortcuts give the right shape and wrong heads, with no error:

        - **no transpose at all**, `x.view(B, H, S, head_dim)`: a common one. It cuts each
          sequence's memory into `H` consecutive pieces, so head 0 gets the first features of token 0,
          then the rest of token 0, and so on, instead of feature block 0 of every token;
        - **permute first**, to `[B, d_model, S]`, then view as `[B, H, S, head_dim]`: the view regroups
          numbers that belong to *different tokens*.

        The grid below labels every number `t<token>f<feature>` and shows what each head receives all
        three ways.
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
        """),
        solution("MultiHeadSelfAttention", HINTS),
        check("check_multihead(MultiHeadSelfAttention)", "check_multihead"),
        graded_cell("multihead"),
        md(r"""
        ## 3. Same numbers as `nn.MultiheadAttention`, head by head

        Because `W_qkv.weight` has the layout of `in_proj_weight`, parity needs no reshuffling. The
        official module can also return the weights of every head (`average_attn_weights=False`): the
        heatmaps show that the four heads look at the sequence differently.
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
        - **Wrong heads, no error**: `x.view(B, H, S, head_dim)` with no transpose, or permute-then-view. Test `split_heads` on `torch.arange` input as the
          visible check does, and check `merge_heads(split_heads(x, H)) == x`.
        - **`view size is not compatible with input tensor's size and stride`**: `view` after a transpose;
          use `reshape`.
        - **Mask shape**: single-head scores need `[B, 1, S]`, multi-head scores `[B, 1, 1, S]`.
        - **Scale**: `sqrt(head_dim)`, not `sqrt(d_model)`.
        """),
    ]
