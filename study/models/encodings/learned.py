"""Learned relative encoding (Cordonnier et al. 2020, Section 4.2), positional scores only:
score_h(δ) = w_h,rowᵀ r_row(δ1) + w_h,colᵀ r_col(δ2), any ``pos_dim`` ≥ 3
(:class:`~study.models.positional.LearnedScores`).  :class:`LearnedEncoding` is shared
with ``learned_content`` (the same tables, plus content scores).
"""

from __future__ import annotations

from .base import Encoding, Field

POSITIONAL_SCORES = ("query", "head")
MIN_LEARNED_POS_DIM = 3


class LearnedEncoding(Encoding):
    """Learned relative embeddings; ``positional_score`` says how a head scores them."""

    fields = (
        Field("pos_dim", int, None, "D_p, dimension of the relative positional encoding r_δ", metavar="D_p"),
        Field(
            "positional_score",
            str,
            None,
            "learned encodings: query (q_h·r_δ, the paper's content model) | head (w_h·r_δ)",
            choices=POSITIONAL_SCORES,
        ),
    )
    default_score = "head"

    def normalise(self, cfg, set_):
        from study.models.config import ConfigError, choice_field, int_at_least

        if cfg.positional_score is None:
            set_("positional_score", self.default_score)
        choice_field(cfg, "positional_score", POSITIONAL_SCORES)
        v = cfg.positional_score
        if not self.content and v != "head":
            raise ConfigError("positional_score", "query needs content attention (encoding learned_content)")
        if cfg.pos_dim is None:
            set_("pos_dim", cfg.hidden)
        int_at_least(cfg, "pos_dim")
        if cfg.pos_dim < MIN_LEARNED_POS_DIM:
            raise ConfigError(
                "pos_dim", f"learned encodings need pos_dim >= {MIN_LEARNED_POS_DIM}, got {cfg.pos_dim}"
            )
        if v == "query" and cfg.pos_dim != cfg.hidden:
            raise ConfigError(
                "pos_dim",
                f"positional_score query dots r_delta with the query, so pos_dim must equal "
                f"hidden ({cfg.hidden}), got {cfg.pos_dim} (positional_score head takes any pos_dim)",
            )
        if v == "query" and cfg.hidden % 2:
            raise ConfigError(
                "hidden",
                f"positional_score query splits the query in halves: hidden must be even, got {cfg.hidden}",
            )

    def positional_macs(self, cfg, *, tokens, side):
        """Head form: w_rowᵀ r_row(δ1) and w_colᵀ r_col(δ2) (D_p each) per row and column
        shift, 2·(2S−1) per head.  Query form: q_h[:D/2]·r_row(δ1) and q_h[D/2:]·r_col(δ2)
        once per query and row / column shift, T·(2S−1)·D per head."""
        shifts = 2 * side - 1
        if cfg.positional_score == "query":
            return cfg.num_heads * tokens * shifts * cfg.pos_dim
        return cfg.num_heads * 2 * shifts * cfg.pos_dim

    def attention(self, cfg):
        from study.models.attention import RelativeSelfAttention
        from study.models.positional import LearnedScores, QueryScores

        scores = QueryScores if cfg.positional_score == "query" else LearnedScores
        return RelativeSelfAttention(
            dim=cfg.hidden,
            num_heads=cfg.num_heads,
            attention_dropout=cfg.attention_dropout,
            content=self.content,
            positional=scores(num_heads=cfg.num_heads, pos_dim=cfg.pos_dim, max_size=cfg.grid),
        )


class Learned(LearnedEncoding):
    name = "learned"
    content = False
    variants = (("learned", {}),)
    equation = "w_h,rowᵀ r_row[δ1] + w_h,colᵀ r_col[δ2]"

    def label(self, cfg):
        return f"SA learned (N_h={cfg.num_heads}, D_p={cfg.pos_dim})"


ENCODING = Learned()
