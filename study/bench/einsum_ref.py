"""A second reference for ``study bench`` (docs/performance.md, "`study bench`"): the same
equations as plain einsums, the way the original implementation (epfml/attention-cnn) computes
them, with the layer's dropout, the positional probabilities shared over the batch (one
(N_h, T, T) matrix, one mask) and the query positional scores from per-axis tables
(H, H, D/2) and (W, W, D/2) instead of a (T, T, D) tensor:

* positional only:  P = softmax(pos) (N_h, T, T);  head = einsum('hqk,bkd->bqhd', P, X)
* content, head form:   A = einsum('bqhd,bkhd->bhqk', q, k)/√D + w·r_δ
* content, query form:  A = [einsum('bijhd,ikd->bhijk', q[:D/2], r_row[kr−qr])
  ⊕ einsum('bijhd,jld->bhijl', q[D/2:], r_col[kc−qc]) + einsum(q, k)] / √D

then softmax, dropout, head = einsum('bhqk,bkd->bqhd', P, X).  Never used by training.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from study.models.attention import RelativeSelfAttention
from study.models.encoded import EncodedAttention
from study.models.positional import relative_index

EINSUM_PATH = "einsum reference (the original's formulation), dropout as the layer"


def einsum_attention_heads(layer: RelativeSelfAttention, x: Tensor) -> Tensor:
    """The concatenated heads before ``out_proj``, (B, T, N_h·D)."""
    if isinstance(layer, EncodedAttention):
        return encoded_reference_heads(layer, x, dropout=True)
    b, h, w, d = x.shape
    t, n = h * w, layer.num_heads
    xf = x.reshape(b, t, d)
    if not layer.content:
        probs = layer.attention_dropout(torch.softmax(layer.positional(h, w), -1))
        return torch.einsum("hqk,bkd->bqhd", probs, xf).reshape(b, t, n * d)
    q = layer.query(x).view(b, h, w, n, d)
    k = layer.key(x).view(b, h, w, n, d)
    scores = torch.einsum("bijhd,bklhd->bhijkl", q, k)
    if layer.query_positional:
        pos = layer.positional
        s = pos.max_size
        r_row = pos.row_embeddings.weight[relative_index(h, device=x.device) + s - h]  # (H, H, D/2)
        r_col = pos.col_embeddings.weight[relative_index(w, device=x.device) + s - w]  # (W, W, D/2)
        half = d // 2
        rows = torch.einsum("bijhd,ikd->bhijk", q[..., :half], r_row)
        cols = torch.einsum("bijhd,jld->bhijl", q[..., half:], r_col)
        scores = (scores + rows[..., :, None] + cols[..., None, :]) / math.sqrt(d)
    else:
        scores = scores / math.sqrt(d) + layer.positional(h, w).view(n, h, w, h, w)
    probs = layer.attention_dropout(torch.softmax(scores.reshape(b, n, t, t), -1))
    return torch.einsum("bhqk,bkd->bqhd", probs, xf).reshape(b, t, n * d)


def encoded_reference_heads(layer: EncodedAttention, x: Tensor, *, dropout: bool) -> Tensor:
    """Today's encodings written as their papers' code writes them: unscaled q, k per head by
    ``Linear`` and ``view``, the encoding's ``reference_probs`` (plain einsums of its
    equation), ``nn.Dropout`` (if ``dropout``), heads by einsum; (B, T, N_h·d_v)."""
    b, h, w, d = x.shape
    t, n, dh = h * w, layer.num_heads, layer.head_dim
    q = layer.query(x).view(b, t, n, dh)
    k = layer.key(x).view(b, t, n, dh)
    probs = layer.encoding.reference_probs(layer, q, k, h, w)
    if dropout:
        probs = layer.attention_dropout(probs)
    if layer.value is None:
        return torch.einsum("bhqk,bkd->bqhd", probs, x.reshape(b, t, d)).reshape(b, t, n * d)
    v = layer.value(x).view(b, t, n, dh)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, n * dh)


def einsum_relative_attention(layer: RelativeSelfAttention, x: Tensor) -> Tensor:
    b, h, w, _ = x.shape
    return layer.out_proj(einsum_attention_heads(layer, x)).view(b, h, w, -1)
