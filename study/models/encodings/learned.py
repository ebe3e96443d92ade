"""Learned relative encoding (Cordonnier et al. 2020, Section 4.2), positional scores only:
score_h(δ) = w_h,rowᵀ r_row(δ1) + w_h,colᵀ r_col(δ2), any ``pos_dim`` ≥ 3
(:class:`~study.models.positional.LearnedScores`).  :class:`LearnedEncoding` is shared
with ``learned_content`` (the same tables, plus content scores).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from study.models.fields import AttentionConfig, ConfigError, PosDim

from .base import Encoding

#: the two forms of the learned encodings' positional score (Eq. 9's r_δ, scored per query or per head)
POSITIONAL_SCORE_DOC = "learned encodings: query (q_h·r_δ, the paper's content model) | head (w_h·r_δ)"

POSITIONAL_SCORES = ("query", "head")


class LearnedEncoding(Encoding):
    """Learned relative embeddings; ``positional_score`` says how a head scores them."""

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


class LearnedConfig(AttentionConfig):
    """A learned encoding's fields (Section 4.2): r_row, r_col of D_p each (default D), scored by a
    head's own keys (``head``) or its query (``query``, content attention only: q_h[:D/2]·r_row +
    q_h[D/2:]·r_col)."""

    spec: ClassVar[Encoding] = ENCODING
    encoding: Literal["learned"] = "learned"
    #: D_p, default the hidden size D (the paper's 400)
    pos_dim: PosDim = 400
    positional_score: Literal["query", "head"] = Field("head", description=POSITIONAL_SCORE_DOC)

    @model_validator(mode="before")
    @classmethod
    def _pos_dim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("pos_dim") is None:
            data = {**data, "pos_dim": data.get("hidden", cls.model_fields["hidden"].default)}
        if isinstance(data, dict) and data.get("positional_score", "") is None:
            data = {**data, "positional_score": cls.model_fields["positional_score"].default}
        return data

    @model_validator(mode="after")
    def _query_form(self):
        if not self.spec.content and self.positional_score != "head":
            raise ConfigError("positional_score", "query needs content attention (encoding learned_content)")
        if self.positional_score == "query" and self.pos_dim != self.hidden:
            raise ConfigError(
                "pos_dim",
                f"positional_score query dots r_delta with the query, so pos_dim must equal "
                f"hidden ({self.hidden}), got {self.pos_dim} (positional_score head takes any pos_dim)",
            )
        if self.positional_score == "query" and self.hidden % 2:
            raise ConfigError(
                "hidden",
                f"positional_score query splits the query in halves: hidden must be even, got {self.hidden}",
            )
        return self
