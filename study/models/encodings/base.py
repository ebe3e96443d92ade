"""What an encoding does (one file per encoding): :meth:`label`, :meth:`positional_macs` (from its
equations), ``content``, the :meth:`attention` layer of one block and the ``variants`` a test or study
must cover.  Its fields, their bounds and its rules are its configuration's, declared beside it in the
same file (a member of :class:`~study.models.fields.AttentionConfig` whose ``spec`` is the encoding).
Pure Python at import time: no torch to read configs or count MACs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from study.models.fields import ModelConfig


class Encoding:
    #: the value of ``ModelConfig.encoding``
    name: str = ""
    #: scores depend on the image (content attention, q·k)
    content: bool = True
    #: (id, overrides): every distinct form, for tests and documentation
    variants: tuple[tuple[str, dict[str, Any]], ...] = ()
    #: one line for ``study models`` / docs/design.md §4-5: the score of head h for shift δ
    equation: str = ""

    def label(self, cfg: ModelConfig) -> str:
        raise NotImplementedError

    def positional_macs(self, cfg: dict[str, Any], *, tokens: int, side: int) -> int:
        """MACs of the positional scores of one layer for one image (``study.models.cost``'s
        convention: per image-dependent pair, or once per shift when image-independent)."""
        raise NotImplementedError

    def attention(self, cfg: ModelConfig) -> nn.Module:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<encoding {self.name}>"


class ContentEncoding(Encoding):
    """An encoding of :class:`~study.models.encoded.EncodedAttention`: parameters in the
    layer's ``positional`` (:meth:`init_parameters`), :meth:`probs` (B, N_h, T, T) from the
    scaled queries q/√d_h and keys (B, N_h, T, d_h)."""

    #: names under ``positional`` trained without weight decay
    no_weight_decay: tuple[str, ...] = ()

    def options(self, cfg: ModelConfig) -> dict[str, Any]:
        """Keyword arguments of :meth:`init_parameters` from a configuration."""
        return {}

    def init_parameters(self, layer, **options) -> None:
        raise NotImplementedError

    def probs(self, layer, q, k, height: int, width: int):
        raise NotImplementedError

    def head_columns(self, layer) -> dict[str, Any]:
        """Per-head values for the ``heads`` table (tensors of length N_h)."""
        return {}

    def attention(self, cfg):
        from study.models.encoded import EncodedAttention

        return EncodedAttention(
            dim=cfg.hidden,
            num_heads=cfg.num_heads,
            encoding=self,
            grid=cfg.grid,
            attention_dropout=cfg.attention_dropout,
            **self.options(cfg),
        )


class AdditiveEncoding(ContentEncoding):
    """Scores q'·k'ᵀ/√d_h + B (an additive (N_h, T, T) bias or none): :meth:`sdpa_inputs`
    returns (q', k', B) as ``scaled_dot_product_attention`` takes them."""

    def sdpa_inputs(self, layer, q, k, height: int, width: int):
        raise NotImplementedError

    def probs(self, layer, q, k, height, width):
        q, k, bias = self.sdpa_inputs(layer, q, k, height, width)
        return softmax_scores(q, k, bias)


def softmax_scores(q, k, bias=None):
    """softmax(q·kᵀ + bias) in at least float32, (B, N_h, T, T)."""
    from study.models.heads import content_scores, softmax32

    return softmax32(content_scores(q, k, bias))
