"""Theorem 1 made executable: a K×K convolution is a multi-head self-attention layer.

Lemma 1 (Cordonnier et al. 2020): an MHSA layer with N_h = K² heads, centres on the K×K
shifts Δ ∈ {−⌊K/2⌋..⌊K/2⌋}² and one-hot softmaxes, whose output projection's block for
head h is the kernel's tap at Δ_h (bias = the conv bias), computes the convolution.
Lemma 2: the quadratic encoding realises such heads: score −½ s²‖δ − Δ_h‖² peaks at
δ = Δ_h and the next-best key trails by ½ s² = α, so α ≥ 46 makes the softmax one-hot
far below float32 resolution (e^−46 ≈ 1e-20).

Borders: the softmax renormalises over the keys that exist, a conv reads zeros outside
the image: the equality is exact where the K×K neighbourhood lies inside the image, and
everywhere once the input is zero-padded by K//2 (:func:`conv_as_attention`).  ``conv2d``
is a cross-correlation: the head for tap (i, j) attends key q + (i − K//2, j − K//2).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from study.models.attention import RelativeSelfAttention
from study.models.positional import GaussianScores, lattice_offsets

#: α = ½ s²: the score gap between the attended key and its nearest neighbour.
DEFAULT_ALPHA = 46.0

__all__ = ["DEFAULT_ALPHA", "conv_as_attention", "lattice_offsets", "mhsa_from_conv", "theorem_error"]


@torch.no_grad()
def mhsa_from_conv(conv: nn.Conv2d, *, alpha: float = DEFAULT_ALPHA) -> RelativeSelfAttention:
    """The :class:`RelativeSelfAttention` layer (quadratic isotropic, N_h = K²) that
    equals ``conv`` on an input zero-padded by K//2 (Lemma 1 + Lemma 2;
    :func:`conv_as_attention`)."""
    if not isinstance(conv, nn.Conv2d):
        raise TypeError(f"expected torch.nn.Conv2d, got {type(conv).__name__}")
    k, kw = conv.kernel_size
    if k != kw or k % 2 == 0:
        raise ValueError(f"kernel must be square and odd, got {conv.kernel_size}")
    if conv.stride != (1, 1) or conv.dilation != (1, 1) or conv.groups != 1:
        raise ValueError("only stride 1, dilation 1, groups 1 convolutions are attention layers")
    if conv.padding not in ((k // 2, k // 2), "same") or conv.padding_mode != "zeros":
        raise ValueError(f"padding must be zero padding of K//2 = {k // 2}, got {conv.padding}")
    w = conv.weight
    positional = GaussianScores(num_heads=k * k, isotropic=True)
    layer = RelativeSelfAttention(
        dim=conv.in_channels, num_heads=k * k, positional=positional, out_dim=conv.out_channels
    )
    layer.to(device=w.device, dtype=w.dtype)
    positional.centers.copy_(lattice_offsets(k).to(w.dtype))
    positional.spreads.fill_(math.sqrt(2.0 * alpha))
    # out_proj.weight is (D_out, N_h·D_in): head h's block is the kernel tap at Δ_h
    layer.out_proj.weight.copy_(torch.cat([w[:, :, i, j] for i in range(k) for j in range(k)], dim=1))
    layer.out_proj.bias.zero_()
    if conv.bias is not None:
        layer.out_proj.bias.copy_(conv.bias)
    return layer


def conv_as_attention(layer: RelativeSelfAttention, images: Tensor, *, padding: int) -> Tensor:
    """Run ``layer`` as the convolution it encodes, (B, C, H, W) → (B, C', H, W): zero-pad
    by ``padding`` (K//2), attend over the padded grid, crop back."""
    x = F.pad(images, (padding,) * 4).permute(0, 2, 3, 1)
    y = layer(x)
    h, w = images.shape[-2:]
    return y[:, padding : padding + h, padding : padding + w].permute(0, 3, 1, 2)


def theorem_error(
    *,
    kernel: int,
    in_channels: int,
    out_channels: int,
    size: int = 8,
    batch: int = 2,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> float:
    """Max |conv(x) − MHSA(x)| for a random conv and input (the CLI's check)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    conv = nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2).to(dtype)
    x = torch.randn(batch, in_channels, size, size, generator=gen, dtype=dtype)
    layer = mhsa_from_conv(conv)
    with torch.no_grad():
        return (conv(x) - conv_as_attention(layer, x, padding=kernel // 2)).abs().max().item()
