"""Hidden checks for part llama (assignment real_models): from_hf_llama, the student's own decoder layer loaded from
transformers' LlamaAttention, alone and inside a LlamaForCausalLM that generates.

One layer, loaded from the worker's copy of the library's LlamaAttention (its weights, its config; the rotary base
passed explicitly), must equal the library's attention with its rotary embedding at the same positions: positions
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
from autograder.checks.real_models import library
from autograder.checks.real_models.common import left_padded, llama_mistakes

_ = i18n.message

# (B, S, d_model, H, H_kv, base): grouped-query and multi-query, bases that make every pair's angle count
SHAPES = ((3, 6, 32, 4, 2, 500.0), (2, 5, 48, 6, 3, 10000.0), (4, 7, 32, 4, 1, 50.0))
LENGTHS = {3: (6, 3, 4), 2: (5, 2), 4: (7, 1, 4, 6)}  # real tokens per sample, left-padded, by B
MODEL = (32, 4, 2, 500.0)  # the generating model: d_model, H, H_kv, base
PROMPTS = (5, 3, 7)  # three prompts of different lengths, left-padded to the longest
NEW_TOKENS = 16
LAYERS = 2
TOL = 1e-4


def gapped_positions(key_mask: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """[B, S] increasing positions with gaps of 1 to 4 over each row's real tokens (0 on padding)."""
    steps = torch.randint(1, 5, key_mask.shape, generator=g) * key_mask
    return (steps.cumsum(-1) - steps[:, :1]).clamp(min=0) * key_mask


def _layer(job, attn, d_model, heads, kv_heads, base, label):
    built = job.builtin("hf_llama_attention", d_model, heads, kv_heads, base, library.llama_state(attn))
    return job.wrap(job.call("from_hf_llama", built, base), label)


def _part(student) -> dict:
    g = seeded()
    checks = {}
    for B, S, d_model, heads, kv_heads, base in SHAPES:
        attn = library.llama_attention(d_model, heads, kv_heads, base, g)
        key_mask = left_padded(LENGTHS[B], S)
        x, positions = torch.randn(B, S, d_model, generator=g), gapped_positions(key_mask, g)
        job = student.job()
        layer = _layer(job, attn, d_model, heads, kv_heads, base, "from_hf_llama(attn, rope_base)")
        checks[("parity", B)] = (job, {"value": job.forward(layer, x, positions=positions, key_mask=key_mask)},
                                 (attn, x, positions, key_mask, heads, kv_heads, base))
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
        steps[f"layer{i}"] = _layer(job, decoder.self_attn, d_model, heads, kv_heads, base,
                                    f"from_hf_llama(model.model.layers[{i}].self_attn, rope_base)")
        steps[f"cache{i}"] = job.builtin("recording_cache")
    # every step of decoding in this one job: the layer gets, at each step, the hidden states the library's layer got
    for step, (positions, key_mask) in enumerate(library.schedule(mask, NEW_TOKENS)):
        for i in range(LAYERS):
            steps[(step, i)] = job.forward(steps[f"layer{i}"], inputs[LAYERS * step + i], positions=positions,
                                           cache=steps[f"cache{i}"], key_mask=key_mask)
    checks["model"] = (job, steps, (model, ids, mask, tokens, outputs))
    return send(student, checks)


def part(student) -> dict:
    return student.once("real_models llama", lambda: _part(student))


@pytest.mark.points(14)
def test_from_hf_llama_equals_the_library_attention_at_gapped_positions(student):
    """from_hf_llama(attn, rope_base)(x, positions, key_mask) equals the library's LlamaAttention with its rotary embedding: positions with gaps, left padding, H_kv < H"""
    runs = part(student)

    def check(B):
        attn, x, positions, key_mask, heads, kv_heads, base = runs[("parity", B)].inputs
        got = expect.shape(runs[("parity", B)].value(), x.shape, "your layer's forward(x, positions, key_mask)")
        expected = library.llama_reference(attn, x, positions, key_mask)
        real = key_mask  # outputs at padded query positions are not graded
        mistakes = {hint: (lambda f=f: f()[real]) for hint, f in llama_mistakes(
            library.llama_state(attn), x, positions, key_mask, heads, kv_heads, base).items()}
        expect.close(got[real], expected[real], _("the output at real tokens"), atol=TOL, mistakes=mistakes)

    smallest_failure([(f"B={B}, S={S}, H={H}, H_kv={kv}, rope_base={base:g}", B)
                      for B, S, d, H, kv, base in sorted(SHAPES, key=lambda s: s[1])], check)


def _when(step: int) -> str:
    return _("the prompt") if step == 0 else _("new token {step}").format(step=step)


@pytest.mark.points(16)
def test_llama_with_your_layers_generates_the_library_greedy_tokens(student):
    """a 2-layer GQA LlamaForCausalLM whose every attention is your layer, with the grader's caches, generates the library's 16 greedy tokens from three left-padded prompts"""
    run = part(student)["model"]
    model, ids, mask, tokens, expected = run.inputs
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
        said.append(_("the attention of layer {layer} (counting from 0) is the first to differ from the library's, "
                      "at {when}: off by up to {off:.3g} on the same input").format(
                          layer=index, when=_when(step), off=off))
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
