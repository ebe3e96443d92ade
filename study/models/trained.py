"""Trained models taken out of a study: one ``.pt`` file, rebuilt anywhere.

An export (written by ``study export``) is a plain dict loadable with
``torch.load(path, weights_only=True)``::

    {"format": "attention-cnn-study/model", "version": 1,
     "model_config": ModelConfig.to_dict(),   # the model actually built (num_classes included)
     "train_config": TrainConfig.to_dict(),   # how it was trained (data, subset, seed, ...)
     "state_dict": {...}, "study": ..., "trial_id": ..., "epoch": epochs trained,
     "final_test_acc": ..., "best_test_acc": ...}

Loaded by :func:`load_trained` (docs/results.md "Taking a model away").
"""

from __future__ import annotations

import os
import pickle
from typing import Any

FORMAT = "attention-cnn-study/model"
VERSION = 1


class ExportError(ValueError):
    """A file that is not a model export (or a checkpoint without its configuration)."""


def export_dict(checkpoint: dict[str, Any], *, study: str = "", trial_id: str = "") -> dict[str, Any]:
    """The export of a training checkpoint (``study/trial/checkpoint.py``): weights
    and configuration, without optimizer and RNG state."""
    if not isinstance(checkpoint.get("model_config"), dict):
        raise ExportError(
            "the checkpoint carries no model_config (written before checkpoints recorded "
            "their model configuration)"
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "model_config": dict(checkpoint["model_config"]),
        "train_config": checkpoint.get("train_config") or {},
        "state_dict": checkpoint["model"],
        "study": study,
        "trial_id": trial_id,
        "epoch": _number(checkpoint, "epoch", int, 0),
        "final_test_acc": _number(checkpoint, "final_test_acc", float, float("nan")),
        "best_test_acc": _number(checkpoint, "best_test_acc", float, float("nan")),
    }


def read_export(path: str | os.PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
    """Load an export, or a raw training checkpoint converted (``weights_only=True``), and
    check it (:func:`check_export`): a crafted or damaged file (truncated, code in the
    pickle, not a dict) is an :class:`ExportError` naming it, never a failure later."""
    import warnings
    import zipfile

    import torch

    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a foreign file
            warnings.simplefilter("ignore")
            data = torch.load(path, map_location=map_location, weights_only=True)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        ValueError,
        KeyError,
        AttributeError,
        TypeError,
        IndexError,
        OSError,
        zipfile.BadZipFile,
        UnicodeDecodeError,
        MemoryError,
        OverflowError,
    ) as e:
        raise ExportError(f"{path}: not a model export ({_load_reason(e)})") from None
    data = as_export(data, path)
    check_export(data, where=str(path))
    return data


def as_export(data: Any, path: str | os.PathLike) -> dict[str, Any]:
    """What a loaded file holds as an export: an export, or a training checkpoint converted; else
    :class:`ExportError` naming ``path``."""
    if not isinstance(data, dict):
        raise ExportError(f"{path}: not a model export (holds a {type(data).__name__}, not a dict)")
    if data.get("format") != FORMAT:
        if "model" in data and "epoch" in data:  # a training checkpoint
            try:
                data = export_dict(data)
            except ExportError as e:
                raise ExportError(f"{path}: {e}") from None
        else:
            raise ExportError(f"{path}: not a model export (no format {FORMAT!r})")
    return data


def state_shapes(config) -> dict[str, tuple[int, ...]]:
    """Name → shape of every entry of the state dict ``config`` builds, from a model
    built on the ``meta`` device (no memory is allocated, whatever its size)."""
    import torch

    from .registry import build_model

    with torch.device("meta"):
        model = build_model(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def check_export_config(data: dict[str, Any], *, where: str):
    """The configuration of an export, without torch: its ``ModelConfig``, within :mod:`study.limits`,
    a ``train_config`` of the types evaluation reads and a dict ``state_dict``; else :class:`ExportError`."""
    from .config import ConfigError, ModelConfig

    mc = data.get("model_config")
    if not isinstance(mc, dict):
        raise ExportError(f"{where}: model_config: must be a dict, got {type(mc).__name__}")
    try:
        cfg = ModelConfig.from_dict(mc)
    except (ConfigError, TypeError) as e:
        what = f"{e.field}: {e.message}" if isinstance(e, ConfigError) else " ".join(str(e).split())[:120]
        raise ExportError(f"{where}: model_config.{what}") from None
    train = data.get("train_config")
    if train is not None and not isinstance(train, dict):
        raise ExportError(f"{where}: train_config: must be a dict, got {type(train).__name__}")
    for fld, types in (("data", str), ("seed", int), ("amp", bool)):
        v = (train or {}).get(fld)
        if v is not None and (not isinstance(v, types) or (types is int and isinstance(v, bool))):
            raise ExportError(f"{where}: train_config.{fld}: must be {types.__name__}, got {v!r}"[:200])
    seed = (train or {}).get("seed")
    if isinstance(seed, int) and not 0 <= seed < 2**32:
        raise ExportError(f"{where}: train_config.seed: must be in [0, 2**32), got {seed}")
    sd = data.get("state_dict")
    if not isinstance(sd, dict):
        raise ExportError(f"{where}: state_dict: must be a dict of tensors, got {type(sd).__name__}")
    return cfg


def check_export(data: dict[str, Any], *, where: str) -> None:
    """The configuration builds within :mod:`study.limits` and ``state_dict`` holds exactly
    that model's tensors and shapes; else :class:`ExportError` naming the first problem."""
    import torch

    from .config import ConfigError

    cfg = check_export_config(data, where=where)
    sd = data["state_dict"]
    try:
        expected = state_shapes(cfg)
    except (ConfigError, RuntimeError, ValueError) as e:
        raise ExportError(
            f"{where}: model_config: cannot build the model ({' '.join(str(e).split())[:120]})"
        ) from None
    missing = [k for k in expected if k not in sd]
    if missing:
        raise ExportError(
            f"{where}: state_dict: missing {missing[0]!r}"
            + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
            + f" of the {len(expected)} tensors of the model its model_config builds"
        )
    extra = [k for k in sd if k not in expected]
    if extra:
        raise ExportError(
            f"{where}: state_dict: unexpected {str(extra[0])[:80]!r}"
            + (f" and {len(extra) - 1} more" if len(extra) > 1 else "")
            + " (not a tensor of the model its model_config builds)"
        )
    for k, shape in expected.items():
        t = sd[k]
        if not isinstance(t, torch.Tensor):
            raise ExportError(f"{where}: state_dict.{k}: must be a tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape:
            raise ExportError(f"{where}: state_dict.{k}: shape {tuple(t.shape)}, the model needs {shape}")
        if not (t.is_floating_point() or t.dtype in (torch.int64, torch.int32, torch.bool)):
            raise ExportError(f"{where}: state_dict.{k}: dtype {t.dtype} is not a parameter dtype")


def load_trained(path: str | os.PathLike, *, map_location: Any = "cpu"):
    """Rebuild the model of an export (or a training checkpoint) with its weights, in
    evaluation mode."""
    from .registry import build_model

    data = read_export(path, map_location=map_location)
    model = build_model(data["model_config"])
    model.load_state_dict(data["state_dict"])
    return model.eval()


def _number(checkpoint: dict[str, Any], key: str, kind: type, default):
    """``checkpoint[key]`` as ``kind`` (a number or a 0-d tensor), else ExportError."""
    v = checkpoint.get(key, default)
    try:
        if isinstance(v, bool) or not (isinstance(v, (int, float)) or getattr(v, "ndim", None) == 0):
            raise TypeError
        return kind(v)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        raise ExportError(f"checkpoint's {key}: must be a number, got {type(v).__name__}") from None


def _load_reason(e: BaseException) -> str:
    """torch.load's failure in a few words, by its type (torch's weights-only refusal is a
    ``pickle.UnpicklingError`` whose message is a paragraph of advice)."""
    if isinstance(e, pickle.UnpicklingError):
        return "refused by the weights-only unpickler: holds more than tensors"
    words = " ".join(str(e).split())[:200]
    return words or ("empty or truncated file" if isinstance(e, EOFError) else type(e).__name__)
