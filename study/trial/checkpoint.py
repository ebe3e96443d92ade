"""Per-epoch checkpoints: written atomically, loaded with ``weights_only=True``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

FILENAME = "checkpoint.pt"


def save_checkpoint(directory: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` (tensors, numbers, strings, dicts/lists of them) to
    ``directory/checkpoint.pt`` via a temporary file and an atomic rename."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pt", dir=directory)
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, directory / FILENAME)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / FILENAME


def load_checkpoint(directory: str | os.PathLike | None, *, map_location="cpu") -> dict[str, Any] | None:
    """The checkpoint in ``directory``, or None if there is none.  Only tensors and
    plain containers are accepted (``weights_only=True``): a pickle carrying code is
    refused with an error rather than executed."""
    if directory is None:
        return None
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    return torch.load(path, map_location=map_location, weights_only=True)
