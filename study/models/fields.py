"""The model's configuration as strict pydantic models: :class:`ModelConfig` (the common fields, paper
defaults of Cordonnier et al. 2020, Table 2), one member per encoding (declared by the encoding's own file,
``study.models.encodings``: its fields, their bounds and its rules) and :class:`ResNetConfig`, the baseline.
``ModelConfig(**fields)`` and :meth:`ModelConfig.from_dict` validate through pydantic's discriminated union
of the members (:func:`union`, tagged by ``arch``, then ``encoding``); every refusal is a
:class:`ConfigError` naming the field.  The lowest layer of ``study.models``: no encoding is imported here
(each registers itself by subclassing :class:`AttentionConfig`).
"""

from __future__ import annotations

import functools
import math
import operator
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import core_schema

from study import limits

ARCHS = ("sa", "resnet18")


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


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """The range of a float field, declared beside the field with its reason (``Annotated[float, BOUNDS]``):
    checked by pydantic wherever the field is validated, published in the JSON Schema.  ``low``..``high``,
    open at an end with ``low_open``/``high_open``; ``off``: 0 (the feature off) is admitted too below a
    positive ``low``.  A refusal says the field ``must be`` ``refusal``; a value that is no finite number, or
    negative, ``must be`` ``finite`` (if given)."""

    low: float
    high: float
    refusal: str
    low_open: bool = False
    high_open: bool = False
    off: bool = False
    finite: str | None = None

    def admits(self, v: float) -> bool:
        above = self.low < v if self.low_open else self.low <= v
        below = v < self.high if self.high_open else v <= self.high
        return (self.off and v == 0) or (above and below)

    def check(self, v: float, given: Any = None) -> float:
        """``v`` if admitted, else ValueError quoting the value as ``given`` (an int before float)."""
        shown = v if given is None else given
        if not math.isfinite(v) or v < 0 <= self.low:
            raise ValueError(f"must be {self.finite or self.refusal}, got {shown!r}")
        if not self.admits(v):
            raise ValueError(f"must be {self.refusal}, got {shown!r}")
        return v

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

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.no_info_wrap_validator_function(
            lambda v, inner: self.check(inner(v), v), handler(source)
        )

    def __get_pydantic_json_schema__(self, schema, handler):
        return {**handler(schema), **self.json_schema()}


def Count(low: int, high: int, limit: str, why: str | None = None):  # noqa: N802 (a type)
    """An integer field from ``low`` to ``high``, the :mod:`study.limits` constant named ``limit`` (the
    schema's ``x-limit``), which a refusal names, or ``why`` it is that (``x-why``)."""
    return Annotated[int, Field(ge=low, le=high, json_schema_extra={"x-limit": limit, "x-why": why or limit})]


def Size(name: str, low: int = 1):  # noqa: N802 (a type)
    """A model size: an integer from ``low`` to ``limits.MAX_MODEL_FIELD[name]`` (a typo of a few zeros is
    refused instead of allocating terabytes)."""
    return Count(low, limits.MAX_MODEL_FIELD[name], "MAX_MODEL_FIELD")


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
#: D_p, the dimension of the relative positional encoding r_δ: at least 3 (the quadratic encoding's
#: (1, δ, ‖δ‖²) has 3, Eq. 9; GPSA's (δx, δy, ‖δ‖²) too; a learned r_δ of fewer scores too
#: little);
#: each encoding narrows it (its own rule)
PosDim = Annotated[
    int,
    Field(
        ge=3,
        le=limits.MAX_MODEL_FIELD["pos_dim"],
        description="D_p, dimension of the relative positional encoding r_δ",
        json_schema_extra={"x-limit": "MAX_MODEL_FIELD", "metavar": "D_p"},
    ),
]

STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)


class ModelConfig(BaseModel):
    """Hyper-parameters of one model (paper defaults, Cordonnier et al. 2020, Table 2): the fields every
    model has.  ``ModelConfig(**fields)`` is the member of ``arch``/``encoding`` (:meth:`from_dict`); an
    encoding's own fields are read flat (``cfg.pos_dim``), another encoding's read as None."""

    model_config = STRICT

    arch: Literal["sa", "resnet18"] = "sa"
    encoding: str | None = "quadratic"
    num_heads: Size("num_heads") | None = 9
    hidden: Size("hidden") = 400
    layers: Size("layers") = 6
    intermediate: Size("intermediate") = 512
    dropout: Annotated[float, PROBABILITY] = 0.1
    attention_dropout: Annotated[float, PROBABILITY] = 0.1
    image_size: Size("image_size") = 32
    in_channels: Size("in_channels") = 3
    num_classes: Size("num_classes") = 10
    downsample: Size("downsample") = 2
    center_init_std: Annotated[float, INIT_STD] = 2.0
    spread_init_std: Annotated[float, INIT_STD] = 0.01

    #: every registered encoding's member, by name (the one registry: ``study.models.encodings``)
    members: ClassVar[dict[str, type[AttentionConfig]]] = {}
    #: the encoding's behaviour (``study.models.encodings.base.Encoding``); None for the baseline
    spec: ClassVar[Any] = None

    def __new__(cls, /, **fields: Any):
        if cls is ModelConfig:  # the member of arch/encoding, validated (below: not twice)
            return ModelConfig.from_dict(fields)
        return super().__new__(cls)

    def __init__(self, /, **fields: Any):
        if not self.__dict__:  # a member built by __new__ holds its fields already
            super().__init__(**fields)

    def __getattr__(self, name: str) -> Any:
        if name in encoding_field_owners():  # another encoding's field: stored as null
            return None
        return super().__getattr__(name)

    @property
    def grid(self) -> int:
        """Side of the token grid after space-to-depth (16 for CIFAR-10)."""
        return self.image_size // self.downsample

    def to_dict(self) -> dict[str, Any]:
        """Every column of ``runs`` a model has (:func:`columns`), another encoding's field as None."""
        return {k: getattr(self, k) for k in columns()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelConfig:
        """The member ``d`` describes (``arch``, then ``encoding``), validated; else :class:`ConfigError`.
        The baseline takes no attention field (given ones are dropped, as a grid crossing ``arch`` with
        ``num_heads`` gives them); another encoding's field must be unset or None."""
        d = dict(d)
        unknown = sorted(set(d) - set(columns()))
        if unknown:
            raise ConfigError(unknown[0], "unknown model field")
        arch = d.get("arch", "sa")
        if arch not in ARCHS:
            raise ConfigError("arch", f"must be one of {', '.join(ARCHS)}, got {arch!r}")
        owners = encoding_field_owners()
        if arch == "resnet18":
            member = ResNetConfig
            d = {k: v for k, v in d.items() if k not in ("encoding", "num_heads", *owners)}
        else:
            name = d.get("encoding", "quadratic")
            member = ModelConfig.members.get(name) if isinstance(name, str) else None
            if member is None:
                raise ConfigError(
                    "encoding", f"must be one of {', '.join(ModelConfig.members)}, got {name!r}"
                )
            d = {k: v for k, v in d.items() if not (k in owners and v is None)}  # None: unset (the default)
            other = sorted(k for k in d if k in owners and k not in member.model_fields)
            if other:
                owner = ", ".join(o.name() for o in owners[other[0]])
                raise ConfigError(other[0], f"applies only to encoding {owner}")
        try:
            return union().validate_python(d)
        except ValidationError as e:  # located under the member's tag
            raise config_error(member, e, "model", tagged=True) from None

    def replace(self, **changes: Any) -> ModelConfig:
        """A validated copy with ``changes``; another ``encoding`` or ``arch`` drops this one's own fields."""
        mine = self.to_dict()
        if {"encoding", "arch"} & set(changes):
            mine = {k: v for k, v in mine.items() if k not in encoding_field_owners()}
        return ModelConfig.from_dict({**mine, **changes})


class AttentionConfig(ModelConfig):
    """The attention-only network (Section 3) with one encoding: the base of every encoding's member,
    which narrows ``encoding`` to its name (a ``Literal``) and declares its own fields and rules."""

    arch: Literal["sa"] = "sa"
    num_heads: Size("num_heads") = 9

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        ann = cls.model_fields["encoding"].annotation
        if typing.get_origin(ann) is Literal:  # a member (registered as it is declared)
            (name,) = typing.get_args(ann)
            common = set(AttentionConfig.model_fields) - {"encoding"}
            if shadowed := sorted(common & set(cls.__dict__.get("__annotations__", {}))):
                raise TypeError(
                    f"encoding {name!r} redeclares {shadowed[0]!r}, a field of every model "
                    "(an encoding declares only its own fields)"
                )
            held = ModelConfig.members.get(name)
            if held is not None and (held.__module__, held.__qualname__) != (
                cls.__module__,
                cls.__qualname__,
            ):
                raise TypeError(
                    f"encoding {name!r} is declared twice: {held.__module__} and {cls.__module__}"
                )
            ModelConfig.members[name] = cls

    @classmethod
    def name(cls) -> str:
        return typing.get_args(cls.model_fields["encoding"].annotation)[0]

    @model_validator(mode="after")
    def _divides(self):
        if self.image_size % self.downsample:
            raise ConfigError(
                "downsample", f"must divide image_size {self.image_size}, got {self.downsample}"
            )
        return self


class ResNetConfig(ModelConfig):
    """The CIFAR ResNet18 baseline (He et al. 2016): no attention field."""

    arch: Literal["resnet18"] = "resnet18"
    encoding: None = None
    num_heads: None = None


def member_tag(fields: Any) -> str | None:
    """The tag of the member ``fields`` describe: ``resnet18`` for the baseline, else its ``encoding``
    (the paper's quadratic one by default)."""
    if isinstance(fields, ModelConfig):
        return "resnet18" if fields.arch == "resnet18" else fields.encoding
    if fields.get("arch", "sa") == "resnet18":
        return "resnet18"
    return fields.get("encoding", "quadratic")


def union() -> TypeAdapter:
    """:class:`ModelConfig` as pydantic's discriminated union of its members, tagged by
    :func:`member_tag`: every registered encoding's member (tag: its name) and the baseline
    (``resnet18``).  Rebuilt once an encoding registers (an installed package or a study file may add
    one after this module is imported)."""
    key = tuple(ModelConfig.members.items())
    if _UNION.get("key") != key:
        tagged = [Annotated[m, Tag(name)] for name, m in key] + [Annotated[ResNetConfig, Tag("resnet18")]]
        members = functools.reduce(operator.or_, tagged)
        _UNION.update(key=key, adapter=TypeAdapter(Annotated[members, Discriminator(member_tag)]))
    return _UNION["adapter"]


_UNION: dict[str, Any] = {}


def encoding_field_owners() -> dict[str, tuple[type[AttentionConfig], ...]]:
    """Every encoding's own field (not a common one), in registry order, with the members declaring it."""
    key = tuple(ModelConfig.members.values())
    if _OWNERS.get("key") != key:
        owners: dict[str, list] = {}
        for m in key:
            for k in m.model_fields:
                if k not in ModelConfig.model_fields:
                    owners.setdefault(k, []).append(m)
        _OWNERS.update(key=key, owners={k: tuple(v) for k, v in owners.items()})
    return _OWNERS["owners"]


_OWNERS: dict[str, Any] = {}


def columns() -> tuple[str, ...]:
    """The model's columns of ``runs`` in order: arch, encoding, num_heads, every encoding's own, the rest."""
    common = list(ModelConfig.model_fields)
    return (*common[:3], *encoding_field_owners(), *common[3:])


def validated(cls: type[BaseModel], d: Mapping[str, Any], kind: str):
    """``cls.model_validate(d)``, pydantic's first error as a :class:`ConfigError` naming the field."""
    try:
        return cls.model_validate(d)
    except ValidationError as e:
        raise config_error(cls, e, kind) from None


def config_error(cls: type[BaseModel], e: ValidationError, kind: str, tagged: bool = False) -> ConfigError:
    """Pydantic's first error of validating ``cls`` (``tagged``: as a member of :func:`union`) as a
    :class:`ConfigError`: a rule's own (raised in a validator), else what the field's type and bounds say,
    in the words of the study's other refusals."""
    first = e.errors()[0]
    loc, kind_, ctx, v = first["loc"][tagged:], first["type"], first.get("ctx") or {}, first.get("input")
    field = str(loc[0]) if loc else ""
    error = ctx.get("error")
    if isinstance(error, ConfigError):
        return error
    info = cls.model_fields.get(field)
    message = bound_message(info, kind_, ctx, v)
    if message is None:
        message = {
            "extra_forbidden": f"unknown {kind} field",
            "missing": "required",
            "int_type": f"must be an integer, got {v!r}",
            "float_type": f"must be a number, got {v!r}",
            "bool_type": f"must be true or false, got {v!r}",
            "string_type": f"must be a string, got {v!r}",
            "literal_error": f"must be one of {_choices(ctx.get('expected'))}, got {v!r}",
            "value_error": str(error),
        }.get(kind_, f"{first['msg']}, got {v!r}")
    return ConfigError(field, message)


def field_bounds(info) -> tuple[Any, Any, tuple[str | None, str | None], Any]:
    """(ge, le, (the limit's name, why it is that), type) a pydantic field declares, also inside
    ``Optional[Annotated[...]]``."""
    metadata, kind = list(info.metadata), info.annotation
    for arg in typing.get_args(info.annotation):
        if typing.get_origin(arg) is Annotated:
            kind, *more = typing.get_args(arg)
            metadata += [m for x in more for m in (x.metadata if hasattr(x, "metadata") else [x])]
            metadata += [x for x in more if hasattr(x, "json_schema_extra")]
    extras = [info, *metadata]
    extra = [e.json_schema_extra for e in extras if isinstance(getattr(e, "json_schema_extra", None), dict)]
    limit = next((e["x-limit"] for e in extra if "x-limit" in e), None)
    why = next((e["x-why"] for e in extra if "x-why" in e), limit)
    ge = next((m.ge for m in metadata if hasattr(m, "ge")), None)
    le = next((m.le for m in metadata if hasattr(m, "le")), None)
    return ge, le, (limit, why), kind


def bound_message(info, kind: str, ctx: dict, v: Any) -> str | None:
    """The refusal of a value beyond a field's declared ``ge``/``le`` (None for another error): a float
    range (an encoding's, what its equation carries) as a range, an integer as its one violated end, naming
    the :mod:`study.limits` constant it is."""
    ranges = ("greater_than_equal", "less_than_equal", "float_type", "finite_number")
    if info is None or kind not in ranges:
        return None
    ge, le, (_, why), typ = field_bounds(info)
    if typ is float and ge is not None and le is not None:
        return f"must be a number from {ge:g} to {le:g}, got {v!r}"
    if kind not in ranges[:2]:
        return None
    if kind == "less_than_equal":
        return f"must be <= {ctx['le']}" + (f" ({why})" if why else "") + f", got {v!r}"
    return f"must be >= {ctx['ge']}, got {v!r}"


def _choices(expected: str) -> str:
    """Pydantic's ``'a', 'b' or 'c'`` of a ``Literal`` as ``a, b, c``."""
    return str(expected).replace("'", "").replace(" or ", ", ")
