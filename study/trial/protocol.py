"""The training protocol beyond the paper's crop and flip: CutMix, MixUp, RandAugment or
AutoAugment, and label smoothing (the fields of :class:`study.trial.config.TrainConfig`).

Everything runs on the device batch inside the training step, from the libraries'
own implementations (``torchvision.transforms.v2`` and ``torch.nn.functional.cross_entropy``),
with no host synchronisation: the random choices these transforms make (an operation, a
magnitude, a Beta-distributed mixing ratio, a box) are drawn from torch's CPU generator,
never read back from the device.

- **RandAugment / AutoAugment** act on the uint8 images after the random crop and flip
  and before normalisation (:meth:`DeviceData.batches`' ``policy``): torchvision's policies
  expect uint8 or [0, 1] images.  On a batched tensor they would draw *one* operation for
  the whole batch; here each image gets its own draw (the policy is called on each image
  of the batch in turn, on the device), as the papers define them.
- **CutMix / MixUp** mix the normalised batch with itself rolled by one (torchvision's
  pairing; the batch is already shuffled) and turn the labels into probability targets;
  mixing normalised images equals normalising mixed ones (the mix is affine with weights
  summing to one, or a paste).  Both on: ``v2.RandomChoice`` picks one per batch with
  equal probability, as timm / DeiT do.  Under DDP every rank mixes within its own shard.
- **Label smoothing**: ``cross_entropy(label_smoothing=ε)``, on hard or mixed targets.

The training accuracy of a mixed batch counts a prediction correct when it is the label
with the larger share of the image's mixed target (``target.argmax(-1)``; the original
label unless CutMix pasted more than half the image), accumulated on the device like the
unmixed accuracy.  ``train_loss`` is the loss optimised (mixed targets, smoothing);
``test_loss`` and ``val_loss`` stay the plain cross-entropy of unaugmented images.

Cost: the per-image policy calls torchvision once per image: 22 ms per batch of 100
32×32 images on one CPU thread for RandAugment with 2 operations (13 ms for AutoAugment),
where one batched call takes 1.4 ms but draws one operation for the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.transforms import v2

from study.trial.config import TrainConfig


@dataclass(frozen=True)
class Protocol:
    """One trial's protocol: ``policy`` (uint8 image (3, H, W) → uint8 image, or None),
    ``mix`` (batch, labels → mixed batch, probability targets, or None) and the loss's
    ``label_smoothing``."""

    policy: Callable[[Tensor], Tensor] | None = None
    mix: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
    label_smoothing: float = 0.0
    num_classes: int = 10

    def images(self, x: Tensor) -> Tensor:
        """The image policy applied to each uint8 image of the batch ``x`` (B, 3, H, W)
        separately (its own operations and magnitudes), on ``x``'s device."""
        if self.policy is None:
            return x
        return torch.stack([self.policy(image) for image in x.unbind(0)])

    def targets(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``(x, y)`` unchanged, or CutMix / MixUp of the batch with probability targets (B, K).

        The labels reach the mixer as one-hot probabilities made by a scatter: given class
        indices, torchvision calls ``F.one_hot``, which reads the labels' minimum and
        maximum back to the host on every device but CUDA."""
        if self.mix is None:
            return x, y
        probs = torch.zeros(len(y), self.num_classes, device=y.device).scatter_(1, y[:, None], 1.0)
        return self.mix(x, probs)

    def loss(self, logits: Tensor, target: Tensor) -> Tensor:
        """Mean cross-entropy against class indices or probability targets, smoothed by
        ``label_smoothing`` (``(1 - ε) target + ε / K``)."""
        return F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)

    @staticmethod
    def hard_labels(target: Tensor) -> Tensor:
        """The label a training-accuracy count compares with: the class itself, or the
        class with the larger share of a mixed target."""
        return target.argmax(-1) if target.is_floating_point() else target


def build_protocol(cfg: TrainConfig, *, num_classes: int) -> Protocol:
    """The :class:`Protocol` of ``cfg`` (all off: the paper's recipe)."""
    policy = None
    if cfg.randaugment_ops:
        policy = v2.RandAugment(num_ops=cfg.randaugment_ops, magnitude=cfg.randaugment_magnitude)
    elif cfg.autoaugment != "none":
        policy = v2.AutoAugment(v2.AutoAugmentPolicy(cfg.autoaugment))
    mixers = []
    if cfg.cutmix_alpha > 0:
        mixers.append(v2.CutMix(alpha=float(cfg.cutmix_alpha), num_classes=num_classes))
    if cfg.mixup_alpha > 0:
        mixers.append(v2.MixUp(alpha=float(cfg.mixup_alpha), num_classes=num_classes))
    mix = mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers) if mixers else None
    return Protocol(policy=policy, mix=mix, label_smoothing=float(cfg.label_smoothing), num_classes=num_classes)
