"""Training configuration of one trial (the paper's recipe by default, Appendix B): a strict pydantic model
whose every field declares its type and bounds (their one home: a study file, an override and a flag are
read by it; the study file's schema publishes them)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from study.limits import (
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_RANDAUGMENT_MAGNITUDE,
    MAX_RANDAUGMENT_OPS,
    MAX_SEED,
    MAX_SUBSET,
    MAX_TRAIN_FIELD,
)
from study.models.fields import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    STRICT,
    Bounds,
    ConfigError,
    Count,
    ModelConfig,
    config_error,
    validated,
)

SCHEDULES = ("cosine", "step")
#: AutoAugment policies of ``torchvision.transforms.v2.AutoAugmentPolicy`` (by value), or none
AUTOAUGMENT_POLICIES = ("none", "cifar10", "imagenet", "svhn")
#: the training protocol's fields (see :class:`TrainConfig`): a study file's ``protocol:`` section
PROTOCOL_FIELDS = (
    "cutmix_alpha",
    "mixup_alpha",
    "randaugment_ops",
    "randaugment_magnitude",
    "autoaugment",
    "label_smoothing",
)
#: the three forms of the warm-up (:meth:`TrainConfig.warmup_steps_for`): a trial gives at most one
WARMUP_FIELDS = ("warmup", "warmup_epochs", "warmup_steps")
#: the paper's warm-up, 5 % of all steps (Appendix B), where no form is given
PAPER_WARMUP = 0.05
#: the named schedules of stored attention maps (:attr:`TrainConfig.maps_at`)
MAP_SCHEDULES = ("auto", "all", "last", "none")


def _float32(refusal: str, finite: str = "a finite non-negative number", **narrower: Any) -> Bounds:
    """The bounds of a float torch takes as a float32 scalar that it multiplies float32 tensors by: from
    float32's smallest normal to its largest (``narrower``: other bounds, ``off``: 0 admitted too)."""
    return Bounds(**{"low": FLOAT32_TINY, "high": FLOAT32_MAX, **narrower}, finite=finite, refusal=refusal)


#: lr: torch's SGD step adds -lr x the float32 gradient (a float32 scalar: FLOAT32_MAX at most; below a
#: normal float32 the step is a subnormal or 0)
LR = _float32("from 2**-126 to 3.40282e+38 (torch's SGD multiplies the float32 gradient by it)")
#: momentum: the velocity's decay factor (buf x momentum + grad); at 1 or more past gradients never fade
MOMENTUM = _float32(
    "0 or from 2**-126 to below 1 (the velocity's decay factor, a float32 scalar)",
    high=1.0,
    high_open=True,
    off=True,
)
#: weight decay: torch's SGD adds weight_decay x the float32 parameters to the gradient (a float32 scalar)
WEIGHT_DECAY = _float32(
    "0 or from 2**-126 to 3.40282e+38 (torch's SGD multiplies the float32 parameters by it)", off=True
)
#: a Beta(α, α) concentration of CutMix/MixUp: torchvision draws from a float32 Dirichlet, which needs a
#: positive float32 (5e-324 becomes 0 and is refused inside the trial); 0 is off
BETA_ALPHA = _float32(
    "a Beta alpha of 0 (off) or from 2**-126 to 3.40282e+38 (torch's float32 Dirichlet)",
    "a finite Beta alpha >= 0 (0: off)",
    off=True,
)
#: label smoothing ε mixes (1 - ε) x the label with ε x uniform: at 1 the target is uniform, nothing to
#: learn
LABEL_SMOOTHING = Bounds(low=0.0, high=1.0, high_open=True, refusal="in [0, 1)")
#: warm-up: a fraction of all steps (1 would be a warm-up as long as the run)
WARMUP = Bounds(low=0.0, high=1.0, high_open=True, refusal="a fraction in [0, 1)")
#: warm-up in epochs: at most the run's (checked against ``epochs``), so at most MAX_EPOCHS
WARMUP_EPOCHS = Bounds(
    low=0.0,
    high=float(MAX_EPOCHS),
    finite="a finite number of epochs >= 0",
    refusal=f"a number of epochs from 0 to {MAX_EPOCHS} (MAX_EPOCHS)",
)


def validation_split(v: int | float) -> int | float:
    """Training images held out for validation: a count (0: none) or a fraction in (0, 1); 0.0 is no count
    (:func:`study.data.validation.validation_size`)."""
    if v < 0 or v > MAX_SUBSET or (isinstance(v, float) and not 0 < v < 1):
        raise ValueError(f"must be a number of training images >= 0 or a fraction in (0, 1), got {v!r}")
    return v


#: the validation split: its one rule (a study file's ``validation``, ``--validation``, TrainConfig)
Validation = Annotated[int | float, AfterValidator(validation_split)]


def _map_schedule(v: Any) -> Any:
    """A schedule's word, a list of epochs, or their comma-separated text (``--map-epochs 0,9,299``): the
    epochs in order."""
    if isinstance(v, str) and v not in MAP_SCHEDULES:
        epochs = [e.strip() for e in v.split(",")]
        if all(re.fullmatch(r"[0-9]{1,9}", e) for e in epochs):  # ASCII, as every integer flag
            v = [int(e) for e in epochs]
    if isinstance(v, list | tuple) and all(type(e) is int for e in v):
        if len(set(v)) != len(v):
            raise ValueError(f"repeats an epoch: {list(v)}")
        return tuple(sorted(v))
    if v in MAP_SCHEDULES:
        return v
    raise ValueError(f"must be auto, all, last, none or a list of epochs, got {v!r}")


#: epochs at which attention maps are stored (:attr:`TrainConfig.maps_at`): its one rule
MapEpochs = Annotated[Literal[MAP_SCHEDULES] | tuple[int, ...], BeforeValidator(_map_schedule)]


class TrainConfig(BaseModel):
    """One trial's whole configuration; the defaults are the paper's recipe (docs/design.md §3
    "Recipes" and why the cosine schedule is stepped per iteration; the protocol's fields, all
    off by default: docs/study-files.md "Training protocol")."""

    model_config = STRICT

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: Annotated[str, Field(min_length=1)] = "synthetic"
    subset: Count(10, MAX_SUBSET, "MAX_SUBSET") | None = None
    epochs: Count(1, MAX_EPOCHS, "MAX_EPOCHS") = 300
    batch_size: Count(1, MAX_BATCH_SIZE, "MAX_BATCH_SIZE") = 100
    lr: Annotated[float, LR] = 0.1
    momentum: Annotated[float, MOMENTUM] = 0.9
    weight_decay: Annotated[float, WEIGHT_DECAY] = 1e-4
    #: linear warm-up (one of the three; none given: the paper's 5 % of all steps, held as
    #: ``warmup`` = 0.05): a fraction of all steps in [0, 1), epochs (<= ``epochs``) or steps
    #: (no run is longer than MAX_TRAIN_FIELD["warmup_steps"] steps)
    warmup: Annotated[float, WARMUP] | None = None
    warmup_epochs: Annotated[float, WARMUP_EPOCHS] | None = None
    warmup_steps: Count(0, MAX_TRAIN_FIELD["warmup_steps"], "MAX_TRAIN_FIELD") | None = None
    schedule: Literal[SCHEDULES] = "cosine"
    seed: Count(0, MAX_SEED, "MAX_SEED") = 0
    amp: bool = True
    compile: bool = False
    head_stats: bool = True
    head_images: Count(1, MAX_TRAIN_FIELD["head_images"], "MAX_TRAIN_FIELD") = 100
    map_radius: Count(0, MAX_TRAIN_FIELD["map_radius"], "MAX_TRAIN_FIELD") = 7
    map_epochs: MapEpochs = "auto"
    eval_batch_size: Count(1, MAX_TRAIN_FIELD["eval_batch_size"], "MAX_TRAIN_FIELD") = 500
    validation: Validation = 0
    cutmix_alpha: Annotated[float, BETA_ALPHA] = 0.0
    mixup_alpha: Annotated[float, BETA_ALPHA] = 0.0
    #: RandAugment's operation set (torchvision) has 14 operations; its magnitude 31 bins (0-30)
    randaugment_ops: Count(0, MAX_RANDAUGMENT_OPS, "MAX_RANDAUGMENT_OPS", "RandAugment's operations") = 0
    randaugment_magnitude: Count(
        0, MAX_RANDAUGMENT_MAGNITUDE, "MAX_RANDAUGMENT_MAGNITUDE", "RandAugment's 31 magnitude bins"
    ) = 9
    autoaugment: Literal[AUTOAUGMENT_POLICIES] = "none"
    label_smoothing: Annotated[float, LABEL_SMOOTHING] = 0.0

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, v: Any) -> Any:
        return ModelConfig.from_dict(v) if isinstance(v, dict) else v

    @model_validator(mode="before")
    @classmethod
    def _one_warmup(cls, data: Any) -> Any:
        """At most one of :data:`WARMUP_FIELDS`; none: the paper's 5 %."""
        if not isinstance(data, dict):
            return data
        given = [k for k in WARMUP_FIELDS if data.get(k) is not None]
        if len(given) > 1:
            a, b = given[:2]
            raise ConfigError(
                b,
                f"{b} {data[b]!r} and {a} {data[a]!r} both set the warm-up: "
                "give one (warmup: a fraction of all steps, warmup_epochs or warmup_steps)",
            )
        return data if given else {**data, "warmup": PAPER_WARMUP}

    @model_validator(mode="after")
    def _consistent(self):
        if self.warmup_epochs is not None and self.warmup_epochs > self.epochs:
            raise ConfigError(
                "warmup_epochs",
                f"must be at most the {self.epochs} epochs of the run, got {self.warmup_epochs!r}",
            )
        if bad := [e for e in self.maps_at if not 0 <= e < self.epochs]:
            raise ConfigError(
                "map_epochs", f"epochs are 0-based and must be < epochs ({self.epochs}), got {bad[0]}"
            )
        if self.autoaugment != "none" and self.randaugment_ops:
            raise ConfigError(
                "autoaugment",
                f"{self.autoaugment} and randaugment_ops {self.randaugment_ops} are "
                "alternative policies: set one (the other none / 0)",
            )
        return self

    def __init__(self, /, **fields: Any):
        try:
            super().__init__(**fields)
        except ValidationError as e:  # its first error, naming the field
            raise config_error(TrainConfig, e, "training") from None

    def warmup_steps_for(self, steps_per_epoch: int) -> int:
        """Optimisation steps of the linear warm-up of a run of ``steps_per_epoch`` steps an epoch
        (:func:`study.trial.schedule.learning_rate`): ``warmup_steps``, ``warmup_epochs`` x
        ``steps_per_epoch`` or ``warmup`` x all steps, rounded to the nearest step."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        if self.warmup_epochs is not None:
            return int(round(self.warmup_epochs * steps_per_epoch))
        return int(round(self.warmup * steps_per_epoch * self.epochs))

    @property
    def maps_at(self) -> list[int]:
        """The 0-based epochs whose attention maps are stored (docs/results.md, "Map schedule"): ``auto``
        the first 10, then 10 spaced geometrically up to the last (at most 21)."""
        last = self.epochs - 1
        if isinstance(self.map_epochs, tuple):
            return list(self.map_epochs)
        if self.map_epochs == "auto":
            later = {round(10 * (last / 10) ** (i / 9)) for i in range(10)} if last >= 10 else set()
            return sorted(set(range(min(10, self.epochs))) | later | {last})
        return {"all": list(range(self.epochs)), "none": [], "last": [last]}[self.map_epochs]

    def to_dict(self) -> dict[str, Any]:
        return {**dict(self), "model": self.model.to_dict()}

    def flat(self) -> dict[str, Any]:
        """Every model and training field in one flat mapping (no name is shared): the
        configuration columns of ``runs``."""
        return {**self.model.to_dict(), **{k: v for k, v in self if k != "model"}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return validated(cls, d, "training")

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes``; a warm-up form among them replaces this one's (whichever form it had)."""
        if any(k in changes for k in WARMUP_FIELDS):
            changes = {**dict.fromkeys(WARMUP_FIELDS), **changes}
        return TrainConfig(**{**dict(self), **changes})


def batch_overflow(
    batch: int, workers: int, *, images: int, held: int = 0, subset: bool = False, data: str | None = None
) -> str | None:
    """Why no training step would run, or None: training drops the last incomplete batch, so one step's
    ``batch`` x ``workers`` (DDP) images must fit the ``images`` (a ``subset`` of ``data``, or all its
    training images) less the ``held`` out for validation; the refusal names each."""
    if batch * workers <= images - held:
        return None
    per_step = f"{batch} x {workers} workers" if workers > 1 else f"{batch}"
    what = f"subset {images}" if subset else f"the {images} training images" + (f" of {data}" if data else "")
    what += f" less {held} held out for validation" if held else ""
    return f"{per_step} images per step is more than {what}: no training step would run"
