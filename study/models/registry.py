"""One factory for every model (timm style): ``arch`` → builder(config=...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .config import ModelConfig

if TYPE_CHECKING:  # torch is imported by the builders, not by reading configs
    from torch import nn

_BUILDERS: dict[str, Callable[..., "nn.Module"]] = {}


def register_model(arch: str):
    """Decorator registering ``builder(*, config: ModelConfig) -> nn.Module`` for ``arch``."""

    def wrap(builder):
        _BUILDERS[arch] = builder
        return builder

    return wrap


def build_model(config: ModelConfig | dict[str, Any] | None = None, **overrides: Any) -> "nn.Module":
    """Build the model described by ``config`` (a :class:`ModelConfig` or plain dict),
    with keyword ``overrides`` applied.  Raises ``ConfigError`` for invalid values."""
    base = config.to_dict() if isinstance(config, ModelConfig) else dict(config or {})
    config = ModelConfig.from_dict({**base, **overrides})
    _register_builtins()
    return _BUILDERS[config.arch](config=config)


def available_models() -> list[str]:
    _register_builtins()
    return sorted(_BUILDERS)


def _register_builtins() -> None:
    """Import the built-in model modules, whose decorators register them (lazily, so
    that reading configs never imports torchvision)."""
    from . import resnet, sa_net  # noqa: F401
