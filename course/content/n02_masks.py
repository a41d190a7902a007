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
        Setting weights to 0 *after* the softmax breaks the normalisation. Some code writes a large
        negative number such as `-1e9` instead of `-inf`: in float32 that gives the same weights, but
        `masked_fill` with `-1e9` on a float16 tensor raises an error, because float16 cannot hold it
        (its most negative finite number is -65504). `-inf` exists in every floating type. The cell
        below shows all of this.

        Part `masks` (four functions): `padding_mask`, `causal_mask`, `apply_padding_mask`,
        `apply_causal_mask`.
        """),
        setup(),
        demo("""
        scores = torch.tensor([[1.0, 2.0, 0.5, 3.0]])  # one query, four keys
        keep = torch.tensor([[True, True, True, False]])  # key 3 is padding
        before = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
        after = torch.softmax(scores, dim=-1).masked_fill(~keep, 0.0)
        print("-inf before the softmax:", [round(w, 3) for w in before[0].tolist()], " sum", round(before.sum().item(), 3))
        print("0 after the softmax:    ", [round(w, 3) for w in after[0].tolist()], " sum", round(after.sum().item(), 3))
        print("float32, -1e9 instead of -inf gives the same weights:", torch.equal(torch.softmax(scores.masked_fill(~keep, -1e9), dim=-1), before))
        try:
            scores.half().masked_fill(~keep, -1e9)
        except RuntimeError as error:
            print("float16, masked_fill with -1e9: RuntimeError:", error)
        print("float16, masked_fill with -inf:", scores.half().masked_fill(~keep, float("-inf")).tolist(),
              "| most negative finite float16:", torch.finfo(torch.float16).min)
        """),
        md(r"""
        ## 1. Three boolean conventions, side by side

        A boolean mask can mean "keep" or "hide", and PyTorch uses both:

        | who | argument | shape | `True` means |
        |---|---|---|---|
        | **this course** | `mask` | `[B, S]` | real token: **keep** |
        | `nn.MultiheadAttention` | `key_padding_mask` | `[B, S]` | padding: **ignore** |
        | `nn.MultiheadAttention` | `attn_mask`, boolean | `[S_q, S_k]` or `[B * H, S_q, S_k]` | **blocked** (float: added to the scores) |
        | `F.scaled_dot_product_attention` | `attn_mask`, boolean | broadcastable to `[B, H, S_q, S_k]` | **may attend** |

        So ours and SDPA's agree (after reshaping), while `key_padding_mask` is the negation of ours.
        Mixing them up does not raise an error: the model silently reads the padding and ignores the words.
        Masks are booleans (`torch.bool`): `masked_fill` refuses a mask of 0/1 integers.
        """),
        demo("""
        ours = torch.tensor([[True, True, True, False, False],  # lengths 3 and 5: sequence 0 has 2 pad tokens
                             [True, True, True, True, True]])  # this course: True = real token
        print("this course (True = keep):\\n", ours.int())
        print("nn.MultiheadAttention key_padding_mask (True = ignore):\\n", (~ours).int())
        print("F.scaled_dot_product_attention attn_mask (True = may attend), shape", list(ours[:, None, None, :].shape))
        try:
            torch.zeros(2, 5).masked_fill(ours.int(), 1.0)
        except RuntimeError as error:
            print("an integer mask: RuntimeError:", error)
        """),
        md(r"""
        `nn.MultiheadAttention` has **two** masks with different jobs, and the seed article warns about
        mixing them up:

        - `key_padding_mask`, `[B, S_k]`: which keys of *each sequence* are padding (True = ignore);
        - `attn_mask`: which (query, key) *pairs* are blocked, the same for every sequence as
          `[S_q, S_k]` (a causal mask, for instance, or any fixed pattern) or given per sequence and head
          as `[B * H, S_q, S_k]`. A boolean `attn_mask` means True = **blocked**, the opposite of SDPA's;
          a float `attn_mask` is **added** to the scores, so `-inf` blocks and `0` allows.

        The trap is to pass a `[B, S]` padding mask as `attn_mask`. With `B != S` it raises, with a
        message about a 2-D `attn_mask` that says nothing about padding. With `B == S` it is silently
        taken as an `[S_q, S_k]` mask: row `b` of the padding mask now blocks keys of *query* `b` in every
        sequence.
        """),
        demo("""
        torch.manual_seed(0)
        d = 8
        mha = nn.MultiheadAttention(d, num_heads=1, batch_first=True).eval()
        x = torch.randn(2, 5, d)
        blocked = torch.eye(5, dtype=torch.bool)  # a structural mask: no token reads itself (True = blocked)
        additive = torch.zeros(5, 5).masked_fill(blocked, float("-inf"))  # the same mask as numbers to add
        with torch.no_grad():
            a, _ = mha(x, x, x, attn_mask=blocked)
            b, _ = mha(x, x, x, attn_mask=additive)
            c, _ = mha(x, x, x, attn_mask=blocked.expand(2 * 1, 5, 5))  # [B * H, S_q, S_k], one head
        print("boolean attn_mask (True = blocked) and float attn_mask (added) agree:", torch.allclose(a, b),
              "| the same mask as [B * H, S_q, S_k]:", torch.allclose(a, c))

        keep = ours  # [B=2, S=5] from the cell above, True = real token
        try:
            with torch.no_grad():
                mha(x, x, x, attn_mask=~keep)  # the trap: a padding mask passed as attn_mask
        except RuntimeError as error:
            print("padding mask as attn_mask, B=2, S=5: RuntimeError:", error)

        x4 = torch.randn(4, 4, d)  # B == S == 4
        keep4 = torch.tensor([[True, True, False, False], [True] * 4, [True, True, True, False], [True] * 4])
        with torch.no_grad():
            right, _ = mha(x4, x4, x4, key_padding_mask=~keep4)
            wrong, _ = mha(x4, x4, x4, attn_mask=~keep4)  # accepted as an [S_q, S_k] mask: no error
        print(f"padding mask as attn_mask, B=S=4: no error, outputs differ by up to {(right - wrong).abs().max().item():.2f}")
        """),
        solution("padding_mask", HINTS),
        check("check_padding_mask(padding_mask)", "check_padding_mask"),
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
        entry, and a hand-written softmax gives `0/0 = NaN` for it, which then spreads to everything it
        touches. `F.scaled_dot_product_attention` treats such a row differently: in the run below
        (PyTorch's CPU kernels) it returns zeros for it. No NaN, but still a query that read nothing;
        do not count on either behaviour, and keep at least one key per row.
        """),
        demo("""
        torch.manual_seed(0)
        scores = torch.randn(2, 4, 4)
        keep = torch.tensor([[True, True, True, False], [True, True, True, True]])
        rows_hidden = scores.masked_fill(~keep[:, :, None], float("-inf"))  # [B, S, 1]: hides query 3
        print("hand-written softmax, sequence 0:")
        print(torch.softmax(rows_hidden, dim=-1)[0])

        q, k, v = (torch.randn(2, 4, 8) for _ in range(3))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, :, None])  # query 3 of sequence 0 may attend nothing
        print(f"F.scaled_dot_product_attention (torch {torch.__version__}, {q.device}): output of that query:", out[0, 3].tolist())
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
        solution("causal_mask", HINTS),
        check("check_causal_mask(causal_mask)", "check_causal_mask"),
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

        with uses_your_code():
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
        - **NaN rows.** A NaN in the output usually means a row with every key masked (a hand-written
          softmax; SDPA gave zeros above).
        - **In place.** `masked_fill_` (with the underscore) overwrites its input; `masked_fill` returns a
          new tensor. Overwriting scores that something else still uses leads to confusing bugs.
        - **Integer masks.** A mask of 0/1 integers must be turned into booleans (`mask.bool()` or
          `mask == 0`) before `masked_fill`, which raises otherwise (section 1); this course always uses
          `torch.bool`.
        - **Padding mask as `attn_mask`** in `nn.MultiheadAttention`: it raises when `B != S` and is
          silently wrong when `B == S`; padding goes to `key_padding_mask`.
        """),
    ]
