"""Gated positional self-attention, GPSA (ConViT, d'Ascoli et al., ICML 2021, Eq. 5-6).

Per head h, with r_δ = (δx, δy, δx² + δy²) for the shift δ = key − query:

    A_h = renorm[(1 − σ(λ_h)) softmax(q_h·k_h/√d_h) + σ(λ_h) softmax(v_hᵀ r_δ + b_h)]

renorm divides each row by its sum (ConViT does; the sum is 1 up to rounding, so the
layer skips it and its einsum reference keeps it); v_h ∈ R³ and b_h (ConViT's
``pos_proj = Linear(3, N_h)``) and the gate λ_h (init 1, ``gating_param``) are learned.

Convolutional initialisation (ConViT's ``local_init``): centres Δ_h on the √N_h × √N_h
lattice of :func:`study.models.positional.lattice_offsets`, v_h = α (2Δ_h,x, 2Δ_h,y, −1) (α the
locality strength): v_hᵀ r_δ = −α‖δ − Δ_h‖² + α‖Δ_h‖², the paper's isotropic quadratic
head with s_h² = 2α (Lemma 2); gated fully positional with α large, the convolution of
Lemma 1 (tested).  ConViT's W_v = I is the paper's layout without W_v, the same map.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from study.models.fields import AttentionConfig, ConfigError

from .base import ContentEncoding, Encoding

#: α initialises v_h = α (2Δ_h, −1) so the positional score is α (2Δ_h·δ − ‖δ‖²): on the
#: paper's
#: 16×16 grid (‖δ‖ ≤ 15√2, ‖δ‖² ≤ 450) α ≤ 100 keeps it within 5·10⁴, and within
#: 4·10⁸ on the
#: largest grid a config allows (1024 tokens a side): far inside float32/bf16 (3·10³⁸), the
#: softmax (in float32) finite.  α ≥ 10⁻⁴: below it the initial positional attention is
#: uniform to 0.1% on the paper's grid (no convolutional initialisation left) and, in
#: float32, soon denormal or 0.  ConViT uses 1.
LocalityStrength = Annotated[
    float,
    Field(
        ge=1e-4,
        le=1e2,
        description="gpsa: α of the convolutional initialisation (ConViT: 1)",
        json_schema_extra={"metavar": "ALPHA"},
    ),
]


class Gpsa(ContentEncoding):
    name = "gpsa"
    variants = (("gpsa", {}),)
    equation = (
        "(1 − σ(λ_h)) softmax(q_h·k_h/√d) + σ(λ_h) softmax(v_hᵀ r_δ),"  # ConViT Eq. 5-6
        " r_δ = (δx, δy, ‖δ‖²)"  # the quadratic encoding's r_δ (Eq. 9)
    )

    def label(self, cfg):
        return f"SA GPSA (N_h={cfg.num_heads})"

    def positional_macs(self, cfg, *, tokens, side):
        """v_hᵀ r_δ (3 products) once per shift of the (2S−1)² shifts and head."""
        return cfg.num_heads * (2 * side - 1) ** 2 * 3

    def options(self, cfg):
        return {"locality_strength": float(cfg.locality_strength)}

    def init_parameters(self, layer, *, locality_strength: float = 1.0, gate: float = 1.0):
        import torch
        from torch import nn

        from study.models.positional import lattice_offsets

        n = layer.num_heads
        pos = layer.positional
        centres = lattice_offsets(round(n**0.5))  # (N_h, 2) as (row, col)
        dy, dx = centres[:, 0], centres[:, 1]
        weight = locality_strength * torch.stack([2 * dx, 2 * dy, -torch.ones(n, dtype=dx.dtype)], dim=1)
        pos.weight = nn.Parameter(weight.float())  # (N_h, 3): v_h
        pos.bias = nn.Parameter(torch.zeros(n))  # b_h (ConViT's pos_proj bias)
        pos.gate = nn.Parameter(torch.full((n,), float(gate)))  # λ_h

    @staticmethod
    def relative_features(height: int, width: int, *, device=None, dtype=None):
        """r_δ = (δx, δy, δx² + δy²) for every (query, key) pair: (T, T, 3), row-major tokens."""
        import torch

        from study.models.positional import relative_offsets

        dy, dx = relative_offsets(height, width, device=device).to(dtype).unbind(-1)  # exact integers
        return torch.stack([dx, dy, dx * dx + dy * dy], dim=-1)

    def positional_probs(self, layer, height: int, width: int):
        """softmax_k(v_hᵀ r_δ + b_h): (N_h, T, T), one matrix for the batch, in at least float32."""
        import torch

        pos = layer.positional
        t = height * width
        dtype = torch.promote_types(pos.weight.dtype, torch.float32)
        r = self.relative_features(height, width, device=pos.weight.device, dtype=dtype).view(t * t, 3)
        scores = torch.addmm(pos.bias.to(dtype), r, pos.weight.to(dtype).t())  # (T·T, N_h)
        return torch.softmax(scores.t().reshape(-1, t, t), dim=-1)

    def probs(self, layer, q, k, height, width):
        import torch

        from .base import softmax_scores

        content = softmax_scores(q, k)  # (B, N_h, T, T)
        positional = self.positional_probs(layer, height, width)
        g = torch.sigmoid(layer.positional.gate.to(content.dtype))[:, None, None]
        # (1 − g)·c + g·p; ConViT's renormalisation skipped (module doc)
        return torch.lerp(content, positional.to(content.dtype).expand_as(content), g)

    def reference_probs(self, layer, q, k, height, width):
        """ConViT's formulation (``study bench``'s einsum reference, with the renorm); ``q``
        and ``k`` unscaled (B, T, N_h, d_h)."""
        import torch

        pos = layer.positional
        r = self.relative_features(height, width, device=q.device, dtype=q.dtype)  # (T, T, 3)
        positional = torch.softmax(torch.einsum("qkc,hc->hqk", r, pos.weight) + pos.bias[:, None, None], -1)
        content = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) * layer.scale, -1)
        g = torch.sigmoid(pos.gate)[:, None, None]
        mixed = (1.0 - g) * content + g * positional
        return mixed / mixed.sum(-1, keepdim=True)

    def head_columns(self, layer):
        import torch

        return {"gate": torch.sigmoid(layer.positional.gate.detach())}


ENCODING = Gpsa()


class GpsaConfig(AttentionConfig):
    """GPSA's fields: r_δ = (δx, δy, ‖δ‖²), so D_p = 3; α of the convolutional initialisation."""

    spec: ClassVar[Encoding] = ENCODING
    encoding: Literal["gpsa"] = "gpsa"
    #: GPSA scores r_δ = (δx, δy, δx² + δy²): D_p is 3
    pos_dim: Literal[3] = Field(3, description="D_p of r_δ = (δx, δy, δx² + δy²): 3")
    locality_strength: LocalityStrength = 1.0

    @model_validator(mode="after")
    def _square(self):
        side = round(self.num_heads**0.5)
        if side * side != self.num_heads:
            raise ConfigError(
                "num_heads",
                f"gpsa's convolutional initialisation puts the heads on a sqrt(N_h) x sqrt(N_h) "
                f"lattice: num_heads must be a square (1, 4, 9, 16, ...), got {self.num_heads}",
            )
        return self
