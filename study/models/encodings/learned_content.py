"""Learned relative embeddings plus content attention (Cordonnier et al. 2020, Eq. 7).

``positional_score: query`` (default; Ramachandran et al. 2019, the paper's 29.5M Table 1
model, :class:`~study.models.positional.QueryScores`):
score_h = [q_h[:D/2]·r_row(δ1) + q_h[D/2:]·r_col(δ2) + q_h·k_h] / √D, ``pos_dim`` = D.
``positional_score: head`` (the original's first version, 29.6M):
score_h = w_h,rowᵀ r_row(δ1) + w_h,colᵀ r_col(δ2) + q_h·k_h/√D, any ``pos_dim`` ≥ 3.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import Encoding
from .learned import POSITIONAL_SCORE_DOC, LearnedConfig, LearnedEncoding


class LearnedContent(LearnedEncoding):
    name = "learned_content"
    variants = (("learned_content", {}),)
    equation = "[q_h[:D/2]·r_row[δ1] + q_h[D/2:]·r_col[δ2] + q_h·k_h]/√D (query form)"

    def label(self, cfg):
        head = " head-keys" if cfg.positional_score == "head" else ""
        return f"SA learned+content{head} (N_h={cfg.num_heads}, D_p={cfg.pos_dim})"

    def legacy_defaults(self, row):
        """A ``runs`` row without ``positional_score`` predates it: its content model was
        the head form."""
        return {} if "positional_score" in row else {"positional_score": "head"}


ENCODING = LearnedContent()


class LearnedContentConfig(LearnedConfig):
    """The learned encoding with content attention: the query form by default (the paper's Table 1 model)."""

    spec: ClassVar[Encoding] = ENCODING
    encoding: Literal["learned_content"] = "learned_content"
    positional_score: Literal["query", "head"] = Field("query", description=POSITIONAL_SCORE_DOC)
