"""The training protocol beyond the paper's crop and flip (docs/study-files.md "Training
protocol"), on the device batch with no host synchronisation (the transforms draw from torch's
CPU generator).  RandAugment / AutoAugment draw per image, as the papers define them: on a
batch torchvision would draw one operation for all (22 ms per batch of 100 on one thread).
CutMix / MixUp mix the normalised batch with itself rolled by one, which equals normalising
mixed images (an affine mix or a paste).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from study.trial.config import TrainConfig


@dataclass(frozen=True)
class Protocol:
    """One trial's protocol: the image ``policy``, the batch ``mix`` and ``label_smoothing``."""

    policy: Callable[[Tensor], Tensor] | None = None
    mix: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
    label_smoothing: float = 0.0
    num_classes: int = 10

    def images(self, x: Tensor) -> Tensor:
        """The image policy (not None) applied to each uint8 image of ``x`` (B, 3, H, W) separately."""
        return torch.stack([self.policy(image) for image in x.unbind(0)])

    def targets(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``(x, y)``, or CutMix / MixUp of the batch with probability targets (B, K), one-hot
        by a scatter: given class indices torchvision calls ``F.one_hot``, which reads the
        labels back to the host on every device but CUDA."""
        if self.mix is None:
            return x, y
        probs = torch.zeros(len(y), self.num_classes, device=y.device).scatter_(1, y[:, None], 1.0)
        return self.mix(x, probs)

    def loss(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)

    @staticmethod
    def hard_labels(target: Tensor) -> Tensor:
        """The class itself, or the one with the larger share of a mixed target."""
        return target.argmax(-1) if target.is_floating_point() else target


def build_protocol(cfg: TrainConfig, *, num_classes: int) -> Protocol:
    """The protocol of ``cfg``; torchvision (an import of ~1 s in each trial process) is imported only
    by a protocol that uses its transforms, not by the paper's (crop and flip are the loop's own)."""
    if not (cfg.randaugment_ops or cfg.autoaugment != "none" or cfg.cutmix_alpha > 0 or cfg.mixup_alpha > 0):
        return Protocol(label_smoothing=float(cfg.label_smoothing), num_classes=num_classes)
    from torchvision.transforms import v2

    policy = None
    if cfg.randaugment_ops:
        policy = v2.RandAugment(num_ops=cfg.randaugment_ops, magnitude=cfg.randaugment_magnitude)
    elif cfg.autoaugment != "none":
        policy = v2.AutoAugment(v2.AutoAugmentPolicy(cfg.autoaugment))
    mixers = [
        mixer(alpha=float(alpha), num_classes=num_classes)
        for mixer, alpha in ((v2.CutMix, cfg.cutmix_alpha), (v2.MixUp, cfg.mixup_alpha))
        if alpha > 0
    ]
    mix = mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers) if mixers else None
    return Protocol(
        policy=policy, mix=mix, label_smoothing=float(cfg.label_smoothing), num_classes=num_classes
    )
