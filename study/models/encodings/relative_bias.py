"""Learned relative position bias (Swin Transformer, Liu et al., ICCV 2021, Eq. 4).

    score_h(q, k) = q_h·k_h/√d_h + B_h[δy, δx]

with B_h a learned (2S − 1) × (2S − 1) table per head, one window = the whole S × S grid;
init truncated normal, std 0.02, no weight decay (Swin's).  Swin indexes the table by
query − key; this one by δ = key − query, as every encoding here: B_h[δ] = Swin's entry
at −δ (the tests port Swin's weights with that flip, and check that skipping it fails).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from study.models.fields import AttentionConfig

from .base import AdditiveEncoding, Encoding


class RelativeBias(AdditiveEncoding):
    name = "relative_bias"
    no_weight_decay = ("table",)
    variants = (("relative_bias", {}),)
    equation = "q_h·k_h/√d + B_h[δy, δx], B_h a learned (2S−1)×(2S−1) table"

    def label(self, cfg):
        return f"SA relative bias (N_h={cfg.num_heads})"

    def positional_macs(self, cfg, *, tokens, side):
        """A table look-up per shift: no multiply-add."""
        return 0

    def init_parameters(self, layer):
        import torch
        from torch import nn

        s = layer.grid
        table = torch.empty(layer.num_heads, 2 * s - 1, 2 * s - 1)
        nn.init.trunc_normal_(table, std=0.02)
        layer.positional.table = nn.Parameter(table)  # [h, δy + S − 1, δx + S − 1]

    def bias_table(self, layer, height: int, width: int):
        """The learned table B_h[δy + S − 1, δx + S − 1], (N_h, 2S − 1, 2S − 1), for a height ×
        width
        grid within S × S (FlexAttention's ``score_mod`` reads it; scores are q·k/√d_h + B)."""
        s = layer.grid
        if height > s or width > s:
            raise ValueError(f"grid {height}x{width} exceeds the bias table's {s}x{s}")
        return layer.positional.table

    def bias(self, layer, height: int, width: int):
        """B_h[δy, δx] for every (query, key) pair: (N_h, T, T), row-major tokens."""
        from study.models.positional import relative_index

        table = self.bias_table(layer, height, width)
        s = layer.grid
        iy = relative_index(height, device=table.device) + s - height  # δy + S − 1
        ix = relative_index(width, device=table.device) + s - width
        b = table[:, iy[:, None, :, None], ix[None, :, None, :]]  # (N_h, qr, qc, kr, kc)
        t = height * width
        return b.reshape(layer.num_heads, t, t)

    def sdpa_inputs(self, layer, q, k, height, width):
        return q, k, self.bias(layer, height, width)

    def reference_probs(self, layer, q, k, height, width):
        """Swin's formulation (``study bench``'s einsum reference: the table gathered through a
        dense (T, T) index of shifts); ``q``, ``k`` unscaled (B, T, N_h, d_h)."""
        import torch

        from study.models.positional import relative_offsets

        s = layer.grid
        # (T, T, 2): (δy, δx) + S − 1
        delta = relative_offsets(height, width, device=q.device).long() + s - 1
        bias = layer.positional.table[:, delta[..., 0], delta[..., 1]]  # (N_h, T, T)
        return torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) * layer.scale + bias, -1)


ENCODING = RelativeBias()


class RelativeBiasConfig(AttentionConfig):
    """The relative bias has no field of its own (one (2S − 1)² table per head, S the grid)."""

    spec: ClassVar[Encoding] = ENCODING
    encoding: Literal["relative_bias"] = "relative_bias"
