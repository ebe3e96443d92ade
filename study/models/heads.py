"""What the attention layers share once each head has its probabilities (Eq. 5-6:
MHSA(X) = concat_h[A_h X W_val] W_out + b_out, W_val folded into ``out_proj``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def softmax32(scores: Tensor) -> Tensor:
    """Softmax over the last axis in at least float32 (scores may be bf16 under autocast)."""
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    return torch.softmax(scores, dim=-1)


def content_scores(q: Tensor, k: Tensor, bias: Tensor | None = None) -> Tensor:
    """q·kᵀ + bias, (B, N_h, T, T): q·kᵀ is added into the bias (broadcast to B, N_h) in place
    (``baddbmm_``): two passes over the T×T matrix."""
    b, n, t, d = q.shape
    if bias is None:
        return q @ k.transpose(-1, -2)
    scores = bias.to(q.dtype).expand(b, n, t, t).contiguous()
    scores.view(b * n, t, t).baddbmm_(q.reshape(b * n, t, d), k.reshape(b * n, t, d).transpose(1, 2))
    return scores


def shared_value_heads(probs: Tensor, x: Tensor) -> Tensor:
    """(B, N_h, T, T) probabilities applied to one (B, T, D) input: (B, N_h, T, D)."""
    b, n, t, _ = probs.shape
    return torch.bmm(probs.reshape(b, n * t, t), x.reshape(b, t, -1)).view(b, n, t, -1)


class HeadsLayer(nn.Module):
    """A layer with ``head_outputs(x, return_attention) -> ((B, T, ·) heads, probs | None)``
    and ``out_proj`` (and, for content attention, ``query``/``key`` of ``num_heads`` heads of
    width ``head_dim``)."""

    out_proj: nn.Linear

    def queries_keys(self, x: Tensor, *, scale: float | None = None) -> tuple[Tensor, Tensor]:
        """q and k as (B, N_h, T, d_h) views; ``scale`` multiplies the query projection's
        weight and bias (the same values, one small multiply: no (B, N_h, T, d_h) tensor scaled)."""
        b, h, w, _ = x.shape
        t, n = h * w, self.num_heads
        weight, bias = self.query.weight, self.query.bias
        if scale is not None:
            weight, bias = weight * scale, (bias * scale if bias is not None else None)
        q = F.linear(x, weight, bias).view(b, t, n, self.head_dim).transpose(1, 2)
        k = self.key(x).view(b, t, n, self.head_dim).transpose(1, 2)
        return q, k

    def forward(self, x: Tensor, *, return_attention: bool = False):
        b, h, w, _ = x.shape
        heads, probs = self.head_outputs(x, return_attention=return_attention)
        out = self.out_proj(heads).view(b, h, w, -1)
        return (out, probs) if return_attention else out
