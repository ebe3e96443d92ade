"""One factory for every model: ``ModelConfig.arch`` → its builder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import ModelConfig

if TYPE_CHECKING:  # torch is imported by the builders, not by reading configs
    from torch import nn


def build_model(config: ModelConfig | dict[str, Any] | None = None, **overrides: Any) -> nn.Module:
    """Build the model described by ``config`` (a :class:`ModelConfig`, used as validated, or a plain
    dict), with keyword ``overrides`` applied.  Raises ``ConfigError`` for invalid values."""
    if not isinstance(config, ModelConfig) or overrides:
        base = config.to_dict() if isinstance(config, ModelConfig) else dict(config or {})
        config = ModelConfig.from_dict({**base, **overrides})
    # imported here, so that reading configs never imports torchvision
    if config.arch == "resnet18":
        from .resnet import cifar_resnet18

        return cifar_resnet18(config=config)
    from .sa_net import SelfAttentionNet

    return SelfAttentionNet(config=config)
