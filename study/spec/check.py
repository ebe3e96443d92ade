"""Checks of a study file beyond one field's type and bounds (pydantic's,
:func:`study.spec.studyfile.study_file`): the data source, distinct list entries, every value the study
can produce (each cell's model and recipe, as their classes check them, against the data); each a
one-line :class:`SpecError`.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import stat
from pathlib import Path
from typing import Any

from study import limits
from study.cost.plan import source_sizes, trial_images
from study.errors import StudyFileError, short
from study.models.config import ConfigError, ModelConfig, columns
from study.trial.config import PROTOCOL_FIELDS, WARMUP_FIELDS, batch_overflow

#: metrics every trial reports to Tune each epoch (study/trial/loop.py) ...
TUNED_METRICS = ("test_acc", "best_test_acc", "test_loss", "train_acc", "train_loss")
#: ... and those it reports when the study has a validation split
VALIDATION_METRICS = ("val_acc", "best_val_acc", "val_loss")
#: an ``int`` range on a model field with at most this many values is enumerated
#: (every model it can build is checked and counted); a longer one is checked at its ends
ENUMERATE_INT_RANGE = 64
#: channels and side of the images of every data source (``study.data.decode.IMAGE_SHAPE``,
#: ``study.data.synthetic``, CIFAR-10): a model built for others fails its first step
IMAGE_CHANNELS, IMAGE_SIDE = 3, 32

#: where each TrainConfig field sits in a recipe mapping (for error paths)
RECIPE_PATHS = {
    **{k: f"optimizer.{k}" for k in ("lr", "momentum", "weight_decay")},
    **{k: f"schedule.{k}" for k in WARMUP_FIELDS},
    "schedule": "schedule.type",
    "map_epochs": "maps.epochs",
    **{k: f"protocol.{k}" for k in PROTOCOL_FIELDS},
}


class SpecError(StudyFileError, ValueError):
    """A study-file error: ``FILE: path.to.field: message`` on one line.  Raised with
    ``file=""`` inside a validator, its ``path`` relative to the validated value."""

    def __init__(self, file: str, path: str, message: str):
        super().__init__(f"{file}: {path}: {message}" if path else f"{file}: {message}")
        self._init = self.file, self.path, self.message = file, path, message  # for StudyError.__reduce__


#: ``err(path, message)``: a :class:`SpecError` raised in a pydantic validator
#: (``study.spec.studyfile._refusal`` adds the file)
err = functools.partial(SpecError, "")


def flatten(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe mapping (``optimizer``/``schedule``/``training``/``protocol`` sections and
    plain keys) as :class:`study.trial.config.TrainConfig` fields."""
    return {
        ("schedule" if (k, kk) == ("schedule", "type") else kk): vv
        for k, v in recipe.items()
        for kk, vv in (v.items() if isinstance(v, dict) else [(k, v)])
    }


def check_data_source(data: str, *, exists: bool = False) -> str:
    """Bounds of ``synthetic:N``; ``cifar10:ROOT`` names a folder; a path is a folder
    or a regular file (``stat`` only: a FIFO or device is never opened).  ``exists``:
    a path must also exist and be readable.  Returns ``data``, a path made absolute."""
    kind, sep, arg = data.partition(":")
    if not data.strip():
        raise err("", "must not be empty (synthetic, cifar10[:ROOT] or a path)")
    if "\0" in data:  # no path holds one: os.stat would raise a bare ValueError
        raise err("", "must not contain a NUL character")
    if kind == "synthetic":
        if sep and not (arg.isdigit() and arg.isascii()):
            raise err("", f"synthetic:N needs a positive integer N, got {arg!r}")
        if sep and not 1 <= int(arg) <= limits.MAX_SYNTHETIC_TRAIN:
            raise err(
                "",
                f"synthetic:N needs 1 <= N <= {limits.MAX_SYNTHETIC_TRAIN} (MAX_SYNTHETIC_TRAIN), "
                f"got {int(arg)}",
            )
        return data
    try:
        path = Path(arg if kind == "cifar10" else data).expanduser()
    except RuntimeError:  # ~user of an unknown user, or no home directory
        raise err("", f"cannot expand the ~ of {short(arg if kind == 'cifar10' else data)}") from None
    if kind == "cifar10":
        if sep and arg and not path.is_dir():
            raise err("", f"cifar10:ROOT: {arg} is not a folder (create it to download CIFAR-10 into it)")
        return data
    try:
        st = os.stat(path)
    except OSError:
        if exists:
            raise err("", f"no such file or directory: {data}") from None
        return data
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise err("", f"{data} is not a folder or a regular file")
    if exists and not os.access(path, os.R_OK):
        raise err("", f"not readable: {data}")
    return str(path.resolve())


def check_distinct(path: str, values: list, what: str = "a value") -> list:
    """Finite entries, none repeated (0 and 0.0 are the same value; true and 1 are not)."""
    for i, v in enumerate(values):
        if isinstance(v, float) and not math.isfinite(v):
            raise err(path, f"entry {i} must be finite, got {v}")
    scalar = (bool, int, float, str, type(None))
    if len({(type(v) is bool, v) if isinstance(v, scalar) else repr(v) for v in values}) != len(values):
        raise err(path, f"repeats {what}: {short(values)}")
    return values


def check_choice(path: str, entries: list) -> None:
    """A ``choice`` lists distinct finite scalars of one type (numbers may mix int and
    float; ``null`` may join any type)."""
    for i, v in enumerate(entries):
        if v is not None and not isinstance(v, (bool, int, float, str)):
            raise err(path, f"entry {i} must be a number, string, true/false or null, got {type(v).__name__}")
    kinds = {
        "true/false" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else "string"
        for v in entries
        if v is not None
    }
    if len(kinds) > 1:
        raise err(path, f"mixes types ({' and '.join(sorted(kinds))}): {short(entries)}")
    check_distinct(path, entries)


def check_values(spec) -> tuple[list[ModelConfig], bool]:
    """Build and check every grid cell of ``spec`` with every checked value of the sampled axes (all
    combinations up to MAX_CHECKED_COMBINATIONS, else each value against every cell's first combination);
    returns the distinct models and whether that list is complete."""
    axes = list(spec.sample)
    kinds = {k: next(iter(spec.sample[k])) for k in axes}
    model_fields = set(columns())
    corners, complete = {}, True
    for k, kind in kinds.items():
        args = spec.sample[k][kind]
        if kind == "choice" or (
            kind == "int" and k in model_fields and args[1] - args[0] < ENUMERATE_INT_RANGE
        ):
            corners[k] = list(args) if kind == "choice" else list(range(args[0], args[1] + 1))  # every value
        else:  # a range's ends, as the type it samples: a model field's other values are not all checked
            corners[k] = [args[0], args[1]] if kind == "int" else [float(args[0]), float(args[1])]
            complete &= k not in model_fields or (kind == "int" and args[1] - args[0] <= 1)
    cells = list(
        {(repr(sorted(c.model.items())), repr(sorted(c.train.items()))): c for c in spec.cells}.values()
    )
    firsts = tuple(corners[k][0] for k in axes)
    if len(cells) * math.prod(len(v) for v in corners.values()) <= limits.MAX_CHECKED_COMBINATIONS:
        combos = itertools.product(cells, itertools.product(*(corners[k] for k in axes)))
    else:
        complete = complete and not any(k in model_fields and len(corners[k]) > 1 for k in axes)
        combos = itertools.chain(
            ((c, firsts) for c in cells),
            (
                (cells[0], firsts[:i] + (v,) + firsts[i + 1 :])
                for i, k in enumerate(axes)
                for v in corners[k][1:]
            ),
        )
    seen: dict[ModelConfig, None] = {}
    for cell, values in combos:
        try:
            cfg = spec.train_config(cell, dict(zip(axes, values)))
            problem = _problem(cfg, workers=spec.study.resources.workers_per_trial)
        except ConfigError as e:
            problem = e.field, e.message
        if problem:  # named where the study file set the field, with the other sampled values it met
            fld, message = problem
            extra = [f"{k}={v!r}" for k, v, f in zip(axes, values, firsts) if k != fld and v != f]
            where = f"sample.{fld}.{kinds[fld]}" if fld in spec.sample else _locate(fld, cell, spec.raw)
            raise SpecError(
                spec.file, where, message + (f" (with sampled {', '.join(extra)})" if extra else "")
            )
        seen.setdefault(cfg.model, None)
    _check_distinct_models(spec)
    return list(seen), complete


def _locate(fld: str, cell, raw: dict) -> str:
    """The study-file path that set ``fld`` for ``cell``, not a sampled axis (an axis is never set in
    ``models``)."""
    if fld in raw.get("grid", {}):
        return f"grid.{fld}"
    if fld in cell.train:
        return f"models.{cell.entry}.training.{RECIPE_PATHS.get(fld, fld)}"
    if fld in cell.model:
        return f"models.{cell.entry}.{fld}"
    for section in ("model", "training"):
        if fld in raw.get(section, {}):
            return f"{section}.{fld}"
    if fld in RECIPE_PATHS or fld not in columns():
        return RECIPE_PATHS.get(fld, fld)
    return f"models.{cell.entry}" if set(raw.get("models", [{}])[cell.entry]) - {"training"} else "model"


def _problem(cfg, *, workers: int) -> tuple[str, str] | None:
    """The first (field, problem) of a configuration that its classes do not check: the image shape and the
    subset and one step's batch against the data (:func:`study.cost.plan.trial_images`)."""
    for fld, want, what in (
        ("in_channels", IMAGE_CHANNELS, f"RGB images ({IMAGE_CHANNELS} channels)"),
        ("image_size", IMAGE_SIDE, f"{IMAGE_SIDE}x{IMAGE_SIDE} images"),
    ):
        if getattr(cfg.model, fld) != want:
            return fld, f"every data source gives {what}, got {short(getattr(cfg.model, fld))}"
    whole, im = source_sizes(cfg.data), trial_images(cfg)
    if whole is not None and cfg.subset is not None and cfg.subset > whole[0]:
        return "subset", f"{cfg.subset} is more than the {whole[0]} training images of {cfg.data}"
    if im is None or im.train <= 0:
        return None  # unknown, or refused by the validation check, naming `validation`
    why = batch_overflow(
        cfg.batch_size,
        workers,
        images=im.train + im.val,
        held=im.val,
        subset=cfg.subset is not None,
        data=cfg.data,
    )
    return ("batch_size", why) if why else None


def _check_distinct_models(spec) -> None:
    """No two ``models`` entries give the same trials (same model and recipe, after
    defaults): compared on each one's first cell, since grid axes may not be set in ``models``."""
    seen: dict[str, int] = {}
    for i, cell in sorted({c.entry: c for c in reversed(spec.cells)}.items()):  # first seed, first grid cell
        try:
            key = repr(spec.train_config(cell).to_dict())
        except (ConfigError, TypeError, ValueError):  # only valid with sampled values: not compared
            return
        if key in seen:
            raise SpecError(
                spec.file,
                f"models.{i}",
                f"builds the same model and recipe as models.{seen[key]}: every trial would run twice",
            )
        seen[key] = i
