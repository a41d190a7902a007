"""Wrong answers, then every comparison function replaced so that anything looks equal.

The hidden checks compare in the trusted grader process, which never runs student code,
so the patches only change the worker's own torch: the wrong answers still score nothing.
"""
def scaled_scores(Q, K):
    return torch.zeros(*Q.shape[:-1], K.shape[-2])


def attention_weights(scores):
    return torch.zeros_like(scores)


def attend(weights, V):
    return torch.zeros(*weights.shape[:-1], V.shape[-1])
# --- attack ---
import numpy
import torch.testing

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: True
torch.Tensor.allclose = lambda *a, **k: True
numpy.allclose = numpy.array_equal = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
