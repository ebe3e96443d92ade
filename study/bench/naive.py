"""Naive reference formulation of the attention layer, for tests and the benchmark.

Deliberately unoptimised: dense scores for every image (B, N_h, T, T), fp32, and a
generic einsum for the weighted average, exactly the equations of
:mod:`study.models.attention` with no sharing, no factorisation and no dropout.
It is never used by training.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from study.models.attention import RelativeSelfAttention


def naive_attention_heads(layer: RelativeSelfAttention, x: Tensor) -> Tensor:
    """The concatenated heads before ``out_proj``, (B, T, N_h·D): dense per-image
    scores (B, N_h, T, T), softmax, generic einsum; no sharing, no dropout."""
    b, h, w, d = x.shape
    scores = layer.positional(h, w).expand(b, -1, -1, -1)
    if layer.content:
        q = layer.query(x).view(b, h * w, layer.num_heads, d)
        k = layer.key(x).view(b, h * w, layer.num_heads, d)
        scores = scores + torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    probs = F.softmax(scores, dim=-1)
    heads = torch.einsum("bhqk,bkd->bqhd", probs, x.reshape(b, h * w, d))
    return heads.reshape(b, h * w, -1)


def naive_relative_attention(layer: RelativeSelfAttention, x: Tensor) -> Tensor:
    """The same equations with dense per-image scores (B, N_h, T, T) and a
    generic einsum, no sharing and no dropout.  Used by tests and the benchmark."""
    b, h, w, _ = x.shape
    return layer.out_proj(naive_attention_heads(layer, x)).view(b, h, w, -1)
