"""Trained models taken out of a study: one ``.pt`` file, rebuilt anywhere.

An export (written by ``study export``) is a plain dict loadable with
``torch.load(path, weights_only=True)``::

    {"format": "attention-cnn-study/model", "version": 1,
     "model_config": ModelConfig.to_dict(),   # the model actually built (num_classes included)
     "train_config": TrainConfig.to_dict(),   # how it was trained (data, subset, seed, ...)
     "state_dict": {...}, "study": ..., "trial_id": ..., "epoch": epochs trained,
     "final_test_acc": ..., "best_test_acc": ...}

>>> from study.models import load_trained
>>> model = load_trained("best.pt")          # eval mode, on the CPU
>>> logits = model(images)
"""

from __future__ import annotations

import os
from typing import Any

FORMAT = "attention-cnn-study/model"
VERSION = 1


class ExportError(ValueError):
    """A file that is not a model export (or a checkpoint without its configuration)."""


def export_dict(checkpoint: dict[str, Any], *, study: str = "", trial_id: str = "") -> dict[str, Any]:
    """The export of a training checkpoint (``study/trial/checkpoint.py``): weights
    and configuration, without optimizer and RNG state."""
    if "model_config" not in checkpoint:
        raise ExportError("the checkpoint carries no model_config (written before checkpoints recorded "
                          "their model configuration)")
    return {
        "format": FORMAT, "version": VERSION, "model_config": dict(checkpoint["model_config"]),
        "train_config": dict(checkpoint.get("train_config") or {}), "state_dict": checkpoint["model"],
        "study": study, "trial_id": trial_id, "epoch": int(checkpoint.get("epoch", 0)),
        "final_test_acc": float(checkpoint.get("final_test_acc", float("nan"))),
        "best_test_acc": float(checkpoint.get("best_test_acc", float("nan"))),
    }


def read_export(path: str | os.PathLike, *, map_location: Any = "cpu") -> dict[str, Any]:
    """Load an export (``weights_only=True``; code in a pickle is refused).  A raw
    training checkpoint (``checkpoint.pt``) is accepted too and converted."""
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a foreign file
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            data = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
        raise ExportError(f"{path}: not a model export ({_load_reason(e)})") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path}: not a model export")
    if data.get("format") != FORMAT:
        if "model" in data and "epoch" in data:  # a training checkpoint
            return export_dict(data)
        raise ExportError(f"{path}: not a model export (no format {FORMAT!r})")
    return data


def load_trained(path: str | os.PathLike, *, map_location: Any = "cpu"):
    """Rebuild the model of an export (or a training checkpoint) with its weights, in
    evaluation mode."""
    from .registry import build_model

    data = read_export(path, map_location=map_location)
    model = build_model(data["model_config"])
    model.load_state_dict(data["state_dict"])
    return model.eval()


__all__ = ["FORMAT", "ExportError", "export_dict", "load_trained", "read_export"]


def _load_reason(e: BaseException) -> str:
    """torch.load's failure in a few words (its weights-only message is a paragraph of advice)."""
    text = " ".join(str(e).split())
    if "WeightsUnpickler error:" in text:
        text = "refused by the weights-only unpickler: " + text.split("WeightsUnpickler error:", 1)[1].split(
            " Check the documentation", 1)[0].split(". ", 1)[0].strip()
    return text[:200] or ("empty or truncated file" if isinstance(e, EOFError) else type(e).__name__)
