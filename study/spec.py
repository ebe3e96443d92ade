"""Study files: one YAML document describes a study (``search_spaces/*.yaml``).

The schema is :class:`StudyFile` (pydantic; ``study schema`` prints it as JSON Schema,
``search_spaces/study.schema.json``).  Every key is optional except ``data``::

    name: smoke                      # default: the file's stem
    description: free text
    data: synthetic                  # synthetic[:N] | cifar10[:ROOT] | image-folder tree / .tar(.gz)
    subset: 2000                     # training images (null: all)
    validation: 200                  # held out for selection: N images or a fraction in (0, 1)
    epochs: 300
    batch_size: 100
    optimizer: {lr: 0.1, momentum: 0.9, weight_decay: 1.0e-4}
    schedule: {type: cosine, warmup: 0.05}         # or {type: step} (ResNet18 recipe)
    training: {amp: true, compile: false, head_stats: true, head_images: 100, map_radius: 7}
    protocol: {cutmix_alpha: 1.0, mixup_alpha: 0.0, randaugment_ops: 2, randaugment_magnitude: 9,
               autoaugment: none, label_smoothing: 0.1}   # all off by default (the paper's recipe)
    maps: {epochs: auto}             # epochs that store attention maps: auto | all | last | none | [0, 9, 299]
    seeds: [0]                                     # grid axis
    model: {hidden: 400, layers: 6}                # base model fields for every trial
    models: [{arch: resnet18, training: {schedule: {type: step}}}, {encoding: quadratic}]   # grid axis
    grid: {num_heads: [4, 9], isotropic: [true, false]} # cartesian product
    sample: {lr: {loguniform: [0.01, 0.3]}, warmup: {uniform: [0.0, 0.1]}}   # Optuna TPE
    num_samples: 1                                 # samples per grid cell
    scheduler: {type: asha, grace_period: 10, reduction_factor: 3}   # or fifo / null; metric: val_acc
    resources: {gpus_per_trial: 1, cpus_per_trial: 4, workers_per_trial: 1}
    max_failures: 2
    max_concurrent: null
    loggers: [tensorboard]           # any of tensorboard, mlflow, wandb (Ray Tune's logger callbacks)

Grid and sample axes name a model field or a training field (:data:`TRAIN_AXES`).
Trials = seeds × models × grid cells × num_samples.  A ``training:`` mapping in a
``models`` entry (:class:`Recipe`) overrides the top-level recipe for that model's
trials; a grid or sample axis may not also be set there.  ``validation`` defaults to
0.1 for studies that select (sampled axes or ASHA), 0 for pure grids; a study selects
on the test set only by asking (``validation: 0``, ``scheduler: {metric: test_acc}``).
``protocol`` is the training protocol of :class:`TrainConfig` (CutMix/MixUp alphas,
RandAugment, AutoAugment, label smoothing), recorded as ``runs`` columns.

Every error is one line ``FILE: path.to.field: what is wrong`` (:class:`SpecError`):
the YAML is read within limits (:mod:`study.specyaml`), pydantic checks the keys,
types and bounds (its first error, :func:`_refusal`), validators the cross-field
rules, and :func:`study.speccheck.check_values` every value the study can produce.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, create_model,
                      field_validator, model_validator)
from pydantic_core import PydanticCustomError

from study import limits, overrides as cli_overrides, speccheck
from study.errors import StudyFileError
from study.models.config import ConfigError, ModelConfig
from study.specyaml import YamlError, load_yaml, read_study_text
from study.trial.config import AUTOAUGMENT_POLICIES, PROTOCOL_FIELDS, SCHEDULES, TrainConfig

#: experiment trackers a study file may name in ``loggers:`` -> (the module each needs,
#: the extra that installs it); Ray Tune's callbacks for them: :mod:`study.tuning.loggers`
LOGGERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboardX", "tensorboard"), "mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
DEFAULT_LOGGERS = ("tensorboard",)
MODEL_FIELDS = tuple(ModelConfig.__dataclass_fields__)
TRAIN_AXES = ("lr", "momentum", "weight_decay", "warmup", "batch_size", *PROTOCOL_FIELDS)
#: where each TrainConfig field sits in a recipe mapping (for error paths)
_RECIPE_PATHS = {"lr": "optimizer.lr", "momentum": "optimizer.momentum", "weight_decay": "optimizer.weight_decay",
                 "warmup": "schedule.warmup", "schedule": "schedule.type", "map_epochs": "maps.epochs",
                 **{k: f"protocol.{k}" for k in PROTOCOL_FIELDS}}


class SpecError(StudyFileError, ValueError):
    """A study-file error: ``FILE: path.to.field: message`` on one line.  Raised with
    ``file=""`` inside a validator, its ``path`` relative to the validated value."""

    def __init__(self, file: str, path: str, message: str):
        self.file, self.path, self.message = file, path, message
        super().__init__(f"{file}: {path}: {message}" if path else f"{file}: {message}")

    def __reduce__(self):  # picklable/copyable (Ray copies exceptions of failed trials)
        return (SpecError, (self.file, self.path, self.message))


def _refuse(path: str, message: str) -> SpecError:
    return SpecError("", path, message)


def _capped(name: str) -> AfterValidator:
    """At most :mod:`study.limits`' ``name``: a number, a string's characters or a
    list's entries; the refusal names the limit."""
    cap = getattr(limits, name)

    def check(v):
        n = len(v) if isinstance(v, (str, list)) else v
        if n > cap:
            raise PydanticCustomError("limit", "{m}", {"m": (
                f"is {n} characters, more than {cap} ({name})" if isinstance(v, str) else
                f"lists {n} entries, more than {cap} ({name})" if isinstance(v, list) else
                f"must be <= {cap} ({name}), got {v:g}" if isinstance(v, float) else
                f"must be <= {cap} ({name}), got {v}")})
        return v
    return AfterValidator(check)


def Capped(kind, name: str, **bounds):  # noqa: N802 (a type)
    """``kind`` with pydantic ``bounds``, at most the limit ``name`` (also in the JSON Schema)."""
    key = {str: "maxLength", list: "maxItems"}.get(getattr(kind, "__origin__", kind), "maximum")
    return Annotated[kind, Field(**bounds, json_schema_extra={key: getattr(limits, name), "x-limit": name}),
                     _capped(name)]


class _Strict(BaseModel):
    """No unknown key, no coercion (``"5"`` is not 5, ``true`` is not 1), no inf/nan."""
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _train_fields(*names: str, **types) -> dict[str, Any]:
    """:class:`TrainConfig`'s fields ``names`` with its types and defaults (their one home)."""
    tc = {f.name: f for f in dataclasses.fields(TrainConfig)}
    return {n: (types.get(n, {"int": int, "float": float, "bool": bool, "str": str}[tc[n].type]), tc[n].default)
            for n in names}


Optimizer = create_model("Optimizer", __base__=_Strict, **_train_fields("lr", "momentum", "weight_decay"))
Training = create_model("Training", __base__=_Strict, **_train_fields(
    "amp", "compile", "head_stats", "head_images", "map_radius", "eval_batch_size"))
Protocol = create_model("Protocol", __base__=_Strict,
                        **_train_fields(*PROTOCOL_FIELDS, autoaugment=Literal[AUTOAUGMENT_POLICIES]))


class Schedule(_Strict):
    type: Literal[SCHEDULES] = "cosine"
    warmup: float = 0.05


class Recipe(Training):
    """A ``models.N.training`` override: the top level's recipe keys."""
    epochs: int = 300
    batch_size: int = 100
    optimizer: Optimizer = Optimizer()
    schedule: Schedule = Schedule()
    protocol: Protocol = Protocol()


class Maps(_Strict):
    epochs: Literal["auto", "all", "last", "none"] | list[int] = "auto"

    @field_validator("epochs")
    @classmethod
    def _distinct(cls, v):
        if isinstance(v, list) and len(set(v)) != len(v):
            raise _refuse("", f"repeats an epoch: {speccheck.short(v)}")
        return v


#: a model's fields, checked by :class:`ModelConfig` (their one home) for every value the study produces
ModelFields = create_model("ModelFields", __base__=_Strict,
                           **{k: (Any, f.default) for k, f in ModelConfig.__dataclass_fields__.items()})
ModelEntry = create_model("ModelEntry", __base__=ModelFields, training=(Recipe, Recipe()))


def _distinct_entries(path: str, values: list) -> None:
    """Finite and distinct (0 and 0.0 are the same value; true and 1 are not)."""
    for i, v in enumerate(values):
        if isinstance(v, float) and not math.isfinite(v):
            raise _refuse(path, f"entry {i} must be finite, got {v}")
    if len({(type(v) is bool, v) if isinstance(v, (bool, int, float, str, type(None))) else repr(v)
            for v in values}) != len(values):
        raise _refuse(path, f"repeats a value: {speccheck.short(values)}")


Axis = Annotated[Capped(list[Any], "MAX_LIST_ENTRIES", min_length=1), AfterValidator(
    lambda v: _distinct_entries("", v) or v)]
Grid = create_model("Grid", __base__=_Strict, **{k: (Axis, None) for k in MODEL_FIELDS + TRAIN_AXES})
Bounds = Annotated[list[float], Field(min_length=2, max_length=2)]


IntBounds = Annotated[list[int], Field(min_length=2, max_length=2)]


class Distribution(_Strict):
    """One of: ``uniform: [low, high]``, ``loguniform`` (low > 0), ``int`` (integers), ``choice: [values]``."""
    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})
    uniform: Bounds = None
    loguniform: Bounds = None
    int: IntBounds = None
    choice: Capped(list[Any], "MAX_LIST_ENTRIES", min_length=1) = None

    @model_validator(mode="after")
    def _one(self):
        if len(self.model_fields_set) != 1:
            raise _refuse("", "must be one of {uniform: ..., loguniform: ..., int: ..., choice: ...}")
        (kind,) = self.model_fields_set
        args = getattr(self, kind)
        if kind == "choice":
            speccheck.check_choice(_refuse, "choice", args)
        elif not args[0] < args[1]:
            raise _refuse(kind, f"low must be < high, got {args}")
        elif kind == "loguniform" and args[0] <= 0:
            raise _refuse(kind, f"low must be > 0 for loguniform, got {args[0]}")
        return self


Sample = create_model("Sample", __base__=_Strict, **{k: (Distribution, None) for k in MODEL_FIELDS + TRAIN_AXES})


class Scheduler(_Strict):
    type: Literal["asha", "fifo"] = "asha"
    grace_period: Annotated[int, Field(ge=1)] = 1
    reduction_factor: Annotated[float, Field(gt=1)] = 3
    metric: str = None
    mode: Literal["max", "min"] = None

    @model_validator(mode="after")
    def _consistent(self):
        for key in {"grace_period", "reduction_factor"} & self.model_fields_set:
            if self.type != "asha":
                raise _refuse(key, "applies only to type asha (the fifo scheduler stops no trial)")
        best = "min" if (self.metric or "").endswith("loss") else "max"
        if self.metric and self.mode and self.mode != best:
            raise _refuse("mode", f"{self.mode} with metric {self.metric} would select the worst trials "
                                  f"(use mode: {best})")
        return self


class Resources(_Strict):
    gpus_per_trial: Capped(float, "MAX_GPUS_PER_TRIAL", ge=0) = 0
    cpus_per_trial: Capped(float, "MAX_CPUS_PER_TRIAL", gt=0) = 1
    workers_per_trial: Capped(int, "MAX_GPUS_PER_TRIAL", ge=1) = None  # null: one per GPU

    @model_validator(mode="after")
    def _consistent(self):
        gpus = self.gpus_per_trial
        if gpus > 1 and gpus != int(gpus):
            raise _refuse("gpus_per_trial", f"fractional GPUs must be <= 1 (to pack trials on one GPU), got {gpus:g}")
        for key in ("cpus_per_trial", "gpus_per_trial"):
            if 0 < getattr(self, key) < 1e-4:  # Ray counts resources in units of 1/10000: this would be 0
                raise _refuse(key, f"must be 0 or at least 0.0001 (Ray's resource unit), got {getattr(self, key):g}")
        if self.workers_per_trial is None:
            self.workers_per_trial = int(gpus) if gpus > 1 else 1
        if gpus > 1 and self.workers_per_trial != int(gpus):
            raise _refuse("workers_per_trial", f"a DDP trial uses one worker per GPU: {int(gpus)}, "
                                               f"got {self.workers_per_trial}")
        return self


class StudyFile(_Strict):
    """A study file (module docstring); ``model_validate(raw, context={"default_name":
    ..., "gpus": ..., "cpus": ...})`` checks it against the target's GPUs/CPUs if known."""
    name: Annotated[str, Field(min_length=1), _capped("MAX_NAME_LENGTH")] = None  # default: the file's stem
    description: Capped(str, "MAX_DESCRIPTION_CHARS") = ""
    data: str
    subset: Annotated[int, Field(ge=1)] | None = None
    validation: int | float = None  # default: 0.1 if the study selects, else 0
    epochs: Capped(int, "MAX_EPOCHS", ge=1) = 300
    batch_size: Capped(int, "MAX_BATCH_SIZE", ge=1) = 100
    optimizer: Optimizer = Optimizer()
    schedule: Schedule = Schedule()
    training: Training = Training()
    protocol: Protocol = Protocol()
    maps: Maps = Maps()
    seeds: Capped(list[Capped(int, "MAX_SEED", ge=0)], "MAX_SEEDS", min_length=1) = [0]
    model: ModelFields = ModelFields()
    models: Capped(list[ModelEntry], "MAX_LIST_ENTRIES", min_length=1) = [ModelEntry()]
    grid: Grid = Grid()
    sample: Sample = Sample()
    num_samples: Capped(int, "MAX_NUM_SAMPLES", ge=1) = 1
    scheduler: Scheduler | None = None
    resources: Resources = Resources()
    max_failures: Capped(int, "MAX_FAILURES", ge=0) = 2
    max_concurrent: Capped(int, "MAX_TRIALS", ge=1) | None = None
    loggers: list[Literal[tuple(LOGGERS)]] = list(DEFAULT_LOGGERS)

    @field_validator("data")
    @classmethod
    def _source(cls, data: str) -> str:
        """The source exists (:func:`study.speccheck.check_data_source`); a path becomes
        absolute (trials run in other working directories, and on other nodes)."""
        return speccheck.check_data_source(lambda _, message: _refuse("", message), data, exists=True)

    @field_validator("seeds", "loggers")
    @classmethod
    def _no_repeats(cls, v: list):
        if len(set(v)) != len(v):
            raise _refuse("", "repeats an entry")
        return v

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo):
        ctx = info.context or {}
        speccheck.check_sizes(_refuse, self)
        if self.num_samples > 1 and not self.sample.model_fields_set:
            raise _refuse("num_samples", f"{self.num_samples} samples per cell but nothing is sampled (no sample "
                                         "axes): every sample would repeat the same trial (repeat with seeds instead)")
        grid, sample = self.grid.model_fields_set, self.sample.model_fields_set
        for k in grid | sample:
            where = f"grid.{k}" if k in grid else f"sample.{k}"
            if k in grid and k in sample:
                raise _refuse(f"sample.{k}", "duplicate axis: also a grid axis")
            for i, m in enumerate(self.models):
                if k in m.model_fields_set:
                    raise _refuse(where, "duplicate axis: also set in models")
                if k in speccheck.flatten(m.training.model_dump(exclude_unset=True)):
                    raise _refuse(where, f"duplicate axis: also set in models.{i}.training")
        _select(self)
        self.name = self.name or ctx.get("default_name")
        if not _valid_name(self.name):
            raise _refuse("name", f"must be 1 to {limits.MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', "
                                  f"got {speccheck.short(self.name)}")
        speccheck.check_resources(_refuse, self.resources, cpus_available=ctx.get("cpus"),
                                  gpus_available=ctx.get("gpus"))
        return self


def _select(study: StudyFile) -> None:
    """Resolve ``validation`` and the metric selection sees (``scheduler``: a fifo one
    when only Optuna selects); both must be ones the trials report."""
    choosing, sched = selects(study.model_dump(include={"sample", "scheduler"}, exclude_unset=True)), study.scheduler
    if study.validation is None:
        study.validation = 0.1 if choosing else 0
    if study.validation < 0 or (isinstance(study.validation, float) and not 0 < study.validation < 1):
        raise _refuse("validation", "must be a number of training images >= 0 or a fraction in (0, 1), "
                                    f"got {study.validation}")
    n_train = study.subset or speccheck.known_train_size(study.data)
    if isinstance(study.validation, int) and n_train is not None and study.validation >= n_train:
        raise _refuse("validation", f"{study.validation} held-out images leave none of the {n_train} training "
                                    "images (use fewer, or validation: 0)")
    metric = sched and sched.metric
    if metric and metric.startswith("val_") and not study.validation:
        raise _refuse("scheduler.metric", f"{metric} needs a validation split (validation: N > 0)")
    if choosing and not metric:
        if not study.validation:
            raise _refuse("validation", "is 0 but the study selects trials (sample/ASHA): keep a validation split, "
                                        "or select on the test set explicitly with scheduler.metric: test_acc")
        metric = "val_acc"
    if metric:
        sched = study.scheduler = sched or Scheduler(type="fifo")
        sched.metric, sched.mode = metric, sched.mode or ("min" if metric.endswith("loss") else "max")
    speccheck.check_scheduler(_refuse, sched, max_epochs=study.epochs, validation=study.validation)


@dataclass(frozen=True)
class Cell:
    """One grid cell: a fixed model, fixed training overrides and a seed."""

    index: int
    model: dict[str, Any]
    train: dict[str, Any]
    seed: int

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in {**self.model, **self.train}.items()]
        return ",".join(parts + [f"seed={self.seed}"])


@dataclass(frozen=True)
class StudySpec:
    """A checked study file (:class:`StudyFile`) expanded into its grid cells."""
    file: str
    name: str
    raw: dict[str, Any]
    base_train: dict[str, Any]
    cells: list[Cell]
    sample: dict[str, dict[str, list]]
    num_samples: int
    scheduler: dict[str, Any] | None
    gpus_per_trial: float
    cpus_per_trial: float
    workers_per_trial: int
    max_failures: int
    max_concurrent: int | None
    models: list[ModelConfig] = field(default_factory=list)
    #: False when ``models`` is a lower bound (a model field sampled from a
    #: continuous or long range, or too many combinations to enumerate)
    models_complete: bool = True
    loggers: tuple[str, ...] = DEFAULT_LOGGERS
    #: the command-line overrides applied to the file's mapping (``raw`` holds the result)
    overrides: tuple[str, ...] = ()

    @property
    def num_trials(self) -> int:
        return len(self.cells) * self.num_samples

    def train_config(self, cell: Cell, sampled: dict[str, Any] | None = None) -> TrainConfig:
        """The full training configuration of one trial."""
        sampled = dict(sampled or {})
        model = {**self.raw.get("model", {}), **cell.model,
                 **{k: v for k, v in sampled.items() if k in MODEL_FIELDS}}
        train = {**self.base_train, **cell.train, **{k: v for k, v in sampled.items() if k in TRAIN_AXES}}
        return TrainConfig(model=ModelConfig.from_dict(model), seed=cell.seed, **train)


def load_spec(path: str | os.PathLike, *, data: str | None = None, gpus_available: int | None = None,
              cpus_available: int | None = None, overrides: list[str] | tuple[str, ...] = ()) -> StudySpec:
    """Read and validate a study file (``data`` overrides the file's ``data``).

    ``overrides``: Hydra-syntax ``key.sub=value`` strings (:mod:`study.overrides`)
    applied to the file's mapping before it is checked; an error they cause names
    the override's path and the override.

    ``gpus_available`` / ``cpus_available``: GPUs / CPUs of the target machine or
    cluster, if known; a request per trial beyond them is an error."""
    file, p = str(path), Path(path)
    try:
        raw = load_yaml(read_study_text(p))
    except YamlError as e:
        raise SpecError(file, "", str(e)) from None
    if not isinstance(raw, (dict, type(None))):
        raise SpecError(file, "", f"must be a mapping of study fields, got {type(raw).__name__}")
    overrides = tuple(overrides)
    raw = cli_overrides.apply(raw or {}, list(overrides), err=lambda where, m: SpecError(file, where, m))
    if data is not None:
        raw = {**raw, "data": data}
    try:
        spec = validate(raw, file=file, default_name=p.stem, gpus_available=gpus_available,
                        cpus_available=cpus_available)
    except SpecError as e:
        culprit = _override_of(e.path, overrides)
        if culprit is None:
            raise
        raise SpecError(file, e.path, f"{e.message} (override {culprit})") from None
    object.__setattr__(spec, "overrides", overrides)
    return spec


def _override_of(path: str, overrides: tuple[str, ...]) -> str | None:
    """The last override that set ``path``, a field under it, or the field it is in."""
    for text in reversed(overrides):
        try:
            where = cli_overrides.dotted(cli_overrides.parse(text)[1])
        except ValueError:
            continue
        if path and (path == where or path.startswith(where + ".") or where.startswith(path + ".")):
            return text
    return None


def validate(raw: dict[str, Any], *, file: str, default_name: str, gpus_available: int | None = None,
             cpus_available: int | None = None) -> StudySpec:
    """Check the study file's mapping ``raw`` (:class:`StudyFile`), expand its grid and
    check every value it can produce (:func:`study.speccheck.check_values`)."""
    try:
        study = StudyFile.model_validate(raw, context={"default_name": default_name, "gpus": gpus_available,
                                                       "cpus": cpus_available})
    except ValidationError as e:
        raise _refusal(file, e) from None
    raw = {**raw, "data": study.data}
    models = [{k: v for k, v in m.items() if k != "training"} for m in raw.get("models", [{}])]
    recipes = [speccheck.flatten(m.training.model_dump(exclude_unset=True)) for m in study.models]
    maps = {"map_epochs": raw["maps"]["epochs"]} if "epochs" in raw.get("maps", {}) else {}
    base_train = {"data": study.data, "subset": study.subset, "validation": study.validation,
                  "epochs": study.epochs, "batch_size": study.batch_size, **speccheck.flatten(
                      {k: raw.get(k, {}) for k in ("optimizer", "schedule", "training", "protocol")}), **maps}
    grid = raw.get("grid", {})
    cells = [Cell(index=i, seed=seed, model={**m, **{k: v for k, v in assigned.items() if k in MODEL_FIELDS}},
                  train={**recipe, **{k: v for k, v in assigned.items() if k in TRAIN_AXES}})
             for i, (seed, (m, recipe), assigned) in enumerate(
                 (seed, mr, dict(zip(grid, values))) for seed in study.seeds for mr in zip(models, recipes)
                 for values in itertools.product(*grid.values()))]
    res = study.resources
    spec = StudySpec(
        file=file, name=study.name, raw=raw, base_train=base_train, cells=cells, sample=raw.get("sample", {}),
        num_samples=study.num_samples,
        scheduler=study.scheduler and {"type": study.scheduler.type, **study.scheduler.model_dump(exclude_unset=True)},
        gpus_per_trial=res.gpus_per_trial, cpus_per_trial=res.cpus_per_trial, workers_per_trial=res.workers_per_trial,
        max_failures=study.max_failures, max_concurrent=study.max_concurrent, loggers=tuple(study.loggers))

    def err(path: str, message: str) -> SpecError:
        return SpecError(file, path, message)
    seen, complete = speccheck.check_values(err, spec, locate=lambda fld, cell: _locate(fld, cell, raw, models, recipes))
    speccheck.check_distinct_models(err, spec, n_models=len(models))
    object.__setattr__(spec, "models", seen)
    object.__setattr__(spec, "models_complete", complete)
    return spec


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, map(_model_in, get_args(annotation))), None)


def _where(loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """The study-file path of a pydantic error's location (a union member's tag is no
    field: dropped) and the model the path ends in."""
    cls, path = StudyFile, []
    for part in loc:
        fields = cls.model_fields if cls else {}
        if isinstance(part, int) or part in fields:
            path.append(str(part))
            cls = _model_in(fields[part].annotation) if part in fields else cls
    return ".".join(path), cls


def _refusal(file: str, e: ValidationError) -> SpecError:
    """Pydantic's first error as one line ``FILE: path.field: problem``."""
    errors = e.errors()
    first = errors[0]
    kind, ctx, value, loc = first["type"], first.get("ctx") or {}, first.get("input"), first["loc"]
    if kind == "extra_forbidden":
        parent, cls = _where(loc[:-1])
        return SpecError(file, ".".join(filter(None, (parent, str(loc[-1])))), (
            "unknown model field" if issubclass(cls, ModelFields) else
            f"unknown axis (model fields or {', '.join(TRAIN_AXES)})" if cls in (Grid, Sample) else
            f"unknown key (allowed: {', '.join(cls.model_fields)})"))
    path, _ = _where(loc)
    if isinstance(ctx.get("error"), SpecError):
        return SpecError(file, ".".join(filter(None, (path, ctx["error"].path))), ctx["error"].message)
    expected = [_TYPES.get(x["type"]) or ctx.get("expected") for x in errors if _where(x["loc"])[0] == path]
    if _TYPES.get(kind) or kind == "literal_error":  # a union's members each reject the value
        return SpecError(file, path, f"must be {' or '.join(dict.fromkeys(filter(None, expected)))}, got "
                                     f"{type(value).__name__} {speccheck.short(value)}")
    message = {
        "missing": "required (synthetic, cifar10[:ROOT] or a path)" if path == "data" else "required",
        "finite_number": f"must be finite, got {value}",
        "greater_than_equal": f"must be >= {ctx.get('ge')}, got {value}",
        "greater_than": f"must be > {ctx.get('gt')}, got {value}",
        "less_than": f"must be < {ctx.get('lt')}, got {value}",
        "too_short": "must not be empty" if ctx.get("min_length") == 1 else
                     f"must list {ctx.get('min_length')} entries, got {speccheck.short(value)}",
        "string_too_short": "must not be empty",
        "too_long": f"must list {ctx.get('max_length')} entries, got {speccheck.short(value)}",
    }.get(kind, first["msg"])
    return SpecError(file, path, message)


#: pydantic's error types for a value of the wrong type -> the type a study file needs
_TYPES = {"int_type": "int", "float_type": "float", "string_type": "str", "bool_type": "bool", "list_type": "list",
          "model_type": "dict", "dict_type": "dict", "none_required": "null"}


def selects(raw: dict[str, Any]) -> bool:
    """Does the study choose among trials (Optuna over sampled axes, or ASHA)?"""
    sched = raw.get("scheduler") or {}
    return bool(raw.get("sample")) or (bool(raw.get("scheduler")) and sched.get("type", "asha") == "asha")


def _valid_name(name: str) -> bool:
    return (0 < len(name) <= limits.MAX_NAME_LENGTH and not name.startswith(".")
            and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name))


def _locate(fld: str, cell: Cell, raw: dict, models: list[dict], recipes: list[dict]) -> str:
    """The study-file path that set ``fld`` for ``cell``."""
    for section in ("grid", "sample"):
        if fld in raw.get(section, {}):
            return f"{section}.{fld}"
    for i, (m, recipe) in enumerate(zip(models, recipes)):
        if fld in recipe and m.items() <= cell.model.items() and recipe.items() <= cell.train.items():
            return f"models.{i}.training.{_RECIPE_PATHS.get(fld, fld)}"
    for i, m in enumerate(models):
        if fld in m and m.items() <= cell.model.items():
            return f"models.{i}.{fld}"
    for section in ("model", "training"):
        if fld in raw.get(section, {}):
            return f"{section}.{fld}"
    if fld in _RECIPE_PATHS:
        return _RECIPE_PATHS[fld]
    if fld in MODEL_FIELDS:
        return next((f"models.{i}" for i, m in enumerate(models) if m and m.items() <= cell.model.items()), "model")
    return fld
