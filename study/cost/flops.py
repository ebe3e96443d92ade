"""Forward FLOPs per image, counted by ``torch.utils.flop_counter`` (matmuls, einsums,
convolutions and fused attention; element-wise ops and softmax are not counted)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_flops(fn: Callable[[], object], batch: int) -> int:
    """FLOPs of ``fn()`` (one forward, no grad) divided by ``batch``."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn()
    return counter.get_total_flops() // batch


def forward_flops(model: nn.Module, *, image_size: int = 32, in_channels: int = 3, batch: int = 2) -> int:
    """FLOPs of one forward pass per image (image-independent positional scores are
    computed once per batch: amortised over ``batch``)."""
    was_training = model.training
    model.eval()
    p = next(model.parameters())
    x = torch.zeros(batch, in_channels, image_size, image_size, device=p.device, dtype=p.dtype)
    flops = count_flops(lambda: model(x), batch)
    model.train(was_training)
    return flops
