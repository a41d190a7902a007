"""Notebook 02: padding and causal masks."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "02_masks"

HINTS = {
    "padding_mask": "compare a row of positions 0..seq_len-1 with a column of lengths; broadcasting does the rest.",
    "causal_mask": "torch.tril / torch.triu keep the lower / upper triangle of a matrix.",
    "apply_padding_mask": "give the mask singleton axes so that its key axis lines up with the last axis of scores\n"
    "(3-D and 4-D scores); masked_fill writes a value where its boolean argument is True.",
    "apply_causal_mask": "the forbidden places (key j > query i) form the strict upper triangle of the last two axes.",
}


def cells():
    return [
        md(r"""
        # 02 · Masks: padding and causality

        Two situations require hiding some keys from some queries:

        1. **Padding.** Sequences in a batch have different lengths; the short ones are filled up at the
           end (right padding) with dummy tokens. Those pad tokens carry no meaning and no query may read
           them.
        2. **Causality.** A decoder that predicts token `t` must not peek at tokens after `t`. Query `i`
           may read keys `j <= i` only (the *look-ahead* or *causal* mask).

        Both work the same way: set the forbidden scores to `-inf` **before** the softmax. Since
        $e^{-\infty} = 0$, those keys get weight exactly 0 and the remaining weights still sum to 1.
        (Setting weights to 0 *after* the softmax would break the normalisation; a large negative number
        like `-1e9` instead of `-inf` works in float32 but overflows in float16.)

        Part `masks` (four functions): `padding_mask`, `causal_mask`, `apply_padding_mask`,
        `apply_causal_mask`.
        """),
        setup(),
        md(r"""
        ## 1. Three boolean conventions, side by side

        A boolean mask can mean "keep" or "hide", and PyTorch uses both:

        | who | argument | shape | `True` means |
        |---|---|---|---|
        | **this course** | `mask` | `[B, S]` | real token: **keep** |
        | `nn.MultiheadAttention` | `key_padding_mask` | `[B, S]` | padding: **ignore** |
        | `F.scaled_dot_product_attention` | boolean `attn_mask` | broadcastable to `[B, H, S_q, S_k]` | **may attend** |

        So ours and SDPA's agree (after reshaping), while `key_padding_mask` is the negation of ours.
        Mixing them up does not raise an error: the model silently reads the padding and ignores the words.
        """),
        demo("""
        lengths = torch.tensor([3, 5])  # sequence 0 has 2 pad tokens at the end
        ours = torch.arange(5)[None, :] < lengths[:, None]  # True = real token
        print("this course (True = keep):\\n", ours.int())
        print("nn.MultiheadAttention key_padding_mask (True = ignore):\\n", (~ours).int())
        print("F.scaled_dot_product_attention attn_mask (True = may attend), shape", list(ours[:, None, None, :].shape))
        """),
        solution("padding_mask", HINTS),
        check("check_padding_mask(padding_mask)", "check_padding_mask"),
        solution("causal_mask", HINTS),
        check("check_causal_mask(causal_mask)", "check_causal_mask"),
        md(r"""
        ## 2. Broadcasting a `[B, S]` mask onto the scores

        The padding mask marks **keys**, the last axis of the scores. To compare it element by element
        with the scores, PyTorch broadcasts: shapes are aligned *from the right*, and size-1 axes are
        stretched. So the mask needs singleton axes *between* the batch axis and the key axis:

        | scores | mask view | broadcast result |
        |---|---|---|
        | `[B, S_q, S_k]` (one head) | `mask[:, None, :]` → `[B, 1, S_k]` | `[B, S_q, S_k]` |
        | `[B, H, S_q, S_k]` (multi-head) | `mask[:, None, None, :]` → `[B, 1, 1, S_k]` | `[B, H, S_q, S_k]` |

        The number of `None`s depends on the number of axes of the scores. A classic bug (found in many
        tutorials) uses the multi-head view `[B, 1, 1, S]` on single-head scores `[B, S, S]`. Aligned from
        the right, `[B, 1, 1, S]` against `[B, S, S]` becomes `[B, B, S, S]`: every sequence's scores are
        masked with *every* sequence's mask. `masked_fill` raises no error; it just returns a bigger
        tensor, and the bug surfaces much later, or not at all when `B = 1`.
        """),
        demo("""
        B, S = 2, 4
        scores = torch.randn(B, S, S)  # single-head scores [B, S, S]
        keep = torch.tensor([[True, True, True, False], [True, True, True, True]])  # [B, S]

        buggy = scores.masked_fill(~keep[:, None, None, :], float("-inf"))  # [B, 1, 1, S] on [B, S, S]
        print("scores", list(scores.shape), "-> with the [B, 1, 1, S] mask:", list(buggy.shape), " (silently 4-D!)")

        fixed = scores.masked_fill(~keep[:, None, :], float("-inf"))  # [B, 1, S] on [B, S, S]
        print("scores", list(scores.shape), "-> with the [B, 1, S] mask:   ", list(fixed.shape))
        print("sequence 0, key 3 is -inf in every row:", torch.isneginf(fixed[0, :, 3]).all().item())
        """),
        md(r"""
        The other classic mistake puts the new axis on the wrong side: `mask[:, :, None]` is `[B, S, 1]`
        and hides **queries** (whole rows) instead of keys. A row that is entirely `-inf` has no valid
        entry, and its softmax is `0/0 = NaN`, which then spreads to everything it touches:
        """),
        demo("""
        scores = torch.randn(2, 4, 4)
        keep = torch.tensor([[True, True, True, False], [True, True, True, True]])
        rows_hidden = scores.masked_fill(~keep[:, :, None], float("-inf"))  # [B, S, 1]: hides query 3
        print(torch.softmax(rows_hidden, dim=-1)[0])
        """),
        solution("apply_padding_mask", HINTS),
        check("check_apply_padding_mask(apply_padding_mask)", "check_apply_padding_mask"),
        md(r"""
        ## 3. The causal mask

        For `S = 4` the allowed pairs (key `j <= query i`) form the lower triangle:

        ```
                 key 0  key 1  key 2  key 3
        query 0    ✓      ·      ·      ·
        query 1    ✓      ✓      ·      ·
        query 2    ✓      ✓      ✓      ·
        query 3    ✓      ✓      ✓      ✓
        ```

        An `[S, S]` mask broadcasts against `[B, S, S]` and `[B, H, S, S]` with no reshaping, because it
        lines up with the last two axes. Every row keeps at least the diagonal, so causal masking never
        produces an all-`-inf` row; neither does padding here, since every length is at least 1.
        """),
        solution("apply_causal_mask", HINTS),
        check("check_apply_causal_mask(apply_causal_mask)", "check_apply_causal_mask"),
        graded_cell("masks"),
        md(r"""
        ## 4. What the masks do to the weights

        Three heatmaps of the same scores (one sequence of length 6 padded to 8): plain, with padding, and
        with padding plus causality. Padded keys (the two right-most columns) get weight 0; with the causal
        mask, everything above the diagonal is 0 too.
        """),
        demo("""
        import matplotlib.pyplot as plt

        torch.manual_seed(3)
        S = 8
        scores = torch.randn(1, S, S) * 1.5
        keep = padding_mask(torch.tensor([6]), S)
        panels = {
            "plain": scores,
            "padding (length 6)": apply_padding_mask(scores, keep),
            "padding + causal": apply_causal_mask(apply_padding_mask(scores, keep)),
        }
        fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
        for ax, (title, s) in zip(axes, panels.items()):
            ax.imshow(torch.softmax(s, dim=-1)[0], cmap="viridis", vmin=0, vmax=1)
            ax.set(title=title, xlabel="key j", ylabel="query i")
        plt.tight_layout()
        plt.show()
        """),
        md(r"""
        ## 5. Pitfalls and how to debug them

        - **Convention mix-up.** If the weights look uniform over the *padding* and zero over real tokens,
          the mask is inverted. Print one row of weights for a short sequence.
        - **Silent broadcasting.** After masking, assert `masked.shape == scores.shape`.
        - **NaN rows.** A NaN in the output usually means a row with every key masked.
        - **In place.** `masked_fill_` (with the underscore) overwrites its input; `masked_fill` returns a
          new tensor. Overwriting scores that something else still uses leads to confusing bugs.
        - **Integer masks.** A mask of 0/1 integers must be turned into booleans (`mask.bool()` or
          `mask == 0`) before `masked_fill`; this course always uses `torch.bool`.
        """),
    ]
