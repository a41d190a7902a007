"""Hidden checks for part module: class SelfAttention.

The student's module is built in the worker, then given the weights of the reference
module (same shapes, load_state_dict), so its forward can be compared exactly.
"""
import pytest
import torch

import solutions as ref
from autograder.checks import expect
from autograder.checks.self_attention.common import (B, D_K, D_MODEL, D_V, LENGTHS, S, lengths_mask, module_mistakes,
                                                     reference_module)
from autograder.failures import StudentRaised

DROPOUT = 0.25
LAYERS = {"W_q": (D_MODEL, D_K), "W_k": (D_MODEL, D_K), "W_v": (D_MODEL, D_V), "W_o": (D_V, D_MODEL)}
ROLE = {"W_q": "d_model -> d_k", "W_k": "d_model -> d_k", "W_v": "d_model -> d_v",
        "W_o": "the output projection, d_v -> d_model"}
SEED_BROADCAST = ("a [B, S] mask needs mask[:, None, :] to line up with [B, S, S] scores; mask[:, None, None, :] "
                  "broadcasts them to [B, B, S, S]")


@pytest.mark.points(4)
def test_submodules(student):
    """SelfAttention has bias-free W_q, W_k, W_v, W_o of the right widths and an nn.Dropout"""
    call = f"SelfAttention({D_MODEL}, d_k={D_K}, d_v={D_V}, dropout={DROPOUT})"
    info = student.new("SelfAttention", D_MODEL, D_K, D_V, dropout=DROPOUT).describe()
    expect.submodules(info, LAYERS, DROPOUT, call, ROLE)


@pytest.mark.points(1)
def test_defaults(student):
    """SelfAttention(d_model) uses d_k = d_v = d_model and dropout 0.1"""
    info = student.new("SelfAttention", D_MODEL).describe()
    layers = {k: (D_MODEL, D_MODEL) for k in LAYERS}
    expect.submodules(info, layers, 0.1, f"SelfAttention({D_MODEL})", ROLE)


def loaded(student, dropout: float = DROPOUT):
    """(student module with the reference weights, in eval mode; the reference module)."""
    reference = reference_module(ref.SelfAttention, D_MODEL, D_K, D_V, dropout=dropout)
    module = student.new("SelfAttention", D_MODEL, D_K, D_V, dropout=dropout)
    state = reference.state_dict()
    theirs = module.state_dict()
    # A missing layer or an extra bias costs the structure check; here the weights that do fit are
    # loaded (extra biases set to zero), so that the forward checks judge the forward alone.
    fitting = {k: v for k, v in state.items() if k in theirs}
    fitting.update({k: torch.zeros_like(v) for k, v in theirs.items()
                    if k not in state and k.endswith(".bias") and isinstance(v, torch.Tensor)})
    try:
        module.load_state_dict(fitting, strict=False)
    except StudentRaised as exc:
        raise expect.CheckFailure(f"the weights of a correct SelfAttention could not be loaded into yours ({exc}): "
                                  "it needs exactly the bias-free layers W_q, W_k, W_v, W_o") from None
    return module.eval(), reference


CASES = {"no mask": (False, False), "padding mask": (True, False), "causal": (False, True),
         "padding mask and causal": (True, True)}


@pytest.mark.points(3)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_reference(student, gen, case):
    """in eval mode, forward(x, mask, causal) equals the reference attention"""
    use_mask, causal = CASES[case]
    module, reference = loaded(student)
    x = torch.randn(B, S, D_MODEL, generator=gen)
    mask = lengths_mask() if use_mask else None
    with torch.no_grad():
        want = reference(x, mask, causal)
    kwargs = {"mask": mask} if use_mask else {}
    if causal:
        kwargs["causal"] = True
    try:
        got = module(x, **kwargs)
    except StudentRaised as exc:
        if use_mask and exc.kind == "RuntimeError":
            raise expect.CheckFailure(f"{exc}; {SEED_BROADCAST}") from None
        raise
    what = f"forward(x{', mask' if use_mask else ''}{', causal=True' if causal else ''})"
    if use_mask:
        what += f" with lengths {list(LENGTHS)}"
    state = reference.state_dict()
    expect.close(got, want, what, mistakes=module_mistakes(state, x, mask, causal, d_model=D_MODEL),
                 shapes={(B, B, S, D_MODEL): f"your output has shape [{B}, {B}, {S}, {D_MODEL}]: {SEED_BROADCAST}"})


@pytest.mark.points(3)
def test_dropout_on_attention_weights(student, gen):
    """in train mode, dropout acts on the attention weights (after the softmax), not on the values or the output"""
    p = 0.5
    module, reference = loaded(student, dropout=p)
    module.train()
    # Every token is the same vector, so every value vector is the same v and every row of the
    # weights is uniform. Dropout on the weights rescales a row's sum: each output row is then a
    # multiple (kept / (S * (1 - p)), never exactly 1 for S = 5) of u = W_o v. Dropout anywhere
    # else either does nothing here or scales single features, which breaks the proportion.
    x = torch.randn(1, 1, D_MODEL, generator=gen).expand(B, S, D_MODEL).contiguous()
    with torch.no_grad():
        u = reference(x[:1, :1])[0, 0].double()  # [d_model]
    got = expect.shape(module(x), (B, S, D_MODEL), "forward(x) in train mode").double()
    expect.finite(got, "forward(x) in train mode")
    rows = got.reshape(-1, D_MODEL)
    factors = rows @ u / (u @ u)  # [B * S]
    if torch.allclose(rows, u.expand_as(rows), atol=1e-5, rtol=1e-4):
        raise expect.CheckFailure(f"in train mode with dropout={p} your output is the same as in eval mode: apply "
                                  "self.dropout to the attention weights, after the softmax (dropout on the scores "
                                  "before the softmax, or no dropout at all, does nothing here)")
    residual = (rows - factors[:, None] * u).abs().max().item()
    if residual > 1e-4 * (1 + u.abs().max().item()):
        raise expect.CheckFailure(f"in train mode with dropout={p} your output is not what dropout on the attention "
                                  "weights gives: dropout seems to act on the values, on weights @ V or on the "
                                  "output; apply self.dropout to the weights right after the softmax")
