"""Shapes and seeded inputs shared by the hidden checks.

Shapes are chosen to expose bugs: B, H and S all different and above 1, S >= 3, so that
a transposed axis or a mask on the wrong axis cannot pass by accident.
"""
from __future__ import annotations

import torch

B, H, S, D_MODEL = 2, 3, 5, 12  # head_dim = 4


def randn(gen: torch.Generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)
