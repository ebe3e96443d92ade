"""The reference formulations ``study bench`` times beside the project's paths (docs/performance.md,
"`study bench`"); :func:`reference_model` puts one in every attention layer."""

from __future__ import annotations

import copy
from collections.abc import Callable

from torch import Tensor, nn

from study.bench.einsum_ref import EINSUM_PATH, einsum_attention_heads, einsum_relative_attention
from study.bench.naive import naive_attention_heads, naive_relative_attention
from study.models.attention import RelativeSelfAttention

NAIVE_PATH = "naive: per-image (B,N_h,T,T), einsum, float32"

#: name -> (layer function, heads-only function, path description, applies dropout)
REFERENCES: dict[str, tuple[Callable, Callable, str, bool]] = {
    "naive": (naive_relative_attention, naive_attention_heads, NAIVE_PATH, False),
    "einsum": (einsum_relative_attention, einsum_attention_heads, EINSUM_PATH, True),
}


class ReferenceAttention(nn.Module):
    """Wraps a layer so a model runs a reference formulation in its place."""

    def __init__(self, layer: RelativeSelfAttention, fn: Callable[[RelativeSelfAttention, Tensor], Tensor]):
        super().__init__()
        self.layer = layer
        self.fn = fn

    def forward(self, x: Tensor, *, return_attention: bool = False):
        return self.fn(self.layer, x)


def reference_model(model: nn.Module, name: str) -> nn.Module:
    """A copy of ``model`` (a self-attention one) whose attention layers run reference ``name``."""
    ref = copy.deepcopy(model)
    fn = REFERENCES[name][0]
    for block in ref.blocks:
        block.attention = ReferenceAttention(block.attention, fn)
    return ref
