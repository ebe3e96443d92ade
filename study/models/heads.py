"""What the attention layers share once each head has its probabilities (Eq. 5-6 of
the paper: MHSA(X) = concat_h[A_h X W_val] W_out + b_out, the value projection folded
into ``out_proj`` in the paper's layout).

* :func:`shared_value_heads` - every head averages the same (B, T, D) input: one
  (B, N_h·T, T) @ (B, T, D) product instead of N_h expanded copies of the input.
* :class:`HeadsLayer` - ``forward`` from a layer's ``head_outputs`` and ``out_proj``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def shared_value_heads(probs: Tensor, x: Tensor) -> Tensor:
    """(B, N_h, T, T) probabilities applied to one (B, T, D) input: (B, N_h, T, D)."""
    b, n, t, _ = probs.shape
    return torch.bmm(probs.reshape(b, n * t, t), x.reshape(b, t, -1)).view(b, n, t, -1)


class HeadsLayer(nn.Module):
    """An attention layer over a (B, H, W, D) grid that defines ``head_outputs(x,
    return_attention=...) -> ((B, T, ·) concatenated heads, probabilities or None)`` and
    an ``out_proj``."""

    out_proj: nn.Linear

    def forward(self, x: Tensor, *, return_attention: bool = False):
        b, h, w, _ = x.shape
        heads, probs = self.head_outputs(x, return_attention=return_attention)
        out = self.out_proj(heads).view(b, h, w, -1)
        return (out, probs) if return_attention else out
