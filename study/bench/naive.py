"""Naive reference formulation of the attention layer, for tests and the benchmark:
exactly the equations of :mod:`study.models.attention` with dense per-image scores
(B, N_h, T, T), no sharing, no factorisation and no dropout.  Never used by training.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from study.models.attention import RelativeSelfAttention
from study.models.positional import relative_offsets


def naive_attention_heads(layer: RelativeSelfAttention, x: Tensor) -> Tensor:
    """The concatenated heads before ``out_proj``, (B, T, N_h·D)."""
    from study.bench.einsum_ref import encoded_reference_heads
    from study.models.encoded import EncodedAttention

    if isinstance(layer, EncodedAttention):  # today's encodings: their papers' formulation, no dropout
        return encoded_reference_heads(layer, x, dropout=False)
    b, h, w, d = x.shape
    if layer.content:
        q = layer.query(x).view(b, h * w, layer.num_heads, d)
        k = layer.key(x).view(b, h * w, layer.num_heads, d)
        qk = torch.einsum("bqhd,bkhd->bhqk", q, k)
        # [q·r_δ + q·k] / √D, r_δ = [r_row(δ1); r_col(δ2)] per pair: dense (T, T, D)
        if layer.query_positional:
            pos = layer.positional
            delta = relative_offsets(h, w, device=pos.row_embeddings.weight.device).long() + pos.max_size - 1
            r = torch.cat(
                [pos.row_embeddings.weight[delta[..., 0]], pos.col_embeddings.weight[delta[..., 1]]], -1
            )
            scores = (torch.einsum("bqhd,qkd->bhqk", q, r) + qk) / math.sqrt(d)
        else:  # w·r_δ + q·k / √D
            scores = layer.positional(h, w).expand(b, -1, -1, -1) + qk / math.sqrt(d)
    else:
        scores = layer.positional(h, w).expand(b, -1, -1, -1)
    probs = F.softmax(scores, dim=-1)
    heads = torch.einsum("bhqk,bkd->bqhd", probs, x.reshape(b, h * w, d))
    return heads.reshape(b, h * w, -1)


def naive_relative_attention(layer: RelativeSelfAttention, x: Tensor) -> Tensor:
    b, h, w, _ = x.shape
    return layer.out_proj(naive_attention_heads(layer, x)).view(b, h, w, -1)
