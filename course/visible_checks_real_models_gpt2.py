"""The named mistakes of notebook 01_gpt2's check (`real_models`): GPT-2's attention computed from your layer's own
weights, right or with one mistake made on purpose, so that a wrong output is answered with its cause in one step
(a Conv1D weight not transposed, q, k and v in another order, a scale other than 1 / sqrt(head_dim), key_mask
ignored). visible_checks.py (course/visible_checks_real_models.py) builds them on its harness with
`gpt2_diagnoses`, so that they speak the notebook's language. Pure torch, in float64.
"""
from __future__ import annotations

import torch


def gpt2_own(layer, x, key_mask, heads: int, *, divisor: str = "head_dim", masked: bool = True) -> torch.Tensor:
    """GPT-2's attention computed from your layer's own W_q, W_k, W_v, W_o in float64, or with one mistake made on
    purpose (the scores divided by something else than sqrt(head_dim), key_mask left out)."""
    B, S, d = x.shape
    hd = d // heads

    def linear(name: str, t: torch.Tensor) -> torch.Tensor:
        lin = getattr(layer, name)
        return t @ lin.weight.detach().double().T + (0.0 if lin.bias is None else lin.bias.detach().double())

    q, k, v = (linear(name, x.double()).view(B, S, heads, hd).transpose(1, 2) for name in ("W_q", "W_k", "W_v"))
    allowed = torch.ones(S, S, dtype=torch.bool).tril() & (key_mask[:, None, None, :] if masked else True)
    scores = q @ k.transpose(-2, -1) / {"head_dim": hd, "none": 1, "heads": heads, "d_model": d}[divisor] ** 0.5
    out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v
    return linear("W_o", out.transpose(1, 2).reshape(B, S, d))


def gpt2_diagnoses(harness, close):
    """The function that names the mistake behind a wrong output of your GPT2StyleAttention (on `harness`)."""
    _ = harness.gettext

    def gpt2_cause(layer, attn, x, key_mask, got) -> str:
        """The mistake behind a wrong output, named where it can be ('' when none of those), from the weights from_hf
        wrote and from what the forward computes with them."""
        d, heads = x.shape[-1], attn.num_heads
        columns = [attn.c_attn.weight[:, i * d:(i + 1) * d] for i in range(3)]  # q, k, v: [in, out] each
        for i, name in enumerate(("W_q", "W_k", "W_v")):
            weight = getattr(layer, name).weight
            if torch.equal(weight, columns[i]):
                return _("{name}.weight is its slice of c_attn.weight as Conv1D stores it ([in, out]); nn.Linear keeps "
                         "[out, in]: transpose it").format(name=name)
            other = next((j for j in range(3) if j != i and torch.equal(weight, columns[j].T)), None)
            if other is not None:
                return _("{name}.weight holds columns {lo}:{hi} of c_attn.weight: its columns are q, then k, then v").format(
                    name=name, lo=other * d, hi=(other + 1) * d)
        if torch.equal(layer.W_o.weight, attn.c_proj.weight):
            return _("W_o.weight is c_proj.weight as Conv1D stores it ([in, out]); nn.Linear keeps [out, in]: transpose it")
        real = key_mask
        named = ((dict(divisor="none"), _("the scores are not scaled: divide q @ k^T by sqrt(head_dim)")),
                 (dict(divisor="heads"), _("the scores are divided by sqrt(num_heads): divide by sqrt(head_dim), the width "
                                           "of one head")),
                 (dict(divisor="d_model"), _("the scores are divided by sqrt(d_model): divide by sqrt(head_dim), the width "
                                             "of one head")),
                 (dict(masked=False), _("key_mask is ignored: hide the padded keys, allowed = causal & "
                                        "key_mask[:, None, None, :]")))
        for variant, why in named:
            if close(got[real], gpt2_own(layer, x, key_mask, heads, **variant)[real], 1e-5):
                return why
        return ""

    return gpt2_cause
