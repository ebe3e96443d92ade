"""Checks of a study file beyond the type of each field: every value it can produce.

:mod:`study.spec` calls these while validating; each raises through ``err(path,
message)`` (a one-line :class:`study.spec.SpecError`).

- :func:`check_sizes`: the explicit limits of :mod:`study.limits` on what would be
  expanded (seeds, list lengths, grid cells counted as a product of lengths — the
  grid is never materialised to be counted — trials, epochs, name length, …);
- :func:`check_data_source`: ``synthetic:N`` bounds, ``cifar10:ROOT`` is a folder, a
  path is a folder or a regular file (never a FIFO or device);
- :func:`check_choice`: a ``choice`` lists distinct scalars of one type;
- :func:`check_values`: every grid cell x every value a sampled axis can take
  (each ``choice`` entry, both ends of each range, every integer of a short ``int``
  range) builds a valid model and training configuration within the limits, its
  batch fits the training images it will see, and the distinct models are counted;
- :func:`check_scheduler`: the tuned ``metric`` is one the trials report;
- :func:`check_resources`: requests fit the machine or cluster, when it is known.
"""

from __future__ import annotations

import itertools
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from study import limits
from study.models.config import ConfigError, ModelConfig

#: metrics every trial reports to Tune each epoch (study/trial/loop.py) ...
TUNED_METRICS = ("test_acc", "best_test_acc", "test_loss", "train_acc", "train_loss")
#: ... and those it reports when the study has a validation split
VALIDATION_METRICS = ("val_acc", "best_val_acc", "val_loss")
#: training images of the built-in sources (``study.data.synthetic.DEFAULT_TRAIN``, CIFAR-10)
SYNTHETIC_DEFAULT_TRAIN = 2000
CIFAR10_TRAIN = 50_000
#: an ``int`` range on a model field with at most this many values is enumerated
#: (every model it can build is checked and counted); a longer one is checked at its ends
ENUMERATE_INT_RANGE = 64

#: channels of the images of every data source (``study.data.decode.IMAGE_SHAPE``,
#: ``study.data.synthetic``, CIFAR-10): a model built for another count fails its first step
IMAGE_CHANNELS = 3
#: side of the images of every data source (the same three): a model built for another
#: size has position tables and a token grid that do not match the images it is fed
IMAGE_SIDE = 32
#: model fields that are standard deviations of an initialisation (ModelConfig does not check them)
INIT_STD_FIELDS = ("center_init_std", "spread_init_std")

Err = Callable[[str, str], Exception]


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (error lines stay short)."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def check_sizes(err: Err, raw: dict[str, Any]) -> None:
    """Limits on lengths and counts, checked before anything is expanded."""
    name = raw.get("name")
    if isinstance(name, str) and len(name) > limits.MAX_NAME_LENGTH:
        raise err("name", f"is {len(name)} characters, more than {limits.MAX_NAME_LENGTH} (MAX_NAME_LENGTH)")
    desc = raw.get("description")
    if isinstance(desc, str) and len(desc) > limits.MAX_DESCRIPTION_CHARS:
        raise err("description", f"is {len(desc)} characters, more than {limits.MAX_DESCRIPTION_CHARS} "
                                 "(MAX_DESCRIPTION_CHARS)")
    for key, cap, const in (("epochs", limits.MAX_EPOCHS, "MAX_EPOCHS"),
                            ("num_samples", limits.MAX_NUM_SAMPLES, "MAX_NUM_SAMPLES"),
                            ("batch_size", limits.MAX_BATCH_SIZE, "MAX_BATCH_SIZE"),
                            ("max_failures", limits.MAX_FAILURES, "MAX_FAILURES"),
                            ("max_concurrent", limits.MAX_TRIALS, "MAX_TRIALS")):
        v = raw.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > cap:
            raise err(key, f"must be <= {cap} ({const}), got {v}")
    seeds = raw.get("seeds", [0])
    if isinstance(seeds, list):
        if len(seeds) > limits.MAX_SEEDS:
            raise err("seeds", f"lists {len(seeds)} seeds, more than {limits.MAX_SEEDS} (MAX_SEEDS)")
        for i, s in enumerate(seeds):
            if isinstance(s, int) and not isinstance(s, bool) and s > limits.MAX_SEED:
                raise err(f"seeds.{i}", f"must be <= {limits.MAX_SEED} (MAX_SEED), got {s}")
    models = raw.get("models", [{}])
    if isinstance(models, list) and len(models) > limits.MAX_LIST_ENTRIES:
        raise err("models", f"lists {len(models)} models, more than {limits.MAX_LIST_ENTRIES} (MAX_LIST_ENTRIES)")
    grid = raw.get("grid", {})
    lengths = []
    for k, values in (grid.items() if isinstance(grid, dict) else ()):
        if isinstance(values, list):
            if len(values) > limits.MAX_LIST_ENTRIES:
                raise err(f"grid.{k}", f"lists {len(values)} values, more than {limits.MAX_LIST_ENTRIES} "
                                       "(MAX_LIST_ENTRIES)")
            lengths.append(len(values))
    n_seeds = len(seeds) if isinstance(seeds, list) else 1
    n_models = len(models) if isinstance(models, list) else 1
    cells = n_seeds * n_models * math.prod(lengths)  # counted, never materialised
    if cells > limits.MAX_GRID_CELLS:
        axes = " x ".join([f"{n_seeds} seeds", f"{n_models} models"] + [f"{n} {k}" for k, n in
                          zip([k for k, v in grid.items() if isinstance(v, list)], lengths)])
        raise err("grid", f"expands to {cells} cells ({axes}), more than {limits.MAX_GRID_CELLS} (MAX_GRID_CELLS)")
    num_samples = raw.get("num_samples", 1)
    if isinstance(num_samples, int) and cells * num_samples > limits.MAX_TRIALS:
        raise err("num_samples", f"{cells} cells x {num_samples} samples = {cells * num_samples} trials, more than "
                                 f"{limits.MAX_TRIALS} (MAX_TRIALS)")


def known_train_size(data: str) -> int | None:
    """Training images of a built-in source (None for a path: known once loaded)."""
    kind, _, arg = data.partition(":")
    if kind == "synthetic":
        return int(arg) if arg.isdigit() else SYNTHETIC_DEFAULT_TRAIN
    if kind == "cifar10":
        return CIFAR10_TRAIN
    return None


def check_data_source(err: Err, data: str) -> None:
    """Bounds of ``synthetic:N``; ``cifar10:ROOT`` names a folder; a path is a folder
    or a regular file (``lstat``/``stat`` only: a FIFO or device is never opened)."""
    kind, sep, arg = data.partition(":")
    if kind == "synthetic":
        if sep and not (arg.isdigit() and arg.isascii()):
            raise err("data", f"synthetic:N needs a positive integer N, got {arg!r}")
        if sep and not 1 <= int(arg) <= limits.MAX_SYNTHETIC_TRAIN:
            raise err("data", f"synthetic:N needs 1 <= N <= {limits.MAX_SYNTHETIC_TRAIN} (MAX_SYNTHETIC_TRAIN), "
                              f"got {int(arg)}")
        return
    if kind == "cifar10":
        try:
            root = Path(arg).expanduser()
        except RuntimeError:  # ~user of an unknown user
            raise err("data", f"cannot expand the ~ of {short(arg)}") from None
        if sep and arg and not root.is_dir():
            raise err("data", f"cifar10:ROOT: {arg} is not a folder (create it to download CIFAR-10 into it)")
        return
    try:
        st = os.stat(Path(data).expanduser())
    except OSError:
        return  # spec.py reports a missing path
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise err("data", f"{data} is not a folder or a regular file")


def check_choice(err: Err, path: str, entries: list) -> None:
    """A ``choice`` lists at most MAX_LIST_ENTRIES distinct scalars of one type
    (numbers may mix int and float; ``null`` may join any type)."""
    if len(entries) > limits.MAX_LIST_ENTRIES:
        raise err(path, f"lists {len(entries)} entries, more than {limits.MAX_LIST_ENTRIES} (MAX_LIST_ENTRIES)")
    kinds = set()
    for i, v in enumerate(entries):
        if v is not None and not isinstance(v, (bool, int, float, str)):
            raise err(path, f"entry {i} must be a number, string, true/false or null, got {type(v).__name__}")
        if isinstance(v, float) and not math.isfinite(v):
            raise err(path, f"entry {i} must be finite, got {v}")
        if v is not None:
            kinds.add("true/false" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else "string")
    if len(kinds) > 1:
        raise err(path, f"mixes types ({' and '.join(sorted(kinds))}): {short(entries)}")
    if len({(type(v) is bool, v) for v in entries}) != len(entries):
        raise err(path, f"repeats a value: {short(entries)}")


def corner_values(kind: str, args: list, *, enumerate_ints: bool) -> tuple[list, bool]:
    """The values of a distribution that are checked: every ``choice`` entry, both ends
    of a range (as the type it samples: floats for uniform/loguniform), every integer
    of a short ``int`` range when ``enumerate_ints``.  Second item: whether these are
    all the values it can take."""
    if kind == "choice":
        return list(args), True
    low, high = args
    if kind == "int":
        if enumerate_ints and high - low < ENUMERATE_INT_RANGE:
            return list(range(low, high + 1)), True
        return [low, high], high - low <= 1
    return [float(low), float(high)], False


def check_values(err: Err, spec, *, raw: dict[str, Any], models: list[dict],
                 locate: Callable[[str, Any, dict, list], str], model_fields: tuple[str, ...]
                 ) -> tuple[list[ModelConfig], bool]:
    """Build the configuration of every grid cell with every checked value of the
    sampled axes (all combinations up to MAX_CHECKED_COMBINATIONS, else each value
    against every cell's first combination) and check it.  Returns the distinct
    models and whether that list is complete (False when a model field is sampled
    from a continuous range or combinations were too many to enumerate)."""
    axes = list(spec.sample)
    kinds = {k: next(iter(spec.sample[k])) for k in axes}
    corners, complete = {}, True
    for k in axes:
        corners[k], every = corner_values(kinds[k], spec.sample[k][kinds[k]], enumerate_ints=k in model_fields)
        complete &= every or k not in model_fields
    cells = list({(repr(sorted(c.model.items())), repr(sorted(c.train.items()))): c for c in spec.cells}.values())
    firsts = tuple(corners[k][0] for k in axes)
    n_combos = len(cells) * math.prod(len(v) for v in corners.values())
    if n_combos <= limits.MAX_CHECKED_COMBINATIONS:
        combos = itertools.product(cells, itertools.product(*(corners[k] for k in axes)))
    else:
        complete = complete and not any(k in model_fields and len(corners[k]) > 1 for k in axes)
        combos = itertools.chain(
            ((c, firsts) for c in cells),
            ((cells[0], firsts[:i] + (v,) + firsts[i + 1:]) for i, k in enumerate(axes) for v in corners[k][1:]))
    workers = spec.workers_per_trial
    seen: dict[ModelConfig, None] = {}
    for cell, values in combos:
        sampled = dict(zip(axes, values))

        def where(fld: str) -> str:
            if fld in spec.sample:
                return f"sample.{fld}.{kinds[fld]}"
            return locate(fld, cell, raw, models)

        def context(fld: str) -> str:
            extra = [f"{k}={v!r}" for k, v, f in zip(axes, values, firsts) if k != fld and v != f]
            return f" (with sampled {', '.join(extra)})" if extra else ""

        try:
            cfg = spec.train_config(cell, sampled)
        except ConfigError as e:
            raise err(where(e.field), f"{e.message}{context(e.field)}") from None
        if cfg.model.in_channels != IMAGE_CHANNELS:
            raise err(where("in_channels"), f"every data source gives RGB images ({IMAGE_CHANNELS} channels), got "
                                            f"{short(cfg.model.in_channels)}{context('in_channels')}")
        if cfg.model.image_size != IMAGE_SIDE:
            raise err(where("image_size"), f"every data source gives {IMAGE_SIDE}x{IMAGE_SIDE} images, got "
                                           f"{short(cfg.model.image_size)}{context('image_size')}")
        for fld in INIT_STD_FIELDS:
            v = getattr(cfg.model, fld, None)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0):
                raise err(where(fld), f"must be a finite number >= 0, got {short(v)}{context(fld)}")
        over = limits.over_limit(cfg)
        if over is not None:
            fld, cap, name, v = over
            raise err(where(fld), f"must be <= {cap} ({name}), got {v}{context(fld)}")
        _check_batch(err, cfg, workers=workers, where=where, context=context)
        seen.setdefault(cfg.model, None)
    return list(seen), complete


def _check_batch(err: Err, cfg, *, workers: int, where, context) -> None:
    """The subset fits the data, and one training step's batch (× DDP workers) fits
    the training images (training drops the last incomplete batch)."""
    known = known_train_size(cfg.data)
    if cfg.subset is not None and known is not None and cfg.subset > known:
        raise err("subset", f"{cfg.subset} is more than the {known} training images of {cfg.data}")
    n = cfg.subset if cfg.subset is not None else known
    held = getattr(cfg, "validation", 0) or 0
    if n is not None and held:  # the validation split is held out of the training images (study.data.validation)
        held = max(1, int(held * n)) if isinstance(held, float) else held
        if held >= n:
            return  # refused by the validation check, naming `validation`
        n -= held
    if n is not None and cfg.batch_size * workers > n:
        what = f"subset {n + held}" if cfg.subset is not None else f"the {n + held} training images of {cfg.data}"
        if held:
            what += f" less {held} held out for validation"
        per_step = f"{cfg.batch_size} x {workers} workers" if workers > 1 else f"{cfg.batch_size}"
        raise err(where("batch_size"), f"{per_step} images per step is more than {what}: no training step "
                                       f"would run{context('batch_size')}")


def check_scheduler(err: Err, raw: dict[str, Any], scheduler: dict[str, Any] | None, *, max_epochs: int,
                    validation: int | float | None = None) -> None:
    """The tuned ``metric`` is one the trials report; ASHA's grace period fits the epochs.
    ``validation``: the resolved validation size (default: the file's ``validation``)."""
    if scheduler is None:
        return
    held_out = raw.get("validation") if validation is None else validation
    metrics = TUNED_METRICS + (VALIDATION_METRICS if held_out else ())
    metric = scheduler.get("metric")
    if metric is not None and metric not in metrics:
        raise err("scheduler.metric", f"{metric!r} is not a reported metric (one of {', '.join(metrics)})")
    grace = scheduler.get("grace_period")
    if scheduler.get("type") == "asha" and isinstance(grace, int) and grace > max_epochs:
        raise err("scheduler.grace_period", f"{grace} is more than the {max_epochs} epochs of the longest trial")


def check_resources(err: Err, *, cpus: float, gpus: float, workers: int, cpus_available: int | None,
                    gpus_available: int | None) -> None:
    """Per-trial requests within the limits and, when known, the machine or cluster."""
    if cpus > limits.MAX_CPUS_PER_TRIAL:
        raise err("resources.cpus_per_trial", f"must be <= {limits.MAX_CPUS_PER_TRIAL}, got {cpus:g}")
    if gpus > limits.MAX_GPUS_PER_TRIAL:
        raise err("resources.gpus_per_trial", f"must be <= {limits.MAX_GPUS_PER_TRIAL}, got {gpus:g}")
    if workers > limits.MAX_GPUS_PER_TRIAL:
        raise err("resources.workers_per_trial", f"must be <= {limits.MAX_GPUS_PER_TRIAL}, got {workers}")
    if cpus_available is not None and cpus > cpus_available:
        raise err("resources.cpus_per_trial", f"requests {cpus:g} CPUs per trial but only {cpus_available} "
                                              "are available: no trial could ever start")
    if cpus_available is not None and gpus == 0 and workers > cpus_available:
        raise err("resources.workers_per_trial", f"{workers} CPU workers per trial but only {cpus_available} CPUs "
                                                 "are available")
    if gpus_available is not None and gpus > max(gpus_available, 0) and gpus_available > 0:
        raise err("resources.gpus_per_trial", f"requests {gpus:g} GPUs per trial but the cluster has "
                                              f"{gpus_available}")
