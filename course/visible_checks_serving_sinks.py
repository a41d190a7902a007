"""The visible checks of `serving`'s notebook 06, attention sinks: the sink cache's kept positions and refusals, and the
sink layer against a dense pass over the kept tokens at their positions inside the cache.

visible_checks.py (course/visible_checks_serving.py) builds them on its harness with `sink_checks`, so that they speak
the notebook's language and name the student's line like the others.
"""
from __future__ import annotations

import torch
from visible_checks_serving_dense import dense_layer


def sink_checks(harness, close, ok):
    """The checks of notebook 06, on the harness of visible_checks.py."""
    _ = harness.gettext

    @harness.check("SinkKVCache")
    def check_sink_kv_cache(SinkKVCache) -> None:
        cache = SinkKVCache(num_sink=2, window=3)
        for t in range(11):
            k = torch.full((1, 1, 1, 2), float(t))
            k_all, _v = cache.append(k, k.clone())
        kept = [int(p) for p in k_all[0, 0, :, 0].tolist()]
        assert kept != [6, 7, 8, 9, 10], _("your cache kept a pure window {kept}: keep the first num_sink positions "
                                           "(the sinks) too").format(kept=kept)
        assert kept == [0, 1, 8, 9, 10] and len(cache) == 5, _(
            "after 11 tokens with 2 sinks and a window of 3, the kept positions are {kept} (len {n}), expected "
            "[0, 1, 8, 9, 10]").format(kept=kept, n=len(cache))
        fresh = SinkKVCache(num_sink=2, window=3)
        fresh.append(torch.randn(1, 1, 5, 2), torch.randn(1, 1, 5, 2))
        assert len(fresh) == 5, _("a first prompt of num_sink + window tokens is accepted whole")
        fresh.append(torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2))
        assert len(fresh) == 5, _("a piece of exactly window tokens fits (none of its own keys is evicted): no error")
        try:
            fresh.append(torch.randn(1, 1, 4, 2), torch.randn(1, 1, 4, 2))
        except ValueError:
            pass
        else:
            raise AssertionError(_("4 new tokens with a window of 3 would evict some of their own keys: raise ValueError"))
        assert len(fresh) == 5, _("a refused append must change nothing")
        ok(_("SinkKVCache: 2 sinks and a window of 3 keep [0, 1, 8, 9, 10]; too long a piece raises"))

    @harness.check("SinkDecoderAttention")
    def check_sink_decoder_attention(SinkDecoderAttention, SinkKVCache) -> None:
        layer = SinkDecoderAttention(24, 4, 2)  # head_dim 6
        assert layer.W_k.weight.shape[0] == 12, _(
            "SinkDecoderAttention(24, 4, num_kv_heads=2): W_k should give 2 key/value heads of 6 (12 outputs), not {n}"
        ).format(n=layer.W_k.weight.shape[0])
        forward = harness.watch(layer, "SinkDecoderAttention.forward")
        x = torch.randn(2, 16, 24)
        cache, kept = SinkKVCache(num_sink=2, window=4), []
        for start, stop in [(0, 3)] + [(t, t + 1) for t in range(3, 16)]:
            with torch.no_grad():
                out = harness.expect_shape(forward(x[:, start:stop], cache), [2, stop - start, 24], _("the output"))
            kept = kept + list(range(start, stop))
            kept = kept if len(kept) <= 6 else kept[:2] + kept[-4:]
            want = torch.stack([dense_layer(layer, x[b, kept], torch.arange(len(kept)), 4)[-(stop - start):]
                                for b in range(2)])
            if close(out.double(), want, 1e-4):
                continue
            original = torch.stack([dense_layer(layer, x[b, kept], torch.tensor(kept), 4)[-(stop - start):]
                                    for b in range(2)])
            assert not close(out.double(), original, 1e-4), _(
                "step {t}: your keys keep their original positions; rotate the kept keys at their positions inside "
                "the cache, 0 .. len(cache) - 1, and the queries at the last S_new of them").format(t=stop - 1)
            raise AssertionError(_(
                "step {t}: your output differs from a dense pass over the kept tokens at positions 0 .. n - 1 by up to "
                "{gap:.2g}: cache the keys unrotated, then rotate them all at every step").format(
                t=stop - 1, gap=(out.double() - want).abs().max().item()))
        ok(_("SinkDecoderAttention: 16 tokens, 2 sinks and a window of 4: every step equals a dense pass over the kept "
             "tokens at 0 .. n - 1"))

    return check_sink_kv_cache, check_sink_decoder_attention
