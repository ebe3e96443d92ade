"""A user's own encoding, outside the ``study`` package (tests/plugin_encoding/README.md): 2-D ALiBi, a
fixed linear distance penalty per head added to content scores (Press et al., ICLR 2022, Eq. 1, with the
1-D distance |i − j| replaced by the Manhattan distance of the shift δ = key − query):

    score_h(q, k) = q_h·k_h/√d_h − m_h (|δy| + |δx|),   m_h = alibi_slope · 2^(−8h/N_h)

(ALiBi's geometric slopes, h = 0 … N_h − 1, scaled so the steepest head has slope ``alibi_slope``).  It
declares what every encoding declares: its behaviour (an :class:`AdditiveEncoding`) and its configuration
(a member of :class:`AttentionConfig`: its field, bounds and rule), and registers by being imported.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from study.models.encodings.base import AdditiveEncoding, Encoding
from study.models.fields import AttentionConfig


class Alibi2d(AdditiveEncoding):
    name = "alibi2d"
    variants = (("alibi2d", {}),)
    equation = "q_h·k_h/√d − m_h (|δy| + |δx|), m_h = m·2^(−8h/N_h)"

    def label(self, cfg):
        return f"SA ALiBi-2D (N_h={cfg.num_heads})"

    def positional_macs(self, cfg, *, tokens, side):
        """m_h times a distance, once per shift of the (2S−1)² shifts and head."""
        return cfg.num_heads * (2 * side - 1) ** 2

    def options(self, cfg):
        return {"slope": cfg.alibi_slope}

    def init_parameters(self, layer, *, slope: float = 1.0):
        import torch

        h = torch.arange(layer.num_heads, dtype=torch.float32)
        layer.positional.register_buffer("slopes", slope * 2.0 ** (-8.0 * h / layer.num_heads))

    def sdpa_inputs(self, layer, q, k, height, width):
        from study.models.positional import relative_offsets

        delta = relative_offsets(height, width, device=q.device).abs().sum(-1)  # (T, T): |δy| + |δx|
        return q, k, -layer.positional.slopes[:, None, None] * delta


ENCODING = Alibi2d()


class Alibi2dConfig(AttentionConfig):
    """2-D ALiBi's one field: the steepest head's slope."""

    spec: ClassVar[Encoding] = ENCODING
    encoding: Literal["alibi2d"] = "alibi2d"
    #: m ≤ 10: the nearest neighbour then trails by 10 in the score (e^−10 ≈ 5e-5), near one-hot, and the
    #: farthest key on the largest grid (2 × 1023 steps) by 2·10⁴, within float32; m ≥ 10⁻³: below, the
    #: penalty across the paper's 16×16 grid (30 steps) is under 0.03, no locality left
    alibi_slope: Annotated[
        float, Field(ge=1e-3, le=10.0, description="alibi2d: m, the steepest head's slope")
    ] = 1.0
