"""Hidden checks for part llama (assignment real_models): from_hf_llama, the student's own decoder layer loaded from
transformers' LlamaAttention, alone and inside a LlamaForCausalLM that generates.

One layer, loaded from the worker's copy of the library's LlamaAttention (its weights, its config; the rotary base
passed as rope_base for a plain config, the library's frequencies as inv_freq otherwise), must equal the library's attention with its rotary embedding at the same positions: positions
with gaps (a layer that ignores them passes any evenly shifted test), left padding, fewer key/value heads than query
heads. A wrong output is compared with the classic mistakes (W_q and W_k not permuted or permuted the wrong way,
W_v permuted, kv heads tiled, positions ignored, the base not passed) to name one.

Then a 2-layer grouped-query LlamaForCausalLM whose every attention is the student's layer, each with a cache the
grader supplies in the worker (`append` / `__len__`), fed one token at a time, must choose the library's greedy
tokens (`generate`, with the library's own cache) for 16 new tokens from three left-padded prompts. The student's
layers get, step by step, the hidden states the library's layers got while it generated (its own tokens fed back:
teacher forcing), all in one round trip; the library's model is then run with their outputs in place of its
attention's, so the first layer output and the first token that differ are named. The adapter zeroes the layer's
outputs at padded query positions (a query that sees no key may give NaN).
"""
import copy

import pytest
import torch

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import seeded, send, smallest_failure
from autograder.checks.real_models import library, lookalike
from autograder.checks import lent
from autograder.checks.real_models.common import (distinct, left_padded, llama_mistakes, llama_steps,
                                                  pasted_layer_mistakes)
from autograder.foundation import spec
from autograder.foundation.failures import CheckFailure, StudentRaised
from solutions import real_models as ref

_ = i18n.message

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}  # wavelengths on both sides of, and between, the thresholds
# (B, S, d_model, H, H_kv, base, real tokens per sample (left-padded), config extras): grouped-query and multi-query,
# bases that make every pair's angle count, Llama 3.1's frequencies, a head_dim of its own (q_proj [H * 16, 32])
SHAPES = ((3, 6, 32, 4, 2, 500.0, (6, 3, 4), {}), (2, 5, 48, 6, 3, 10000.0, (5, 2), {}),
          (4, 7, 32, 4, 1, 50.0, (7, 1, 4, 6), {}),
          (5, 6, 32, 2, 1, 500000.0, (6, 2, 5, 4, 3), {"rope_scaling": LLAMA3}),
          (2, 4, 32, 4, 2, 10000.0, (4, 3), {"head_dim": 16}))
MODEL = (32, 4, 2, 500.0)  # the generating model: d_model, H, H_kv, base
PROMPTS = (5, 3, 7)  # three prompts of different lengths, left-padded to the longest
NEW_TOKENS = 16
LAYERS = 2
TOL = 1e-4
PART = spec.REAL_MODELS.part("llama")
# the student's own conversions, probed before llama is graded: a wrong one is replaced by the reference's (lent)
PROBES = {name: [((torch.randn(rows, 5, generator=seeded(11 + i)), heads), {})
                 for i, (rows, heads) in enumerate(((16, 2), (24, 4), (48, 3)))]
          for name in spec.CONVERSIONS}


def gapped_positions(key_mask: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """[B, S] increasing positions with gaps of 1 to 4 over each row's real tokens (0 on padding)."""
    steps = torch.randint(1, 5, key_mask.shape, generator=g) * key_mask
    return (steps.cumsum(-1) - steps[:, :1]).clamp(min=0) * key_mask


def _layer(job, attn, label, base: float | None = None):
    """The student's layer loaded from `attn` in the worker: with its rotary base when `base` is given (a config
    without rope scaling), else with the library's frequencies."""
    built = job.builtin("hf_llama_attention", lookalike.describe(attn), library.llama_state(attn))
    given = {"rope_base": base} if base is not None else {"inv_freq": library.inv_freq(attn.config)}
    layer = job.wrap(job.call("from_hf_llama", built, **given), label)
    job.eval(layer)  # as the library's reference is
    return layer


def _part(student) -> dict:
    lent.lending(student, "from_hf_llama", PART, ref, PROBES)
    g = seeded()
    checks = {}
    for index, (B, S, d_model, heads, kv_heads, base, lengths, extra) in enumerate(SHAPES):
        attn = library.llama_attention(d_model, heads, kv_heads, base, g, **extra)
        key_mask = left_padded(lengths, S)
        x, positions = torch.randn(B, S, d_model, generator=g), gapped_positions(key_mask, g)
        job = student.job()
        by_base = base if not extra else None  # a plain config: its base, as notebook 03 passes it
        layer = _layer(job, attn, f"from_hf_llama(attn, rope_base={base:g})" if by_base else
                       "from_hf_llama(attn, inv_freq=inv_freq)", by_base)
        checks[("parity", index)] = (job, {"value": job.forward(layer, x, positions=positions, key_mask=key_mask)},
                                     (attn, x, positions, key_mask, heads, kv_heads))
    d_model, heads, kv_heads, base = MODEL
    model = library.llama_model(d_model, heads, kv_heads, base, g)
    mask = left_padded(PROMPTS, max(PROMPTS))
    ids = torch.randint(1, library.VOCAB, mask.shape, generator=g) * mask
    reference = copy.deepcopy(model)
    inputs, outputs = library.recording(reference)  # what each attention module got and returned, step by step
    tokens = library.generate(reference, ids, mask, NEW_TOKENS)  # [B, 16]: the library's own greedy decoding
    job = student.job()
    steps = {}
    for i, decoder in enumerate(model.model.layers):
        steps[f"layer{i}"] = _layer(job, decoder.self_attn,
                                    f"from_hf_llama(model.model.layers[{i}].self_attn, inv_freq=inv_freq)")
        steps[f"cache{i}"] = job.builtin("recording_cache")
    # every step of decoding in this one job: the layer gets, at each step, the hidden states the library's layer got
    for step, (positions, key_mask) in enumerate(library.schedule(mask, NEW_TOKENS)):
        for i in range(LAYERS):
            steps[(step, i)] = job.forward(steps[f"layer{i}"], inputs[LAYERS * step + i], positions=positions,
                                           cache=steps[f"cache{i}"], key_mask=key_mask)
    checks["model"] = (job, steps, (model, ids, mask, tokens, (inputs, outputs)))
    return send(student, checks)


def part(student) -> dict:
    return student.once("real_models llama", lambda: _part(student))


def _head_dim_hint(attn) -> str:
    config = attn.config
    plain = config.hidden_size // config.num_attention_heads
    if attn.head_dim == plain:
        return ""
    return _("this config sets head_dim = {head_dim}, not hidden_size / num_attention_heads = {plain}: q_proj is "
             "[{rows}, {d_model}], o_proj [{d_model}, {rows}]; take head_dim from the module (attn.head_dim)").format(
        head_dim=attn.head_dim, plain=plain, rows=config.num_attention_heads * attn.head_dim, d_model=config.hidden_size)


def _groups_named(get, heads: int, kv_heads: int):
    """get(); a size mismatch raised where the query heads outnumber the key/value heads is named: how many times
    each key/value head is repeated."""
    try:
        return get()
    except StudentRaised as exc:
        if kv_heads >= heads or "must match the size of tensor" not in str(exc):
            raise
        raise CheckFailure(_("{failure}; this layer has H = {heads} query heads over H_kv = {kv_heads} key/value "
                             "heads: repeat each key/value head num_key_value_groups = H // H_kv = {groups} times "
                             "(repeat_kv), not a fixed number of times").format(
            failure=exc.message, heads=heads, kv_heads=kv_heads, groups=heads // kv_heads)) from None


@pytest.mark.points(14)
def test_from_hf_llama_equals_the_library_attention_at_gapped_positions(student):
    """from_hf_llama(attn, rope_base=base) or (attn, inv_freq=inv_freq), then (x, positions, key_mask), equals the library's LlamaAttention with its rotary embedding: positions with gaps, left padding, H_kv < H, Llama 3.1's frequencies, a head_dim of its own"""
    runs = part(student)

    def check(index):
        attn, x, positions, key_mask, heads, kv_heads = runs[("parity", index)].inputs
        run = runs[("parity", index)]
        value = expect.hinted(lambda: _groups_named(run.value, heads, kv_heads), _head_dim_hint(attn))
        got = expect.shape(value, x.shape, "your layer's forward(x, positions, key_mask)")
        expected = library.llama_reference(attn, x, positions, key_mask)
        real = key_mask  # outputs at padded query positions are not graded
        mistakes = {hint: (lambda f=f: f()[real]) for hint, f in llama_mistakes(
            library.llama_state(attn), x, positions, key_mask, heads, kv_heads, library.inv_freq(attn.config)).items()}
        expect.close(got[real], expected[real], _("the output at real tokens"), atol=TOL,
                     mistakes=distinct(mistakes, expected[real]))

    smallest_failure([(_label(SHAPES[i]), i) for i in sorted(range(len(SHAPES)), key=lambda i: SHAPES[i][1])], check)


def _label(shape) -> str:
    B, S, d, H, kv, base, _lengths, extra = shape
    label = f"B={B}, S={S}, H={H}, H_kv={kv}, rope_theta={base:g}"
    if "head_dim" in extra:
        label += f", head_dim={extra['head_dim']}"
    if "rope_scaling" in extra:
        label += ", rope_type=llama3"
    return label


def _when(step: int) -> str:
    return _("the prompt") if step == 0 else _("new token {step}").format(step=step)


@pytest.mark.points(16)
def test_llama_with_your_layers_generates_the_library_greedy_tokens(student):
    """a 2-layer GQA LlamaForCausalLM whose every attention is your layer, with the grader's caches, generates the library's 16 greedy tokens from three left-padded prompts"""
    run = part(student)["model"]
    model, ids, mask, tokens, (hidden, expected) = run.inputs
    outs, first = {}, []  # first: (step, layer, off by), the first layer output that differs
    for step, (_positions, key_mask) in enumerate(library.schedule(mask, NEW_TOKENS)):
        for i in range(LAYERS):
            want = expected[LAYERS * step + i]
            got = expect.shape(run.value((step, i)), want.shape, _("your layer {layer} at {when}").format(
                layer=i, when=_when(step)))
            real = key_mask[:, -want.shape[1]:]  # [B, S_new]
            got = torch.where(real[..., None], got.to(want.dtype), torch.zeros_like(want))  # padded queries: zero
            off = expect.largest_difference(got[real], want[real])
            if not first and off > TOL:
                first.append((step, i, off))
            outs[(step, i)] = got
    # the library's model with your layers' outputs in place of its attention's, fed the same tokens
    chosen = library.teacher_forced(model, ids, mask, tokens, lambda index, hidden, step, **given: outs[(step, index)])
    differs = (chosen != tokens).any(dim=0).nonzero()
    said = []
    if first:
        step, index, off = first[0]
        said.append(expect.hinted_message(_(
            "the attention of layer {layer} (counting from 0) is the first to differ from the library's, at {when}: "
            "off by up to {off:.3g} on the same input").format(layer=index, when=_when(step), off=off),
            _pasted(model, hidden, mask, step, index, outs)))
    if len(differs):
        token = int(differs[0])
        row = int((chosen[:, token] != tokens[:, token]).nonzero()[0])
        said.append(_("the greedy tokens first differ at new token {token} of {total} (prompt {row}, of length "
                      "{length}): yours {got}, the library's {expected}").format(
                          token=token + 1, total=NEW_TOKENS, row=row, length=PROMPTS[row],
                          got=int(chosen[row, token]), expected=int(tokens[row, token])))
    if len(said) == 2:
        raise expect.CheckFailure(_("{first}; {then}").format(first=said[0], then=said[1]))
    if said:
        raise expect.CheckFailure(said[0])


def _pasted(model, hidden, mask, step: int, index: int, outs: dict) -> str:
    """The pasted layer's mistake that the student's layer `index` matches up to `step`, else ''."""
    attn = model.model.layers[index].self_attn
    d_model, heads, kv_heads, _base = MODEL
    schedule = library.schedule(mask, NEW_TOKENS)[:step + 1]
    inputs = [hidden[LAYERS * s + index] for s in range(step + 1)]
    for hint, keywords in pasted_layer_mistakes().items():
        variant = llama_steps(library.llama_state(attn), inputs, schedule, heads, kv_heads,
                              library.inv_freq(attn.config), **keywords)
        real = [key_mask[:, -x.shape[1]:] for x, (_p, key_mask) in zip(inputs, schedule)]
        if all(expect.same(outs[(s, index)][r], v[r], 1e-4, 1e-3) for s, (v, r) in enumerate(zip(variant, real))):
            return hint
    return ""
