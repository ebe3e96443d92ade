"""2-D rotary position embedding (RoPE for vision, Heo et al., ECCV 2024, Eq. 10-13).

Each channel pair i = (2i, 2i+1) of a head's queries and keys is rotated by an angle of
the token's position p = (x, y) (column, row): q̃_h,i(p) = R(θ_h,i(p)) q_h,i, k̃ likewise,
score_h = q̃_h·k̃_h/√d_h, so q̃·k̃ depends on δ = p_k − p_q only: R(a)ᵀR(b) = R(b − a).

* ``axial`` (fixed): the first d_h/4 pairs rotate by x·f_i, the last by y·f_i,
  f_i = θ^(−4i/d_h) (``rope_theta`` θ, default 100 as Heo et al.).
* ``mixed`` (learned per layer and head, no weight decay): θ_h,i(p) = f^x_h,i·x + f^y_h,i·y,
  init magnitudes θ^(−4j/d_h) (θ default 10) in a random direction per head (Heo et al.'s
  ``init_random_2d_freqs``).

Pairs are interleaved (channels 2i, 2i+1) as in timm's ``apply_rot_embed``; d_h % 4 == 0.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from study.models.fields import AttentionConfig, ConfigError

from .base import AdditiveEncoding, Encoding

MODES = ("axial", "mixed")
DEFAULT_THETA = {"axial": 100.0, "mixed": 10.0}


#: θ gives the frequencies f_i = θ^(−4i/d_h), i < d_h/4.  θ ≥ 1: f_i ≤ 1 rad per token (θ < 1
#: makes them grow to 1/θ: θ = 1e-300 overflows float32 to inf and the angles x·f to NaN).
#: θ ≤ 10⁶: the lowest frequency, about 1/θ, still turns a channel pair by more than float32's
#: resolution across the grid (beyond, those pairs are not rotated at all).  Heo et al.: 100, 10.
RopeTheta = Annotated[
    float, Field(ge=1.0, le=1e6, description="rope2d: frequency base θ (Heo et al.: 100 axial, 10 mixed)")
]


class Rope2d(AdditiveEncoding):
    name = "rope2d"
    no_weight_decay = ("freqs",)
    variants = (("rope2d-axial", {"rope_mode": "axial"}), ("rope2d-mixed", {"rope_mode": "mixed"}))
    equation = (
        "R(θ(p_q)) q_h · R(θ(p_k)) k_h / √d,"  # the rotated query and key
        " angles x·f, y·f (axial) or f_x·x + f_y·y (mixed, learned)"  # θ(p) of the position p = (x, y)
    )

    def label(self, cfg):
        return f"SA RoPE {cfg.rope_mode} (N_h={cfg.num_heads})"

    def positional_macs(self, cfg, *, tokens, side):
        """Rotating q and k: a 2×2 product per channel pair, token and head (4 MACs per
        pair, twice); mixed angles f_x·x + f_y·y add 2 MACs per pair, token and head, axial
        angles x·f_i, y·f_i one per pair and token."""
        d, h = cfg.hidden, cfg.num_heads
        rotate = 2 * h * tokens * (d // 2) * 4
        angles = h * tokens * (d // 2) * 2 if cfg.rope_mode == "mixed" else tokens * (d // 2)
        return rotate + angles

    def options(self, cfg):
        return {"mode": cfg.rope_mode, "theta": float(cfg.rope_theta)}

    def init_parameters(self, layer, *, mode: str = "axial", theta: float | None = None):
        import math

        import torch
        from torch import nn

        d = layer.head_dim
        if d % 4:
            raise ValueError(f"rope2d needs a head width divisible by 4, got {d}")
        theta = DEFAULT_THETA[mode] if theta is None else theta
        pos = layer.positional
        pos.mode = mode
        mag = theta ** (-torch.arange(0, d, 4, dtype=torch.float64) / d)  # (d/4,) θ^(−4i/d)
        if mode == "axial":
            # f_i = 1 / θ^(4i/d) in float32, as Heo et al.'s code and timm's freq_bands compute
            # it (bit for bit; float64 rounded once differs by up to ~2 ulp at d ≥ 12)
            axial = 1.0 / (theta ** (torch.arange(0, d, 4, dtype=torch.float32) / d))
            pos.register_buffer("freqs", axial, persistent=False)
        else:
            phi = torch.rand(layer.num_heads, 1, dtype=torch.float64) * 2 * math.pi
            fx = torch.cat([mag * torch.cos(phi), mag * torch.cos(phi + math.pi / 2)], dim=-1)
            fy = torch.cat([mag * torch.sin(phi), mag * torch.sin(phi + math.pi / 2)], dim=-1)
            pos.freqs = nn.Parameter(torch.stack([fx, fy]).float())  # (2, N_h, d/2)

    def angles(self, layer, height: int, width: int):
        """θ(p) for every token (row-major) and channel pair: (T, d/2) axial, (N_h, T, d/2) mixed.
        Mixed angles always in float32, as Heo et al.'s code and timm's ``get_mixed_freqs``
        (also in a float64 layer: the tests match timm to float64 round-off)."""
        import torch

        pos = layer.positional
        dtype = torch.float32 if pos.mode == "mixed" else torch.promote_types(pos.freqs.dtype, torch.float32)
        f = pos.freqs.to(dtype)
        y = torch.arange(height, device=f.device, dtype=dtype).repeat_interleave(width)
        x = torch.arange(width, device=f.device, dtype=dtype).repeat(height)
        if pos.mode == "axial":
            return torch.cat([x[:, None] * f, y[:, None] * f], dim=-1)
        return x[:, None] * f[0][:, None, :] + y[:, None] * f[1][:, None, :]

    def rotate(self, x, cos, sin):
        """Interleaved pairs: (x0, x1) → (x0 cos − x1 sin, x1 cos + x0 sin)."""
        import torch

        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).flatten(-2)

    def reference_probs(self, layer, q, k, height, width):
        """Heo et al.'s formulation (``study bench``'s einsum reference): channel pairs as
        complex numbers times e^{iθ(p)}, scores Re(q̃·conj(k̃))/√d_h by einsum; ``q``, ``k``
        unscaled (B, T, N_h, d_h)."""
        import torch

        a = self.angles(layer, height, width)  # (T, d/2) or (N_h, T, d/2)
        rot = torch.polar(torch.ones_like(a), a)
        rot = rot[:, None, :] if a.dim() == 2 else rot.transpose(0, 1)  # (T, 1|N_h, d/2)
        b, t, n, d = q.shape
        qc = torch.view_as_complex(q.reshape(b, t, n, d // 2, 2).contiguous()) * rot
        kc = torch.view_as_complex(k.reshape(b, t, n, d // 2, 2).contiguous()) * rot
        scores = torch.einsum("bqhc,bkhc->bhqk", qc, kc.conj()).real
        return torch.softmax(scores * layer.scale, -1)

    def sdpa_inputs(self, layer, q, k, height, width):
        import contextlib

        import torch

        # the angles in float32 under autocast; the meta device (FLOPs, `study models`) has no autocast
        exact = (
            torch.autocast(q.device.type, enabled=False)
            if torch.amp.is_autocast_available(q.device.type)
            else contextlib.nullcontext()
        )
        with exact:
            a = self.angles(layer, height, width)
        cos, sin = a.cos().to(q.dtype), a.sin().to(q.dtype)
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin), None


ENCODING = Rope2d()


class Rope2dConfig(AttentionConfig):
    """2-D RoPE's fields: the mode and the frequency base θ (default by mode, Heo et al.)."""

    spec: ClassVar[Encoding] = ENCODING
    encoding: Literal["rope2d"] = "rope2d"
    rope_mode: Literal["axial", "mixed"] = Field(
        "axial", description="rope2d: axial (fixed frequencies per axis) | mixed (learned per head)"
    )
    #: default: DEFAULT_THETA of the mode
    rope_theta: RopeTheta = DEFAULT_THETA["axial"]

    @model_validator(mode="before")
    @classmethod
    def _theta(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("rope_mode", "") is None:
                data = {**data, "rope_mode": "axial"}
            if data.get("rope_theta") is None and data.get("rope_mode", "axial") in DEFAULT_THETA:
                data = {**data, "rope_theta": DEFAULT_THETA[data.get("rope_mode", "axial")]}
        return data

    @model_validator(mode="after")
    def _pairs(self):
        if self.hidden % 4:
            raise ConfigError(
                "hidden",
                f"rope2d rotates channel pairs, half by x and half by y: "
                f"the head width (hidden) must be a multiple of 4, got {self.hidden}",
            )
        return self
