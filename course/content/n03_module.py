"""Notebook 03: the SelfAttention module and parity with nn.MultiheadAttention."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "03_module"

HINTS = {
    "SelfAttention.__init__": "d_k and d_v default to d_model; four bias-free nn.Linear layers and one nn.Dropout.",
    "SelfAttention.forward": "project, score, mask (padding mask [B, S] -> [B, 1, S]; causal [S, S]),\n"
    "softmax over the keys, dropout on the weights, weighted sum of V, then W_o.",
    "to_official": "in_proj_weight holds the q, k, v weights stacked along dim 0. Copy under torch.no_grad()\n"
    "and zero both biases.",
    "parity_error": "compare both modules in eval mode without gradients, convert the mask to key_padding_mask's\n"
    "convention, and put the custom module back in the mode it was in.",
}


def cells():
    return [
        md(r"""
        # 03 · A reusable `SelfAttention` module, checked against PyTorch

        The loose functions of notebooks 01 and 02 become one `nn.Module`, the form used inside a
        Transformer block. Then we make sure it computes *the same thing* as PyTorch's own
        `nn.MultiheadAttention`, by copying our weights into it and comparing outputs.

        | part | what you write |
        |---|---|
        | `module` | `class SelfAttention(nn.Module)` |
        | `official_parity` | `to_official(custom)`, `parity_error(custom, x, mask=None)` |

        Each notebook stands alone: write the module from scratch here (you may reuse your code from the
        earlier notebooks by copying it *into* the class; the grader only sees this notebook's solution
        cells).
        """),
        setup(),
        md(r"""
        ## 1. The forward pass, step by step

        `SelfAttention(d_model, d_k=None, d_v=None, dropout=0.1)` owns `W_q`, `W_k`, `W_v`
        (bias-free, `d_model -> d_k / d_k / d_v`), an output projection `W_o` (`d_v -> d_model`) and an
        `nn.Dropout`. `forward(x, mask=None, causal=False)`:

        | step | computation | shape |
        |---|---|---|
        | 1 | `Q, K, V = W_q(x), W_k(x), W_v(x)` | `[B, S, d_k]`, `[B, S, d_k]`, `[B, S, d_v]` |
        | 2 | scores `Q K^T / sqrt(d_k)` | `[B, S, S]` |
        | 3 | padding: `-inf` at padded keys, mask viewed as `[B, 1, S]` | `[B, S, S]` |
        | 3' | causal (if `causal=True`): `-inf` where key > query | `[B, S, S]` |
        | 4 | softmax over keys, then **dropout on the weights** | `[B, S, S]` |
        | 5 | weights `@ V`, then `W_o` | `[B, S, d_v]` → `[B, S, d_model]` |

        *Why dropout on the weights?* Randomly zeroing attention weights during training stops the model
        from relying on a few fixed links between positions. Typical rates are 0.1 to 0.2; much larger
        rates blur every distribution towards uniform. `nn.Dropout` is active only in `train()` mode and
        rescales the survivors by `1 / (1 - p)`, so in training the weights of a row no longer sum to
        exactly 1: this is expected.

        *Why `W_o`?* It maps `d_v` back to `d_model`, so the output can be added to the input (residual
        connection), and with several heads it mixes them (notebook 04).
        """),
        solution("SelfAttention", HINTS),
        check("check_self_attention(SelfAttention)", "check_self_attention"),
        demo("""
        attn = SelfAttention(d_model=16, dropout=0.5)
        x = torch.randn(2, 4, 16)
        attn.train()
        a, b = attn(x), attn(x)
        print("train mode, two calls differ (dropout):", not torch.allclose(a, b))
        attn.eval()
        print("eval mode, two calls agree:            ", torch.allclose(attn(x), attn(x)))
        print("output", list(attn(x).shape))
        """),
        graded_cell("module"),
        md(r"""
        ## 2. Copying our weights into `nn.MultiheadAttention`

        `nn.MultiheadAttention(embed_dim, num_heads, ...)` stores its parameters differently:

        | ours | official | shape |
        |---|---|---|
        | `W_q.weight`, `W_k.weight`, `W_v.weight` | `in_proj_weight` (rows: q, then k, then v) | `[3 * d_model, d_model]` |
        | (no bias) | `in_proj_bias` | `[3 * d_model]`, set to zero |
        | `W_o.weight` | `out_proj.weight` | `[d_model, d_model]` |
        | (no bias) | `out_proj.bias` | `[d_model]`, set to zero |

        It needs `d_k == d_v == d_model` (it has no separate widths for one head) and three traps:

        - `batch_first` defaults to **False**: without `batch_first=True` it reads `[B, S, d]` as
          `[S, B, d]`, mixing up sequences and positions;
        - its `key_padding_mask` uses True = **ignore** (ours is True = keep);
        - it returns a tuple `(output, weights)`; `need_weights=False` skips the weights.

        A popular tutorial copies the stacked weights with `in_proj_weight.view(3, d, d).copy_(cat)`.
        That raises: `torch.cat` of three `[d, d]` matrices along dim 0 is `[3d, d]`, but the view is
        `[3, d, d]`, and `copy_` only broadcasts a source that *fits* the destination:
        """),
        demo("""
        d = 16
        official = nn.MultiheadAttention(d, num_heads=1, batch_first=True)
        W_q, W_k, W_v = (nn.Linear(d, d, bias=False) for _ in range(3))
        stacked = torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0)  # [3d, d]
        with torch.no_grad():
            try:
                official.in_proj_weight.view(3, d, d).copy_(stacked)  # the tutorial's line
            except RuntimeError as error:
                print("RuntimeError:", str(error).splitlines()[0])
            # Two correct ways: copy the [3d, d] stack as it is, or stack to [3, d, d] for the [3, d, d] view.
            official.in_proj_weight.copy_(stacked)
            official.in_proj_weight.view(3, d, d).copy_(torch.stack([W_q.weight, W_k.weight, W_v.weight]))
        print("q rows hold W_q:", torch.equal(official.in_proj_weight[:d], W_q.weight))
        print("v rows hold W_v:", torch.equal(official.in_proj_weight[2 * d:], W_v.weight))
        """),
        solution("to_official", HINTS),
        check("check_to_official(to_official)", "check_to_official"),
        md(r"""
        ## 3. A parity check must be able to fail

        `parity_error(custom, x, mask)` runs both modules on the same input, in eval mode (no dropout) and
        without gradients, with the mask converted to `key_padding_mask`, and returns the largest absolute
        difference. For a correct module it is around `1e-7` in float32 (rounding only; PyTorch's fused
        path adds tiny differences of its own).

        A check is only worth something if it *can* say no. A tempting but useless check compares the
        module with itself, or builds the "official" module from the same code it is meant to test: it
        returns 0 whatever the bug. Below, the same parity check is run on deliberately broken modules:
        each must give a large error. Run this kind of experiment whenever you write a test.
        """),
        solution("parity_error", HINTS),
        check("check_parity_error(parity_error, SelfAttention)", "check_parity_error"),
        demo("""
        torch.manual_seed(0)
        x = torch.randn(3, 5, 16)
        mask = torch.arange(5)[None, :] < torch.tensor([5, 2, 4])[:, None]  # True = real token


        class ForgetsTheMask(SelfAttention):
            def forward(self, x, mask=None, causal=False):
                return super().forward(x, None, causal)  # bug: drops the padding mask


        class AlwaysCausal(SelfAttention):
            def forward(self, x, mask=None, causal=False):
                return super().forward(x, mask, True)  # bug: an encoder that cannot see the future


        good = SelfAttention(16, dropout=0.0)
        print(f"correct module, padding mask:   {parity_error(good, x, mask):.2e}")
        for Broken in (ForgetsTheMask, AlwaysCausal):
            broken = Broken(16, dropout=0.0)
            broken.load_state_dict(good.state_dict())
            print(f"{Broken.__name__ + ',':<15} padding mask:   {parity_error(broken, x, mask):.2e}")

        # The batch_first trap: the same official module reading [B, S, d] as [S, B, d].
        official = to_official(good).eval()
        official.batch_first = False
        with torch.no_grad():
            theirs, _ = official(x, x, x, need_weights=False)
            print(f"batch_first=False by mistake:   {(good.eval()(x) - theirs).abs().max().item():.2e}")
        """),
        graded_cell("official_parity"),
        md(r"""
        ## 4. Pitfalls and how to debug them

        When your module and the official one disagree, check in this order:

        1. `batch_first=True`? (Otherwise sequences and positions are swapped.)
        2. Mask convention: `key_padding_mask = ~mask`.
        3. Biases zeroed (`in_proj_bias`, `out_proj.bias`)?
        4. Both in `eval()` mode? Dropout makes every call different.
        5. Scale `1/sqrt(d_k)` and softmax over `dim=-1` in your module.

        A difference around `1e-7` (float32) or `1e-15` (float64) is rounding. Anything above `1e-4` is a
        bug.
        """),
    ]
