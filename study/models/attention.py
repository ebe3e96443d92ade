"""Multi-head self-attention with relative positional scores (Eq. 5-7 of the paper).

Each head returns the attention-weighted average of the raw input (head dimension =
input dimension: W_val is folded into the output projection, as in the original
code and in Lemma 1); heads are concatenated and projected by ``out_proj``
(``Linear(N_h·D → D_out)``, the original's ``value``):

    MHSA(X)_q = Σ_h  (Σ_k softmax_k(A_h[q, :])_k · X_k) W_out,hᵀ + b_out

with A_h = positional scores (image independent) plus, for content attention,
q·k/√D with ``query``/``key`` = ``Linear(D → N_h·D)``.

Positional-only attention computes one (N_h, T, T) probability matrix per forward,
shared by the whole batch; attention-probability dropout then draws one mask per
step on that shared matrix, as the original implementation did.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class RelativeSelfAttention(nn.Module):
    """MHSA over a 2-D token grid with a pluggable positional score module.

    Args:
        dim: input (and per-head value) dimension D.
        num_heads: N_h.
        positional: module mapping (height, width) → scores (N_h, T, T)
            (:class:`~study.models.positional.GaussianScores` or ``LearnedScores``).
        content: add content scores q·k/√D (``learned_content`` encoding).
        out_dim: output dimension (default ``dim``).
        attention_dropout: dropout on the attention probabilities.

    ``forward(x)`` takes channels-last ``(B, H, W, D)`` and returns ``(B, H, W, out_dim)``;
    with ``return_attention=True`` also the probabilities, ``(1, N_h, T, T)`` for
    positional-only attention (shared by the batch) or ``(B, N_h, T, T)`` with content.
    """

    def __init__(
        self, *, dim: int, num_heads: int, positional: nn.Module, content: bool = False,
        out_dim: int | None = None, attention_dropout: float = 0.0,
    ):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.positional = positional
        self.content = content
        if content:
            self.query = nn.Linear(dim, num_heads * dim)
            self.key = nn.Linear(dim, num_heads * dim)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.out_proj = nn.Linear(num_heads * dim, out_dim or dim)

    def attention_scores(self, x: Tensor) -> Tensor:
        """Pre-softmax scores: (N_h, T, T) positional, or (B, N_h, T, T) with content."""
        b, h, w, d = x.shape
        scores = self.positional(h, w)
        if self.content:
            t = h * w
            q = self.query(x).view(b, t, self.num_heads, d).transpose(1, 2)
            k = self.key(x).view(b, t, self.num_heads, d).transpose(1, 2)
            scores = scores.to(q.dtype) + (q @ k.transpose(-1, -2)) / math.sqrt(d)
        return scores

    def attention_probs(self, x: Tensor) -> Tensor:
        """Softmax over all keys of the image, before dropout; see ``attention_scores``.
        Computed in at least float32 (scores may be bf16 under autocast)."""
        scores = self.attention_scores(x)
        if scores.dtype in (torch.float16, torch.bfloat16):
            scores = scores.float()
        return torch.softmax(scores, dim=-1)

    def forward(self, x: Tensor, *, return_attention: bool = False):
        b, h, w, d = x.shape
        t = h * w
        probs = self.attention_probs(x)
        dropped = self.attention_dropout(probs).to(x.dtype)
        tokens = x.reshape(b, t, d)
        if self.content:  # (B, N_h, T, T) @ (B, 1, T, D) -> (B, N_h, T, D)
            heads = dropped @ tokens[:, None]
            heads = heads.permute(0, 2, 1, 3)
        else:  # one shared (N_h·T, T) matrix times every image: (N_h·T, T) @ (T, B·D)
            flat = tokens.permute(1, 0, 2).reshape(t, b * d)
            heads = (dropped.reshape(self.num_heads * t, t) @ flat).view(self.num_heads, t, b, d)
            heads = heads.permute(2, 1, 0, 3)
        out = self.out_proj(heads.reshape(b, t, self.num_heads * d)).view(b, h, w, -1)
        if return_attention:
            return out, (probs if self.content else probs[None])
        return out

    def no_weight_decay(self) -> set[str]:
        """Gaussian centres and spreads are excluded from weight decay (paper, App. B)."""
        if hasattr(self.positional, "centers"):
            return {"positional.centers", "positional.spreads"}
        return set()

