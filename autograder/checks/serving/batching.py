"""The continuous_batching checks' model, requests and trusted references (the grader's side only).

The model is an embedding, two paged layers (the student's PagedDecoderAttention, GQA 4/2) with residuals and a
head; in the worker it is standins.ServingModel, which records every call so that the grader counts steps, tokens
and blocks itself. Here the same model runs each request alone through generation's DecoderAttention + KVCache:
greedy decoding that continuous and static batching must reproduce token for token (every top-2 logit margin of
these requests is above 1e-2: tests/test_serving_checks.py).
"""
from __future__ import annotations

import copy
import functools
import math

import torch

from solutions import generation as gen

D_MODEL, H, H_KV, LAYERS, VOCAB = 16, 4, 2, 2, 32
HEAD_DIM = D_MODEL // H
BLOCK_SIZE = 4
PROMPT_LENGTHS, NEW_TOKENS = (7, 7, 6, 13, 11, 3), (3, 10, 2, 9, 2, 2)  # 47 prompt tokens, 28 generated, 22 blocks
SYSTEM = 12  # the prefix-caching check: a 12-token system prompt before each request's own tokens
SUFFIXES = (3, 1, 2, 4, 2, 1)
POOL, PREFIX_POOL, STATIC_POOL = 12, 16, 24
TOKEN_BUDGET, MAX_NUM_SEQS = 8, 3
TIGHT = 2  # the tight run: token_budget == max_num_seqs == 2 (the last decode of a step meets a budget of 1)
WHOLE, WHOLE_NEW, WHOLE_POOL = 3, 3, 4  # request 3 alone, 13 + 3 tokens: exactly the 4 blocks of its pool
SEED = 21


def weights(seed: int = SEED) -> dict:
    """{"embedding", "head", "layers": [state dict of each layer]}: the model's weights."""
    g = torch.Generator().manual_seed(seed)
    scale = 1 / math.sqrt(D_MODEL)

    def layer():
        return {"W_q.weight": torch.randn(D_MODEL, D_MODEL, generator=g) * scale,
                "W_k.weight": torch.randn(H_KV * HEAD_DIM, D_MODEL, generator=g) * scale,
                "W_v.weight": torch.randn(H_KV * HEAD_DIM, D_MODEL, generator=g) * scale,
                "W_o.weight": torch.randn(D_MODEL, D_MODEL, generator=g) * scale}

    return {"embedding": torch.randn(VOCAB, D_MODEL, generator=g), "head": torch.randn(VOCAB, D_MODEL, generator=g),
            "layers": [layer() for _ in range(LAYERS)]}


def prompts(prefix: bool = False, seed: int = SEED) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed + 1)
    if not prefix:
        return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    system = torch.randint(0, VOCAB, (SYSTEM,), generator=g).tolist()
    return [system + torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in SUFFIXES]


def alone(w: dict, prompt: list[int], n: int) -> tuple[list[int], float]:
    """(greedy tokens of one request through DecoderAttention + KVCache, the smallest top-2 logit margin)."""
    layers = []
    for state in w["layers"]:
        layer = gen.DecoderAttention(D_MODEL, H, H_KV)
        layer.load_state_dict(state)
        layers.append(layer)
    caches, out, margin, tokens = [gen.KVCache() for _ in layers], [], math.inf, torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            x = w["embedding"][tokens]
            for layer, cache in zip(layers, caches):
                x = x + layer(x, cache)
            logits = x[0, -1] @ w["head"].T
            top = logits.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            out.append(int(logits.argmax()))
            tokens = torch.tensor([[out[-1]]])
    return out, margin


def counts(calls: list[dict], requests: list[list[int]], expected: list[list[int]]) -> dict:
    """The grader's own counts from the model's record: steps, tokens per step, prompt tokens computed (tokens at a
    position below their request's prompt length), mixed steps (a decode and a prompt chunk together), and the most
    blocks the step's tables used. Each chunk's request: see owners."""
    steps = {"steps": len(calls), "tokens_per_step": [], "prefill_tokens": 0, "mixed_steps": 0, "max_blocks_used": 0,
             "chunks_per_step": []}
    next_position: dict[int, int] = {}  # request -> the position after its last chunk
    for call in calls:
        tokens, positions, cu = call["tokens"].tolist(), call["positions"].tolist(), call["cu"].tolist()
        steps["tokens_per_step"].append(len(tokens))
        steps["chunks_per_step"].append([cu[b + 1] - cu[b] for b in range(len(cu) - 1)])
        steps["max_blocks_used"] = max(steps["max_blocks_used"], int(call["blocks"]))
        chunks = [(tokens[cu[b]:cu[b + 1]], positions[cu[b]:cu[b + 1]]) for b in range(len(cu) - 1)]
        prompt = decode = 0
        for (_chunk, pos), owner in zip(chunks, owners(chunks, requests, expected, next_position)):
            length = len(requests[owner]) if owner is not None else 0
            in_prompt = sum(p < length for p in pos)
            prompt += in_prompt
            decode += in_prompt < len(pos)
            if owner is not None and pos:
                next_position[owner] = pos[-1] + 1
        steps["prefill_tokens"] += prompt
        steps["mixed_steps"] += int(prompt > 0 and decode > 0)
    return steps


def owners(chunks: list[tuple[list, list]], requests: list[list[int]], expected: list[list[int]],
           next_position: dict[int, int]) -> list[int | None]:
    """The request of each chunk (tokens, positions) of one step, each request at most once: first one that goes on
    from where its last chunk ended with tokens that match its known ones (a row of static batching that goes on past
    its last output matches there by continuity alone), else one not seen yet whose known tokens match the chunk from
    a block boundary (a fresh prompt, or the rest of a prompt after a prefix hit), else any whose known tokens match.
    Tokens alone cannot tell two requests apart: a single token often matches another request at that position."""
    known = [p + e for p, e in zip(requests, expected)]
    taken: set[int] = set()

    def matches(r: int, chunk: list, pos: list, beyond: bool) -> bool:
        return all((beyond or p < len(known[r])) and (p >= len(known[r]) or known[r][p] == t)
                   for p, t in zip(pos, chunk))

    out: list[int | None] = []
    for chunk, pos in chunks:
        free = [r for r in range(len(known)) if r not in taken]
        owner = next((r for r in free if pos and next_position.get(r) == pos[0] and matches(r, chunk, pos, True)), None)
        if owner is None:
            owner = next((r for r in free if r not in next_position and pos and pos[0] % BLOCK_SIZE == 0
                          and matches(r, chunk, pos, False)), None)
        if owner is None:
            owner = next((r for r in free if matches(r, chunk, pos, False)), None)
        if owner is not None:
            taken.add(owner)
        out.append(owner)
    return out


class _Silent:
    """A model whose logits are all zero: the schedule (tokens per step) depends on lengths only; it records the
    chunks of each step (meta's rows: decodes, prompt chunks, admitted requests)."""

    def __init__(self):
        self.chunks = []

    def __call__(self, tokens, positions, meta, cache):
        cu = [int(c) for c in meta.cu_seqlens_q]
        self.chunks.append([cu[b + 1] - cu[b] for b in range(len(cu) - 1)])
        return torch.zeros(len(tokens), VOCAB)


def reference_stats(reference, prefix: bool = False, static: bool = False, tight: bool = False) -> dict:
    """The stats of the contract's policy on the checks' requests (the reference scheduler, run here on lengths only:
    steps, tokens per step, prompt tokens computed, mixed steps and peak blocks do not depend on the tokens); run
    once per process, a copy each call."""
    return copy.deepcopy(_policy_stats(reference, prefix, static, tight))


@functools.lru_cache(maxsize=8)
def _policy_stats(reference, prefix: bool, static: bool, tight: bool) -> dict:
    requests = prompts(prefix)
    blocks = STATIC_POOL if static else PREFIX_POOL if prefix else POOL
    cache = reference.PagedKVCache(blocks, BLOCK_SIZE, H_KV, HEAD_DIM, num_layers=1, enable_prefix_caching=prefix)
    model = _Silent()
    if static:
        _out, stats = reference.static_batching_generate(model, requests, list(NEW_TOKENS), cache,
                                                         batch_size=MAX_NUM_SEQS)
    else:
        budget, seqs = (TIGHT, TIGHT) if tight else (TOKEN_BUDGET, MAX_NUM_SEQS)
        _out, stats = reference.continuous_batching_generate(model, requests, list(NEW_TOKENS), cache,
                                                             token_budget=budget, max_num_seqs=seqs)
    return {**stats, "tokens_per_step": list(stats["tokens_per_step"]), "chunks_per_step": model.chunks}
