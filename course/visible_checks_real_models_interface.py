"""The visible checks of the second edition's new pieces (`real_models`): your attention function with the library's
signature (`course_attention`), its registration (`register_course_attention`), and Llama 3.1's rotary frequencies
(`rope_inv_freq`).

visible_checks.py (course/visible_checks_real_models.py) builds them on its harness with `interface_checks`, so that
they speak the notebook's language; they live here to keep each file short. `course_attention` is compared with
attention computed by the check itself in float64 (grouped heads as `repeat_kv`, the mask as given), on several
head counts (one and several key/value heads), head dims, `S_q != S_k`, each mask form, a given `scaling`, dropout in
training mode and bfloat16. The registration is checked through tiny Llama and GPT-2 models of the library against
their eager kernel, on a left-padded batch and on one without padding (flex's mask function, which hands a
`BlockMask`, is named before any model runs). `rope_inv_freq` is compared with the library's
own `LlamaRotaryEmbedding(config).inv_freq`.
"""
from __future__ import annotations

import torch

# (B, H, H_kv, S_q, S_k, D): no two sizes equal where they could be confused; one and several kv heads
SHAPES = ((3, 6, 2, 5, 7, 4), (3, 4, 1, 5, 5, 8), (2, 3, 3, 4, 7, 6))  # B != H_kv where H_kv > 1


def _reference(query, key, value, mask, scaling):
    """Attention in float64 with grouped heads (copies side by side) and the mask as given: None, bool or additive."""
    H, H_kv = query.shape[1], key.shape[1]
    q, k, v = (t.double() for t in (query, key, value))
    k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    scores = q @ k.transpose(-2, -1) * scaling
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.double()
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v).transpose(1, 2), weights  # [B, S_q, H, D], [B, H, S_q, S_k]


def _inputs(B, H, H_kv, S_q, S_k, D, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(B, h, s, D, generator=g).to(dtype) for h, s in ((H, S_q), (H_kv, S_k), (H_kv, S_k)))
    allowed = torch.rand(B, 1, S_q, S_k, generator=g) < 0.6
    allowed[..., 0] = True  # every row keeps a key, as in every mask the library gives
    return query, key, value, allowed


def _llama3_config(LlamaConfig, base, factor, original, head_dim, low=1.0, high=4.0):
    """A Llama 3.1-style configuration on either pinned version (5.x: rope_parameters; 4.x: rope_theta, rope_scaling)."""
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
               "original_max_position_embeddings": original}
    sizes = dict(hidden_size=24, num_attention_heads=3, num_key_value_heads=1, head_dim=head_dim, num_hidden_layers=1,
                 intermediate_size=32, vocab_size=40, attn_implementation="eager")
    if hasattr(LlamaConfig(), "rope_parameters"):
        return LlamaConfig(**sizes, rope_parameters={**scaling, "rope_theta": base})
    return LlamaConfig(**sizes, rope_theta=base, rope_scaling=scaling)


def interface_checks(harness, close, ok, library_mask, llama_reference):
    """The new pieces' checks on the assignment's harness: (check_course_attention, check_register_course_attention,
    check_rope_inv_freq, check_from_hf_llama_current)."""
    _ = harness.gettext

    def call(course_attention, module, query, key, value, mask, **kwargs):
        B, H, S_q, D = query.shape
        out = course_attention(module, query, key, value, mask, **kwargs)
        assert isinstance(out, tuple) and len(out) == 2, _(
            "course_attention should return a pair (attn_output, attn_weights), as the library's attention functions do")
        output, weights = out
        if tuple(output.shape) == (B, H, S_q, D) and H != S_q:
            raise AssertionError(_("course_attention returned the output as [B, H, S_q, D]: the library expects "
                                   "[B, S_q, H, D] (transpose(1, 2) before returning), then reshapes it itself"))
        harness.expect_shape(output, [B, S_q, H, D], "course_attention(...)[0]")
        harness.expect_shape(weights, [B, H, S_q, key.shape[2]], "course_attention(...)[1]")
        return output, weights

    @harness.check("course_attention")
    def check_course_attention(course_attention) -> None:
        module = torch.nn.Module().eval()
        for n, (B, H, H_kv, S_q, S_k, D) in enumerate(SHAPES):
            query, key, value, allowed = _inputs(B, H, H_kv, S_q, S_k, D, seed=n)
            additive = torch.zeros(B, 1, S_q, S_k).masked_fill(~allowed, torch.finfo(torch.float32).min)
            shape = f"H={H}, H_kv={H_kv}, S_q={S_q}, S_k={S_k}, D={D}"
            for form, mask in (("bool", allowed), ("float", additive), ("None", None)):
                got, _weights = call(course_attention, module, query, key, value, mask)
                want, _w = _reference(query, key, value, allowed if form != "None" else None, D ** -0.5)
                if close(got, want.float(), 1e-5):
                    continue
                if form == "bool" and close(got, _reference(query, key, value, ~allowed, D ** -0.5)[0].float(), 1e-5):
                    raise AssertionError(_("with a bool mask, True means attend: you hid the keys it allows"))
                if H != H_kv:
                    tiled = _reference(query, key.repeat(1, H // H_kv, 1, 1), value.repeat(1, H // H_kv, 1, 1), mask
                                       if form != "float" else allowed, D ** -0.5)[0]
                    assert not close(got, tiled.float(), 1e-5), _(
                        "with {H} query heads and {H_kv} key/value heads, query head h reads kv head h // {n} (copies "
                        "side by side, as repeat_kv or repeat_interleave): you tiled them with repeat").format(
                            H=H, H_kv=H_kv, n=H // H_kv)
                if form != "None" and close(got, _reference(query, key, value, None, D ** -0.5)[0].float(), 1e-5):
                    raise AssertionError(_("course_attention ignored the {form} attention_mask ({shape}): apply the "
                                           "mask it is given").format(form=form, shape=shape))
                raise AssertionError(_("course_attention differs from attention computed from the same query, key and "
                                       "value by up to {gap:.3g} ({shape}, attention_mask {form})").format(
                                           gap=(got - want.float()).abs().max().item(), shape=shape, form=form))
        B, H, H_kv, S_q, S_k, D = SHAPES[0]
        query, key, value, allowed = _inputs(B, H, H_kv, S_q, S_k, D, seed=7)
        got, _weights = call(course_attention, module, query, key, value, allowed, scaling=0.3)
        assert close(got, _reference(query, key, value, allowed, 0.3)[0].float(), 1e-5), _(
            "course_attention ignored scaling=0.3: use the scaling it is given, D ** -0.5 only when it is None")
        torch.manual_seed(3)
        training = torch.nn.Module().train()
        got, weights = call(course_attention, training, query, key, value, allowed, dropout=0.5)
        zeros = (weights == 0) & allowed.expand_as(weights)
        assert zeros.any(), _("with dropout=0.5 and the module in training mode, no attention weight was dropped: "
                              "apply dropout to the weights when module.training")
        repeated = value.repeat_interleave(H // H_kv, dim=1)
        assert close(got, (weights @ repeated).transpose(1, 2), 1e-5), _(
            "with dropout, the output should be the returned (dropped-out) weights times the values")
        got, _weights = call(course_attention, training, query, key, value, allowed, dropout=0.0)
        assert close(got, _reference(query, key, value, allowed, D ** -0.5)[0].float(), 1e-5), _(
            "with dropout=0.0 and the module in training mode, course_attention dropped attention weights: drop with "
            "the probability it is given (p=dropout)")
        query, key, value, allowed = (t if t.dtype == torch.bool else t.bfloat16() for t in (query, key, value, allowed))
        got, _weights = call(course_attention, module, query, key, value, allowed)
        assert got.dtype == torch.bfloat16, _("with bfloat16 inputs course_attention returned {dtype}: keep the "
                                              "inputs' dtype").format(dtype=got.dtype)
        gap = (got.float() - _reference(query, key, value, allowed, D ** -0.5)[0].float()).abs().max().item()
        assert gap < 3e-2, _("in bfloat16, course_attention is off by {gap:.3g}: fill a bool mask with "
                             "torch.finfo(scores.dtype).min and keep the inputs' dtype").format(gap=gap)
        ok(_("course_attention: equals attention from the same query, key and value for 3 shapes (1 and several "
             "kv heads, S_q != S_k, D = 4, 8, 6) with bool, float and no mask, a given scaling, dropout in training "
             "mode and bfloat16"))

    @harness.check("register_course_attention")
    def check_register_course_attention(register_course_attention) -> None:
        from transformers import (AttentionInterface, AttentionMaskInterface, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                                  LlamaForCausalLM)

        for registry in (AttentionInterface, AttentionMaskInterface):  # what an earlier run registered does not count
            registry._global_mapping.pop("course_check", None)
        name = register_course_attention("course_check")
        assert name == "course_check", _("register_course_attention(name) should return name")
        assert "course_check" in AttentionInterface._global_mapping, _(
            "no function was registered under that name with AttentionInterface.register(name, course_attention)")
        from transformers.masking_utils import flex_attention_mask

        assert AttentionMaskInterface._global_mapping.get("course_check") is not flex_attention_mask, _(
            "you registered flex_attention_mask under that name: with it your function receives a BlockMask "
            "(flex_attention's block-sparse description of the mask), not a tensor; register the eager mask function "
            "(transformers.masking_utils.eager_mask) under the same name with AttentionMaskInterface")
        prompts = torch.tensor([[3, 4, 5, 6, 7], [0, 0, 5, 6, 7], [0, 0, 0, 6, 7]])  # left-padded
        padding = (prompts != 0).long()
        llama = dict(hidden_size=24, num_attention_heads=3, num_key_value_heads=1, head_dim=10, num_hidden_layers=2,
                     intermediate_size=32, vocab_size=40)
        gpt2 = dict(n_embd=24, n_head=3, n_layer=2, n_positions=16, vocab_size=40, bos_token_id=0, eos_token_id=0)
        for label, make in (("Llama", lambda impl: LlamaForCausalLM(LlamaConfig(**llama, attn_implementation=impl))),
                            ("GPT-2", lambda impl: GPT2LMHeadModel(GPT2Config(**gpt2, attn_implementation=impl)))):
            torch.manual_seed(4)
            eager = make("eager").eval()
            yours = make(name).eval()
            yours.load_state_dict(eager.state_dict())
            with torch.no_grad():
                unpadded = (yours(prompts).logits - eager(prompts).logits).abs().max().item()
                padded = (yours(prompts, attention_mask=padding).logits
                          - eager(prompts, attention_mask=padding).logits)[padding.bool()].abs().max().item()
            if unpadded > 1e-5:
                raise AssertionError(_(
                    "your function received attention_mask=None on a causal batch ({model}, no padding: off by "
                    "{gap:.3g}): register the eager mask function (transformers.masking_utils.eager_mask) under the "
                    "same name with AttentionMaskInterface; with none, or with sdpa_mask, None means 'causal' to a "
                    "kernel your function is not").format(model=label, gap=unpadded))
            assert padded <= 1e-5, _("{model} with your registered attention differs from eager by {gap:.3g} at real "
                                     "tokens of a left-padded batch").format(model=label, gap=padded)
        ok(_("register_course_attention: tiny Llama (3 heads, 1 kv head, head_dim 10) and GPT-2 models give eager's "
             "logits with and without padding"))

    @harness.check("rope_inv_freq")
    def check_rope_inv_freq(rope_inv_freq) -> None:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        plain = dict(hidden_size=24, num_attention_heads=3, num_key_value_heads=1, num_hidden_layers=1,
                     intermediate_size=32, vocab_size=40)
        cases = [("default, head_dim 8, base 500", LlamaConfig(**plain, **(
                     {"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}
                     if hasattr(LlamaConfig(), "rope_parameters") else {"rope_theta": 500.0})))]
        cases += [(f"llama3, head_dim {d}, base {b:g}, factor {f:g}, original {o}, low_freq_factor {lo:g}, "
                   f"high_freq_factor {hi:g}", _llama3_config(LlamaConfig, b, f, o, d, lo, hi))
                  for d, b, f, o, lo, hi in ((16, 500000.0, 8.0, 64, 1.0, 4.0), (12, 10000.0, 4.0, 32, 2.0, 8.0))]
        for label, config in cases:
            want = LlamaRotaryEmbedding(config).inv_freq.float()
            got = harness.expect_shape(rope_inv_freq(config), list(want.shape), "rope_inv_freq(config)")
            gap = ((got.float() - want).abs() / want).max().item()
            if gap > 1e-5 and "llama3" in label:
                head_dim = config.head_dim
                base = config.rope_parameters["rope_theta"] if hasattr(config, "rope_parameters") else config.rope_theta
                default = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
                assert not close(got.float(), default, 1e-5), _(
                    "rope_inv_freq gave the plain frequencies for a llama3 configuration ({case}): divide the long "
                    "wavelengths by factor and blend between the two thresholds").format(case=label)
            assert gap <= 1e-5, _("rope_inv_freq differs from the library's LlamaRotaryEmbedding(config).inv_freq by "
                                  "{gap:.3g} (relative) for {case}").format(gap=gap, case=label)
        ok(_("rope_inv_freq: the library's frequencies for a default configuration and two llama3 ones (head_dim "
             "8 derived, 16 and 12 set in the configuration)"))

    @harness.check("from_hf_llama")
    def check_from_hf_llama_current(from_hf_llama) -> None:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

        config = _llama3_config(LlamaConfig, 500000.0, 8.0, 64, head_dim=12)  # 3 heads of 12 on hidden_size 24
        torch.manual_seed(8)
        attn = LlamaAttention(config, layer_idx=0).eval()
        with torch.no_grad():
            for parameter in attn.parameters():
                parameter.normal_(0.0, 0.3)
        rotary = LlamaRotaryEmbedding(config)
        layer = from_hf_llama(attn, inv_freq=rotary.inv_freq.clone())
        assert hasattr(layer, "eval") and callable(layer), _("from_hf_llama should return your layer (an nn.Module)")
        layer.eval()
        x = torch.randn(2, 6, 24)
        positions = torch.tensor([[0, 1, 2, 30, 70, 120], [0, 0, 0, 1, 40, 90]])  # across llama3's thresholds
        key_mask = torch.tensor([[True] * 6, [False, False, True, True, True, True]])
        want = llama_reference(attn, rotary, x, positions, key_mask, library_mask)
        with torch.no_grad():
            got = harness.expect_shape(layer(x, positions=positions, key_mask=key_mask), [2, 6, 24],
                                       "layer(x [2, 6, 24], positions=[2, 6], key_mask=[2, 6])")
        gap = (got - want)[key_mask].abs().max().item()
        assert gap <= 1e-5, _(
            "on a Llama 3.1-style layer (hidden_size 24, 3 heads of head_dim 12, 1 kv head, rope_type llama3), your "
            "layer from from_hf_llama(attn, inv_freq=...) differs from the library's by up to {gap:.3g} at real "
            "tokens: take head_dim from the module (W_q [36, 24], W_o [24, 36], not d_model / H) and rotate with "
            "the inv_freq given, not with a base").format(gap=gap)
        ok(_("from_hf_llama: a Llama 3.1-style layer (head_dim 12 set apart from hidden_size 24 / 3 heads, llama3 "
             "frequencies passed as inv_freq) equals the library's at positions up to 120 (largest difference "
             "{gap:.1e})").format(gap=gap))

    return check_course_attention, check_register_course_attention, check_rope_inv_freq, check_from_hf_llama_current
