"""Training configuration of one trial (the paper's recipe by default, Appendix B)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from study.limits import MAX_EPOCHS, MAX_RANDAUGMENT_MAGNITUDE, MAX_RANDAUGMENT_OPS, MAX_TRAIN_FIELD
from study.models.config import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    Bounds,
    ConfigError,
    ModelConfig,
    check_bounds,
    int_at_least,
    strict_from_dict,
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


def bounded(default: Any, bounds: Bounds) -> Any:
    """A field of ``default`` within ``bounds`` (declared beside it with its reason: its one home)."""
    return field(default=default, metadata={"bounds": bounds})


#: lr: torch's SGD step adds -lr x the float32 gradient (a float32 scalar: FLOAT32_MAX at most; below a
#: normal float32 the step is a subnormal or 0)
LR = Bounds(
    low=FLOAT32_TINY,
    high=FLOAT32_MAX,
    finite="a finite non-negative number",
    refusal="from 2**-126 to 3.40282e+38 (torch's SGD multiplies the float32 gradient by it)",
)
#: momentum: the velocity's decay factor (buf x momentum + grad); at 1 or more past gradients never fade
MOMENTUM = Bounds(
    low=FLOAT32_TINY,
    high=1.0,
    high_open=True,
    off=True,
    finite="a finite non-negative number",
    refusal="0 or from 2**-126 to below 1 (the velocity's decay factor, a float32 scalar)",
)
#: weight decay: torch's SGD adds weight_decay x the float32 parameters to the gradient (a float32 scalar)
WEIGHT_DECAY = Bounds(
    low=FLOAT32_TINY,
    high=FLOAT32_MAX,
    off=True,
    finite="a finite non-negative number",
    refusal="0 or from 2**-126 to 3.40282e+38 (torch's SGD multiplies the float32 parameters by it)",
)
#: a Beta(α, α) concentration of CutMix/MixUp: torchvision draws from a float32 Dirichlet, which needs a
#: positive float32 (5e-324 becomes 0 and is refused inside the trial); 0 is off
BETA_ALPHA = Bounds(
    low=FLOAT32_TINY,
    high=FLOAT32_MAX,
    off=True,
    finite="a finite Beta alpha >= 0 (0: off)",
    refusal="a Beta alpha of 0 (off) or from 2**-126 to 3.40282e+38 (torch's float32 Dirichlet)",
)
#: label smoothing ε mixes (1 - ε) x the label with ε x uniform: at 1 the target is uniform, nothing to learn
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
#: warm-up in steps: no run is longer than MAX_TRAIN_FIELD["warmup_steps"] steps
WARMUP_STEPS = Bounds(
    low=0,
    high=MAX_TRAIN_FIELD["warmup_steps"],
    integer=True,
    refusal=f"<= {MAX_TRAIN_FIELD['warmup_steps']} (MAX_TRAIN_FIELD)",
)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One trial's whole configuration; the defaults are the paper's recipe (docs/design.md §3
    "Recipes" and why the cosine schedule is stepped per iteration; the protocol's fields, all
    off by default: docs/study-files.md "Training protocol")."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: str = "synthetic"
    subset: int | None = None
    epochs: int = 300
    batch_size: int = 100
    lr: float = bounded(0.1, LR)
    momentum: float = bounded(0.9, MOMENTUM)
    weight_decay: float = bounded(1e-4, WEIGHT_DECAY)
    #: linear warm-up (one of the three; none given: the paper's 5 % of all steps, held as
    #: ``warmup`` = 0.05): a fraction of all steps in [0, 1), epochs (<= ``epochs``) or steps
    warmup: float | None = bounded(None, WARMUP)
    warmup_epochs: float | None = bounded(None, WARMUP_EPOCHS)
    warmup_steps: int | None = bounded(None, WARMUP_STEPS)
    schedule: str = "cosine"
    seed: int = 0
    amp: bool = True
    compile: bool = False
    head_stats: bool = True
    head_images: int = 100
    map_radius: int = 7
    #: epochs at which attention maps are stored (:func:`study.tables.map_epochs`):
    #: "auto" (first ten, log-spaced, last), "all", "last", "none" or a list of epochs
    map_epochs: str | tuple[int, ...] = "auto"
    eval_batch_size: int = 500
    #: training images held out for validation: a count (0: none) or a fraction in (0, 1)
    validation: int | float = 0
    cutmix_alpha: float = bounded(0.0, BETA_ALPHA)
    mixup_alpha: float = bounded(0.0, BETA_ALPHA)
    randaugment_ops: int = 0
    randaugment_magnitude: int = 9
    autoaugment: str = "none"
    label_smoothing: float = bounded(0.0, LABEL_SMOOTHING)

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", ModelConfig.from_dict(self.model))
        for k, low in (
            ("epochs", 1),
            ("batch_size", 1),
            ("head_images", 1),
            ("eval_batch_size", 1),
            ("map_radius", 0),
            ("seed", 0),
        ):
            int_at_least(self, k, low)
        if self.subset is not None:
            int_at_least(self, "subset", 10)
        self._check_warmup()
        check_bounds(self)  # every field declared with its Bounds (their reasons: above the class)
        if self.schedule not in SCHEDULES:
            raise ConfigError("schedule", f"must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        v = self.validation
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or v != v
            or v < 0
            or (isinstance(v, float) and not 0 < v < 1)
        ):  # 0.0 is no count (study.data.validation_size)
            raise ConfigError(
                "validation", f"must be a number of images >= 0 or a fraction in (0, 1), got {v!r}"
            )
        v = self.map_epochs
        if not (isinstance(v, str) and v in ("auto", "all", "last", "none")):
            if not isinstance(v, (list, tuple)) or not all(
                isinstance(e, int) and not isinstance(e, bool) for e in v
            ):
                raise ConfigError(
                    "map_epochs", f"must be auto, all, last, none or a list of epochs, got {v!r}"
                )
            bad = [e for e in v if not 0 <= e < self.epochs]
            if bad:
                raise ConfigError(
                    "map_epochs", f"epochs are 0-based and must be < epochs ({self.epochs}), got {bad[0]}"
                )
            object.__setattr__(self, "map_epochs", tuple(sorted(set(v))))
        for k, cap, what in (
            ("randaugment_ops", MAX_RANDAUGMENT_OPS, "RandAugment's operations"),
            ("randaugment_magnitude", MAX_RANDAUGMENT_MAGNITUDE, "RandAugment's 31 magnitude bins"),
        ):
            int_at_least(self, k, 0)
            if getattr(self, k) > cap:
                raise ConfigError(k, f"must be <= {cap} ({what}), got {getattr(self, k)}")
        if self.autoaugment not in AUTOAUGMENT_POLICIES:
            raise ConfigError(
                "autoaugment", f"must be one of {', '.join(AUTOAUGMENT_POLICIES)}, got {self.autoaugment!r}"
            )
        if self.autoaugment != "none" and self.randaugment_ops:
            raise ConfigError(
                "autoaugment",
                f"{self.autoaugment} and randaugment_ops {self.randaugment_ops} are "
                "alternative policies: set one (the other none / 0)",
            )
        if not isinstance(self.data, str) or not self.data:
            raise ConfigError("data", f"must be a data source string, got {self.data!r}")

    def _check_warmup(self) -> None:
        """At most one of :data:`WARMUP_FIELDS` (its bounds: :func:`check_bounds`; warmup_epochs also at most
        ``epochs``); none: the paper's 5 %."""
        given = [k for k in WARMUP_FIELDS if getattr(self, k) is not None]
        if len(given) > 1:
            a, b = given[:2]
            raise ConfigError(
                b,
                f"{b} {getattr(self, b)!r} and {a} {getattr(self, a)!r} both set the warm-up: "
                "give one (warmup: a fraction of all steps, warmup_epochs or warmup_steps)",
            )
        if not given:
            object.__setattr__(self, "warmup", PAPER_WARMUP)
        elif given == ["warmup_epochs"]:
            WARMUP_EPOCHS.check(self, "warmup_epochs")
            if self.warmup_epochs > self.epochs:
                raise ConfigError(
                    "warmup_epochs",
                    f"must be at most the {self.epochs} epochs of the run, got {self.warmup_epochs!r}",
                )
            object.__setattr__(self, "warmup_epochs", float(self.warmup_epochs))  # one column type

    def warmup_steps_for(self, steps_per_epoch: int) -> int:
        """Optimisation steps of the linear warm-up of a run of ``steps_per_epoch`` steps an epoch
        (:func:`study.trial.schedule.learning_rate`): ``warmup_steps``, ``warmup_epochs`` x
        ``steps_per_epoch`` or ``warmup`` x all steps, rounded to the nearest step."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        if self.warmup_epochs is not None:
            return int(round(self.warmup_epochs * steps_per_epoch))
        return int(round(self.warmup * steps_per_epoch * self.epochs))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """Every model and training field in one flat mapping (no name is shared): the
        configuration columns of ``runs``."""
        train = {k: v for k, v in self.to_dict().items() if k != "model"}
        return {**self.model.to_dict(), **train}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return strict_from_dict(cls, d, "training")

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes``; a warm-up form among them replaces this one's (whichever form it had)."""
        if any(k in changes for k in WARMUP_FIELDS):
            changes = {**dict.fromkeys(WARMUP_FIELDS), **changes}
        return dataclasses.replace(self, **changes)
