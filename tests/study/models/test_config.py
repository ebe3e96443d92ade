"""ModelConfig and TrainConfig are strict pydantic models (issue 44): no coercion (an int field refuses 2.5
and "3", a bool refuses 1), frozen, no unknown field; every encoding's member reads flat, round-trips
through the ``runs`` columns and refuses with a ConfigError naming the field."""

from __future__ import annotations

import pydantic
import pytest

from study.models import ConfigError, ModelConfig
from study.models.config import columns
from study.models.encodings import REGISTRY
from study.trial import TrainConfig

TINY = dict(hidden=16, layers=1, intermediate=16, num_heads=4)


@pytest.mark.parametrize(
    "cls,field,value,message",
    [
        (ModelConfig, "num_heads", 2.5, "must be an integer, got 2.5"),
        (ModelConfig, "num_heads", "3", "must be an integer, got '3'"),
        (ModelConfig, "isotropic", 1, "must be true or false, got 1"),
        (ModelConfig, "dropout", True, "must be a number, got True"),
        (ModelConfig, "layers", 257, "must be <= 256 (MAX_MODEL_FIELD), got 257"),
        (ModelConfig, "colour", 1, "unknown model field"),
        (TrainConfig, "epochs", 2.0, "must be an integer, got 2.0"),
        (TrainConfig, "amp", 0, "must be true or false, got 0"),
        (TrainConfig, "seed", -1, "must be >= 0, got -1"),
        (TrainConfig, "colour", 1, "unknown training field"),
    ],
)
def test_a_value_of_another_type_or_beyond_its_bounds_is_refused_naming_the_field(cls, field, value, message):
    with pytest.raises(ConfigError) as e:
        cls(**{field: value})
    assert (e.value.field, e.value.message) == (field, message)


def test_a_configuration_is_frozen():
    cfg = TrainConfig(model=ModelConfig(**TINY))
    for obj, field in ((cfg, "lr"), (cfg.model, "hidden")):
        with pytest.raises(pydantic.ValidationError):
            setattr(obj, field, 1)


def test_every_encoding_reads_flat_and_round_trips_through_the_runs_columns(encoding_variant):
    cfg = ModelConfig(**TINY, **encoding_variant)
    assert isinstance(cfg, ModelConfig) and cfg.spec is REGISTRY[cfg.encoding]
    row = cfg.to_dict()
    assert tuple(row) == columns()  # every encoding's field a column, another encoding's None
    own = set(type(cfg).model_fields)
    assert all(v is None for k, v in row.items() if k not in own)
    assert ModelConfig.from_dict(row) == cfg and hash(ModelConfig.from_dict(row)) == hash(cfg)
    assert TrainConfig.from_dict(TrainConfig(model=cfg).to_dict()).model == cfg
    assert cfg.replace(num_heads=9).num_heads == 9 and cfg.replace(num_heads=9).encoding == cfg.encoding


def test_replacing_the_encoding_leaves_the_old_encodings_fields():
    rope = ModelConfig(**TINY, encoding="rope2d", rope_mode="mixed")
    bias = rope.replace(encoding="relative_bias")
    assert (bias.encoding, bias.rope_mode, bias.rope_theta) == ("relative_bias", None, None)
    with pytest.raises(ConfigError) as e:
        ModelConfig(**TINY, encoding="relative_bias", rope_mode="mixed")
    assert e.value.field == "rope_mode" and "applies only to encoding rope2d" in e.value.message


def test_a_model_configuration_is_a_discriminated_union_on_its_encoding(encoding_variant):
    """pydantic's tagged union of the members picks the member of ``encoding`` (``resnet18`` for the
    baseline) and validates the fields with that member's own bounds, naming the field."""
    from study.models.fields import ResNetConfig, union

    config = union().validate_python({**TINY, **encoding_variant})
    assert type(config) is ModelConfig.members[encoding_variant["encoding"]]
    assert config == ModelConfig(**TINY, **encoding_variant)
    assert type(union().validate_python({"arch": "resnet18"})) is ResNetConfig
    with pytest.raises(pydantic.ValidationError) as e:
        union().validate_python({**TINY, **encoding_variant, "num_heads": 0})
    assert e.value.errors()[0]["loc"] == (encoding_variant["encoding"], "num_heads")


@pytest.mark.parametrize("field", ["hidden", "num_heads", "layers", "arch"])
def test_an_encoding_may_not_redeclare_a_field_every_model_has(field):
    """An encoding's own field named like a common one (``hidden``) replaced that field's type and
    bounds for that encoding only, and study files were refused in two contradicting ways."""
    from typing import ClassVar, Literal

    from study.models.encodings import REGISTRY
    from study.models.fields import AttentionConfig, ModelConfig

    before = dict(ModelConfig.members)
    with pytest.raises(TypeError, match=f"encoding 'shadowing' redeclares {field!r}, a field of every model"):

        class Shadowing(AttentionConfig):
            spec: ClassVar = REGISTRY["quadratic"]
            encoding: Literal["shadowing"] = "shadowing"
            __annotations__[field] = float  # noqa: F821 (the class body's own annotations)
            locals()[field] = 1.0

    assert ModelConfig.members == before
