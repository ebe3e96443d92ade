"""Dropout on attention probabilities (the paper's 0.1, App. B), as ``nn.Dropout``
computes it — each entry kept with probability 1 − p and scaled by 1/(1 − p)
(inverted dropout) — with a cheaper mask on CPU.

``nn.Dropout`` on CPU draws its mask with ``bernoulli_`` and rescales it in a second
pass; one uniform draw compared with p in place (``u ≥ p`` keeps the entry: P = 1 − p
on float32's 2⁻²⁴ grid of uniforms) and scaled in place costs about half as much on
the (B, N_h, T, T) matrix of content attention (51 vs 102 ms at batch 8, N_h 9,
T 256 on one thread of this project's 2-core machine; ``study bench`` times the
layer against the einsum reference, which keeps ``nn.Dropout``).  On CUDA
``nn.Dropout``'s fused kernel is used unchanged.  Same distribution as
``nn.Dropout``, another random stream: a seed reproduces a run of this code, not
the masks ``nn.Dropout`` would have drawn.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def probability_dropout(probs: Tensor, p: float, *, training: bool) -> Tensor:
    """``probs`` with each entry zeroed with probability ``p`` and the kept ones scaled by
    1/(1 − p); the identity when not ``training`` or ``p == 0``.  The gradient is the
    same mask times the incoming gradient."""
    if not training or p == 0.0:
        return probs
    if probs.device.type != "cpu" or p >= 1.0:
        return F.dropout(probs, p, training=True)
    keep = torch.rand_like(probs)
    keep.ge_(p).mul_(1.0 / (1.0 - p))  # 0 or 1/(1 − p), in place on the draw
    return probs * keep
