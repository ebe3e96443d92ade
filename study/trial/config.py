"""Training configuration of one trial (the paper's recipe by default, Appendix B)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from study.limits import MAX_RANDAUGMENT_MAGNITUDE, MAX_RANDAUGMENT_OPS
from study.models.config import ConfigError, ModelConfig, int_at_least, number_in, strict_from_dict

SCHEDULES = ("cosine", "step")
#: AutoAugment policies of ``torchvision.transforms.v2.AutoAugmentPolicy`` (by value), or none
AUTOAUGMENT_POLICIES = ("none", "cifar10", "imagenet", "svhn")
#: the training protocol's fields (see :class:`TrainConfig`): a study file's ``protocol:`` section
PROTOCOL_FIELDS = ("cutmix_alpha", "mixup_alpha", "randaugment_ops", "randaugment_magnitude", "autoaugment",
                   "label_smoothing")
#: the three forms of the warm-up (:meth:`TrainConfig.warmup_steps_for`): a trial gives at most one
WARMUP_FIELDS = ("warmup", "warmup_epochs", "warmup_steps")
#: the paper's warm-up, 5 % of all steps (Appendix B), where no form is given
PAPER_WARMUP = 0.05


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
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    #: linear warm-up (one of the three; none given: the paper's 5 % of all steps, held as
    #: ``warmup`` = 0.05): a fraction of all steps in [0, 1), epochs (<= ``epochs``) or steps
    warmup: float | None = None
    warmup_epochs: float | None = None
    warmup_steps: int | None = None
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
    cutmix_alpha: float = 0.0
    mixup_alpha: float = 0.0
    randaugment_ops: int = 0
    randaugment_magnitude: int = 9
    autoaugment: str = "none"
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", ModelConfig.from_dict(self.model))
        for k, low in (("epochs", 1), ("batch_size", 1), ("head_images", 1), ("eval_batch_size", 1),
                       ("map_radius", 0), ("seed", 0)):
            int_at_least(self, k, low)
        if self.subset is not None:
            int_at_least(self, "subset", 10)
        for k in ("lr", "momentum", "weight_decay"):
            number_in(self, k, 0, float("inf"), "must be a finite non-negative number")
        if self.lr == 0:
            raise ConfigError("lr", "must be > 0")
        self._check_warmup()
        if self.schedule not in SCHEDULES:
            raise ConfigError("schedule", f"must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        v = self.validation
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or (
                isinstance(v, float) and v >= 1):
            raise ConfigError("validation", f"must be a number of images >= 0 or a fraction in (0, 1), got {v!r}")
        v = self.map_epochs
        if not (isinstance(v, str) and v in ("auto", "all", "last", "none")):
            if not isinstance(v, (list, tuple)) or not all(isinstance(e, int) and not isinstance(e, bool) for e in v):
                raise ConfigError("map_epochs", f"must be auto, all, last, none or a list of epochs, got {v!r}")
            bad = [e for e in v if not 0 <= e < self.epochs]
            if bad:
                raise ConfigError("map_epochs", f"epochs are 0-based and must be < epochs ({self.epochs}), "
                                                f"got {bad[0]}")
            object.__setattr__(self, "map_epochs", tuple(sorted(set(v))))
        for k in ("cutmix_alpha", "mixup_alpha"):
            number_in(self, k, 0, float("inf"), "must be a finite Beta alpha >= 0 (0: off)")
        for k, cap, what in (("randaugment_ops", MAX_RANDAUGMENT_OPS, "RandAugment's operations"),
                             ("randaugment_magnitude", MAX_RANDAUGMENT_MAGNITUDE, "RandAugment's 31 magnitude bins")):
            int_at_least(self, k, 0)
            if getattr(self, k) > cap:
                raise ConfigError(k, f"must be <= {cap} ({what}), got {getattr(self, k)}")
        if self.autoaugment not in AUTOAUGMENT_POLICIES:
            raise ConfigError("autoaugment", f"must be one of {', '.join(AUTOAUGMENT_POLICIES)}, "
                                             f"got {self.autoaugment!r}")
        if self.autoaugment != "none" and self.randaugment_ops:
            raise ConfigError("autoaugment", f"{self.autoaugment} and randaugment_ops {self.randaugment_ops} are "
                                             "alternative policies: set one (the other none / 0)")
        number_in(self, "label_smoothing", 0, 1, "must be in [0, 1)")
        if not isinstance(self.data, str) or not self.data:
            raise ConfigError("data", f"must be a data source string, got {self.data!r}")

    def _check_warmup(self) -> None:
        """At most one of :data:`WARMUP_FIELDS`, within its bounds; none: the paper's 5 %."""
        given = [k for k in WARMUP_FIELDS if getattr(self, k) is not None]
        if len(given) > 1:
            a, b = given[:2]
            raise ConfigError(b, f"{b} {getattr(self, b)!r} and {a} {getattr(self, a)!r} both set the warm-up: "
                                 "give one (warmup: a fraction of all steps, warmup_epochs or warmup_steps)")
        if not given:
            object.__setattr__(self, "warmup", PAPER_WARMUP)
        elif given == ["warmup"]:
            number_in(self, "warmup", 0, 1, "must be a fraction in [0, 1)")
        elif given == ["warmup_epochs"]:
            number_in(self, "warmup_epochs", 0, float("inf"), "must be a finite number of epochs >= 0")
            if self.warmup_epochs > self.epochs:
                raise ConfigError("warmup_epochs", f"must be at most the {self.epochs} epochs of the run, "
                                                   f"got {self.warmup_epochs!r}")
            object.__setattr__(self, "warmup_epochs", float(self.warmup_epochs))  # one column type
        else:
            int_at_least(self, "warmup_steps", 0)

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
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        return strict_from_dict(cls, d, "training")

    def replace(self, **changes: Any) -> "TrainConfig":
        """A copy with ``changes``; a warm-up form among them replaces this one's (whichever form it had)."""
        if any(k in changes for k in WARMUP_FIELDS):
            changes = {**dict.fromkeys(WARMUP_FIELDS), **changes}
        return dataclasses.replace(self, **changes)
