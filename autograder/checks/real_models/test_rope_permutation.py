"""Hidden checks for part rope_permutation (assignment real_models): the reordering of W_q and W_k's rows between
Meta's neighbouring RoPE pairs and the library's half-split pairs.

Each function must move rows within each head only (exactly: a permutation loses nothing), the two must undo each
other, and after `interleaved_to_half_split` the scores q·k with the library's half-split RoPE must equal those with
neighbour-pair RoPE (float64, 1e-5 relative to the largest score) for several heads, head dims, bases and positions
up to about 2000, with fewer key/value heads than query heads. A wrong result is compared with the permutation
applied the wrong way, with one permutation over the whole matrix (heads ignored) and with no permutation.
"""
import pytest
import torch

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import seeded, send, smallest_failure
from autograder.checks.real_models import library, lookalike
from autograder.checks.real_models.common import grouped_scores, half_split_rope, inv_freq_mistakes
from solutions import real_models as ref

_ = i18n.message

# (H, H_kv, head_dim, d_in, base, positions): heads, kv heads, head dims, bases and positions that differ
CASES = (
    (2, 1, 4, 6, 10000.0, (0, 1, 2, 3, 4)),
    (4, 2, 8, 12, 500.0, (3, 9, 10, 40, 41, 100)),
    (6, 2, 6, 10, 10000.0, (0, 7, 300, 1024, 1999, 2047)),
    (3, 3, 16, 8, 1e6, (5, 6, 50, 51, 700)),
)


# rope_inv_freq's configs: (hidden_size, heads, head_dim or None, rope_theta, llama3 scaling or None); each llama3 case
# has wavelengths shorter than, between and longer than the two thresholds
FREQ_CASES = (
    (32, 4, None, 10000.0, None),
    (48, 4, 16, 500.0, None),
    (32, 2, None, 500000.0, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}),
    (64, 4, 32, 10000.0, {"factor": 4.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                          "original_max_position_embeddings": 128}),
)


def freq_config(hidden: int, heads: int, head_dim, base: float, llama3):
    extra = {} if head_dim is None else {"head_dim": head_dim}
    if llama3 is not None:
        extra["rope_scaling"] = {"rope_type": "llama3", **llama3}
    return library.llama_config(hidden, heads, heads, base, **extra)


def _names(h2i: bool) -> tuple[str, str]:
    return ("half_split_to_interleaved", "interleaved_to_half_split") if h2i else \
        ("interleaved_to_half_split", "half_split_to_interleaved")


def _part(student) -> dict:
    g = seeded()
    checks = {}
    for index, (H, H_kv, hd, d_in, base, positions) in enumerate(CASES):
        W_q = torch.randn(H * hd, d_in, generator=g, dtype=torch.float64)
        W_k = torch.randn(H_kv * hd, d_in, generator=g, dtype=torch.float64)
        x = torch.randn(len(positions), d_in, generator=g, dtype=torch.float64)
        job = student.job()
        steps = {"q": job.call("interleaved_to_half_split", W_q, H),
                 "k": job.call("interleaved_to_half_split", W_k, H_kv)}
        checks[("scores", index)] = (job, steps, (W_q, W_k, x, H, H_kv, base, torch.tensor(positions)))
        for h2i in (False, True):
            first, second = _names(h2i)
            job = student.job()
            there = job.call(first, W_q, H)
            checks[(first, index)] = (job, {"value": there, "back": job.call(second, there, H)}, (W_q, H))
    for index, case in enumerate(FREQ_CASES):
        config = freq_config(*case)
        job = student.job()
        given = job.builtin("hf_config", lookalike.describe_config(config))
        checks[("inv_freq", index)] = (job, {"value": job.call("rope_inv_freq", given)}, (case, config))
    return send(student, checks)


def part(student) -> dict:
    return student.once("real_models rope_permutation", lambda: _part(student))


def permutation_mistakes(w: torch.Tensor, heads: int, h2i: bool) -> dict:
    wrong, right = (ref.interleaved_to_half_split, ref.half_split_to_interleaved) if h2i else \
        (ref.half_split_to_interleaved, ref.interleaved_to_half_split)
    return {
        _("the permutation goes the wrong way: this is the other function's reordering"): wrong(w, heads),
        _("the rows were reordered over the whole matrix, as one head: each head's rows are reordered on their "
          "own (view(num_heads, ...))"): right(w, 1),
        _("the rows were not reordered"): w,
    }


def _check_function(student, h2i: bool) -> None:
    runs = part(student)
    name = _names(h2i)[0]

    def check(index):
        run = runs[(name, index)]
        w, heads = run.inputs
        expected = (ref.half_split_to_interleaved if h2i else ref.interleaved_to_half_split)(w, heads)
        expect.close(run.value(), expected, f"{name}(weight [{w.shape[0]}, {w.shape[1]}], num_heads={heads})",
                     atol=0, rtol=0, mistakes=permutation_mistakes(w, heads, h2i))

    smallest_failure([(f"num_heads={c[0]}, head_dim={c[2]}", i) for i, c in enumerate(CASES)], check)


@pytest.mark.points(4)
def test_interleaved_to_half_split_reorders_rows_within_each_head(student):
    """interleaved_to_half_split moves row 2i + j of each head to row j * head_dim / 2 + i of that head"""
    _check_function(student, h2i=False)


@pytest.mark.points(4)
def test_half_split_to_interleaved_reorders_rows_back(student):
    """half_split_to_interleaved moves row j * head_dim / 2 + i of each head back to row 2i + j"""
    _check_function(student, h2i=True)


@pytest.mark.points(4)
def test_the_round_trip_is_the_identity(student):
    """half_split_to_interleaved(interleaved_to_half_split(w)) == w and the other way round, for several heads and head dims"""
    runs = part(student)
    for h2i in (False, True):
        first, second = _names(h2i)

        def check(index, first=first, second=second):
            run = runs[(first, index)]
            w, heads = run.inputs
            expect.close(run.value("back"), w, f"{second}({first}(w, {heads}), {heads})", atol=0, rtol=0)

        smallest_failure([(f"num_heads={c[0]}, head_dim={c[2]}", i) for i, c in enumerate(CASES)], check)


@pytest.mark.points(8)
def test_scores_with_half_split_rope_are_unchanged_after_conversion(student):
    """after interleaved_to_half_split, q·k with the library's half-split RoPE equals q·k with neighbour-pair RoPE (float64, positions up to 2047, fewer kv heads)"""
    runs = part(student)

    def scores_of(W_q, W_k, x, H, H_kv, rope, positions):
        hd = W_q.shape[0] // H
        q = rope((x @ W_q.T).view(-1, H, hd).transpose(0, 1), positions)  # [H, S, hd]
        k = rope((x @ W_k.T).view(-1, H_kv, hd).transpose(0, 1), positions)  # [H_kv, S, hd]
        return grouped_scores(q, k, H, H_kv)

    def check(index):
        run = runs[("scores", index)]
        W_q, W_k, x, H, H_kv, base, positions = run.inputs
        q_hf, k_hf = (expect.shape(run.value(n), w.shape, f"interleaved_to_half_split(W_{n})")
                      for n, w in (("q", W_q), ("k", W_k)))
        expected = scores_of(W_q, W_k, x, H, H_kv, lambda t, p: ref.apply_rope(t, p, base), positions)

        def half_split(wq, wk):
            return scores_of(wq, wk, x, H, H_kv, lambda t, p: half_split_rope(t, p, base), positions)

        got = half_split(q_hf.to(torch.float64), k_hf.to(torch.float64))
        scale = float(expected.abs().max())
        mistakes = {hint: half_split(wq, wk) for hint, wq, wk in zip(
            permutation_mistakes(W_q, H, False), permutation_mistakes(W_q, H, False).values(),
            permutation_mistakes(W_k, H_kv, False).values())}
        expect.close(got, expected, _("the scores q·k after RoPE"), atol=1e-5 * scale, rtol=0, mistakes=mistakes)

    smallest_failure([(f"H={c[0]}, H_kv={c[1]}, head_dim={c[2]}, base={c[4]:g}", i) for i, c in enumerate(CASES)],
                     check)


@pytest.mark.points(5)
def test_rope_inv_freq_equals_the_library_rotary_frequencies(student):
    """rope_inv_freq(config) equals LlamaRotaryEmbedding(config).inv_freq (relative 1e-5): rope_type default and llama3, several bases, factors, thresholds and head dims"""
    runs = part(student)

    def check(index):
        (hidden, heads, head_dim, base, llama3), config = runs[("inv_freq", index)].inputs
        expected = library.inv_freq(config)
        params = {"rope_theta": base, **({} if llama3 is None else {"rope_type": "llama3", **llama3})}
        mistakes = inv_freq_mistakes(params, expected.numel() * 2, hidden // heads)
        expect.close(runs[("inv_freq", index)].value(), expected, "rope_inv_freq(config)", atol=0, rtol=1e-5, mistakes=mistakes)

    smallest_failure([(_freq_label(c), i) for i, c in enumerate(FREQ_CASES)], check)


def _freq_label(case) -> str:
    hidden, heads, head_dim, base, llama3 = case
    label = f"hidden_size={hidden}, num_attention_heads={heads}, rope_theta={base:g}"
    if head_dim is not None:
        label += f", head_dim={head_dim}"
    if llama3 is not None:
        label += ", rope_type=llama3 (factor={factor:g}, low_freq_factor={low_freq_factor:g}, high_freq_factor=" \
                 "{high_freq_factor:g}, original_max_position_embeddings={original_max_position_embeddings})".format(
                     **llama3)
    return label
