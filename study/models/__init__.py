"""Models of the study: the paper's attention-only network with every relative
positional encoding, and the CIFAR ResNet18 baseline, behind one factory."""

from .config import ENCODINGS, PAPER_MODELS, ConfigError, ModelConfig, model_name
from .registry import available_models, build_model, register_model

__all__ = [
    "ENCODINGS",
    "PAPER_MODELS",
    "ConfigError",
    "ModelConfig",
    "available_models",
    "build_model",
    "model_name",
    "register_model",
]
