"""Study files: one YAML document describes a study (``search_spaces/*.yaml``).

Schema (every key optional except ``data``)::

    name: smoke                      # default: the file's stem
    description: free text
    data: synthetic                  # synthetic | cifar10[:ROOT] | image-folder tree / .tar(.gz)
    subset: 2000                     # training images (null: all)
    validation: 200                  # training images held out for model selection (0: none)
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
    models: [{arch: resnet18}, {encoding: quadratic}]   # explicit model list (grid axis)
    # a model's own recipe: `training:` in its entry (keys below) overrides the top level
    #   models: [{arch: resnet18, training: {schedule: {type: step}}}, {encoding: quadratic}]
    grid: {num_heads: [4, 9], isotropic: [true, false]} # cartesian product
    sample:                                        # Optuna TPE, num_samples per grid cell
      lr: {loguniform: [0.01, 0.3]}
      warmup: {uniform: [0.0, 0.1]}
    num_samples: 1
    scheduler: {type: asha, grace_period: 10, reduction_factor: 3}   # or fifo / null; metric: val_acc
    resources: {gpus_per_trial: 1, cpus_per_trial: 4, workers_per_trial: 1}
    max_failures: 2
    max_concurrent: null
    loggers: [tensorboard]           # any of tensorboard, mlflow, wandb (Ray Tune's logger callbacks)

Grid and sample keys name a model field (``num_heads``, ``pos_dim``, ``encoding``,
``isotropic``, ...) or a training field (``lr``, ``momentum``, ``weight_decay``,
``warmup``, ``batch_size``, and the ``protocol`` fields).  Trials = seeds × models × grid cells × num_samples.

A ``training:`` mapping inside a ``models`` entry gives that model its own recipe:
keys ``epochs``, ``batch_size``, ``optimizer``, ``schedule``, ``protocol`` and the top-level
``training`` keys, validated like the top level (``models.0.training.schedule.type``);
they override the top-level values for that model's trials only.  A grid or sample
axis may not also be set there.

``validation``: training images held out (class-stratified, drawn from the trial's
seed) whose accuracy is what selection sees: Optuna's objective (``best_val_acc``)
and ASHA's metric (``val_acc``).  An integer N, or a fraction in (0, 1) of the
training images (after ``subset``).  Default: 0.1 (10 %) for studies that select
(sampled axes or ASHA), 0 for pure grids.  A study may select on the test set only
by asking for it: ``validation: 0`` with ``scheduler: {metric: test_acc}``.

``protocol``: the training protocol beyond crop and flip (:class:`TrainConfig`,
applied by :mod:`study.trial.protocol`): CutMix's / MixUp's Beta alpha (0: off; both
on: one of the two per batch), RandAugment's operations per image (0: off) and
magnitude (0-30), an AutoAugment policy (none, cifar10, imagenet, svhn; not with
RandAugment), the loss's label smoothing in [0, 1).  Recorded as ``runs`` columns of
the same names.

Every error is one line ``FILE: path.to.field: what is wrong`` (:class:`SpecError`).
The YAML is read within limits (:mod:`study.specyaml`); every value the study can
produce is checked against the models, the training recipe, the data and the limits
of :mod:`study.limits` (:mod:`study.speccheck`).
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from study import limits, overrides as cli_overrides, speccheck
from study.errors import StudyFileError
from study.models.config import ConfigError, ModelConfig
from study.specyaml import YamlError, load_yaml, read_study_text
from study.trial.config import PROTOCOL_FIELDS, TrainConfig

#: experiment trackers a study file may name in ``loggers:`` -> (the module each needs,
#: the extra that installs it); Ray Tune's callbacks for them: :mod:`study.tuning.loggers`
LOGGERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboardX", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}
DEFAULT_LOGGERS = ("tensorboard",)
MODEL_FIELDS = tuple(f for f in ModelConfig.__dataclass_fields__)
TRAIN_AXES = ("lr", "momentum", "weight_decay", "warmup", "batch_size", *PROTOCOL_FIELDS)
DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")
TOP_KEYS = {
    "name": str, "description": str, "data": str, "subset": (int, type(None)), "validation": (int, float),
    "epochs": int,
    "batch_size": int, "optimizer": dict, "schedule": dict, "training": dict, "seeds": list,
    "model": dict, "models": list, "grid": dict, "sample": dict, "num_samples": int,
    "scheduler": (dict, type(None)), "resources": dict, "max_failures": int,
    "max_concurrent": (int, type(None)), "maps": dict, "loggers": list, "protocol": dict,
}
SECTION_KEYS = {
    "optimizer": {"lr": (int, float), "momentum": (int, float), "weight_decay": (int, float)},
    "schedule": {"type": str, "warmup": (int, float)},
    "training": {"amp": bool, "compile": bool, "head_stats": bool, "head_images": int, "map_radius": int,
                 "eval_batch_size": int},
    "scheduler": {"type": str, "grace_period": int, "reduction_factor": (int, float), "metric": str,
                  "mode": str},
    "resources": {"gpus_per_trial": (int, float), "cpus_per_trial": (int, float), "workers_per_trial": int},
    "maps": {"epochs": (str, list)},
    "protocol": {"cutmix_alpha": (int, float), "mixup_alpha": (int, float), "randaugment_ops": int,
                 "randaugment_magnitude": int, "autoaugment": str, "label_smoothing": (int, float)},
}

#: Keys of a per-model ``training:`` override inside a ``models`` entry.
MODEL_TRAINING_KEYS = {
    "epochs": int, "batch_size": int, "optimizer": dict, "schedule": dict, "protocol": dict,
    **SECTION_KEYS["training"],
}
#: Where each TrainConfig field sits in a recipe mapping (for error paths).
_RECIPE_PATHS = {"lr": "optimizer.lr", "momentum": "optimizer.momentum",
                 "weight_decay": "optimizer.weight_decay", "warmup": "schedule.warmup",
                 "schedule": "schedule.type", **{k: f"protocol.{k}" for k in PROTOCOL_FIELDS}}


class SpecError(StudyFileError, ValueError):
    """A study-file error: ``FILE: path.to.field: message`` on one line."""

    def __init__(self, file: str, path: str, message: str):
        self.file, self.path, self.message = file, path, message
        super().__init__(f"{file}: {path}: {message}" if path else f"{file}: {message}")

    def __reduce__(self):  # picklable/copyable (Ray copies exceptions of failed trials)
        return (SpecError, (self.file, self.path, self.message))


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
    file = str(path)
    p = Path(path)
    try:
        raw = load_yaml(read_study_text(p))
    except YamlError as e:
        raise SpecError(file, "", str(e)) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(file, "", f"must be a mapping of study fields, got {type(raw).__name__}")
    overrides = tuple(overrides)
    if overrides:
        raw = cli_overrides.apply(raw, list(overrides), err=lambda where, message: SpecError(file, where, message))
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
    def err(path: str, message: str) -> SpecError:
        return SpecError(file, path, message)

    for key, value in raw.items():
        if key not in TOP_KEYS:
            raise err(str(key), f"unknown key (allowed: {', '.join(TOP_KEYS)})")
        _check_type(err, key, value, TOP_KEYS[key])
    for section, keys in SECTION_KEYS.items():
        for key, value in (raw.get(section) or {}).items():
            if key not in keys:
                raise err(f"{section}.{key}", f"unknown key (allowed: {', '.join(keys)})")
            _check_type(err, f"{section}.{key}", value, keys[key])
    speccheck.check_sizes(err, raw)
    if "data" not in raw:
        raise err("data", "required (synthetic, cifar10[:ROOT] or a path)")
    _check_data(err, raw["data"])
    speccheck.check_data_source(err, raw["data"])
    if _is_path(raw["data"]):
        # trials run in other working directories (and on other nodes): absolute path
        raw = {**raw, "data": str(Path(raw["data"]).expanduser().resolve())}
    for key in ("epochs", "batch_size", "num_samples", "subset"):
        if raw.get(key) is not None and raw[key] < 1:
            raise err(key, f"must be >= 1, got {raw[key]}")

    map_epochs = raw.get("maps", {}).get("epochs")
    if isinstance(map_epochs, list) and len({_same_key(v) for v in map_epochs}) != len(map_epochs):
        raise err("maps.epochs", f"repeats an epoch: {speccheck.short(map_epochs)}")
    validation, selection_metric = _check_validation(err, raw)
    base_train = {
        "data": raw["data"], "subset": raw.get("subset"), "validation": validation,
        "epochs": raw.get("epochs", 300),
        "batch_size": raw.get("batch_size", 100),
        **_recipe(raw.get("optimizer", {}), raw.get("schedule", {}), raw.get("training", {})),
        **raw.get("protocol", {}),
        **({"map_epochs": raw["maps"]["epochs"]} if "epochs" in raw.get("maps", {}) else {}),
    }

    seeds = raw.get("seeds", [0])
    if not seeds:
        raise err("seeds", "must list at least one seed")
    for i, s in enumerate(seeds):
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise err(f"seeds.{i}", f"must be a non-negative integer, got {s!r}")
    if len(set(seeds)) != len(seeds):
        raise err("seeds", "repeats a seed")

    models = raw.get("models", [{}])
    if not models:
        raise err("models", "must list at least one model")
    for i, m in enumerate(models):
        if not isinstance(m, dict):
            raise err(f"models.{i}", f"must be a mapping of model fields, got {type(m).__name__}")
        for k in m:
            if k not in MODEL_FIELDS and k != "training":
                raise err(f"models.{i}.{k}", "unknown model field")
    model_recipes = [_model_recipe(err, f"models.{i}.training", m.get("training", {})) for i, m in enumerate(models)]
    models = [{k: v for k, v in m.items() if k != "training"} for m in models]
    for k in raw.get("model", {}):
        if k not in MODEL_FIELDS:
            raise err(f"model.{k}", "unknown model field")

    grid = raw.get("grid", {})
    axes_ok = MODEL_FIELDS + TRAIN_AXES
    for k, values in grid.items():
        if k not in axes_ok:
            raise err(f"grid.{k}", f"unknown axis (model fields or {', '.join(TRAIN_AXES)})")
        if not isinstance(values, list):
            raise err(f"grid.{k}", f"must be a list of values, got {type(values).__name__}")
        if not values:
            raise err(f"grid.{k}", "empty axis: a grid axis needs at least one value")
        for i, v in enumerate(values):
            if isinstance(v, float) and not math.isfinite(v):
                raise err(f"grid.{k}", f"entry {i} must be finite, got {v}")
        if len({_same_key(v) for v in values}) != len(values):
            raise err(f"grid.{k}", "repeats a value")
    sample = raw.get("sample", {})
    for k, dist in sample.items():
        if k not in axes_ok:
            raise err(f"sample.{k}", f"unknown axis (model fields or {', '.join(TRAIN_AXES)})")
        if k in grid:
            raise err(f"sample.{k}", "duplicate axis: also a grid axis")
        _check_distribution(err, f"sample.{k}", dist)
    for k in list(grid) + list(sample):
        if any(k in m for m in models):
            raise err(f"grid.{k}" if k in grid else f"sample.{k}", "duplicate axis: also set in models")
        for i, recipe in enumerate(model_recipes):
            if k in recipe:
                raise err(f"grid.{k}" if k in grid else f"sample.{k}",
                          f"duplicate axis: also set in models.{i}.training")
    num_samples = raw.get("num_samples", 1)
    if num_samples > 1 and not sample:
        raise err("num_samples", f"{num_samples} samples per cell but nothing is sampled (no sample axes): every "
                                 "sample would repeat the same trial (repeat with seeds instead)")

    scheduler = raw.get("scheduler")
    if scheduler is not None:
        kind = scheduler.get("type", "asha")
        if kind not in ("asha", "fifo"):
            raise err("scheduler.type", f"must be asha or fifo, got {kind!r}")
        if scheduler.get("mode", "max") not in ("max", "min"):
            raise err("scheduler.mode", "must be max or min")
        if scheduler.get("grace_period", 1) < 1:
            raise err("scheduler.grace_period", "must be >= 1")
        if scheduler.get("reduction_factor", 3) <= 1:
            raise err("scheduler.reduction_factor", "must be > 1")
        for key in ("grace_period", "reduction_factor"):
            if kind != "asha" and key in scheduler:
                raise err(f"scheduler.{key}", f"applies only to type asha (the fifo scheduler stops no trial)")
        metric, mode = scheduler.get("metric"), scheduler.get("mode")
        if isinstance(metric, str) and mode is not None and mode != ("min" if metric.endswith("loss") else "max"):
            raise err("scheduler.mode", f"{mode} with metric {metric} would select the worst trials "
                                        f"(use mode: {'min' if metric.endswith('loss') else 'max'})")
        scheduler = {"type": kind, **scheduler}
    if selection_metric is not None:
        scheduler = {"type": "fifo", **(scheduler or {}), "metric": selection_metric}
        scheduler.setdefault("mode", "min" if selection_metric.endswith("loss") else "max")
    speccheck.check_scheduler(err, raw, scheduler, max_epochs=base_train["epochs"],
                             validation=validation)

    res = raw.get("resources", {})
    gpus = res.get("gpus_per_trial", 0)
    cpus = res.get("cpus_per_trial", 1)
    if gpus < 0:
        raise err("resources.gpus_per_trial", f"must be >= 0, got {gpus}")
    if gpus > 1 and gpus != int(gpus):
        raise err("resources.gpus_per_trial",
                  f"fractional GPUs must be <= 1 (to pack trials on one GPU), got {gpus}")
    if cpus <= 0:
        raise err("resources.cpus_per_trial", f"must be > 0, got {cpus}")
    for key, v in (("cpus_per_trial", cpus), ("gpus_per_trial", gpus)):
        if 0 < v < 1e-4:  # Ray counts resources in units of 1/10000: this would be 0
            raise err(f"resources.{key}", f"must be 0 or at least 0.0001 (Ray's resource unit), got {v:g}")
    workers = res.get("workers_per_trial", int(gpus) if gpus > 1 else 1)
    if workers < 1:
        raise err("resources.workers_per_trial", f"must be >= 1, got {workers}")
    if gpus > 1 and workers != int(gpus):
        raise err("resources.workers_per_trial", f"a DDP trial uses one worker per GPU: {int(gpus)}, got {workers}")
    if gpus > 0 and gpus_available == 0:
        raise err("resources.gpus_per_trial", f"requests {gpus} GPU(s) per trial but the cluster has no GPU")
    speccheck.check_resources(err, cpus=cpus, gpus=gpus, workers=workers, cpus_available=cpus_available,
                              gpus_available=gpus_available)
    max_failures = raw.get("max_failures", 2)
    if max_failures < 0:
        raise err("max_failures", "must be >= 0")
    max_concurrent = raw.get("max_concurrent")
    if max_concurrent is not None and max_concurrent < 1:
        raise err("max_concurrent", "must be >= 1")

    loggers = raw.get("loggers", list(DEFAULT_LOGGERS))
    for i, name in enumerate(loggers):
        if not isinstance(name, str) or name not in LOGGERS:
            raise err(f"loggers.{i}", f"unknown logger {name!r} (one of {', '.join(LOGGERS)})")
    if len(set(loggers)) != len(loggers):
        raise err("loggers", "repeats a logger")

    # expand the grid and check every cell builds a valid model and training config
    keys = list(grid)
    cells: list[Cell] = []
    for seed in seeds:
        for mi, m in enumerate(models):
            for values in itertools.product(*(grid[k] for k in keys)):
                assigned = dict(zip(keys, values))
                cell = Cell(index=len(cells), seed=seed,
                            model={**m, **{k: v for k, v in assigned.items() if k in MODEL_FIELDS}},
                            train={**model_recipes[mi], **{k: v for k, v in assigned.items() if k in TRAIN_AXES}})
                cells.append(cell)
    spec = StudySpec(
        file=file, name=raw.get("name", default_name), raw=raw, base_train=base_train, cells=cells,
        sample=sample, num_samples=num_samples, scheduler=scheduler, gpus_per_trial=float(gpus),
        cpus_per_trial=float(cpus), workers_per_trial=workers, max_failures=max_failures,
        max_concurrent=max_concurrent, loggers=tuple(loggers),
    )
    if not _valid_name(spec.name):
        raise err("name", f"must be 1 to {limits.MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', "
                          f"got {speccheck.short(spec.name)}")
    # every cell with every value the sampled axes can take (choice entries, range ends)
    seen_models, complete = speccheck.check_values(err, spec, raw=raw, models=models, locate=lambda f, c, r, m: _locate(f, c, r, m, model_recipes),
                                                   model_fields=MODEL_FIELDS)
    _check_distinct_models(err, spec, n_models=len(models))
    object.__setattr__(spec, "models", seen_models)
    object.__setattr__(spec, "models_complete", complete)
    return spec




def _same_key(v: Any) -> Any:
    """Key under which two list entries are the same value (0 and 0.0 are; true and 1 are not)."""
    try:
        hash(v)
        return (type(v) is bool, v)
    except TypeError:
        return repr(v)


def _check_distinct_models(err, spec: StudySpec, *, n_models: int) -> None:
    """No two ``models`` entries give the same trials (same model and recipe, after
    defaults): compared on the first seed and the first grid cell, since grid axes
    may not be set in ``models``."""
    if n_models < 2:
        return
    n_grid = len(spec.cells) // (n_models * max(1, len({c.seed for c in spec.cells})))
    seen: dict[Any, int] = {}
    for i in range(n_models):
        cell = spec.cells[i * n_grid]
        try:
            key = spec.train_config(cell).to_dict()
        except (ConfigError, TypeError, ValueError):  # only valid with sampled values: not compared
            return
        key = repr(key)
        if key in seen:
            raise err(f"models.{i}", f"builds the same model and recipe as models.{seen[key]}: "
                                     "every trial would run twice")
        seen[key] = i


def selects(raw: dict[str, Any]) -> bool:
    """Does the study choose among trials (Optuna over sampled axes, or ASHA)?"""
    sched = raw.get("scheduler") or {}
    return bool(raw.get("sample")) or (bool(raw.get("scheduler")) and sched.get("type", "asha") == "asha")


def _check_validation(err, raw: dict[str, Any]) -> tuple[int | float, str | None]:
    """(validation size, metric that selection sees or None when nothing selects)."""
    sched = raw.get("scheduler") or {}
    choosing = selects(raw)
    validation = raw.get("validation", 0.1 if choosing else 0)
    if validation < 0 or (isinstance(validation, float) and not 0 < validation < 1):
        raise err("validation", f"must be a number of training images >= 0 or a fraction in (0, 1), got {validation}")
    n_train = raw.get("subset")
    kind, _, arg = raw["data"].partition(":")
    if n_train is None and kind == "synthetic":
        n_train = int(arg) if arg.isdigit() else 2000
    if isinstance(validation, int) and n_train is not None and validation >= n_train:
        raise err("validation", f"{validation} held-out images leave none of the {n_train} training images "
                                f"(use fewer, or validation: 0)")
    metric = sched.get("metric")
    if metric is not None and metric.startswith("val_") and not validation:
        raise err("scheduler.metric", f"{metric} needs a validation split (validation: N > 0)")
    if not choosing:
        return validation, metric
    if metric is None:
        if not validation:
            raise err("validation", "is 0 but the study selects trials (sample/ASHA): keep a validation "
                                    "split, or select on the test set explicitly with scheduler.metric: test_acc")
        metric = "val_acc"
    return validation, metric


def _valid_name(name: str) -> bool:
    return (0 < len(name) <= limits.MAX_NAME_LENGTH and all(c.isascii() and (c.isalnum() or c in "-_.")
                                                             for c in name) and not name.startswith("."))


def _recipe(opt: dict, sched: dict, training: dict) -> dict[str, Any]:
    """``optimizer`` / ``schedule`` / ``training`` sections → TrainConfig fields."""
    return {**opt, **({"schedule": sched["type"]} if "type" in sched else {}),
            **({"warmup": sched["warmup"]} if "warmup" in sched else {}), **training}


def _model_recipe(err, path: str, d: Any) -> dict[str, Any]:
    """Validate a ``models.N.training`` override and flatten it to TrainConfig fields."""
    _check_type(err, path, d, dict)
    for key, value in d.items():
        if key not in MODEL_TRAINING_KEYS:
            raise err(f"{path}.{key}", f"unknown key (allowed: {', '.join(MODEL_TRAINING_KEYS)})")
        _check_type(err, f"{path}.{key}", value, MODEL_TRAINING_KEYS[key])
        if key in ("optimizer", "schedule", "protocol"):
            for k, v in value.items():
                if k not in SECTION_KEYS[key]:
                    raise err(f"{path}.{key}.{k}", f"unknown key (allowed: {', '.join(SECTION_KEYS[key])})")
                _check_type(err, f"{path}.{key}.{k}", v, SECTION_KEYS[key][k])
    flat = {k: v for k, v in d.items() if k not in ("optimizer", "schedule", "protocol")}
    return {**flat, **_recipe(d.get("optimizer", {}), d.get("schedule", {}), {}), **d.get("protocol", {})}


def _locate(fld: str, cell: Cell, raw: dict, models: list[dict], recipes: list[dict] | None = None) -> str:
    """The study-file path that set ``fld`` for ``cell``."""
    train_map = {**_RECIPE_PATHS, "map_epochs": "maps.epochs"}
    if fld in raw.get("grid", {}):
        return f"grid.{fld}"
    if fld in raw.get("sample", {}):
        return f"sample.{fld}"
    for i, (m, recipe) in enumerate(zip(models, recipes or [])):
        if fld in recipe and m.items() <= cell.model.items() and recipe.items() <= cell.train.items():
            key = train_map.get(fld, fld)
            return f"models.{i}.training.{key}"
    for i, m in enumerate(models):
        if fld in m and m.items() <= cell.model.items():
            return f"models.{i}.{fld}"
    if fld in raw.get("model", {}):
        return f"model.{fld}"
    if fld in raw.get("training", {}):
        return f"training.{fld}"
    if fld in train_map:
        return train_map[fld]
    if fld in MODEL_FIELDS:
        for i, m in enumerate(models):
            if m.items() <= cell.model.items() and m:
                return f"models.{i}"
        return "model"
    return fld


def _check_type(err, path: str, value: Any, types) -> None:
    types = types if isinstance(types, tuple) else (types,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = "/".join("null" if t is type(None) else t.__name__ for t in types)
        raise err(path, f"must be {names}, got {type(value).__name__} {speccheck.short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise err(path, f"must be finite, got {value}")


def _is_path(data: str) -> bool:
    return not (data == "synthetic" or data.startswith("synthetic:") or data == "cifar10"
                or data.startswith("cifar10:"))


def _check_data(err, data: str) -> None:
    if not data.strip():
        raise err("data", "must not be empty (synthetic, cifar10[:ROOT] or a path)")
    if not _is_path(data):
        return
    try:
        p = Path(data).expanduser()
    except RuntimeError:  # ~user of an unknown user, or no home directory
        raise err("data", f"cannot expand the ~ of {speccheck.short(data)}") from None
    if not p.exists():
        raise err("data", f"no such file or directory: {data}")
    if not os.access(p, os.R_OK):
        raise err("data", f"not readable: {data}")


def _check_distribution(err, path: str, dist: Any) -> None:
    if not isinstance(dist, dict) or len(dist) != 1:
        raise err(path, f"must be one of {{{', '.join(f'{d}: ...' for d in DISTRIBUTIONS)}}}")
    (kind, args), = dist.items()
    if kind not in DISTRIBUTIONS:
        raise err(path, f"unknown distribution {kind!r} (one of {', '.join(DISTRIBUTIONS)})")
    if kind == "choice":
        if not isinstance(args, list) or not args:
            raise err(f"{path}.choice", "must be a non-empty list")
        speccheck.check_choice(err, f"{path}.choice", args)
        return
    if not (isinstance(args, list) and len(args) == 2 and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)):
        raise err(f"{path}.{kind}", "must be [low, high]")
    low, high = args
    if not all(math.isfinite(a) for a in args):
        raise err(f"{path}.{kind}", f"bounds must be finite, got [{low}, {high}]")
    if not low < high:
        raise err(f"{path}.{kind}", f"low must be < high, got [{low}, {high}]")
    if kind == "loguniform" and low <= 0:
        raise err(f"{path}.{kind}", f"low must be > 0 for loguniform, got {low}")
    if kind == "int" and not (isinstance(low, int) and isinstance(high, int)):
        raise err(f"{path}.{kind}", "bounds must be integers")
