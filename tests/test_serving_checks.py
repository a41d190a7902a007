"""The machinery the `serving` checks added: the watch's labels for serving kernels, reshape_and_cache lent in place,
the grader's worker-side helpers (a cache that keeps given rows, a model that records its calls), and the greedy
references' margins (the contract: every top-2 logit margin of the checks' requests at least 1e-2).
"""
from __future__ import annotations

import pytest
import torch

from autograder.checks.serving import batching
from autograder.sandbox.lender import Lender
from autograder.worker import borrowed, names, serving_standins as standins, watch, wire
from solutions import serving as ref


def test_sdpa_on_nested_tensors_gets_its_own_label_that_serving_forbids():
    jagged = torch.nested.as_nested_tensor([torch.randn(2, 3, 4), torch.randn(2, 5, 4)], layout=torch.jagged)
    label = watch.nested_label("F.scaled_dot_product_attention", (jagged, jagged, jagged))
    assert label == names.NESTED_SDPA_LABEL and names.is_forbidden_name(label, names.SERVING_KERNELS)
    plain = torch.randn(2, 3, 4)
    assert watch.nested_label("F.scaled_dot_product_attention", (plain, plain, plain)) == \
        "F.scaled_dot_product_attention"
    assert not names.is_forbidden_name("F.scaled_dot_product_attention", names.SERVING_KERNELS)


def test_torch_varlen_attention_is_labelled_and_forbidden_in_serving():
    def op():  # (what the watch's torch function mode is handed when varlen_attn runs: an op of this name)
        return None

    op.__name__ = "_varlen_attn"
    assert watch.torch_label(op) == "torch.nn.attention.varlen.varlen_attn"
    assert names.is_forbidden_name("torch.nn.attention.varlen.varlen_attn", names.SERVING_KERNELS)
    for api in ("varlen_attention", "paged_attention", "PagedDecoderAttention"):  # the students' own names
        assert not names.is_forbidden_name(api, names.SERVING_KERNELS)


def test_reshape_and_cache_is_lent_in_place_through_the_trusted_side():
    """the stand-in's caller sees the reference's writes in its own tensors; the lender answers with them"""
    lender = Lender(ref, frozenset({"reshape_and_cache"}))
    codec = wire.WorkerCodec()

    def ask(name, args, kwargs):
        answer = lender.answer({"kind": "piece", "name": name, "args": codec.encode(list(args)),
                                "kwargs": codec.encode(dict(kwargs))})
        assert answer["ok"], answer
        return codec.decode(answer["value"])

    key, value = torch.randn(3, 1, 2), torch.randn(3, 1, 2)
    k_cache, v_cache = torch.zeros(2, 4, 1, 2), torch.zeros(2, 4, 1, 2)
    stand_in = borrowed.standin("reshape_and_cache", ask)
    assert stand_in(key, value, k_cache, v_cache, torch.tensor([6, -1, 1])) is None
    assert torch.equal(k_cache[1, 2], key[0]) and torch.equal(v_cache[0, 1], value[2])
    assert int((k_cache != 0).any(-1).any(-1).sum()) == 2


def test_the_scheduled_cache_keeps_the_rows_it_is_given():
    cache = standins.scheduled_cache([[0, 1, 2], [0, 2, 3]])
    cache.append(torch.arange(3.0).view(1, 1, 3, 1), torch.zeros(1, 1, 3, 1))
    k, _v = cache.append(torch.full((1, 1, 1, 1), 9.0), torch.zeros(1, 1, 1, 1))
    assert k.flatten().tolist() == [0.0, 2.0, 9.0] and len(cache) == 3


def test_the_serving_model_records_each_call_and_its_blocks():
    w = batching.weights()
    layers = []
    for i, state in enumerate(w["layers"]):
        layer = ref.PagedDecoderAttention(batching.D_MODEL, batching.H, batching.H_KV, layer_idx=i)
        layer.load_state_dict(state)
        layers.append(layer)
    model = standins.serving_model(w["embedding"], w["head"], layers)
    cache = ref.PagedKVCache(8, batching.BLOCK_SIZE, batching.H_KV, batching.HEAD_DIM, num_layers=batching.LAYERS)
    cache.add_sequence(0)
    slots = cache.reserve(0, 6)
    meta = standins.step_meta(ref.cu_seqlens([6]), slots, cache.block_tables_tensor([0]), cache.seq_lens_tensor([0]))
    with torch.no_grad():
        logits = model(torch.arange(6), torch.arange(6), meta, cache)
    assert logits.shape == (6, batching.VOCAB)
    [call] = model.record()
    assert call["blocks"] == 2 and call["tokens"].tolist() == list(range(6))


def test_the_greedy_references_have_a_clear_top_two_margin():
    w = batching.weights()
    for prefix in (False, True):
        for prompt, n in zip(batching.prompts(prefix), batching.NEW_TOKENS):
            _tokens, margin = batching.alone(w, prompt, n)
            assert margin >= 1e-2, (prefix, prompt, margin)


@pytest.mark.parametrize("key, figures", [("continuous", (14, 69, 10, 6, 47)), ("prefix", (13, 51, 10, 3, 29)),
                                          ("static", (19, 98, 14, 0, 47))])
def test_the_grader_counts_steps_prompt_tokens_and_mixed_steps_from_the_models_record(key, figures):
    """the grader's counts equal the reference's stats in each of the three generation checks, static batching's rows
    that go on past their last output included (a single token matching another request's prompt is not a prompt
    token); and they are the contract's figures: steps, tokens computed, peak blocks, mixed steps, prompt tokens"""
    w = batching.weights()
    prefix = key == "prefix"
    prompts = batching.prompts(prefix)
    expected = [batching.alone(w, p, n)[0] for p, n in zip(prompts, batching.NEW_TOKENS)]
    layers = []
    for i, state in enumerate(w["layers"]):
        layer = ref.PagedDecoderAttention(batching.D_MODEL, batching.H, batching.H_KV, layer_idx=i)
        layer.load_state_dict(state)
        layers.append(layer)
    model = standins.serving_model(w["embedding"], w["head"], layers)
    blocks = batching.STATIC_POOL if key == "static" else batching.PREFIX_POOL if prefix else batching.POOL
    cache = ref.PagedKVCache(blocks, batching.BLOCK_SIZE, batching.H_KV, batching.HEAD_DIM,
                             num_layers=batching.LAYERS, enable_prefix_caching=prefix)
    with torch.no_grad():
        if key == "static":
            outputs, stats = ref.static_batching_generate(model, prompts, list(batching.NEW_TOKENS), cache,
                                                          batch_size=batching.MAX_NUM_SEQS)
        else:
            outputs, stats = ref.continuous_batching_generate(model, prompts, list(batching.NEW_TOKENS), cache,
                                                              batching.TOKEN_BUDGET, batching.MAX_NUM_SEQS)
    assert outputs == expected
    counts = batching.counts(model.record(), prompts, expected)
    assert {name: counts[name] for name in stats} == stats
    assert (counts["steps"], sum(counts["tokens_per_step"]), counts["max_blocks_used"], counts["mixed_steps"],
            counts["prefill_tokens"]) == figures
    assert batching.reference_stats(ref, prefix, key == "static") == counts  # chunks per step included


def test_a_chunk_belongs_to_the_request_it_continues_not_to_one_its_token_matches():
    """a decode token equal to another request's prompt token at that position stays a decode; a row that goes on
    past its known tokens is its own request's; a fresh chunk starts at a block boundary"""
    requests, expected = [[1, 2, 3, 4, 5, 6], [1, 9]], [[], [3, 4]]
    # request 1 decodes token 3 at position 2, where request 0's prompt also holds 3; request 0 not seen yet
    assert batching.owners([([3], [2])], requests, expected, {1: 2}) == [1]
    assert batching.owners([([7], [4])], requests, expected, {1: 4}) == [1]  # past its known tokens: continuity
    assert batching.owners([([1, 2, 3, 4], [0, 1, 2, 3]), ([1, 9], [0, 1])], requests, expected, {}) == [0, 1]
