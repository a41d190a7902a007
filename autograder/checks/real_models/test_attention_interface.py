"""Hidden checks for part attention_interface (assignment real_models): course_attention, the library's attention-
function signature, and register_course_attention, which plugs it into the library's models by name.

The function alone, in the worker: query [B, H, S_q, D] against key/value [B, H_kv, S_k, D] (grouped heads, S_q !=
S_k), on each mask form the library hands (None, bool, float additive; the mask given, never inferred), a scaling
given or not, bfloat16 inputs (the output and weights keep their dtype), and dropout with the module in training mode (judged by what dropout may do: each weight dropped or
divided by 1 - p, the output those weights times the values). A wrong result is compared with the classic mistakes
(the output left as [B, H, S_q, D], the scaling ignored, grouped heads tiled, the mask ignored or inverted).

Then the library's models, on the trusted side only (seam.py): the first round trip registers the student's
function in the worker and reads which mask function they registered under the name; a tiny grouped-query
LlamaForCausalLM and a GPT2LMHeadModel under a proxy name with that same mask function record every call of the
attention function (left-padded batches, batches without padding with no attention_mask and with an all-ones one,
and the library's own generate() with its own cache from three left-padded prompts); the second round trip has the
student's registered function answer every call; the models are then run again with those answers and must give
eager's logits (1e-5) and eager's 16 greedy tokens. flex's mask function registered under the name (it hands a
BlockMask, not a tensor) is named by each model check, and no model runs.
"""
import pytest
import torch

from autograder.checks import expect
from autograder.checks.cases import seeded, send
from autograder.checks.real_models import library, seam
from autograder.foundation import i18n
from solutions import real_models as ref

_ = i18n.message

# the function alone: (B, H, H_kv, S_q, S_k, D, mask form, scaling)
ALONE = {
    "none": (2, 4, 2, 3, 5, 8, None, None),
    "bool": (3, 6, 2, 4, 7, 4, "bool", 0.3),
    "float": (2, 4, 1, 5, 5, 6, "float", None),
    "bool, bfloat16": (2, 6, 3, 4, 5, 8, "bool", None),  # query, key, value in bfloat16 (the output keeps it)
}
HALF_TOL = 2e-2  # bfloat16's precision
DROPOUT = (3, 4, 2, 6, 7, 8, 0.3)  # B, H, H_kv, S_q, S_k, D, p
MODELS = {"llama": (32, 4, 2), "gpt2": (32, 4, 4)}  # d_model, H, H_kv
PROMPTS = (7, 4, 2)  # left-padded batch of the logits checks: real tokens per row
GEN_PROMPTS = (5, 3, 7)
NEW_TOKENS = 16
TOL = 1e-5


def _inputs(g, B, H, H_kv, S_q, S_k, D, form):
    q, k, v = (torch.randn(B, h, s, D, generator=g) for h, s in ((H, S_q), (H_kv, S_k), (H_kv, S_k)))
    if form is None:
        return q, k, v, None
    allowed = torch.rand(B, 1, S_q, S_k, generator=g) < 0.6
    allowed[..., -1] = True  # every row has at least one key
    return q, k, v, allowed if form == "bool" else library.additive_mask(allowed)


def _config(kind: str):
    d_model, heads, kv_heads = MODELS[kind]
    if kind == "gpt2":
        return library.gpt2_config(d_model, heads, layers=2)
    return library.llama_config(d_model, heads, kv_heads, 500.0, layers=2)


def _register(job):
    name = job.call("register_course_attention")
    return name, job.builtin_value("hf_registration", name, label="register_course_attention()")


def _alone(student) -> dict:
    """Round trip 1: the registration, read, and the function alone."""
    g = seeded()
    checks = {}
    job = student.job()
    checks["registration"] = (job, dict(zip(("name", "value"), _register(job))), None)
    for form, (B, H, H_kv, S_q, S_k, D, mask, scaling) in ALONE.items():
        q, k, v, m = _inputs(g, B, H, H_kv, S_q, S_k, D, mask)
        if "bfloat16" in form:
            q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
        job = student.job()
        module = job.builtin("hf_attention_module", H, H_kv, D)
        kwargs = {} if scaling is None else {"scaling": scaling}
        checks[form] = (job, {"value": job.call("course_attention", module, q, k, v, m, **kwargs)},
                        (q, k, v, m, scaling))
    B, H, H_kv, S_q, S_k, D, p = DROPOUT
    q, k, v, _m = _inputs(g, B, H, H_kv, S_q, S_k, D, None)
    job = student.job()
    module = job.builtin("hf_attention_module", H, H_kv, D, 0, True, p)
    checks["dropout"] = (job, {"value": job.call("course_attention", module, q, k, v, None, dropout=p)}, (q, k, v, p))
    return send(student, checks)


def _models(student, registration: dict) -> dict:
    """Round trip 2 (3 with a mask function of the student's own, answered first): every recorded call answered by
    the student's registered function."""
    g = seeded(7)
    recorded = {kind: seam.record(kind, _config(kind), registration["mask"], g, PROMPTS,
                                  GEN_PROMPTS if kind == "llama" else None, NEW_TOKENS) for kind in MODELS}
    if registration["mask"] == "custom":
        _custom_masks(student, recorded)
    checks = {}
    for kind, rec in recorded.items():
        d_model, heads, kv_heads = MODELS[kind]
        for run, (calls, _expected, _mask) in rec["runs"].items():
            job = student.job()
            name, _reg = _register(job)
            fn = job.builtin("hf_registered_attention", name)
            modules = {}
            steps = {}
            for i, call in enumerate(calls):
                if call.layer not in modules:
                    modules[call.layer] = job.builtin("hf_attention_module", heads, kv_heads, d_model // heads,
                                                      call.layer, False, 0.0, registration["name"])
                kwargs = {} if call.scaling is None else {"scaling": call.scaling}
                steps[i] = job.forward(fn, modules[call.layer], call.query, call.key, call.value, call.mask,
                                       dropout=call.dropout, **kwargs)
            checks[(kind, run)] = (job, steps, rec)
    return send(student, checks)


def _custom_masks(student, recorded: dict) -> None:
    """A mask function of the student's own: each of its calls (collected while the models ran) answered by it in the
    worker, in one round trip; the models are then recorded again with its masks."""
    checks = {}
    for kind, rec in recorded.items():
        for run, calls in rec["mask_calls"].items():
            job = student.job()
            name, _reg = _register(job)
            fn, causal = job.builtin("hf_registered_mask", name), job.builtin("hf_causal_mask_function")
            steps = {}
            for i, kwargs in enumerate(calls):
                given = dict(kwargs)
                if given.get("mask_function") == "causal":
                    given["mask_function"] = causal
                if "config" in given:
                    given["config"] = job.builtin("hf_config", given["config"])
                steps[i] = job.forward(fn, **given)
            checks[(kind, run)] = (job, steps, calls)
    runs = send(student, checks)
    for (kind, run), ran in runs.items():
        recorded[kind].setdefault("mask_answers", {})[run] = [_mask_answer(ran.value(i)) for i in range(len(ran.inputs))]
    for rec in recorded.values():
        seam.rerun(rec)


def _mask_answer(value):
    if value is None or isinstance(value, torch.Tensor):
        return value
    raise expect.CheckFailure(_("your mask function returned {kind}: the grader takes a tensor [B, 1, S_q, S_k] "
                                "(bool or float additive) or None").format(kind=type(value).__name__))


def part(student) -> dict:
    def grade():
        runs = _alone(student)
        try:
            registration = runs["registration"].value()
        except expect.CheckFailure:
            registration = None
        usable = registration and registration["attention"] and registration["mask"] in (None, "eager", "sdpa", "custom")
        state = {"alone": runs, "registration": registration, "models": {}, "failure": None}
        try:
            state["models"] = _models(student, registration) if usable else {}
        except expect.CheckFailure as exc:  # the student's own mask function failed: every model check says so
            state["failure"] = exc
        return state

    return student.once("real_models attention_interface", grade)


# --------------------------------------------------------------------------- the function alone


def _output(value, expected_shape, B, H, S_q, D):
    out = value[0] if isinstance(value, (tuple, list)) else value
    out = expect.tensor(out, "attn_output")
    if tuple(out.shape) == (B, H, S_q, D) and (B, H, S_q, D) != tuple(expected_shape):
        raise expect.CheckFailure(_("your attn_output is [B, H, S_q, D] {got}: the library expects [B, S_q, H, D] (it "
                                    "reshapes it to [B, S_q, H * D] next): transpose(1, 2) before returning").format(
            got=expect.fmt_shape(out)))
    return expect.shape(out, expected_shape, "attn_output")


def alone_mistakes(q, k, v, mask, scaling) -> dict:
    def call(**kw):
        args = {"q": q, "k": k, "v": v, "mask": mask, "scaling": scaling, **kw}
        return ref.course_attention(_Eval(), args["q"], args["k"], args["v"], args["mask"], scaling=args["scaling"])[0]

    n = q.shape[1] // k.shape[1]
    mistakes = {
        _("key/value heads were tiled (kv head h % H_kv for query head h) instead of grouped (h // (H / H_kv)), as "
          "repeat_kv groups them"): lambda: call(k=k.repeat(1, n, 1, 1), v=v.repeat(1, n, 1, 1)),
    }
    if scaling is not None:
        mistakes[_("the scaling argument was ignored: the library passes its own scale (scaling), use it when given")] = \
            lambda: call(scaling=None)
    if mask is not None:
        mistakes[_("attention_mask was ignored")] = lambda: call(mask=None)
    if mask is not None and mask.dtype == torch.bool:
        mistakes[_("the bool mask was read the wrong way round: True means attend")] = lambda: call(mask=~mask)
    return mistakes


class _Eval(torch.nn.Module):
    """The `module` of the reference's own calls: in eval mode (no dropout)."""

    def __init__(self):
        super().__init__()
        self.eval()


@pytest.mark.points(6)
def test_course_attention_equals_eager_attention_on_each_mask_form(student):
    """course_attention gives eager_attention_forward's output and weights with attention_mask None, bool and float additive, grouped heads, S_q != S_k, scaling given or not, bfloat16"""
    runs = part(student)["alone"]
    for form in ALONE:
        q, k, v, mask, scaling = runs[form].inputs
        B, H, S_q, D = q.shape
        expected, weights = ref.course_attention(_Eval(), q, k, v, mask, scaling=scaling)
        value = runs[form].value()
        what = _("mask {form}, H={H}, H_kv={H_kv}, S_q={S_q}, S_k={S_k}").format(
            form=form, H=H, H_kv=k.shape[1], S_q=S_q, S_k=k.shape[2])
        got = _output(value, expected.shape, B, H, S_q, D)
        mistakes = {hint: (lambda f=f: f()) for hint, f in alone_mistakes(q, k, v, mask, scaling).items()}
        tol = HALF_TOL if q.dtype == torch.bfloat16 else TOL
        expect.close(got, expected, _("attn_output ({what})").format(what=what), atol=tol, mistakes=mistakes)
        if isinstance(value, (tuple, list)) and len(value) == 2 and value[1] is not None:
            expect.close(expect.shape(value[1], weights.shape, "attn_weights"), weights,
                         _("attn_weights ({what})").format(what=what), atol=tol)
        else:
            raise expect.CheckFailure(_("course_attention must return (attn_output, attn_weights), the weights "
                                        "[B, H, S_q, S_k]"))


@pytest.mark.points(2)
def test_course_attention_drops_weights_in_training_mode(student):
    """with the module in training mode and dropout=p, each weight is dropped or divided by 1 - p, the output is those weights times the values"""
    run = part(student)["alone"]["dropout"]
    q, k, v, p = run.inputs
    value = run.value()
    full, weights = ref.course_attention(_Eval(), q, k, v, None)
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and value[1] is not None):
        raise expect.CheckFailure(_("course_attention must return (attn_output, attn_weights), the weights "
                                    "[B, H, S_q, S_k]"))
    got_w = expect.shape(value[1], weights.shape, "attn_weights")
    kept = (got_w - weights / (1 - p)).abs() <= 1e-5
    dropped = got_w.abs() <= 1e-12
    if torch.allclose(got_w, weights, atol=1e-6):
        raise expect.CheckFailure(_("no dropout with the module in training mode and dropout={p}: drop the weights "
                                    "with probability dropout (F.dropout(weights, p=dropout, training="
                                    "module.training))").format(p=p))
    share = float(dropped.float().mean())
    if abs(share - p) > 0.1:
        raise expect.CheckFailure(_("with dropout={p} in training mode about {expected} of the weights are dropped "
                                    "(0); {share} of yours are").format(p=p, expected=f"{p:.0%}", share=f"{share:.0%}"))
    if not bool((kept | dropped).all()):
        off = expect.largest_difference(got_w[~dropped], (weights / (1 - p))[~dropped])
        raise expect.CheckFailure(_("with dropout={p} in training mode the weights not dropped must be softmax's "
                                    "divided by 1 - p; yours are off by up to {off:.3g}").format(p=p, off=off))
    n = q.shape[1] // k.shape[1]
    expected = (got_w @ v.repeat_interleave(n, dim=1)).transpose(1, 2)
    got = _output(value, full.shape, *q.shape)
    expect.close(got, expected, _("attn_output: the weights after dropout times the values"), atol=TOL)


# --------------------------------------------------------------------------- through the library's models


def _usable(student) -> dict:
    state = part(student)
    reg = state["registration"]
    if reg is None:
        state["alone"]["registration"].value()  # raises register_course_attention()'s own failure
    if not reg["attention"]:
        raise expect.CheckFailure(_("register_course_attention() returned {name!r}, but no attention function is "
                                    "registered under that name (AttentionInterface.register(name, fn))").format(
            name=reg["name"]))
    if reg["mask"] == "flex":
        raise expect.CheckFailure(_("you registered flex_attention_mask under {name!r}: with it your function receives "
                                    "a BlockMask (flex_attention's block-sparse description of the mask), not a "
                                    "tensor, and plain torch cannot apply it; register the library's eager_mask with "
                                    "AttentionMaskInterface under the same name").format(name=reg["name"]))
    if reg["mask"] not in (None, "eager", "sdpa", "custom"):
        raise expect.CheckFailure(_("the grader runs a registered attention with the library's eager_mask or "
                                    "sdpa_mask as its mask function, one of your own, or none; yours is {mask}: "
                                    "register eager_mask under the same name").format(mask=reg["mask"]))
    if state["failure"] is not None:
        raise state["failure"]
    return state


def _answers(run, calls) -> tuple[list, str | None]:
    """The student's answer to each call (their padded query rows replaced by the reference's: not graded), and what
    the first call off by more than TOL says."""
    answers, said = [], None
    for i, call in enumerate(calls):
        B, S_q, H, D = call.expected.shape
        got = _output(run.value(i), call.expected.shape, B, H, S_q, D).to(call.expected.dtype)
        real = (call.eager_mask == 0).any(-1)[:, 0]  # [B, S_q]: query rows that see a key
        got = torch.where(real[:, :, None, None], got, call.expected)
        off = expect.largest_difference(got, call.expected)
        if said is None and not off <= TOL:
            said = _why(call, got, real, off)
        answers.append(got)
    return answers, said


def _why(call, got: torch.Tensor, real: torch.Tensor, off: float) -> str:
    """What a wrong answer to one of the library's calls says: the mask it received when a right function would be
    wrong with it (None on a causal batch: no mask function, or sdpa_mask; another mask: the student's own mask
    function), else the function's own mistake when one is recognised."""
    expected = call.expected[real]
    given = ref.course_attention(_Eval(), call.query, call.key, call.value, call.mask, scaling=call.scaling)[0]
    if not expect.same(given[real], expected, 1e-4, 1e-3):
        if call.mask is None:
            return _("your function received attention_mask=None on a causal batch: its output at layer {layer} is off "
                     "by up to {off:.3g}; register the mask function that always gives the mask (the library's "
                     "eager_mask) with AttentionMaskInterface under the same name; registered alone, or with sdpa_mask "
                     "(which leaves causality to SDPA's is_causal), the function gets None").format(
                layer=call.layer, off=off)
        return _("the mask your function received (layer {layer}) hides other keys than eager's mask: the mask "
                 "function registered under your name must give the causal and padding mask of each batch").format(
            layer=call.layer)
    for hint, variant in alone_mistakes(call.query, call.key, call.value, call.mask, call.scaling).items():
        produced = variant()[real]
        if not expect.same(produced, expected, 1e-4, 1e-3) and expect.same(got[real], produced, 1e-4, 1e-3):
            return _("your function's output at layer {layer} is off by up to {off:.3g}: {hint}").format(
                layer=call.layer, off=off, hint=hint)
    return _("your function's output at layer {layer} is off by up to {off:.3g} on the library's own call").format(
        layer=call.layer, off=off)


def _replayed_logits(rec, run_name: str, answers: list) -> torch.Tensor:
    proxy = rec["proxy"]
    proxy.register()
    proxy.replaying(answers, rec.get("mask_answers", {}).get(run_name))
    try:
        _calls, _expected, mask = rec["runs"][run_name]
        ids = rec["ids"] * (mask if run_name == "padded" else 1)
        return seam.logits(rec["model"], ids, mask)
    finally:
        proxy.answers = None


def _model_check(student, kind: str) -> None:
    state = _usable(student)
    for run_name in ("padded", "no mask", "all ones"):
        ran = state["models"][(kind, run_name)]
        calls, expected, mask = ran.inputs["runs"][run_name]
        answers, said = _answers(ran, calls)
        got = _replayed_logits(ran.inputs, run_name, answers)
        real = torch.ones(expected.shape[:2], dtype=torch.bool) if mask is None else mask.bool()
        what = {"padded": _("left-padded batch"), "no mask": _("batch without padding, no attention_mask"),
                "all ones": _("batch without padding, an all-ones attention_mask")}[run_name]
        off = expect.largest_difference(got[real], expected[real])
        if not off <= TOL:
            raise expect.CheckFailure(_("{model} with attn_implementation set to your name, {what}: the logits are "
                                        "off by up to {off:.3g} from eager's; {why}").format(
                model=kind, what=what, off=off, why=said or _("every single call was right")))


@pytest.mark.points(4)
def test_registered_llama_gives_eager_logits(student):
    """a tiny grouped-query LlamaForCausalLM with attn_implementation set to your name gives eager's logits: left-padded, no attention_mask, all-ones mask"""
    _model_check(student, "llama")


@pytest.mark.points(4)
def test_registered_gpt2_gives_eager_logits(student):
    """a tiny GPT2LMHeadModel with attn_implementation set to your name gives eager's logits: left-padded, no attention_mask, all-ones mask"""
    _model_check(student, "gpt2")


@pytest.mark.points(4)
def test_the_library_generate_with_your_attention_gives_eager_greedy_tokens(student):
    """the library's own generate() with its own cache and your registered attention gives eager's 16 greedy tokens from three left-padded prompts"""
    state = _usable(student)
    ran = state["models"][("llama", "generate")]
    rec = ran.inputs
    calls, tokens, (ids, prompts) = rec["runs"]["generate"]
    answers, said = _answers(ran, calls)
    proxy = rec["proxy"]
    proxy.register()
    proxy.replaying(answers, rec.get("mask_answers", {}).get("generate"))
    try:
        chosen = library.generate(rec["model"], ids, prompts, NEW_TOKENS)
    finally:
        proxy.answers = None
    differs = (chosen != tokens).any(dim=0).nonzero()
    if len(differs):
        token = int(differs[0])
        row = int((chosen[:, token] != tokens[:, token]).nonzero()[0])
        raise expect.CheckFailure(_("generate() with your attention: the greedy tokens first differ at new token "
                                    "{token} of {total} (prompt {row}): yours {got}, eager's {expected}; {why}").format(
            token=token + 1, total=NEW_TOKENS, row=row, got=int(chosen[row, token]), expected=int(tokens[row, token]),
            why=said or _("every single call was right")))
    if said:
        raise expect.CheckFailure(said)
