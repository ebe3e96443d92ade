"""Plain model configuration shared by the factory, the CLI and study files.

A :class:`ModelConfig` is a flat, JSON-serialisable record (it becomes columns of
the ``runs`` table).  Every check raises :class:`ConfigError` naming the field, so
callers can turn it into ``--flag: message`` or ``file: path.field: message``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

ARCHS = ("sa", "resnet18")
ENCODINGS = ("quadratic", "learned", "learned_content")
#: How learned relative embeddings r_δ become a head's positional score:
#: ``query`` = q_h · r_δ (the query's halves against the row and column tables;
#: the paper's Table 1 learned + content model), ``head`` = w_h · r_δ with learned
#: per-head key vectors w_h (Section 4.2's positional-only form).
POSITIONAL_SCORES = ("query", "head")
MIN_LEARNED_POS_DIM = 3


class ConfigError(ValueError):
    """An invalid configuration value; ``field`` names the offending key."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self):  # survives pickle (Ray copies a failed trial's exception)
        return (type(self), (self.field, self.message))


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Hyper-parameters of one model (paper defaults, Cordonnier et al. 2020, Table 2).

    ``encoding`` selects the relative positional encoding of Section 4:
    ``quadratic`` (Eq. 9, Gaussian heads; ``isotropic`` picks Σ⁻¹ = s²I or A Aᵀ),
    ``learned`` (Section 4.2, learned row/column embeddings, D_p = ``pos_dim``) or
    ``learned_content`` (learned positional plus content scores, Eq. 7).

    ``positional_score`` (learned encodings only) says how a head scores the learned
    relative embedding r_δ = [r_row(δ1); r_col(δ2)]:

    * ``query`` (default of ``learned_content``; Ramachandran et al. 2019, the
      original code's final form and the paper's 29.5M Table 1 model):
      score_h = [q_h[:D/2]·r_row(δ1) + q_h[D/2:]·r_col(δ2) + q_h·k_h] / √D.  r_δ is
      dotted with the D-dimensional query, so ``pos_dim`` (D_p, the length of r_δ)
      must equal ``hidden`` (D, even); each axis table is (2·S−1)×(D_p/2).
    * ``head`` (the only form of ``learned``; optional for ``learned_content``, where
      it is the original's first version, 29.6M): score_h = w_h,rowᵀ r_row(δ1) +
      w_h,colᵀ r_col(δ2) (+ q_h·k_h/√D), with ``Linear(D_p → N_h)`` head keys per axis
      and any ``pos_dim`` ≥ 3: each axis table is (2·S−1)×D_p (r_row, r_col ∈ R^D_p).
    """

    arch: str = "sa"
    encoding: str | None = "quadratic"
    isotropic: bool | None = True
    num_heads: int | None = 9
    pos_dim: int | None = None
    positional_score: str | None = None
    hidden: int = 400
    layers: int = 6
    intermediate: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.1
    image_size: int = 32
    in_channels: int = 3
    num_classes: int = 10
    downsample: int = 2
    center_init_std: float = 2.0
    spread_init_std: float = 0.01

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        if self.arch not in ARCHS:
            raise ConfigError("arch", f"must be one of {', '.join(ARCHS)}, got {self.arch!r}")
        _positive_int(self, "num_classes")
        _positive_int(self, "image_size")
        _positive_int(self, "in_channels")
        if self.arch == "resnet18":
            # attention-only fields do not apply to the baseline
            for k in ("encoding", "isotropic", "num_heads", "pos_dim", "positional_score"):
                set_(k, None)
            return
        if self.encoding not in ENCODINGS:
            raise ConfigError(
                "encoding", f"must be one of {', '.join(ENCODINGS)}, got {self.encoding!r}"
            )
        for k in ("num_heads", "hidden", "layers", "intermediate", "downsample"):
            _positive_int(self, k)
        for k in ("dropout", "attention_dropout"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                raise ConfigError(k, f"must be a probability in [0, 1), got {v!r}")
        if self.image_size % self.downsample:
            raise ConfigError(
                "downsample", f"must divide image_size {self.image_size}, got {self.downsample}"
            )
        if self.encoding == "quadratic":
            if self.positional_score is not None:
                raise ConfigError("positional_score", "applies only to learned encodings")
            if self.isotropic is None:
                set_("isotropic", True)
            if not isinstance(self.isotropic, bool):
                raise ConfigError("isotropic", f"must be true or false, got {self.isotropic!r}")
            expected = 3 if self.isotropic else 5
            if self.pos_dim is None:
                set_("pos_dim", expected)
            elif self.pos_dim != expected:
                kind = "isotropic" if self.isotropic else "non-isotropic"
                raise ConfigError(
                    "pos_dim",
                    f"quadratic {kind} encoding has pos_dim {expected}, got {self.pos_dim!r}",
                )
        else:
            if self.isotropic not in (None, True):
                raise ConfigError("isotropic", "applies only to encoding quadratic")
            set_("isotropic", None)
            self._check_positional_score()
            if self.pos_dim is None:
                set_("pos_dim", self.hidden)
            _positive_int(self, "pos_dim")
            if self.pos_dim < MIN_LEARNED_POS_DIM:
                raise ConfigError(
                    "pos_dim",
                    f"learned encodings need pos_dim >= {MIN_LEARNED_POS_DIM}, got {self.pos_dim}",
                )
            if self.positional_score == "query":
                if self.pos_dim != self.hidden:
                    raise ConfigError(
                        "pos_dim",
                        f"positional_score query dots r_delta with the query, so pos_dim must equal "
                        f"hidden ({self.hidden}), got {self.pos_dim} (positional_score head takes any pos_dim)",
                    )
                if self.hidden % 2:
                    raise ConfigError(
                        "hidden",
                        f"positional_score query splits the query in halves: hidden must be even, got {self.hidden}",
                    )

    def _check_positional_score(self) -> None:
        """Default and validate ``positional_score`` of a learned encoding."""
        v = self.positional_score
        if v is None:
            v = "query" if self.encoding == "learned_content" else "head"
        if v not in POSITIONAL_SCORES:
            raise ConfigError(
                "positional_score", f"must be one of {', '.join(POSITIONAL_SCORES)}, got {v!r}"
            )
        if self.encoding == "learned" and v != "head":
            raise ConfigError(
                "positional_score", "query needs content attention (encoding learned_content)"
            )
        object.__setattr__(self, "positional_score", v)

    @property
    def grid(self) -> int:
        """Side of the token grid after space-to-depth (16 for CIFAR-10)."""
        return self.image_size // self.downsample

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        return strict_from_dict(cls, d, "model")

    def replace(self, **changes: Any) -> "ModelConfig":
        return ModelConfig.from_dict({**self.to_dict(), **changes})


def strict_from_dict(cls, d: dict[str, Any], kind: str):
    """``cls(**d)``, but an unknown key is a ConfigError naming it."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(unknown[0], f"unknown {kind} field")
    return cls(**d)


def _positive_int(cfg: ModelConfig, key: str) -> None:
    v = getattr(cfg, key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(key, f"must be an integer, got {v!r}")
    if v < 1:
        raise ConfigError(key, f"must be >= 1, got {v}")


def model_name(cfg: ModelConfig) -> str:
    """Human-readable name used in tables and figure legends."""
    if cfg.arch == "resnet18":
        return "ResNet18"
    if cfg.encoding == "quadratic":
        kind = "isotropic" if cfg.isotropic else "non-isotropic"
        return f"SA quadratic {kind} (N_h={cfg.num_heads})"
    label = "learned" if cfg.encoding == "learned" else "learned+content"
    if cfg.encoding == "learned_content" and cfg.positional_score == "head":
        label += " head-keys"
    return f"SA {label} (N_h={cfg.num_heads}, D_p={cfg.pos_dim})"


#: The configurations of the paper's Table 1 / Figure 2 (all N_h = 9).
PAPER_MODELS: dict[str, ModelConfig] = {
    "resnet18": ModelConfig(arch="resnet18"),
    "sa_quadratic": ModelConfig(encoding="quadratic", isotropic=True),
    "sa_quadratic_noniso": ModelConfig(encoding="quadratic", isotropic=False),
    "sa_learned": ModelConfig(encoding="learned", pos_dim=400),
    "sa_learned_content": ModelConfig(encoding="learned_content", pos_dim=400),
}

__all__ = [
    "ARCHS",
    "ENCODINGS",
    "POSITIONAL_SCORES",
    "ConfigError",
    "ModelConfig",
    "PAPER_MODELS",
    "model_name",
]
