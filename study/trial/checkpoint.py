"""Per-epoch checkpoints: written atomically, loaded with ``weights_only=True``, the previous
one kept for a damaged latest (docs/design.md §9 "Checkpoints", docs/reliability.md)."""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import Any, Callable

import torch

from study.atomicio import write_atomic
from study.errors import CheckpointError, cause
from study.storage import is_remote
from study.tables import file_system
from study.trial.config import PROTOCOL_FIELDS, TrainConfig

FILENAME = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"

#: TrainConfig fields that do not change what a checkpoint continues (how the
#: trial is executed or observed, not what it trains).
OPERATIONAL_FIELDS = frozenset({"amp", "compile", "head_stats", "head_images", "map_radius", "eval_batch_size"})


def folder_fs(directory: str):
    """(pyarrow file system, path on it) of a checkpoint folder: local (made absolute) or ``s3://…``."""
    return file_system(directory if is_remote(directory) else str(Path(directory).absolute()))


def save_checkpoint(directory: str | os.PathLike, state: dict[str, Any]) -> str:
    """Write ``state`` to ``directory/checkpoint.pt`` in one step; the checkpoint it replaces
    becomes ``checkpoint.prev.pt``.  On object storage the old object is moved aside, then
    one upload appears whole."""
    directory = str(directory)
    fs, base = folder_fs(directory)

    def keep_previous() -> None:
        import pyarrow.fs as pafs

        if fs.get_file_info(f"{base}/{FILENAME}").type == pafs.FileType.File:
            fs.move(f"{base}/{FILENAME}", f"{base}/{PREVIOUS}")

    if is_remote(directory):  # write_atomic calls before_replace on local files only
        keep_previous()
    return write_atomic(f"{directory}/{FILENAME}", lambda f: torch.save(state, f), suffix=".pt",
                        before_replace=keep_previous)


def load_checkpoint(directory: str | os.PathLike | None, *, map_location="cpu",
                    warn: Callable[[str], None] | None = None,
                    check: Callable[[dict, str], None] | None = None) -> dict[str, Any] | None:
    """The latest intact checkpoint in ``directory``, or None if there is none; a damaged
    latest falls back to the previous one (``warn`` names the skipped file), none intact raises
    :class:`CheckpointError`.  ``check(state, path)`` may refuse one that loads: it counts as damaged."""
    import pyarrow.fs as pafs

    if directory is None:
        return None
    directory = str(directory)
    fs, base = folder_fs(directory)
    damaged: list[str] = []
    for name in (FILENAME, PREVIOUS):
        shown = f"{directory}/{name}" if is_remote(directory) else str(Path(directory) / name)
        kind = fs.get_file_info(f"{base}/{name}").type
        if kind == pafs.FileType.NotFound:
            continue
        if kind != pafs.FileType.File:  # a folder, a FIFO, a device: never opened
            damaged.append(f"{shown} (not a regular file)")
            continue
        try:
            with fs.open_input_stream(f"{base}/{name}") as f:
                state = torch.load(io.BytesIO(f.read()), map_location=map_location, weights_only=True)
            if not isinstance(state, dict) or "epoch" not in state or "model" not in state:
                raise CheckpointError(f"{shown}: not a checkpoint of this project")
            if check is not None:
                check(state, shown)
        except Exception as e:  # truncated, not a zip, refused pickle, wrong content
            damaged.append(f"{shown} ({cause(e)})")
            continue
        if damaged and warn is not None:
            warn(f"checkpoint {damaged[0]} is damaged; using the previous one, {shown} (epoch {state['epoch']})")
        return state
    if damaged:
        raise CheckpointError(f"checkpoint {damaged[0]} is damaged and no earlier checkpoint is intact")
    return None


def check_config(state: dict[str, Any], *, model_config: dict[str, Any], train_config: dict[str, Any],
                 where: str) -> None:
    """Refuse to continue ``state`` under another configuration (instead of silently reusing
    it or failing inside ``load_state_dict``): one line naming every differing field.
    Checkpoints older than these keys are not checked; the training protocol's fields, added
    since, compare as their defaults (all off), which they had then."""
    diffs = []
    saved_model = state.get("model_config")
    if isinstance(saved_model, dict):
        diffs += [f"{k}: {saved_model.get(k)!r} -> {v!r}" for k, v in model_config.items() if saved_model.get(k) != v]
    saved_train = state.get("train_config")
    if isinstance(saved_train, dict):
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
        saved_train = {**{k: defaults[k] for k in PROTOCOL_FIELDS}, **saved_train}
        diffs += [f"{k}: {saved_train.get(k)!r} -> {v!r}" for k, v in train_config.items()
                  if k != "model" and k not in OPERATIONAL_FIELDS and saved_train.get(k) != v]
    if diffs:
        raise CheckpointError(f"{where} holds a checkpoint of another configuration ({'; '.join(diffs)}); "
                              "use another output folder or the same settings")
