"""Model configuration shared by the factory, the CLI and study files: a flat,
JSON-serialisable record (columns of ``runs``); every check raises :class:`ConfigError`
naming the field (``--flag: message`` or ``file: path.field: message``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from study.models.encodings import PAPER_ENCODINGS, REGISTRY, Field, encoding_fields, variants

ARCHS = ("sa", "resnet18")
#: every registered encoding (``study.models.encodings``), the paper's first
ENCODINGS = tuple(REGISTRY)


class ConfigError(ValueError):
    """An invalid configuration value; ``field`` names the offending key."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self):  # survives pickle (Ray copies a failed trial's exception)
        return (type(self), (self.field, self.message))


#: float32's largest finite value and its smallest normal one.  torch takes a float field that it
#: multiplies float32 tensors by (an lr, a weight decay, a Beta concentration) as a float32 scalar:
#: above the largest it refuses ("value cannot be converted to type float without overflow") or
#: gives inf; below the smallest normal it is a subnormal or 0, the field silently off
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 2.0**-126


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bounds:
    """The range of a number field, declared beside the field with its reason (the field's one
    home): :class:`ModelConfig` and ``TrainConfig`` check it for a study file, an override and a
    flag alike; :func:`json_schema` publishes it in the study file's schema.  ``low``..``high``,
    open at an end with ``low_open``/``high_open``; ``off``: 0 (the feature off) is admitted too
    below a positive ``low``; ``integer``: an int field.  A refusal says the field ``must be``
    ``refusal``; a value that is no finite number, or negative, ``must be`` ``finite`` (if given)."""

    low: float
    high: float
    refusal: str
    low_open: bool = False
    high_open: bool = False
    off: bool = False
    integer: bool = False
    finite: str | None = None

    def admits(self, v: float) -> bool:
        above = self.low < v if self.low_open else self.low <= v
        below = v < self.high if self.high_open else v <= self.high
        return (self.off and v == 0) or (above and below)

    def check(self, cfg, key: str) -> None:
        v = getattr(cfg, key)
        if self.integer:
            int_at_least(cfg, key, int(self.low))
        elif (
            type(v) is not float
            and (isinstance(v, bool) or not isinstance(v, (int, float)))
            or not math.isfinite(v)
            or v < 0 <= self.low
        ):
            raise ConfigError(key, f"must be {self.finite or self.refusal}, got {v!r}")
        if not self.admits(v):
            raise ConfigError(key, f"must be {self.refusal}, got {v!r}")

    def json_schema(self) -> dict[str, Any]:
        """JSON Schema's keywords for the range: ``minimum``/``exclusiveMinimum``, ``maximum``/
        ``exclusiveMaximum``, and with ``off`` a ``not`` of the gap between 0 and ``low``."""
        low, high = (
            ("exclusiveMinimum" if self.low_open else "minimum"),
            ("exclusiveMaximum" if self.high_open else "maximum"),
        )
        if self.off and self.low > 0:
            gap = {"exclusiveMinimum": 0, ("maximum" if self.low_open else "exclusiveMaximum"): self.low}
            return {"minimum": 0, high: self.high, "not": gap}
        return {low: self.low, high: self.high}


def bounds_of(field: dataclasses.Field) -> Bounds | None:
    """The :class:`Bounds` a dataclass field declares (``metadata={"bounds": ...}``), or None."""
    return field.metadata.get("bounds")


@functools.cache
def _declared_bounds(cls: type) -> tuple[tuple[str, Bounds, bool], ...]:
    """(field, bounds, optional) of ``cls``'s fields that declare bounds, read once per class: a study
    checks a configuration per grid cell (10,000 cells within the refusals' 1 s of CPU)."""
    return tuple(
        (f.name, b, f.default is None) for f in dataclasses.fields(cls) if (b := bounds_of(f)) is not None
    )


def check_bounds(cfg) -> None:
    """Every declared :class:`Bounds` of ``cfg``'s fields (an optional field left None is not given)."""
    for name, b, optional in _declared_bounds(type(cfg)):
        if not (optional and getattr(cfg, name) is None):
            b.check(cfg, name)


#: a probability of dropping (``torch.nn.functional.dropout``'s p): 1 would zero every activation
PROBABILITY = Bounds(low=0.0, high=1.0, high_open=True, refusal="a probability in [0, 1)")
#: a standard deviation of an initialisation, times float32 noise (torch.randn(...) * std); at most
#: float32's largest, beyond which every initial value is ±inf (0: the initial value itself)
INIT_STD = Bounds(
    low=FLOAT32_TINY,
    high=FLOAT32_MAX,
    off=True,
    finite="a finite number >= 0",
    refusal="0 or from 2**-126 to 3.40282e+38 (a float32 scale: below, a subnormal; above, inf)",
)


class _ModelConfigMethods:
    """Hyper-parameters of one model (paper defaults, Cordonnier et al. 2020, Table 2).
    ``encoding`` (``study.models.encodings``) declares its own fields; another encoding's
    field must be unset (or at its default), and is stored as null."""

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        choice_field(self, "arch", ARCHS)
        for k in ("num_classes", "image_size", "in_channels"):
            int_at_least(self, k)
        check_bounds(self)  # dropout, attention_dropout, the initialisations' spreads (declared in _FIELDS)
        if self.arch == "resnet18":
            # attention-only fields do not apply to the baseline
            for k in ("encoding", "num_heads", *ENCODING_FIELDS):
                set_(k, None)
            return
        choice_field(self, "encoding", ENCODINGS)
        for k in ("num_heads", "hidden", "layers", "intermediate", "downsample"):
            int_at_least(self, k)
        if self.image_size % self.downsample:
            raise ConfigError(
                "downsample", f"must divide image_size {self.image_size}, got {self.downsample}"
            )
        spec = REGISTRY[self.encoding]
        mine = {f.name for f in spec.fields}
        for name, fld in ((n, f) for n, f in ENCODING_FIELDS.items() if n not in mine):
            if getattr(self, name) not in (None, fld.default):
                owners = ", ".join(e.name for e in REGISTRY.values() if any(f.name == name for f in e.fields))
                raise ConfigError(name, f"applies only to encoding {owners}")
            set_(name, None)
        spec.normalise(self, set_)

    @property
    def grid(self) -> int:
        """Side of the token grid after space-to-depth (16 for CIFAR-10)."""
        return self.image_size // self.downsample

    @property
    def spec(self):
        """The :class:`~study.models.encodings.base.Encoding` of this model (None for resnet18)."""
        return REGISTRY.get(self.encoding)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        return strict_from_dict(cls, d, "model")

    def replace(self, **changes: Any) -> ModelConfig:
        return ModelConfig.from_dict({**self.to_dict(), **changes})


#: the encoding-specific fields, declared by the encodings themselves
ENCODING_FIELDS = encoding_fields()

#: (name, type, default) in column order, the encodings' fields (nullable) after num_heads
_FIELDS = [
    ("arch", str, "sa"),
    ("encoding", "str | None", "quadratic"),
    ("num_heads", "int | None", 9),
    *((f.name, f"{getattr(f.type, '__name__', f.type)} | None", f.default) for f in ENCODING_FIELDS.values()),
    ("hidden", int, 400),
    ("layers", int, 6),
    ("intermediate", int, 512),
    ("dropout", float, 0.1, PROBABILITY),
    ("attention_dropout", float, 0.1, PROBABILITY),
    ("image_size", int, 32),
    ("in_channels", int, 3),
    ("num_classes", int, 10),
    ("downsample", int, 2),
    ("center_init_std", float, 2.0, INIT_STD),
    ("spread_init_std", float, 0.01, INIT_STD),
]

ModelConfig = dataclasses.make_dataclass(
    "ModelConfig",
    [(n, t, dataclasses.field(default=d, metadata={"bounds": b[0]} if b else {})) for n, t, d, *b in _FIELDS],
    bases=(_ModelConfigMethods,),
    frozen=True,
    kw_only=True,
    namespace={"__module__": __name__, "__doc__": _ModelConfigMethods.__doc__},
)


def strict_from_dict(cls, d: dict[str, Any], kind: str):
    """``cls(**d)``, but an unknown key is a ConfigError naming it."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(unknown[0], f"unknown {kind} field")
    return cls(**d)


def int_at_least(cfg, key: str, low: int = 1) -> None:
    v = getattr(cfg, key)
    if type(v) is not int and (isinstance(v, bool) or not isinstance(v, int)):
        raise ConfigError(key, f"must be an integer, got {v!r}")
    if v < low:
        raise ConfigError(key, f"must be >= {low}, got {v}")


def number_in(cfg, key: str, low: float, high: float, message: str) -> None:
    v = getattr(cfg, key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v < high:
        raise ConfigError(key, f"{message}, got {v!r}")


def bool_field(cfg: ModelConfig, name: str) -> None:
    v = getattr(cfg, name)
    if not isinstance(v, bool):
        raise ConfigError(name, f"must be true or false, got {v!r}")


def bounded(cfg: ModelConfig, field: Field) -> None:
    """``cfg.<field>`` is a number within ``field.bounds`` (NaN and infinities are not)."""
    v = getattr(cfg, field.name)
    low, high = field.bounds
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
        raise ConfigError(
            field.name,
            f"must be a number from {low:g} to {high:g} (what the encoding's equation carries), got {v!r}",
        )


def choice_field(cfg: ModelConfig, name: str, choices: tuple[str, ...]) -> None:
    v = getattr(cfg, name)
    if v not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}, got {v!r}")


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
    "ConfigError",
    "ENCODING_MODELS",
    "ModelConfig",
    "PAPER_MODELS",
    "model_name",
]
