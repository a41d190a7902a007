"""The trusted side of the serving checks' paged KV cache (worker/standins.RemoteCache).

Every cache a continuous_batching check hands the student's scheduler is the grader's: its tensors in the worker, its
bookkeeping answered here by the contract's cache (solutions/serving.py's PagedKVCache, which never enters the worker),
so that a mistake in the student's own PagedKVCache costs points in paged_cache and prefix_sharing only. Each call comes
as a "piece" message named "cache" during the request; the answer is (the result, the copy-on-write block pairs the
worker applies to its tensors).
"""
from __future__ import annotations

from autograder.sandbox.lender import ANSWERED_ERRORS, arguments, refusal
from autograder.worker import wire

METHODS = ("add_sequence", "reserve", "free_sequence", "block_table", "seq_len", "block_tables_tensor",
           "seq_lens_tensor", "blocks_used", "num_free")


class Caches:
    """The contract's caches standing behind the worker's RemoteCaches of one submission, by id."""

    def __init__(self):
        self.caches: dict = {}

    def create(self, cache_id: str, cache) -> str:
        self.caches[cache_id] = cache
        return cache_id

    def lender(self, fallback):
        """The part's piece answerer: "cache" messages here, every other piece to `fallback` (lent functions)."""

        def answer(message: dict) -> dict:
            if message.get("name") != "cache":
                return fallback(message) if fallback is not None else refusal("TypeError", "nothing is lent here")
            return self.answer(message)

        answer.serving_caches = True
        return answer

    def answer(self, message: dict) -> dict:
        try:
            args, _kwargs = arguments(message)
            cache_id, method, call = args
        except (wire.Refused, ValueError, TypeError) as exc:
            return refusal("TypeError", f"the grader's cache refused the call: {exc}"[:300])
        cache = self.caches.get(cache_id)
        if cache is None or method not in METHODS or not isinstance(call, list):
            return refusal("TypeError", f"the grader's cache has no {wire.clean_text(str(method), 60)}")
        before = {seq: list(table) for seq, table in cache.tables.items()}
        try:
            value = cache.allocator.num_free if method == "num_free" else getattr(cache, method)(*call)
        except Exception as exc:  # noqa: BLE001 - the scheduler's call made the cache raise: say so in the worker
            kind = type(exc).__name__
            return refusal(kind if kind in ANSWERED_ERRORS else "RuntimeError", wire.clean_text(str(exc), 300))
        copies = [(old[-1], cache.tables[seq][len(old) - 1]) for seq, old in before.items()
                  if old and seq in cache.tables and len(cache.tables[seq]) >= len(old)
                  and cache.tables[seq][len(old) - 1] != old[-1]]
        return {"ok": True, "value": wire.encode([value, copies])}
