"""What the attention layers share once each head has its probabilities (Eq. 5-6:
MHSA(X) = concat_h[A_h X W_val] W_out + b_out, W_val folded into ``out_proj``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def shared_value_heads(probs: Tensor, x: Tensor) -> Tensor:
    """(B, N_h, T, T) probabilities applied to one (B, T, D) input: (B, N_h, T, D)."""
    b, n, t, _ = probs.shape
    return torch.bmm(probs.reshape(b, n * t, t), x.reshape(b, t, -1)).view(b, n, t, -1)


class HeadsLayer(nn.Module):
    """A layer with ``head_outputs(x, return_attention) -> ((B, T, ·) heads, probs | None)``
    and ``out_proj``."""

    out_proj: nn.Linear

    def forward(self, x: Tensor, *, return_attention: bool = False):
        b, h, w, _ = x.shape
        heads, probs = self.head_outputs(x, return_attention=return_attention)
        out = self.out_proj(heads).view(b, h, w, -1)
        return (out, probs) if return_attention else out
