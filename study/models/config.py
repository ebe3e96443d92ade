"""Model configuration shared by the factory, the CLI and study files: strict pydantic models (the common
fields and one member per encoding, :mod:`study.models.fields`; each encoding's own in its file,
:mod:`study.models.encodings`), read flat as the columns of ``runs``; every check raises
:class:`ConfigError` naming the field (``--flag: message`` or ``file: path.field: message``).
"""

from __future__ import annotations

from study.models.encodings import PAPER_ENCODINGS, REGISTRY, encoding_fields, variants
from study.models.fields import (
    ARCHS,
    FLOAT32_MAX,
    FLOAT32_TINY,
    Bounds,
    ConfigError,
    ModelConfig,
    columns,
)

#: every registered encoding (``study.models.encodings``), the paper's first
ENCODINGS = tuple(REGISTRY)
#: the encoding-specific fields, declared by the encodings themselves
ENCODING_FIELDS = encoding_fields()


def model_name(cfg: ModelConfig) -> str:
    """Human-readable name used in tables and figure legends (the encoding's label)."""
    if cfg.arch == "resnet18":
        return "ResNet18"
    return REGISTRY[cfg.encoding].label(cfg)


#: The configurations of the paper's Table 1 / Figure 2 (all N_h = 9).
PAPER_MODELS: dict[str, ModelConfig] = {
    "resnet18": ModelConfig(arch="resnet18"),
    "sa_quadratic": ModelConfig(encoding="quadratic", isotropic=True),
    "sa_quadratic_noniso": ModelConfig(encoding="quadratic", isotropic=False),
    "sa_learned": ModelConfig(encoding="learned", pos_dim=400),
    "sa_learned_content": ModelConfig(encoding="learned_content", pos_dim=400),
}

#: Today's encodings (every form of every registered encoding beyond the paper's) at
#: the paper's size: N_h = 9, D = 400, 6 layers, heads of width D (``study.models.encoded``).
ENCODING_MODELS: dict[str, ModelConfig] = {
    "sa_" + vid.replace("-", "_"): ModelConfig(**over)
    for vid, over in variants()
    if over["encoding"] not in PAPER_ENCODINGS
}

__all__ = [
    "ARCHS",
    "ENCODINGS",
    "FLOAT32_MAX",
    "FLOAT32_TINY",
    "Bounds",
    "ConfigError",
    "ENCODING_MODELS",
    "ModelConfig",
    "PAPER_MODELS",
    "columns",
    "model_name",
]
