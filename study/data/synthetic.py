"""Deterministic synthetic CIFAR-shaped data for tests and CPU smoke runs.

Both the colour statistics and the spatial pattern carry the class, so a tiny attention
model learns it in a few CPU seconds (well above chance) without reaching 100 % at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported on first use: the sizes below are read by torch-free study-file checks
    import torch
    from torch import Tensor

NUM_CLASSES = 10
CLASSES = tuple(f"class{i}" for i in range(NUM_CLASSES))
DEFAULT_TRAIN = 2000
DEFAULT_TEST = 500
SIZE = 32


def make_synthetic(
    *, n_train: int = DEFAULT_TRAIN, n_test: int = DEFAULT_TEST, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(train_images, train_labels, test_images, test_labels)``: uint8 (N, 3, 32, 32)
    and int64 (N,), balanced over :data:`NUM_CLASSES` classes.  The same ``seed`` gives
    the same data; the test split does not depend on ``n_train``."""
    import torch

    base = torch.Generator().manual_seed(seed)
    patterns = _smooth((NUM_CLASSES, 3, 4, 4), base)
    colours = torch.randn(NUM_CLASSES, 3, 1, 1, generator=base)
    train = _samples(n_train, patterns, colours, torch.Generator().manual_seed(seed * 2 + 1_000_001))
    test = _samples(n_test, patterns, colours, torch.Generator().manual_seed(seed * 2 + 1_000_002))
    return (*train, *test)


def _smooth(shape: tuple[int, int, int, int], gen: torch.Generator) -> Tensor:
    """Unit-variance-ish random fields of ``shape`` upsampled smoothly to 32×32."""
    import torch
    import torch.nn.functional as F

    field = torch.randn(shape, generator=gen)
    return F.interpolate(field, size=(SIZE, SIZE), mode="bicubic", align_corners=False)


def _samples(n: int, patterns: Tensor, colours: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    import torch

    labels = torch.arange(n) % NUM_CLASSES
    labels = labels[torch.randperm(n, generator=gen)]
    shifts = torch.randint(-3, 4, (n, 2), generator=gen)
    contrast = 0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=gen)
    brightness = 0.5 * torch.randn(n, 1, 1, 1, generator=gen)
    distortion = _smooth((n, 3, 4, 4), gen)
    noise = torch.randn(n, 3, SIZE, SIZE, generator=gen)
    pattern = (
        torch.stack(
            [
                torch.roll(patterns[c], shifts=(int(dy), int(dx)), dims=(1, 2))
                for c, (dy, dx) in zip(labels.tolist(), shifts.tolist())
            ]
        )
        if n
        else patterns[:0]
    )
    x = contrast * pattern + 0.6 * colours[labels] + brightness + 0.8 * distortion + 0.5 * noise
    images = (120 + 40 * x).round().clamp(0, 255).to(torch.uint8)
    return images, labels.to(torch.int64)
