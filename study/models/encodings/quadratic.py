"""Quadratic encoding (Cordonnier et al. 2020, Eq. 9, Lemma 1): a Gaussian attention
centre per head, positional scores only (:class:`~study.models.positional.GaussianScores`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from study.models.fields import AttentionConfig, ConfigError, PosDim

from .base import Encoding


class Quadratic(Encoding):
    name = "quadratic"
    content = False
    variants = (("quadratic-iso", {"isotropic": True}), ("quadratic-noniso", {"isotropic": False}))
    equation = (
        "−½ s_h² ‖δ − Δ_h‖² (isotropic)"  # Eq. 9 with Σ⁻¹ = s² I
        " or −½ (δ − Δ_h)ᵀ A_h A_hᵀ (δ − Δ_h)"  # with Σ⁻¹ = A Aᵀ (non-isotropic)
    )

    def label(self, cfg):
        kind = "isotropic" if cfg.isotropic else "non-isotropic"
        return f"SA quadratic {kind} (N_h={cfg.num_heads})"

    def positional_macs(self, cfg, *, tokens, side):
        """r_δ·v_h (D_p products) once per shift of the (2S−1)² shifts and head."""
        return cfg.num_heads * (2 * side - 1) ** 2 * cfg.pos_dim

    def attention(self, cfg):
        from study.models.attention import RelativeSelfAttention
        from study.models.positional import GaussianScores

        return RelativeSelfAttention(
            dim=cfg.hidden,
            num_heads=cfg.num_heads,
            attention_dropout=cfg.attention_dropout,
            positional=GaussianScores(
                num_heads=cfg.num_heads,
                isotropic=cfg.isotropic,
                center_init_std=cfg.center_init_std,
                spread_init_std=cfg.spread_init_std,
            ),
        )


ENCODING = Quadratic()


class QuadraticConfig(AttentionConfig):
    """The quadratic encoding's fields: r_δ = (‖δ‖², δx, δy) (isotropic, D_p = 3) or with the cross
    terms δx², δy², δxδy of a full A_h A_hᵀ (non-isotropic, D_p = 5), Eq. 9."""

    spec: ClassVar[Encoding] = ENCODING
    encoding: Literal["quadratic"] = "quadratic"
    isotropic: bool = Field(True, description="quadratic heads: Σ⁻¹ = s²I (true) or A Aᵀ (false)")
    #: D_p follows from isotropic (3 or 5): given, it must agree
    pos_dim: PosDim = 3

    @model_validator(mode="before")
    @classmethod
    def _pos_dim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("pos_dim") is None:
            data = {**data, "pos_dim": 3 if data.get("isotropic", True) is not False else 5}
        return data

    @model_validator(mode="after")
    def _agrees(self):
        expected = 3 if self.isotropic else 5
        if self.pos_dim != expected:
            kind = "isotropic" if self.isotropic else "non-isotropic"
            raise ConfigError(
                "pos_dim", f"quadratic {kind} encoding has pos_dim {expected}, got {self.pos_dim!r}"
            )
        return self
