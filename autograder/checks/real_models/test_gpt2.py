"""Hidden checks for part gpt2 (assignment real_models): split_c_attn and GPT2StyleAttention, against transformers'
GPT2Attention and GPT2LMHeadModel.

The library's modules are built and run here, on the trusted side (library.py); the student's `from_hf` and
`to_hf` get the worker's copies of GPT2Attention (autograder/worker/hflike.py: the library's weights, its
attribute names). The layer must equal the library's eager attention for several B, S and heads with left
padding (so that padded keys come before real queries); a wrong output is compared with the classic mistakes
(c_attn not transposed, biases dropped, not causal, ...) to name one. Last, a 2-layer GPT2LMHeadModel whose every
attention is the student's layer must give the library's logits: each layer gets, in the part's one round trip, the
hidden states the library's layer got, and the library's model is run with their outputs in place of its attention's
(library.StudentAttention); the first layer whose output differs is named.
"""
import copy

import pytest
import torch

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import seeded, send, smallest_failure
from autograder.checks.real_models import library, lookalike
from autograder.checks.real_models.common import gpt2_mistakes, left_padded, right_padded
from solutions import real_models as ref

_ = i18n.message

SHAPES = ((2, 5, 3, 24), (3, 7, 2, 16), (4, 4, 4, 32))  # (B, S, H, d_model): B, S, H all different
LENGTHS = {2: (5, 3), 3: (7, 2, 5), 4: (4, 1, 3, 2)}  # real tokens per sample, left-padded, by B
NO_MASK = (3, 6, 2, 16)  # forward(x) without key_mask: the layer must be causal all the same (B, S, H, d_model)
SPLIT_D = 12
MODEL = (3, 6, 2, 16)  # the whole model: B, S, heads, d_model
MODEL_LENGTHS = (6, 4, 2)  # right-padded prompts
TOL = 1e-5


def _layer(job, attn, label):
    """The student's layer from the worker's copy of `attn`, in eval mode as the library's reference is."""
    built = job.builtin("hf_gpt2_attention", lookalike.describe(attn), library.gpt2_state(attn))
    layer = job.wrap(job.method(job.fetch("GPT2StyleAttention"), "from_hf", built), label)
    job.eval(layer)
    return layer


def _part(student) -> dict:
    checks = {}
    g = seeded()
    weight, bias = torch.randn(SPLIT_D, 3 * SPLIT_D, generator=g), torch.randn(3 * SPLIT_D, generator=g)
    job = student.job()
    checks["split"] = (job, {"value": job.call("split_c_attn", weight, bias)}, (weight, bias))
    for B, S, heads, d_model in SHAPES:
        attn = library.gpt2_attention(d_model, heads, g)
        x, key_mask = torch.randn(B, S, d_model, generator=g), left_padded(LENGTHS[B], S)
        job = student.job()
        layer = _layer(job, attn, "GPT2StyleAttention.from_hf(attn)")
        checks[("parity", B)] = (job, {"layer": layer, "value": job.forward(layer, x, key_mask=key_mask)},
                                 (attn, x, key_mask, heads))
    B, S, heads, d_model = NO_MASK
    attn = library.gpt2_attention(d_model, heads, g)
    x = torch.randn(B, S, d_model, generator=g)
    job = student.job()
    layer = _layer(job, attn, "GPT2StyleAttention.from_hf(attn)")
    checks[("parity", None)] = (job, {"layer": layer, "value": job.forward(layer, x)},
                                (attn, x, torch.ones(B, S, dtype=torch.bool), heads))
    # to_hf: the checks' weights into a zeroed GPT2Attention
    d_model, heads = 16, 4
    weights = {f"W_{n}.{kind}": torch.randn(*((d_model, d_model) if kind == "weight" else (d_model,)), generator=g)
               for n in "qkvo" for kind in ("weight", "bias")}
    job = student.job()
    layer = job.new("GPT2StyleAttention", d_model, heads)
    blank = library.gpt2_attention(d_model, heads, torch.Generator().manual_seed(0))  # described only: zeros there
    attn = job.builtin("hf_gpt2_attention", lookalike.describe(blank))
    checks["to_hf"] = (job, {"layer": layer, "load": job.load_state_dict(layer, weights),
                             "to_hf": job.method(layer, "to_hf", attn), "value": job.state_dict(attn)}, weights)
    # the whole model: the library runs it here; each of your layers gets the hidden states the library's layer got
    B, S, heads, d_model = MODEL
    model = library.gpt2_model(d_model, heads, g)
    ids, mask = torch.randint(1, library.VOCAB, (B, S), generator=g), right_padded(MODEL_LENGTHS, S)
    reference = copy.deepcopy(model)
    inputs, outputs = library.recording(reference)
    with torch.no_grad():
        logits = reference(input_ids=ids, attention_mask=mask.long()).logits
    job = student.job()
    steps = {}
    for i, block in enumerate(model.transformer.h):
        steps[f"layer{i}"] = _layer(job, block.attn, f"GPT2StyleAttention.from_hf(model.transformer.h[{i}].attn)")
        steps[i] = job.forward(steps[f"layer{i}"], inputs[i], key_mask=mask)
    checks["model"] = (job, steps, (model, ids, mask, logits, outputs))
    return send(student, checks)


def part(student) -> dict:
    return student.once("real_models gpt2", lambda: _part(student))


@pytest.mark.points(3)
def test_split_c_attn_transposes_and_splits_q_k_v(student):
    """split_c_attn(weight [d, 3d], bias [3d]) gives W_q, W_k, W_v in nn.Linear layout [d, d] and their biases"""
    run = part(student)["split"]
    weight, bias = run.inputs
    got = run.value()
    if not isinstance(got, (tuple, list)) or len(got) != 6:
        raise expect.CheckFailure(_("split_c_attn should return six tensors (W_q, W_k, W_v, b_q, b_k, b_v), got "
                                    "{kind}").format(kind=type(got).__name__))
    expected = ref.split_c_attn(weight, bias)
    d = SPLIT_D
    untransposed = [weight[:, i * d:(i + 1) * d] for i in range(3)]
    for name, value, want, wrong in zip(("W_q", "W_k", "W_v"), got[:3], expected[:3], untransposed):
        expect.close(value, want, f"split_c_attn(...)[{name}]", mistakes={
            _("c_attn's weight was not transposed: a Conv1D stores [in, out] (y = x @ weight), nn.Linear [out, in] "
              "(y = x @ weight.T)"): wrong})
    for name, value, want in zip(("b_q", "b_k", "b_v"), got[3:], expected[3:]):
        if value is None:
            raise expect.CheckFailure(_("split_c_attn returned None for {name}: GPT-2's c_attn has a bias, split it "
                                        "like the weight").format(name=name))
        expect.close(value, want, f"split_c_attn(...)[{name}]")


@pytest.mark.points(8)
def test_from_hf_equals_the_library_gpt2_attention(student):
    """GPT2StyleAttention.from_hf(attn)(x, key_mask) equals the library's GPT2Attention (eager) for several B, S, heads, left padding, and without key_mask"""
    runs = part(student)

    def check(B):
        attn, x, key_mask, heads = runs[("parity", B)].inputs
        call = "GPT2StyleAttention.from_hf(attn)(x, key_mask)" if B else "GPT2StyleAttention.from_hf(attn)(x)"
        got = expect.shape(runs[("parity", B)].value(), x.shape, call)
        expected = library.gpt2_reference(attn, x, key_mask)
        real = key_mask  # outputs at padded query positions are not graded
        mistakes = {hint: (lambda f=f: f()[real]) for hint, f in
                    gpt2_mistakes(library.gpt2_state(attn), x, key_mask, heads).items()}
        expect.close(got[real], expected[real], _("the output at real tokens"), atol=TOL, mistakes=mistakes)

    B, S, H, d = NO_MASK
    smallest_failure([(f"B={B}, S={S}, H={H}, d_model={d}", B) for B, S, H, d in sorted(SHAPES, key=lambda s: s[1])]
                     + [(_("B={B}, S={S}, H={H}, d_model={d}, forward(x) without key_mask").format(B=B, S=S, H=H, d=d),
                         None)], check)


@pytest.mark.points(4)
def test_to_hf_writes_conv1d_weights(student):
    """layer.to_hf(attn) writes the layer's weights into GPT2Attention in Conv1D layout (c_attn [d, 3d], c_proj [d, d]) with the biases"""
    run = part(student)["to_hf"]
    w = run.inputs
    run.value("to_hf")
    state = run.value()
    qkv = torch.cat([w["W_q.weight"], w["W_k.weight"], w["W_v.weight"]], dim=0)  # [3 d, d]
    expect.close(state["c_attn.weight"], qkv.T, "attn.c_attn.weight after to_hf", atol=0, rtol=0, mistakes={
        _("each of W_q, W_k, W_v went in without its transpose: a Conv1D wants [in, out]"):
            torch.cat([w["W_q.weight"], w["W_k.weight"], w["W_v.weight"]], dim=1)})
    expect.close(state["c_attn.bias"], torch.cat([w["W_q.bias"], w["W_k.bias"], w["W_v.bias"]]),
                 "attn.c_attn.bias after to_hf", atol=0, rtol=0, mistakes={
                     _("the biases were not written (GPT-2's c_attn has a bias)"): torch.zeros(qkv.shape[0])})
    expect.close(state["c_proj.weight"], w["W_o.weight"].T, "attn.c_proj.weight after to_hf", atol=0, rtol=0,
                 mistakes={_("c_proj.weight was not transposed (Conv1D [in, out])"): w["W_o.weight"]})
    expect.close(state["c_proj.bias"], w["W_o.bias"], "attn.c_proj.bias after to_hf", atol=0, rtol=0)


@pytest.mark.points(10)
def test_gpt2_model_with_your_layers_gives_the_library_logits(student):
    """a 2-layer GPT2LMHeadModel whose every attention is your layer (loaded by from_hf) gives the library's logits"""
    run = part(student)["model"]
    model, ids, mask, expected, recorded = run.inputs
    outs, first = [], []  # first: (layer, off by), the first layer whose output differs
    for index, want in enumerate(recorded):
        got = expect.shape(run.value(index), want.shape, _("your layer {layer} in the model").format(layer=index))
        got = torch.where(mask[..., None], got.to(want.dtype), torch.zeros_like(want))  # padded queries: not graded
        off = expect.largest_difference(got[mask], want[mask])
        if not first and off > 1e-4:
            first.append((index, off))
        outs.append(got)
    with torch.no_grad():  # the library's model with your layers' outputs in place of its attention's
        logits = library.with_student_layers(copy.deepcopy(model), lambda index, hidden: outs[index])(
            input_ids=ids, attention_mask=mask.long()).logits
    if first:
        index, off = first[0]
        raise expect.CheckFailure(_("in the 2-layer GPT2LMHeadModel, the attention of layer {layer} (counting from 0) "
                                    "is the first to differ from the library's: off by up to {off:.3g} on the same "
                                    "input").format(layer=index, off=off))
    expect.close(logits[mask], expected[mask], "the logits of the model with your layers", atol=1e-4)

