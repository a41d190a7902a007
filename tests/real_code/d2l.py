# Corpus of real implementations (tests/test_real_code.py): Dive into Deep Learning (d2l), PyTorch edition.
# Source: github.com/d2l-ai/d2l-en, d2l/torch.py: sequence_mask, masked_softmax, DotProductAttention;
# commit c3fb91b02a8ea24e15134326872983d773c494cf
# License: MIT-0 (the book's code), (c) the d2l authors.
# Provides (self_attention): scaled_scores, attention_weights, attend (DotProductAttention in three steps);
# padding_mask (sequence_mask's comparison), apply_padding_mask (masked_softmax's -1e6 fill). The math is d2l's;
# adaptations are marked ADAPTED.
import math

import torch
from torch import nn


def scaled_scores(queries, keys):  # ADAPTED: DotProductAttention.forward's first step
    d = queries.shape[-1]
    # Swap the last two dimensions of keys with keys.transpose(1, 2)
    return torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)


def attention_weights(scores):  # ADAPTED: masked_softmax with valid_lens None
    return nn.functional.softmax(scores, dim=-1)


def attend(weights, values):  # ADAPTED: DotProductAttention's weighted sum (its dropout left to the module)
    return torch.bmm(weights, values)


def padding_mask(lengths, seq_len):  # ADAPTED: the mask sequence_mask(X, valid_len) builds for maxlen = seq_len
    return torch.arange((seq_len), dtype=torch.float32, device=lengths.device)[None, :] < lengths[:, None]


def sequence_mask(X, valid_len, value=0):
    """Mask irrelevant entries in sequences."""
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32,
                        device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def apply_padding_mask(scores, mask):
    # ADAPTED: masked_softmax's masking step without its softmax, on a copy; the course's [B, S] boolean mask
    # becomes d2l's valid_lens (its number of True), repeated for each query row (and head) as masked_softmax does
    valid_lens = mask.sum(-1)
    shape = scores.shape
    valid_lens = torch.repeat_interleave(valid_lens, math.prod(shape[1:-1]))
    # On the last axis, replace masked elements with a very large negative
    # value, whose exponentiation outputs 0
    return sequence_mask(scores.reshape(-1, shape[-1]).clone(), valid_lens, value=-1e6).reshape(shape)
