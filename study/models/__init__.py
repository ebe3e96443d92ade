"""Models of the study: the paper's attention-only network with every registered
encoding (``study.models.encodings``: the paper's relative positional encodings and
today's GPSA, relative bias and 2-D RoPE), and the CIFAR ResNet18 baseline, behind one
factory."""

from .config import ENCODING_MODELS, ENCODINGS, PAPER_MODELS, ConfigError, ModelConfig, model_name
from .registry import build_model
from .trained import ExportError, load_trained, read_export

__all__ = [
    "ENCODINGS",
    "ENCODING_MODELS",
    "PAPER_MODELS",
    "ConfigError",
    "ExportError",
    "ModelConfig",
    "build_model",
    "load_trained",
    "model_name",
    "read_export",
]
