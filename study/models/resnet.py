"""CIFAR ResNet18 baseline (He et al. 2016, CIFAR variant used by the paper).

torchvision's ``resnet18`` with a 3×3 stride-1 stem and no max-pool: BasicBlocks
[2, 2, 2, 2], 11,173,962 parameters for 10 classes.
"""

from __future__ import annotations

from torch import nn
from torchvision.models import resnet18

from .config import ModelConfig


def cifar_resnet18(*, config: ModelConfig) -> nn.Module:
    model = resnet18(weights=None, num_classes=config.num_classes)
    model.conv1 = nn.Conv2d(config.in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model
