"""A whole split resident on the training device, batched and augmented there, with no
host synchronisation inside the loop; DDP sharding: docs/design.md §3, "data pipeline"."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from study.device.paths import to_device

#: Input normalisation of the original code (epfml/attention-cnn, train.py), used for
#: every data source: the CIFAR-10 channel means and its std constants
#: (0.2023, 0.1994, 0.2010), not the training set's per-pixel std (0.2470, 0.2435, 0.2616).
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
PAD = 4


@dataclass(frozen=True)
class EpochPlan:
    """One training epoch's randomness (CPU tensors): ``order`` of the samples, ``offsets``
    (N, 2) the crop's top-left (row, column) in the padded image, ``flips`` (N,) bool."""

    order: Tensor
    offsets: Tensor
    flips: Tensor


def seeded(text: str) -> torch.Generator:
    """A CPU generator with a 63-bit seed hashed from ``text`` (stable across processes)."""
    return torch.Generator().manual_seed(
        int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1
    )


def epoch_plan(n: int, *, seed: int, epoch: int) -> EpochPlan:
    """The :class:`EpochPlan` of an ``n``-sample split for (``seed``, ``epoch``)."""
    gen = seeded(f"study.data:{seed}:{epoch}")
    order = torch.randperm(n, generator=gen)
    offsets = torch.randint(0, 2 * PAD + 1, (n, 2), generator=gen)
    flips = torch.randint(0, 2, (n,), generator=gen).bool()
    return EpochPlan(order=order, offsets=offsets, flips=flips)


def augment(images: Tensor, *, offsets: Tensor, flips: Tensor) -> Tensor:
    """Zero-pad ``images`` (B, C, H, W) by :data:`PAD`, crop H×W at ``offsets`` (B, 2), then
    mirror left-right where ``flips`` (B,); one gather on the images' device."""
    b, c, h, w = images.shape
    padded = F.pad(images, (PAD, PAD, PAD, PAD))
    wp = w + 2 * PAD
    ar_h = torch.arange(h, device=images.device)
    ar_w = torch.arange(w, device=images.device)
    rows = offsets[:, :1] + ar_h  # (B, H)
    cols = offsets[:, 1:] + torch.where(flips[:, None], (w - 1) - ar_w, ar_w)  # (B, W)
    index = (rows[:, :, None] * wp + cols[:, None, :]).reshape(b, 1, h * w).expand(b, c, h * w)
    return padded.reshape(b, c, -1).gather(2, index).reshape(b, c, h, w)


class DeviceData:
    """``images`` (N, 3, H, W) uint8 and ``labels`` (N,) held on ``device``; ``pinned``: each
    epoch's plan goes through page-locked memory (default: on CUDA; :func:`study.device.paths.to_device`)."""

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        *,
        device: torch.device | str = "cpu",
        pinned: bool | None = None,
    ):
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be uint8 (N, 3, H, W), got {images.dtype} {tuple(images.shape)}")
        if labels.ndim != 1 or len(labels) != len(images):
            raise ValueError(f"labels must be ({len(images)},), got {tuple(labels.shape)}")
        self.device = torch.device(device)
        self.pinned = self.device.type == "cuda" if pinned is None else bool(pinned)
        self.images = images.to(self.device).contiguous()
        self.labels = labels.to(self.device, torch.int64)
        m = torch.tensor(CIFAR_MEAN, dtype=torch.float32, device=self.device).view(1, -1, 1, 1)
        s = torch.tensor(CIFAR_STD, dtype=torch.float32, device=self.device).view(1, -1, 1, 1)
        self._scale = 1.0 / (255.0 * s)
        self._shift = m / s

    def __len__(self) -> int:
        return len(self.images)

    def normalise(self, images: Tensor) -> Tensor:
        """uint8 images → float32 ``(x / 255 - mean) / std``."""
        return images.float() * self._scale - self._shift

    def num_batches(self, *, batch_size: int, train: bool, rank: int = 0, world_size: int = 1) -> int:
        """Batches :meth:`batches` yields to ``rank`` (evaluation: a rank the last partial
        global batch does not reach gets one fewer)."""
        return len(self._starts(batch_size=batch_size, train=train, rank=rank, world_size=world_size))

    def batches(
        self,
        *,
        batch_size: int,
        train: bool,
        epoch: int | None = None,
        seed: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        policy: Callable[[Tensor], Tensor] | None = None,
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Yield ``(images float32 normalised, labels int64)`` on the device: training shuffled by
        (``seed``, ``epoch``), cropped, flipped, then ``policy`` on the uint8 batch (RandAugment /
        AutoAugment: :mod:`study.trial.protocol`), dropping the last partial global batch;
        evaluation in order, unaugmented, complete."""
        starts = self._starts(batch_size=batch_size, train=train, rank=rank, world_size=world_size)
        if not train:
            for lo in starts:
                yield self.normalise(self.images[lo : lo + batch_size]), self.labels[lo : lo + batch_size]
            return
        if epoch is None or seed is None:
            raise ValueError("batches(train=True) needs epoch= and seed=")
        plan = epoch_plan(len(self), seed=seed, epoch=epoch)
        order, offsets, flips = (
            to_device(t, self.device, pinned=self.pinned) for t in (plan.order, plan.offsets, plan.flips)
        )
        for lo in starts:
            idx = order[lo : lo + batch_size]
            x = augment(
                self.images.index_select(0, idx),
                offsets=offsets[lo : lo + batch_size],
                flips=flips[lo : lo + batch_size],
            )
            if policy is not None:
                x = policy(x)
            yield self.normalise(x), self.labels.index_select(0, idx)

    def _starts(self, *, batch_size: int, train: bool, rank: int, world_size: int) -> range:
        """Where ``rank``'s batches start (training: positions in the epoch's order, whole global batches
        only)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world_size {world_size}")
        g = batch_size * world_size
        return range(rank * batch_size, len(self) // g * g if train else len(self), g)
