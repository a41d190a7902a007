"""What the continuous_batching checks say of a run: its outputs against each request decoded alone, the steps the
grader counted against the contract's policy, the student's stats against the grader's counts (the grader's side only).
"""
from __future__ import annotations

from autograder.checks import expect
from autograder.checks.serving import batching as bt
from autograder.foundation import i18n
from solutions import serving as ref

_ = i18n.message


def same_outputs(outputs, want, what: str) -> None:
    """The outputs are lists of Python ints, one per request, each what decoding the request alone gives."""
    if isinstance(outputs, (list, tuple)) and any(not isinstance(t, int) or isinstance(t, bool) for o in outputs
                                                  if isinstance(o, (list, tuple)) for t in o):
        raise expect.CheckFailure(_("{what}: the outputs should be lists of Python ints (int(logits.argmax())), not "
                                    "tensors").format(what=what))
    got = [list(map(int, o)) if isinstance(o, (list, tuple)) else o for o in outputs] \
        if isinstance(outputs, (list, tuple)) else outputs
    if got == [list(w) for w in want]:
        return
    if not isinstance(got, list) or len(got) != len(want):
        raise expect.CheckFailure(_("{what}: outputs should be one list of token ids per request ({n} requests)")
                                  .format(what=what, n=len(want)))
    r = next(i for i, (g, w) in enumerate(zip(got, want)) if g != list(w))
    raise expect.CheckFailure(_("{what}: request {r} generated {got}, decoding it alone gives {want}. Does a request "
                                "whose prompt is done sample from its LAST token's logits (not its chunk's first)? "
                                "Are positions the cache's length plus the offset? Does every layer write its own "
                                "layer_idx?").format(what=what, r=r, got=got[r], want=list(want[r])))


def follows_the_policy(counts: dict, key: str) -> None:
    """The steps the grader counted are those of the contract's fixed policy (tokens per step, step by step)."""
    policy = bt.reference_stats(ref, prefix=key == "prefix", static=key == "static")
    want = policy["tokens_per_step"]
    if counts["tokens_per_step"] != want:
        raise expect.CheckFailure(_("the model was given {got} tokens step by step; the contract's policy gives {want}: "
                                    "each step, every running request with an output decodes 1 token, then prompts "
                                    "being prefilled get chunks oldest first, then waiting requests are admitted in "
                                    "order while budget, max_num_seqs and the free blocks allow").format(
            got=counts["tokens_per_step"], want=want))
    chunks = policy["chunks_per_step"]
    step = next((i for i, (g, w) in enumerate(zip(counts["chunks_per_step"], chunks)) if g != w), None)
    if step is not None:
        raise expect.CheckFailure(_("at step {i} the model was given chunks of {got} tokens (meta's rows); the "
                                    "contract's policy gives {want}: decodes first, then the running prompts' chunks "
                                    "oldest first (while budget is left), then admitted requests").format(
            i=step, got=counts["chunks_per_step"][step], want=chunks[step]))


def stats_agree(stats: dict, counts: dict) -> None:
    """The student's stats against the grader's counts, key by key (static batching's mixed_steps is 0)."""
    for key in ("steps", "mixed_steps", "prefill_tokens", "max_blocks_used"):
        if stats.get(key) != counts[key]:
            raise expect.CheckFailure(_("stats[{key!r}] is {got}, the grader counted {want} (calls of its model, "
                                        "blocks its tables used)").format(key=key, got=stats.get(key), want=counts[key]))
    if list(stats.get("tokens_per_step", [])) != counts["tokens_per_step"]:
        raise expect.CheckFailure(_("stats['tokens_per_step'] does not match the tokens the model was given at each "
                                    "step"))
