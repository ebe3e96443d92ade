"""Study files: one YAML document describes a study (every key, default and rule:
docs/study-files.md).  The schema is :class:`StudyFile`; only ``data`` is required.  Every
error is one line ``FILE: path.to.field: what is wrong`` (:class:`SpecError`): the YAML read
within limits (:mod:`study.spec.yamlfile`), pydantic's first error (:func:`_refusal`), validators
for cross-field rules, :func:`study.spec.check.check_values` for every value the study can produce.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo

from study import limits
from study.cost.plan import source_sizes
from study.errors import short
from study.models import encodings
from study.models.config import ModelConfig, columns
from study.models.fields import bound_message, encoding_field_owners
from study.spec import check as speccheck
from study.spec import overrides as cli_overrides
from study.spec.check import SpecError
from study.spec.check import err as _refuse
from study.spec.yamlfile import YamlError, load_yaml, read_study_text
from study.trial.config import PROTOCOL_FIELDS, WARMUP_FIELDS, MapEpochs, TrainConfig, Validation

#: experiment trackers a study file may name in ``loggers:`` -> (the module each needs,
#: the extra that installs it); Ray Tune's callbacks for them: :mod:`study.tuning.loggers`
LOGGERS = {
    "tensorboard": ("tensorboardX", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}
DEFAULT_LOGGERS = ("tensorboard",)
TRAIN_AXES = ("lr", "momentum", "weight_decay", *WARMUP_FIELDS, "batch_size", *PROTOCOL_FIELDS)
#: is ``name`` a study name (a folder name on local disks and in object storage)?
valid_name = re.compile(rf"(?!\.)[\w.-]{{1,{limits.MAX_NAME_LENGTH}}}", re.ASCII).fullmatch


def Capped(kind, name: str, **bounds):  # noqa: N802 (a type)
    """``kind`` with pydantic ``bounds`` and at most :mod:`study.limits`' ``name`` (a refusal names it)."""
    cap = getattr(limits, name)

    def check(v):
        if (len(v) if isinstance(v, (str, list)) else v) > cap:
            raise _refuse(
                "",
                f"is {len(v)} characters, more than {cap} ({name})"
                if isinstance(v, str)
                else f"lists {len(v)} entries, more than {cap} ({name})"
                if isinstance(v, list)
                else f"must be <= {cap} ({name}), got {v if isinstance(v, int) else format(v, 'g')}",
            )
        return v

    key = {str: "maxLength", list: "maxItems"}.get(getattr(kind, "__origin__", kind), "maximum")
    return Annotated[
        kind, Field(**bounds, json_schema_extra={key: cap, "x-limit": name}), AfterValidator(check)
    ]


class _Strict(BaseModel):
    """No unknown key, no coercion (``"5"`` is not 5, ``true`` is not 1), no inf/nan."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _train_field(name: str) -> FieldInfo:
    """:class:`TrainConfig`'s field ``name``: its bounds and default (their one home)."""
    return FieldInfo.merge_field_infos(TrainConfig.model_fields[name])


def _fields(*names: str) -> dict[str, Any]:
    """:class:`TrainConfig`'s fields ``names``: their types, bounds and defaults (their one home)."""
    return {n: (TrainConfig.model_fields[n].annotation, _train_field(n)) for n in names}


Optimizer = create_model("Optimizer", __base__=_Strict, **_fields("lr", "momentum", "weight_decay"))
Training = create_model(
    "Training",
    __base__=_Strict,
    **_fields("amp", "compile", "head_stats", "head_images", "map_radius", "eval_batch_size"),
)
Protocol = create_model("Protocol", __base__=_Strict, **_fields(*PROTOCOL_FIELDS))
#: the warm-up in one of three forms (none: the paper's 5 % of all steps; :class:`TrainConfig`)
Schedule = create_model(
    "Schedule",
    __base__=_Strict,
    type=(TrainConfig.model_fields["schedule"].annotation, TrainConfig.model_fields["schedule"].default),
    **_fields(*WARMUP_FIELDS),
)
#: a ``models.N.training`` override: the top level's recipe keys
Recipe = create_model(
    "Recipe",
    __base__=Training,
    **_fields("epochs", "batch_size"),
    optimizer=(Optimizer, Optimizer()),
    schedule=(Schedule, Schedule()),
    protocol=(Protocol, Protocol()),
)


class _ModelPart(_Strict):
    """Model fields a study file sets (``model``, a ``models`` entry): each typed and bounded as its
    :class:`~study.models.config.ModelConfig` member declares it; the whole model is validated per cell."""


class _Axes(_Strict):
    """A ``grid`` or ``sample``: one axis per model field or :data:`TRAIN_AXES`."""


def _model_part_fields() -> dict[str, Any]:
    """Every model field (:func:`~study.models.config.columns`: the common ones and every registered
    encoding's), its type, bounds, documentation and default from the member declaring it; ``encoding``
    one of the registered encodings."""
    owners = encoding_field_owners()
    out: dict[str, Any] = {}
    for k in columns():
        info = owners[k][0].model_fields[k] if k in owners else ModelConfig.model_fields[k]
        kind = Literal[tuple(ModelConfig.members)] | None if k == "encoding" else info.annotation
        extra = Field(description=info.description, json_schema_extra=info.json_schema_extra)
        typed = Annotated[kind, *info.metadata, extra]
        out[k] = (typed | None, None) if k in owners else (typed, info.default)
    return out


def _typed_axis(value: Any) -> Any:
    """A ``grid`` axis whose schema gives its entries ``value``'s type and bounds (an editor checks
    them); each entry is validated where its rule lives, in the model or recipe of every cell
    (:func:`study.spec.check.check_values`), so the refusal names the axis."""
    schema = TypeAdapter(Axis).json_schema()
    item = TypeAdapter(value).json_schema()
    options = [o for o in item.pop("anyOf", [item]) if o.get("type") != "null"]
    schema["items"] = {**item, **options[0]} if len(options) == 1 else {**item, "anyOf": options}
    schema["items"].pop("default", None)
    return Annotated[Axis, WithJsonSchema(schema)]


@functools.cache
def _schema(registered: tuple[str, ...]) -> type[BaseModel]:
    """The :class:`StudyFile` of the encodings ``registered`` (``ModelConfig.members``): its model
    fields, ``models`` entries and axes."""
    model_fields = _model_part_fields()
    values = {k: kind for k, (kind, _) in model_fields.items()}
    values |= {k: TrainConfig.model_fields[k].rebuild_annotation() for k in TRAIN_AXES}
    axes = {k: (_typed_axis(kind), None) for k, kind in values.items()}
    model = create_model("ModelFields", __base__=_ModelPart, **model_fields)
    entry = create_model("ModelEntry", __base__=model, training=(Recipe, Recipe()))
    grid = create_model("Grid", __base__=_Axes, **axes)
    sample = create_model("Sample", __base__=_Axes, **{k: (Distribution, None) for k in axes})
    return create_model(
        "StudyFile",
        __base__=_StudyFile,
        __doc__=_StudyFile.__doc__,
        model=(model, model()),
        models=(Capped(list[entry], "MAX_LIST_ENTRIES", min_length=1), [entry()]),
        grid=(grid, grid()),
        sample=(sample, sample()),
    )


def study_file() -> type[BaseModel]:
    """The study file's schema for the encodings registered now (a study file's ``encodings:`` or an
    installed package's may add some: :mod:`study.models.encodings`)."""
    return _schema(tuple(ModelConfig.members))


def _distinct(what: str = "a value") -> AfterValidator:
    return AfterValidator(lambda v: speccheck.check_distinct("", v, what))


class Maps(_Strict):
    """Epochs whose attention maps are stored (:func:`study.results.tables.map_epochs`)."""

    epochs: MapEpochs = "auto"


Axis = Annotated[Capped(list[Any], "MAX_LIST_ENTRIES", min_length=1), _distinct()]
#: a distribution's [low, high] (not a field's declared :class:`~study.models.config.Bounds`)
Range, IntRange = (Annotated[list[t], Field(min_length=2, max_length=2)] for t in (float, int))


class Distribution(_Strict):
    """One of: ``uniform: [low, high]``, ``loguniform`` (low > 0), ``int`` (integers), ``choice: [...]``."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})
    uniform: Range = None
    loguniform: Range = None
    int: IntRange = None
    choice: Capped(list[Any], "MAX_LIST_ENTRIES", min_length=1) = None

    @model_validator(mode="after")
    def _one(self):
        if len(self.model_fields_set) != 1:
            raise _refuse("", "must be one of {uniform: ..., loguniform: ..., int: ..., choice: ...}")
        (kind,) = self.model_fields_set
        args = getattr(self, kind)
        if kind == "choice":
            speccheck.check_choice("choice", args)
        elif not args[0] < args[1]:
            raise _refuse(kind, f"low must be < high, got {args}")
        elif kind == "loguniform" and args[0] <= 0:
            raise _refuse(kind, f"low must be > 0 for loguniform, got {args[0]}")
        return self


class Scheduler(_Strict):
    """Ray Tune's trial scheduler: ASHA (stops poor trials early, on ``metric``) or FIFO."""

    type: Literal["asha", "fifo"] = "asha"
    grace_period: Annotated[int, Field(ge=1)] = 1
    reduction_factor: Annotated[float, Field(gt=1)] = 3
    metric: str = None  # default: val_acc when the study has a validation split, else test_acc
    mode: Literal["max", "min"] = None  # default: min for a loss, else max

    @model_validator(mode="after")
    def _consistent(self):
        asha_only = sorted({"grace_period", "reduction_factor"} & self.model_fields_set)
        if self.type != "asha" and asha_only:
            raise _refuse(asha_only[0], "applies only to type asha (the fifo scheduler stops no trial)")
        best = "min" if (self.metric or "").endswith("loss") else "max"
        if self.metric and self.mode and self.mode != best:
            raise _refuse(
                "mode",
                f"{self.mode} with metric {self.metric} would select the worst trials (use mode: {best})",
            )
        return self


class Resources(_Strict):
    """What one trial asks Ray for; more than one GPU is a DDP trial of one worker per GPU."""

    gpus_per_trial: Capped(float, "MAX_GPUS_PER_TRIAL", ge=0) = 0
    cpus_per_trial: Capped(float, "MAX_CPUS_PER_TRIAL", gt=0) = 1
    workers_per_trial: Capped(int, "MAX_GPUS_PER_TRIAL", ge=1) = None  # default: one per GPU

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo):
        """Ray can place it, on the machine or cluster when known (``context``: ``cpus``, ``gpus``)."""
        gpus, cpus, ctx = self.gpus_per_trial, self.cpus_per_trial, info.context or {}
        if gpus > 1 and gpus != int(gpus):
            raise _refuse(
                "gpus_per_trial", f"fractional GPUs must be <= 1 (to pack trials on one GPU), got {gpus:g}"
            )
        for key, v in (("cpus_per_trial", cpus), ("gpus_per_trial", gpus)):
            if 0 < v < 1e-4:  # Ray counts resources in units of 1/10000: this would be 0
                raise _refuse(key, f"must be 0 or at least 0.0001 (Ray's resource unit), got {v:g}")
        workers = self.workers_per_trial = self.workers_per_trial or (int(gpus) if gpus > 1 else 1)
        if gpus > 1 and workers != int(gpus):
            raise _refuse(
                "workers_per_trial", f"a DDP trial uses one worker per GPU: {int(gpus)}, got {workers}"
            )
        have_cpus, have_gpus = ctx.get("cpus"), ctx.get("gpus")
        if gpus > 0 and have_gpus is not None and gpus > have_gpus:
            raise _refuse(
                "gpus_per_trial",
                f"requests {gpus:g} GPUs per trial but the cluster has {have_gpus or 'no GPU'}",
            )
        if have_cpus is not None and cpus > have_cpus:
            raise _refuse(
                "cpus_per_trial",
                f"requests {cpus:g} CPUs per trial but only {have_cpus} are available: "
                "no trial could ever start",
            )
        if have_cpus is not None and gpus == 0 and workers > have_cpus:
            raise _refuse(
                "workers_per_trial",
                f"{workers} CPU workers per trial but only {have_cpus} CPUs are available",
            )
        return self


def _logger(name: str) -> str:
    if name not in LOGGERS:
        raise _refuse("", f"unknown logger {name!r} (one of {', '.join(LOGGERS)})")
    return name


Logger = Annotated[str, AfterValidator(_logger), WithJsonSchema({"enum": list(LOGGERS), "type": "string"})]


#: a subset's type and bounds, :class:`TrainConfig`'s
Subset = TrainConfig.model_fields["subset"].annotation


class _StudyFile(_Strict):
    """A study file (module docstring).  ``model_validate(raw, context=...)``: the
    ``default_name`` and, if known, the target's ``cpus`` and ``gpus``."""

    name: Capped(str, "MAX_NAME_LENGTH", min_length=1) = None  # default: the file's stem
    description: Capped(str, "MAX_DESCRIPTION_CHARS") = ""
    #: the source exists; a path becomes absolute (trials run in other working directories, on other nodes)
    data: Annotated[str, AfterValidator(functools.partial(speccheck.check_data_source, exists=True))]
    #: modules that declare encodings of the user's own, imported before the models are read
    #: (:func:`study.models.encodings.load`; docs/study-files.md "Your own encoding")
    encodings: Capped(list[str], "MAX_LIST_ENTRIES") = []
    subset: Subset = None
    validation: Validation | None = None  # default: 0.1 if the study selects, else 0
    epochs: int = _train_field("epochs")
    batch_size: int = _train_field("batch_size")
    optimizer: Optimizer = Optimizer()
    schedule: Schedule = Schedule()
    training: Training = Training()
    protocol: Protocol = Protocol()
    maps: Maps = Maps()
    seeds: Annotated[
        Capped(list[Capped(int, "MAX_SEED", ge=0)], "MAX_SEEDS", min_length=1), _distinct("a seed")
    ] = [0]
    num_samples: Capped(int, "MAX_NUM_SAMPLES", ge=1) = 1
    scheduler: Scheduler | None = None
    resources: Resources = Resources()
    max_failures: Capped(int, "MAX_FAILURES", ge=0) = 2
    max_concurrent: Capped(int, "MAX_TRIALS", ge=1) | None = None
    loggers: Annotated[list[Logger], _distinct("a logger")] = list(DEFAULT_LOGGERS)

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo):
        self.name = self.name or (info.context or {}).get("default_name", "study")
        if not valid_name(self.name):
            raise _refuse(
                "name",
                f"must be 1 to {limits.MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', "
                f"got {short(self.name)}",
            )
        axes = {k: len(v) for k, v in self.grid.model_dump(exclude_unset=True).items()}
        cells = len(self.seeds) * len(self.models) * math.prod(axes.values())  # counted, never materialised
        if cells > limits.MAX_GRID_CELLS:
            what = " x ".join(
                [f"{len(self.seeds)} seeds", f"{len(self.models)} models"]
                + [f"{n} {k}" for k, n in axes.items()]
            )
            raise _refuse(
                "grid",
                f"expands to {cells} cells ({what}), more than {limits.MAX_GRID_CELLS} (MAX_GRID_CELLS)",
            )
        if cells * self.num_samples > limits.MAX_TRIALS:
            raise _refuse(
                "num_samples",
                f"{cells} cells x {self.num_samples} samples = {cells * self.num_samples} "
                f"trials, more than {limits.MAX_TRIALS} (MAX_TRIALS)",
            )
        if self.num_samples > 1 and not self.sample.model_fields_set:
            raise _refuse(
                "num_samples",
                f"{self.num_samples} samples per cell but nothing is sampled (no sample "
                "axes): every sample would repeat the same trial (repeat with seeds instead)",
            )
        grid, sample = self.grid.model_fields_set, self.sample.model_fields_set
        # sorted: the same axis named on every run (a set's order follows string hashing)
        for k in sorted(grid | sample):
            where = f"grid.{k}" if k in grid else f"sample.{k}"
            if k in grid and k in sample:
                raise _refuse(f"sample.{k}", "duplicate axis: also a grid axis")
            for i, m in enumerate(self.models):
                if k in m.model_fields_set:
                    raise _refuse(where, "duplicate axis: also set in models")
                if k in speccheck.flatten(m.training.model_dump(exclude_unset=True)):
                    raise _refuse(where, f"duplicate axis: also set in models.{i}.training")
        self._one_warmup()
        self._select()
        return self

    def _one_warmup(self) -> None:
        """A trial's warm-up is given in one form (:data:`WARMUP_FIELDS`), wherever the file sets it:
        ``schedule``, its model's ``training.schedule``, a grid or a sample axis."""
        common = [
            (f"{section}.{k}", k)
            for section in ("schedule", "grid", "sample")
            for k in WARMUP_FIELDS
            if k in getattr(self, section).model_fields_set
        ]
        for i, m in enumerate(self.models):
            own = [
                (f"models.{i}.training.schedule.{k}", k)
                for k in WARMUP_FIELDS
                if k in m.training.schedule.model_fields_set
            ]
            given = common + own
            if len(given) > 1:
                (first, a), (where, b) = given[:2]
                section = where.rpartition(".")[0]
                # both in one schedule mapping: name the mapping
                if first.rpartition(".")[0] == section and section.endswith("schedule"):
                    where, first = section, a
                raise _refuse(
                    where,
                    f"{b} and {first} both set the warm-up: give one (warmup: a fraction of all "
                    "steps, warmup_epochs or warmup_steps)",
                )

    def _select(self) -> None:
        """Resolve ``validation`` and the metric selection sees (``scheduler``: a fifo one
        when only Optuna selects); the metric is one the trials report."""
        choosing = selects(self.model_dump(include={"sample", "scheduler"}, exclude_unset=True))
        held = self.validation = (0.1 if choosing else 0) if self.validation is None else self.validation
        n_train = self.subset or (source_sizes(self.data) or [None])[0]
        if isinstance(held, int) and n_train is not None and held >= n_train:
            raise _refuse(
                "validation",
                f"{held} held-out images leave none of the {n_train} training images (use "
                "fewer, or validation: 0)",
            )
        sched = self.scheduler
        metric = sched and sched.metric
        if metric and metric.startswith("val_") and not held:
            raise _refuse("scheduler.metric", f"{metric} needs a validation split (validation: N > 0)")
        if choosing and not metric and not held:
            raise _refuse(
                "validation",
                "is 0 but the study selects trials (sample/ASHA): keep a validation split, "
                "or select on the test set explicitly with scheduler.metric: test_acc",
            )
        metric = metric or ("val_acc" if choosing else None)
        if metric:
            sched = self.scheduler = sched or Scheduler(type="fifo")
            sched.metric, sched.mode = metric, sched.mode or ("min" if metric.endswith("loss") else "max")
            metrics = speccheck.TUNED_METRICS + (speccheck.VALIDATION_METRICS if held else ())
            if metric not in metrics:
                raise _refuse(
                    "scheduler.metric", f"{metric!r} is not a reported metric (one of {', '.join(metrics)})"
                )
        if sched and sched.type == "asha" and sched.grace_period > self.epochs:
            raise _refuse(
                "scheduler.grace_period",
                f"{sched.grace_period} is more than the {self.epochs} epochs of the longest trial",
            )


@dataclass(frozen=True)
class Cell:
    """One grid cell: a fixed model, fixed training overrides and a seed; ``entry``: its ``models`` index."""

    entry: int
    model: dict[str, Any]
    train: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class StudySpec:
    """A checked study file: ``study`` (a :class:`StudyFile`, its defaults resolved) expanded into its
    grid cells."""

    file: str
    study: BaseModel  # a StudyFile (:func:`study_file`)
    raw: dict[str, Any]
    base_train: dict[str, Any]  # the recipe every cell starts from, as TrainConfig fields
    cells: list[Cell]
    sample: dict[str, dict[str, list]]  # ``raw``'s sampled axes: {axis: {distribution: arguments}}
    models: list[ModelConfig] = field(default_factory=list)
    models_complete: bool = True  # False: a model field is sampled from a range, or too many to enumerate
    #: the command-line overrides applied to the file's mapping (``raw`` holds the result)
    overrides: tuple[str, ...] = ()

    @property
    def num_trials(self) -> int:
        return len(self.cells) * self.study.num_samples

    def train_config(self, cell: Cell, sampled: dict[str, Any] | None = None) -> TrainConfig:
        """The full training configuration of one trial."""
        sampled = dict(sampled or {})
        model = {
            **self.raw.get("model", {}),
            **cell.model,
            **{k: v for k, v in sampled.items() if k in columns()},
        }
        train = {**self.base_train, **cell.train, **{k: v for k, v in sampled.items() if k in TRAIN_AXES}}
        return TrainConfig(model=ModelConfig.from_dict(model), seed=cell.seed, **train)


def load_spec(
    path: str | os.PathLike,
    *,
    data: str | None = None,
    gpus_available: int | None = None,
    cpus_available: int | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> StudySpec:
    """Read and validate a study file (``data`` overrides the file's ``data``).  ``overrides``:
    :mod:`study.spec.overrides` strings applied to the file's mapping first (an error they cause
    names the override).  ``gpus_available`` / ``cpus_available``: of the target, if known."""
    file, p, overrides = str(path), Path(path), tuple(overrides)
    try:
        raw = load_yaml(read_study_text(p))
    except YamlError as e:
        raise SpecError(file, "", str(e)) from None
    if not isinstance(raw, (dict, type(None))):
        raise SpecError(file, "", f"must be a mapping of study fields, got {type(raw).__name__}")
    raw = cli_overrides.apply(raw or {}, list(overrides), err=lambda where, m: SpecError(file, where, m))
    try:
        return validate(
            raw if data is None else {**raw, "data": data},
            file=file,
            default_name=p.stem,
            gpus_available=gpus_available,
            cpus_available=cpus_available,
            overrides=overrides,
        )
    except SpecError as e:  # blame the last override that set the field, one under it or the one it is in
        at, sets = f"{e.path}.", {t: ".".join(map(str, cli_overrides.parse(t)[1])) + "." for t in overrides}
        culprit = next(
            (t for t in reversed(overrides) if e.path and (at.startswith(sets[t]) or sets[t].startswith(at))),
            None,
        )
        if culprit is None:
            raise
        raise SpecError(file, e.path, f"{e.message} (override {culprit})") from None


def validate(
    raw: dict[str, Any],
    *,
    file: str,
    default_name: str,
    gpus_available: int | None = None,
    cpus_available: int | None = None,
    overrides: tuple[str, ...] = (),
) -> StudySpec:
    """Check the study file's mapping ``raw`` (:class:`StudyFile`; ``overrides``: those applied
    to it), expand its grid and check every value it can produce (:func:`study.spec.check.check_values`)."""
    _load_encodings(raw.get("encodings"), file=file)
    schema = study_file()
    try:
        study = schema.model_validate(
            raw, context={"default_name": default_name, "gpus": gpus_available, "cpus": cpus_available}
        )
    except ValidationError as e:
        raise _refusal(file, e, schema) from None
    raw = {**raw, "data": study.data}
    model_keys = set(columns())
    grid = raw.get("grid", {})
    cells = [
        Cell(
            entry=i,
            seed=seed,
            model={k: v for k, v in {**m, **values}.items() if k in model_keys},
            train={
                **speccheck.flatten(m.get("training", {})),
                **{k: v for k, v in values.items() if k in TRAIN_AXES},
            },
        )
        for seed, (i, m), values in itertools.product(
            study.seeds,
            enumerate(raw.get("models", [{}])),
            (dict(zip(grid, v)) for v in itertools.product(*grid.values())),
        )
    ]
    sections = speccheck.flatten(
        {k: raw.get(k, {}) for k in ("optimizer", "schedule", "training", "protocol")}
    )
    spec = StudySpec(
        file=file,
        study=study,
        raw=raw,
        cells=cells,
        sample=raw.get("sample", {}),
        overrides=overrides,
        base_train={
            **study.model_dump(include={"data", "subset", "validation", "epochs", "batch_size"}),
            **sections,
            **({"map_epochs": study.maps.epochs} if "epochs" in raw.get("maps", {}) else {}),
        },
    )
    seen, complete = speccheck.check_values(spec)
    return dataclasses.replace(spec, models=seen, models_complete=complete)


def _load_encodings(modules: Any, *, file: str) -> None:
    """Import the modules a study file's ``encodings:`` names (their encodings register), before its
    models are read; a list of anything else is left for the schema to refuse."""
    if not isinstance(modules, list):
        return
    for i, name in enumerate(modules):
        if isinstance(name, str):
            try:
                encodings.load([name])
            except (ImportError, TypeError) as e:  # each names the module
                raise SpecError(file, f"encodings.{i}", str(e)) from None


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, map(_model_in, get_args(annotation))), None)


def _where(loc: tuple, schema: type[BaseModel]) -> tuple[str, type[BaseModel] | None, Any]:
    """The study-file path of a pydantic error's location (a union member's tag is no
    field: dropped), the model the path ends in and its last field (a ``FieldInfo``)."""
    cls, path, info = schema, [], None
    for part in loc:
        fields = cls.model_fields if cls else {}
        if isinstance(part, int) or part in fields:
            path.append(str(part))
            info = fields.get(part, info)
            cls = _model_in(fields[part].annotation) if part in fields else cls
    return ".".join(path), cls, info


#: pydantic's error types for a value of the wrong type -> the type a study file needs
_TYPES = {
    "int_type": "int",
    "float_type": "float",
    "string_type": "str",
    "bool_type": "bool",
    "list_type": "list",
    "model_type": "dict",
    "dict_type": "dict",
}


def _refusal(file: str, e: ValidationError, schema: type[BaseModel]) -> SpecError:
    """Pydantic's first error as one line ``FILE: path.field: problem``."""
    errors = e.errors()
    path, _, info = _where(errors[0]["loc"], schema)
    same = [x for x in errors if _where(x["loc"], schema)[0] == path]  # a union's members: one each
    first = next((x for x in same if isinstance((x.get("ctx") or {}).get("error"), SpecError)), errors[0])
    kind, ctx, value, loc = first["type"], first.get("ctx") or {}, first.get("input"), first["loc"]
    if kind == "extra_forbidden":
        parent, cls, _ = _where(loc[:-1], schema)
        return SpecError(
            file,
            ".".join(filter(None, (parent, str(loc[-1])))),
            "unknown model field"
            if issubclass(cls, _ModelPart)
            else f"unknown axis (model fields or {', '.join(TRAIN_AXES)})"
            if issubclass(cls, _Axes)
            else f"unknown key (allowed: {', '.join(cls.model_fields)})",
        )
    if isinstance(ctx.get("error"), SpecError):  # a validator's refusal
        return SpecError(file, ".".join(filter(None, (path, ctx["error"].path))), ctx["error"].message)
    bounded = bound_message(info, kind, ctx, value)
    if bounded is not None:
        return SpecError(file, path, bounded)
    if kind in _TYPES or kind == "literal_error":  # each member of a union rejects the value: name them all
        expected = [_TYPES.get(x["type"]) or (x.get("ctx") or {}).get("expected") for x in same]
        return SpecError(
            file,
            path,
            f"must be {' or '.join(dict.fromkeys(filter(None, expected)))}, got "
            f"{type(value).__name__} {short(value)}",
        )
    return SpecError(
        file,
        path,
        {
            "missing": "required (synthetic, cifar10[:ROOT] or a path)" if path == "data" else "required",
            "finite_number": f"must be finite, got {value}",
            "string_too_short": "must not be empty",
            "greater_than": f"must be > {ctx.get('gt')}, got {value}",
            "value_error": str(ctx.get("error")),
            "too_short": "must not be empty"
            if ctx.get("min_length") == 1
            else f"must list {ctx.get('min_length')} entries, got {short(value)}",
            "too_long": f"must list {ctx.get('max_length')} entries, got {short(value)}",
        }.get(kind, first["msg"]),
    )


def selects(raw: dict[str, Any]) -> bool:
    """Does the study choose among trials (Optuna over sampled axes, or ASHA)?"""
    sched = raw.get("scheduler") or {}
    return bool(raw.get("sample")) or (bool(raw.get("scheduler")) and sched.get("type", "asha") == "asha")


#: the study file's schema of the encodings registered at import (this package's and installed packages')
StudyFile = study_file()
