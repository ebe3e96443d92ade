"""Layers of the paper's attention-only network (Section 4, Appendix B): the 2×2
space-to-depth stem and the BERT post-LN encoder block."""

from __future__ import annotations

from torch import Tensor, nn

LAYER_NORM_EPS = 1e-12  # BERT's value, kept by the original code


class SpaceToDepth(nn.Module):
    """Invertible 2×2 downsampling: (B, C, H, W) → channels-last (B, H/k, W/k, k·k·C),
    features ordered (row offset, column offset, channel) as the original
    ``downsample_concatenate``."""

    def __init__(self, *, block: int = 2):
        super().__init__()
        self.block = block

    def forward(self, images: Tensor) -> Tensor:
        b, c, h, w = images.shape
        k = self.block
        x = images.permute(0, 2, 3, 1).reshape(b, h // k, k, w // k, k, c)
        return x.permute(0, 1, 3, 2, 4, 5).reshape(b, h // k, w // k, k * k * c)


class FeedForward(nn.Module):
    """Linear(D → D_ff), GELU (erf), Linear(D_ff → D)."""

    def __init__(self, *, dim: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.up(x)))


class EncoderBlock(nn.Module):
    """BERT post-LN block: x ← LN(x + Drop(Dense(MHSA(x)))); x ← LN(x + Drop(FFN(x)))."""

    def __init__(self, *, dim: int, intermediate: int, attention: nn.Module, dropout: float = 0.1):
        super().__init__()
        self.attention = attention
        self.attention_dense = nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.feed_forward = FeedForward(dim=dim, hidden=intermediate)
        self.output_norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, return_attention: bool = False):
        attn = self.attention(x, return_attention=return_attention)
        if return_attention:
            attn, probs = attn
        x = self.attention_norm(x + self.dropout(self.attention_dense(attn)))
        x = self.output_norm(x + self.dropout(self.feed_forward(x)))
        return (x, probs) if return_attention else x
