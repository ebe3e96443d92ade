"""Quadratic encoding (Cordonnier et al. 2020, Eq. 9, Lemma 1): a Gaussian attention
centre per head, positional scores only (:class:`~study.models.positional.GaussianScores`).
"""

from __future__ import annotations

from .base import Encoding, Field


class Quadratic(Encoding):
    name = "quadratic"
    content = False
    fields = (
        Field("isotropic", bool, True, "quadratic heads: Σ⁻¹ = s²I (true) or A Aᵀ (false)"),
        Field("pos_dim", int, None, "D_p, dimension of the relative positional encoding r_δ", metavar="D_p"),
    )
    variants = (("quadratic-iso", {"isotropic": True}), ("quadratic-noniso", {"isotropic": False}))
    equation = "−½ s_h² ‖δ − Δ_h‖² (isotropic) or −½ (δ − Δ_h)ᵀ A_h A_hᵀ (δ − Δ_h)"

    def normalise(self, cfg, set_):
        from study.models.config import ConfigError, bool_field

        if cfg.isotropic is None:
            set_("isotropic", True)
        bool_field(cfg, "isotropic")
        expected = 3 if cfg.isotropic else 5
        if cfg.pos_dim is None:
            set_("pos_dim", expected)
        elif cfg.pos_dim != expected:
            kind = "isotropic" if cfg.isotropic else "non-isotropic"
            raise ConfigError(
                "pos_dim", f"quadratic {kind} encoding has pos_dim {expected}, got {cfg.pos_dim!r}"
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
