"""Every number a study file, an override or a flag accepts is one the trial runs (issue 45, finding 1):
each numeric field of TrainConfig, ModelConfig and every encoding at the extremes of a float (0, the
smallest subnormal, the largest float, NaN, ±inf), at each declared bound and just past it is either
refused by `study validate` in one line naming it (exit 2), or accepted and one optimisation step of a
tiny model with it runs.  The bounds are declared once, beside each field, and published in the schema."""

import json
import math
import typing

import pytest
import torch
import yaml

from study import limits
from study.models.config import ENCODING_FIELDS, FLOAT32_MAX, Bounds, ModelConfig, columns
from study.models.fields import encoding_field_owners
from study.trial import TrainConfig
from study.trial.loop import first_steps

FLOAT_MAX = 1.7976931348623157e308
PROBES = [0, 5e-324, FLOAT_MAX, math.nan, math.inf, -math.inf]
BASE = {
    "data": "synthetic:20",
    "epochs": 1,
    "batch_size": 10,
    "validation": 0,
    "training": {"head_stats": False, "amp": False},
    "model": {"hidden": 8, "layers": 1, "intermediate": 8, "num_heads": 1},
}
#: where a study file sets each TrainConfig field
TRAIN_PATHS = {
    "lr": "optimizer.lr",
    "momentum": "optimizer.momentum",
    "weight_decay": "optimizer.weight_decay",
    "warmup": "schedule.warmup",
    "warmup_epochs": "schedule.warmup_epochs",
    "warmup_steps": "schedule.warmup_steps",
    "cutmix_alpha": "protocol.cutmix_alpha",
    "mixup_alpha": "protocol.mixup_alpha",
    "label_smoothing": "protocol.label_smoothing",
    "randaugment_ops": "protocol.randaugment_ops",
    "randaugment_magnitude": "protocol.randaugment_magnitude",
    "epochs": "epochs",
    "batch_size": "batch_size",
    "subset": "subset",
    "validation": "validation",
    "head_images": "training.head_images",
    "map_radius": "training.map_radius",
    "eval_batch_size": "training.eval_batch_size",
    "seed": "seeds",
}
#: the lowest value of each int field (int_at_least in the configuration classes)
INT_LOW = {
    "subset": 10,
    "map_radius": 0,
    "seed": 0,
    "randaugment_ops": 0,
    "randaugment_magnitude": 0,
    "warmup_steps": 0,
}
#: the highest (study.limits); model sizes at their caps are checked refused just past them, not trained
INT_HIGH = {
    **limits.MAX_TRAIN_FIELD,
    "epochs": limits.MAX_EPOCHS,
    "batch_size": limits.MAX_BATCH_SIZE,
    "seed": limits.MAX_SEED,
    "subset": limits.MAX_SUBSET,
    "randaugment_ops": limits.MAX_RANDAUGMENT_OPS,
    "randaugment_magnitude": limits.MAX_RANDAUGMENT_MAGNITUDE,
}
#: the encoding whose field it is (the others' fields must stay unset)
ENCODING_OF = {"locality_strength": "gpsa", "rope_theta": "rope2d", "pos_dim": "learned"}
#: ModelConfig fields a data source decides (every source gives 32x32 RGB; classes replace num_classes)
DATA_FIXED = {"image_size", "in_channels", "num_classes", "downsample"}


def _info(name):
    """The pydantic field ``name`` of TrainConfig, ModelConfig or the encoding declaring it."""
    owners = encoding_field_owners()
    if name in TrainConfig.model_fields:
        return TrainConfig.model_fields[name]
    return owners[name][0].model_fields[name] if name in owners else ModelConfig.model_fields[name]


def _types(info):
    """The types a field takes, None and bounds aside (``Annotated[float, B] | None`` -> (float,))."""
    args = (
        typing.get_args(info.annotation) if typing.get_origin(info.annotation) is not typing.Annotated else ()
    )
    kinds = [typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a for a in args]
    return tuple(k for k in kinds or [info.annotation] if k is not type(None))


def bounds_of(info):
    """The :class:`Bounds` a float field declares (also inside ``Optional``), or None."""
    args = [info.annotation, *typing.get_args(info.annotation)]
    meta = [
        *info.metadata,
        *(m for a in args if typing.get_origin(a) is typing.Annotated for m in a.__metadata__),
    ]
    return next((m for m in meta if isinstance(m, Bounds)), None)


def _numeric(names):
    return [n for n in names if set(_types(_info(n))) & {int, float} and bool not in _types(_info(n))]


TRAIN_FIELDS = _numeric([k for k in TrainConfig.model_fields if k != "model"])
MODEL_FIELDS = [n for n in _numeric(columns()) if n not in DATA_FIXED]


def _bounds(name):
    """(low, high, admits) of a field: its declared Bounds, an encoding's range, or the int table above."""
    b = bounds_of(_info(name))
    if b is not None:
        return b.low, b.high, b.admits
    enc = ENCODING_FIELDS.get(name)
    if enc is not None and enc.bounds is not None:
        return enc.bounds[0], enc.bounds[1], lambda v: enc.bounds[0] <= v <= enc.bounds[1]
    if name == "validation":  # a count, or a fraction in (0, 1)
        return 0.0, 1.0, lambda v: (isinstance(v, int) and v >= 0) or 0 < v < 1
    return None


def _values(name):
    b = _bounds(name)
    if b is not None:
        low, high, _ = b
        extra = [low, high, math.nextafter(low, -math.inf), math.nextafter(high, math.inf)]
        return PROBES + [v for v in extra if v not in PROBES]
    low = INT_LOW.get(name, 1)
    high = INT_HIGH.get(name, limits.MAX_MODEL_FIELD.get(name))
    ints = [low - 1, low] + ([high + 1] if high is not None else [])
    if name in TRAIN_PATHS and high is not None:
        ints.append(high)  # cheap to step at (model sizes at their caps are not: see INT_HIGH)
    return PROBES + [v for v in ints if v not in PROBES]


CASES = [(n, v) for n in TRAIN_FIELDS + MODEL_FIELDS for v in _values(n)]


def _doc(name, value):
    doc = json.loads(json.dumps(BASE))
    if name in TRAIN_PATHS:
        *parents, key = TRAIN_PATHS[name].split(".")
        at = doc
        for p in parents:
            at = at.setdefault(p, {})
        at[key] = [value] if key == "seeds" else value
    else:
        doc["model"][name] = value
        if name in ENCODING_OF:
            doc["model"]["encoding"] = ENCODING_OF[name]
    return doc


@pytest.fixture(scope="module")
def splits():
    from study.data import load_splits

    return load_splits("synthetic:20", subset=None, seed=0)


def test_every_numeric_field_is_covered():
    assert {
        "lr",
        "momentum",
        "weight_decay",
        "warmup",
        "warmup_epochs",
        "warmup_steps",
        "cutmix_alpha",
        "mixup_alpha",
        "label_smoothing",
        "validation",
    } <= set(TRAIN_FIELDS)
    assert {
        "dropout",
        "attention_dropout",
        "center_init_std",
        "spread_init_std",
        "locality_strength",
        "rope_theta",
        "hidden",
        "num_heads",
    } <= set(MODEL_FIELDS)
    assert set(TRAIN_FIELDS) <= set(TRAIN_PATHS)


@pytest.mark.parametrize("name,value", CASES, ids=[f"{n}={v!r}" for n, v in CASES])
def test_a_number_is_refused_in_one_line_or_its_step_runs(study_in_process, tmp_path, splits, name, value):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_doc(name, value)))
    code, out, err, _ = study_in_process("validate", path)
    b = _bounds(name)
    if code != 0:
        assert code == 2 and len(err) == 1 and name in err[0].split(f"{path}: ", 1)[1], (code, err)
        return
    assert b is None or b[2](value), f"{name}={value!r} is outside its declared bounds but was accepted"
    from study.spec.studyfile import load_spec

    spec = load_spec(path)
    cfg = spec.train_config(spec.cells[0])
    losses = first_steps(
        cfg, steps=1, splits=None if name == "subset" else splits, device=torch.device("cpu")
    )
    assert len(losses) == 1  # a non-finite loss is allowed: the trial records it as diverged


def test_the_published_schema_states_every_declared_bound():
    from study.spec.studyfile import StudyFile

    defs = StudyFile.model_json_schema()["$defs"]
    props = {
        **defs["Optimizer"]["properties"],
        **defs["Schedule"]["properties"],
        **defs["Protocol"]["properties"],
    }
    declared = {k: bounds_of(f) for k, f in TrainConfig.model_fields.items() if bounds_of(f)}
    assert {
        "lr",
        "momentum",
        "weight_decay",
        "warmup",
        "warmup_epochs",
        "cutmix_alpha",
        "mixup_alpha",
        "label_smoothing",
    } <= set(declared)
    steps = _typed(props["warmup_steps"])  # an integer field: its range and the limit it is
    assert (steps["minimum"], steps["maximum"]) == (0, limits.MAX_TRAIN_FIELD["warmup_steps"])
    for name, b in declared.items():
        assert b.json_schema().items() <= _typed(props[name]).items(), name
    model = defs["ModelFields"]["properties"]
    for name in columns():
        if bounds_of(_info(name)):
            assert bounds_of(_info(name)).json_schema().items() <= _typed(model[name]).items(), name
        elif name in ENCODING_FIELDS and ENCODING_FIELDS[name].bounds:
            low, high = ENCODING_FIELDS[name].bounds
            assert (_typed(model[name])["minimum"], _typed(model[name])["maximum"]) == (low, high), name
    assert _typed(model["num_heads"])["type"] == "integer" and _typed(model["num_heads"])["minimum"] == 1
    assert set(_typed(model["encoding"])["enum"]) == set(ModelConfig.members)


def _typed(prop):
    """A property's schema without its ``null`` alternative (an optional field's)."""
    return next((p for p in prop.get("anyOf", []) if p.get("type") != "null"), prop)


@pytest.mark.parametrize(
    "train,model",
    [({"lr": FLOAT32_MAX}, {}), ({}, {"center_init_std": FLOAT32_MAX})],
    ids=["lr", "center_init_std"],
)
def test_an_extreme_accepted_value_whose_loss_turns_non_finite_ends_the_trial_diverged(
    tmp_path, train, model
):
    from study.results.tables import read_table
    from study.trial import train_trial

    cfg = TrainConfig(
        model=ModelConfig(**{**BASE["model"], **model}),
        data="synthetic:20",
        epochs=2,
        batch_size=10,
        head_images=4,
        amp=False,
        **train,
    )
    assert train_trial(cfg, trial_id="t", tables=tmp_path).status == "diverged"
    assert read_table(tmp_path, "runs").status.tolist() == ["diverged"]


DECLARED = [k for k, f in TrainConfig.model_fields.items() if bounds_of(f)]
#: the declared fields `study train` has a flag for (momentum has none: the paper's 0.9)
TRAIN_FLAGS = {
    "lr",
    "weight_decay",
    "warmup",
    "warmup_epochs",
    "cutmix_alpha",
    "mixup_alpha",
    "label_smoothing",
}


@pytest.mark.parametrize("name", DECLARED)
def test_an_override_and_a_flag_just_past_a_declared_bound_are_refused_in_one_line(
    study_in_process, tmp_path, name
):
    past = math.nextafter(bounds_of(TrainConfig.model_fields[name]).high, math.inf)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    override = f"{TRAIN_PATHS[name]}={past!r}"
    code, _, err, _ = study_in_process("validate", path, override)
    assert (
        code == 2
        and len(err) == 1
        and f"{TRAIN_PATHS[name]}: " in err[0]
        and f"(override {override})" in err[0]
    )
    if name in TRAIN_FLAGS:
        flag = "--" + name.replace("_", "-")
        code, _, err, _ = study_in_process(
            "train", "--data", "synthetic:20", flag, repr(past), "--out", tmp_path / "o"
        )
        assert code == 2 and len(err) == 1 and f"{flag}: " in err[0], err
        assert not (tmp_path / "o").exists()
