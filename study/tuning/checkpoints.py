"""A study's trial checkpoints in ``<study>/trials/<key>/``, a local folder or an object-store
prefix (:mod:`study.trial.checkpoint` writes and reads them)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from study.trial.checkpoint import FILENAME, PREVIOUS


def find_checkpoints(root: str) -> list[str]:
    """The keys of the trials under the study folder ``root`` that hold a checkpoint."""
    import pyarrow.fs as pafs

    from study.trial.checkpoint import folder_fs

    fs, base = folder_fs(f"{root}/trials")
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError:
        return []
    parts = [i.path[len(base) :].strip("/").split("/") for i in infos if i.type == pafs.FileType.File]
    return sorted({p[0] for p in parts if len(p) == 2 and p[1] in (FILENAME, PREVIOUS)})


def latest_checkpoint(
    root: str,
    key: str,
    *,
    check: Callable[[dict, str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any] | None:
    """:func:`~study.trial.checkpoint.load_checkpoint` of trial ``key``; none intact: ``ExportError``."""
    from study.trial.checkpoint import load_checkpoint

    with _none_intact(key):
        return load_checkpoint(f"{root}/trials/{key}", check=check, warn=warn)


def latest_checkpoint_head(
    root: str, key: str, *, check: Callable[[dict, str], None] | None = None
) -> dict[str, Any] | None:
    """The same choice read without torch (:func:`~study.trial.checkpoint.checkpoint_head`): none intact
    is the same ``ExportError``, before torch is imported; None where only torch can tell."""
    from study.trial.checkpoint import checkpoint_head

    with _none_intact(key):
        return checkpoint_head(f"{root}/trials/{key}", check=check)


@contextlib.contextmanager
def _none_intact(key: str):
    from study.errors import CheckpointError
    from study.models.trained import ExportError

    try:
        yield
    except CheckpointError as e:
        raise ExportError(f"no intact checkpoint of trial {key} ({e})") from None


__all__ = ["find_checkpoints", "latest_checkpoint", "latest_checkpoint_head"]
