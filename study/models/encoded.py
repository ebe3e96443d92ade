"""Content attention whose scores an encoding shapes: the layer of today's encodings
(docs/design.md §5: GPSA, Swin's relative position bias, 2-D RoPE).

Per head h, with queries and keys of width d_h (``head_dim``):

    q_h = x W_q,h + b_q,h,   k_h = x W_k,h + b_k,h,   A_h = encoding(q_h, k_h, δ)
    MHSA(x)_q = Σ_h (Σ_k A_h[q, k] v_h[k]) W_out,h + b_out

where the encoding (an :class:`~study.models.encodings.base.Encoding`) turns queries,
keys and shifts δ = key − query into probabilities; its parameters live in this layer's
``positional`` container.  Head layouts (docs/design.md §5): **paper** (``head_dim = dim``,
the default: each head averages the raw input, W_val folded into ``out_proj``) and **timm**
(``head_dim = dim // num_heads``, ``value=True``: ConViT's ``GPSA``, Swin's
``WindowAttention``, EVA's rotary attention, compared with timm's layers in the tests).
Three exact paths: explicit (B, N_h, T, T) probabilities; SDPA for encodings whose
scores are q'·k'ᵀ/√d_h plus an optional bias (default on CUDA only, ``fused``); and
FlexAttention (``flex``, docs/design.md §12) for those and GPSA, off by default on every
device until a GPU session has measured it (docs/performance.md): the relative bias is
a ``score_mod`` reading B_h[δy, δx] from the (N_h, 2S − 1, 2S − 1) table per (head, query,
key), no (N_h, T, T) bias built; GPSA's content softmax goes through FlexAttention and its
batch-shared positional probabilities through one matrix product (Eq. 5-6 of ConViT, the
renorm skipped as in ``probs``).  FlexAttention has no dropout (refused in training with
p > 0) and, in torch 2.13, no backward on CPU (torch refuses it: CPU under no_grad only).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.flex_attention import flex_attention

from study.models.dropout import probability_dropout
from study.models.heads import HeadsLayer, shared_value_heads


class EncodedAttention(HeadsLayer):
    """Multi-head attention with an encoding's scores over an S×S grid (``grid``).
    ``key_bias`` (default ``qkv_bias``): EVA's rotary attention has none (under RoPE a key
    bias is rotated with the key, so it changes the scores)."""

    content = True
    #: SDPA for encodings with ``sdpa_inputs``: None (default) on CUDA only, True/False to force
    fused: bool | None = None
    #: FlexAttention for encodings with ``sdpa_inputs`` and GPSA (takes precedence over ``fused``):
    #: None (default) is off on every device until a GPU session has measured it, True to force
    flex: bool | None = None

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        encoding: Any,  # a ContentEncoding (study.models.encodings.base), which builds this layer
        grid: int,
        head_dim: int | None = None,
        value: bool = False,
        qkv_bias: bool = True,
        key_bias: bool | None = None,
        out_dim: int | None = None,
        attention_dropout: float = 0.0,
        **options,
    ):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = head_dim or dim
        self.grid = grid
        self.encoding = encoding
        inner = num_heads * self.head_dim
        self.query = nn.Linear(dim, inner, bias=qkv_bias)
        self.key = nn.Linear(dim, inner, bias=qkv_bias if key_bias is None else key_bias)
        self.value = nn.Linear(dim, inner, bias=qkv_bias) if value else None
        self.positional = nn.Module()
        encoding.init_parameters(self, **options)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.out_proj = nn.Linear(inner if value else num_heads * dim, out_dim or dim)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def uses_fused(self, device: torch.device) -> bool:
        return hasattr(self.encoding, "sdpa_inputs") and (
            device.type == "cuda" if self.fused is None else self.fused
        )

    def uses_flex(self) -> bool:
        """FlexAttention when forced (``flex=True``) for an encoding it serves: additive scores
        (``sdpa_inputs``) or GPSA's gated mix with batch-shared ``positional_probs``."""
        served = hasattr(self.encoding, "sdpa_inputs") or hasattr(self.encoding, "positional_probs")
        return bool(self.flex) and served

    def path_name(self) -> str:
        """Which exact path ``forward`` takes in the current mode (``study bench``)."""
        p = self.attention_dropout.p if self.training else 0.0
        device = next(self.parameters()).device
        if self.uses_flex():
            path = "FlexAttention"
        else:
            path = "SDPA" if self.uses_fused(device) else "explicit (B,N_h,T,T)"
        return f"{self.encoding.name}: {path}" + (f", dropout {p:g}" if p else "")

    def attention_probs(self, x: Tensor) -> Tensor:
        b, h, w, _ = x.shape
        q, k = self.queries_keys(x, scale=self.scale)
        return self.encoding.probs(self, q, k, h, w)

    def head_outputs(self, x: Tensor, *, return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """The concatenated heads before ``out_proj``, (B, T, N_h·d_v), and the
        probabilities if asked for."""
        b, h, w, _ = x.shape
        t, n = h * w, self.num_heads
        q, k = self.queries_keys(x, scale=self.scale)
        v = (
            x.reshape(b, 1, t, -1)
            if self.value is None
            else self.value(x).view(b, t, n, self.head_dim).transpose(1, 2)
        )
        if not return_attention and self.uses_flex():
            return self._flex_heads(q, k, v, h, w), None
        if not return_attention and self.uses_fused(x.device):
            q, k, bias = self.encoding.sdpa_inputs(self, q, k, h, w)
            if bias is not None:
                bias = bias.to(q.dtype).expand(b, n, t, t)
            p = self.attention_dropout.p if self.training else 0.0
            # q is already scaled by 1/√d_h (queries_keys): scale=1 here
            heads = F.scaled_dot_product_attention(
                q, k, v.to(q.dtype).expand(b, n, t, v.shape[-1]), attn_mask=bias, dropout_p=p, scale=1.0
            )
            return heads.transpose(1, 2).reshape(b, t, -1), None
        probs = self.encoding.probs(self, q, k, h, w)
        dropped = probability_dropout(probs, self.attention_dropout.p, training=self.training).to(v.dtype)
        heads = (
            shared_value_heads(dropped, v) if self.value is None else dropped @ v
        )  # no W_v: one input for all
        return heads.transpose(1, 2).reshape(b, t, -1), probs

    def _flex_heads(self, q: Tensor, k: Tensor, v: Tensor, height: int, width: int) -> Tensor:
        """softmax(q'·k'ᵀ/√d_h + B) v through ``flex_attention`` (module doc): B read from the
        encoding's ``bias_table`` by a ``score_mod`` (relative bias, Swin Eq. 4) or none (RoPE,
        Heo et al. Eq. 10-13; a dense bias without a table is refused);
        GPSA: (1 − σ(λ_h))·FlexAttention(q, k, v) + σ(λ_h)·P_h v (ConViT Eq. 5-6)."""
        if self.training and self.attention_dropout.p > 0:
            p = self.attention_dropout.p
            raise ValueError(
                f"flex: FlexAttention has no dropout, attention_dropout is {p:g} in training: "
                f"set flex=False (SDPA or explicit path)"
            )
        b, n, t, _ = q.shape
        encoding = self.encoding
        table = getattr(encoding, "bias_table", None)
        score_mod = None
        if table is not None:
            score_mod = relative_table_mod(table(self, height, width), grid=self.grid, width=width)
        elif hasattr(encoding, "sdpa_inputs"):
            q, k, bias = encoding.sdpa_inputs(self, q, k, height, width)
            if bias is not None:
                raise ValueError(
                    f"flex: {encoding.name} has a dense (N_h, T, T) bias and no bias_table "
                    f"for FlexAttention's score_mod: set flex=False (SDPA or explicit path)"
                )
        value = v.to(q.dtype).expand(b, n, t, v.shape[-1])
        # q is already scaled by 1/√d_h (queries_keys): scale=1 here
        heads = flex_attention(q, k, value, score_mod=score_mod, scale=1.0)
        if hasattr(encoding, "positional_probs"):
            positional = shared_probs_heads(encoding.positional_probs(self, height, width), v)
            gate = torch.sigmoid(self.positional.gate.to(heads.dtype))[:, None, None]
            heads = torch.lerp(heads, positional.to(heads.dtype), gate)
        return heads.transpose(1, 2).reshape(b, t, -1)

    def head_columns(self) -> dict[str, Tensor]:
        return self.encoding.head_columns(self)

    def no_weight_decay(self) -> set[str]:
        return {f"positional.{name}" for name in self.encoding.no_weight_decay}


def relative_table_mod(table: Tensor, *, grid: int, width: int):
    """FlexAttention ``score_mod`` of Swin's relative position bias (Eq. 4): score + B_h[δy, δx],
    read from the (N_h, 2S − 1, 2S − 1) table at [h, δy + S − 1, δx + S − 1] for δ = key − query
    of the row-major tokens of a grid ``width`` wide (S = ``grid``, the table's side)."""
    shift = grid - 1

    def score_mod(score: Tensor, batch: Tensor, head: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        dy = kv_idx // width - q_idx // width + shift
        dx = kv_idx % width - q_idx % width + shift
        return score + table[head, dy, dx].to(score.dtype)

    return score_mod


def shared_probs_heads(probs: Tensor, v: Tensor) -> Tensor:
    """(N_h, T, T) probabilities shared by the batch applied to v, (B, N_h, T, d): one
    (N_h·T, T) @ (T, B·D) product when v is one input for all heads (B, 1, T, D, the paper's
    layout), else a (T, T) @ (T, d_h) product per image and head (B, N_h, T, d_h)."""
    b, heads, t, d = v.shape
    n = probs.shape[0]
    if heads > 1:
        return probs.to(v.dtype) @ v
    flat = v.reshape(b, t, d).transpose(0, 1).reshape(t, b * d)
    return (probs.to(v.dtype).reshape(n * t, t) @ flat).view(n, t, b, d).permute(2, 0, 1, 3)
