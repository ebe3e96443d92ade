"""Find a study's trial checkpoints in its storage (local folder or ``s3://``).

Ray names trial folders by its own ids (``study_trial_<hash>_<n>_cell=…``), which
change when a study is resumed or a trial re-created.  The table identity of a trial
(its ``key``, e.g. ``c000-s000``) is in each folder's ``params.json`` (the config Tune
gave the trial); DDP trials keep their checkpoints under ``ddp/ddp-<key>-<ray id>/``.
Every ``checkpoint_*/checkpoint.pt`` found for a key is a candidate; the one with the
most epochs wins (ties: the newest file).
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import Any

CHECKPOINT_FILE = "checkpoint.pt"
_DDP = re.compile(r"^ddp-(?P<key>.+)-[^-]+$")  # ddp-<key>-<Ray trial id>


@dataclass(frozen=True)
class CheckpointRef:
    key: str
    path: str  # path of checkpoint.pt on ``fs``
    order: str  # Ray's folder name: checkpoint_<index> (Tune) or checkpoint_<timestamp> (Train); sorts by age
    mtime: float


def _fs(root: str):
    import pyarrow.fs as pafs

    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    return pafs.LocalFileSystem(), root


def find_checkpoints(root: str) -> dict[str, list[CheckpointRef]]:
    """Every checkpoint under the study folder ``root``, by trial key."""
    import pyarrow.fs as pafs

    fs, base = _fs(root)
    base = base.rstrip("/")
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError:
        return {}
    keys: dict[str, str] = {}  # trial folder -> key
    found: list[tuple[str, str, str, float]] = []  # trial folder, path, order, mtime
    for info in infos:
        rel = info.path[len(base):].lstrip("/")
        parts = rel.split("/")
        if rel.startswith("tables/") or info.type != pafs.FileType.File:
            continue
        if len(parts) == 2 and parts[1] == "params.json":
            with fs.open_input_stream(info.path) as f:
                try:
                    key = json.loads(f.read()).get("key")
                except (ValueError, AttributeError):
                    key = None
            if isinstance(key, str):
                keys[parts[0]] = key
        elif parts[-1] == CHECKPOINT_FILE and len(parts) >= 3 and parts[-2].startswith("checkpoint_"):
            index = parts[-2]
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            if parts[0] == "ddp" and len(parts) == 4:
                m = _DDP.match(parts[1])
                if m:
                    found.append(("ddp:" + m["key"], info.path, index, mtime))
            elif len(parts) == 3:
                found.append((parts[0], info.path, index, mtime))
    out: dict[str, list[CheckpointRef]] = {}
    for folder, path, index, mtime in found:
        key = folder[4:] if folder.startswith("ddp:") else keys.get(folder)
        if key is not None:
            out.setdefault(key, []).append(CheckpointRef(key=key, path=path, order=index, mtime=mtime))
    return out


def read_checkpoint(root: str, ref: CheckpointRef) -> dict[str, Any]:
    """Load one checkpoint (``weights_only=True``: tensors and plain containers only)."""
    import torch

    fs, _ = _fs(root)
    with fs.open_input_stream(ref.path) as f:
        data = f.read()
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def latest_checkpoint(root: str, key: str) -> dict[str, Any] | None:
    """The checkpoint of trial ``key`` with the most epochs, or None if it has none.
    Within one Ray folder the last ``checkpoint_*`` by name is its latest; across
    folders (a re-created trial) the epochs stored in the files decide."""
    refs = find_checkpoints(root).get(key, [])
    if not refs:
        return None
    latest: dict[str, CheckpointRef] = {}
    for ref in refs:
        folder = ref.path.rsplit("/", 2)[0]
        if folder not in latest or ref.order > latest[folder].order:
            latest[folder] = ref
    best, best_rank = None, None
    for ref in latest.values():
        state = read_checkpoint(root, ref)
        rank = (int(state.get("epoch", 0)), ref.mtime)
        if best_rank is None or rank > best_rank:
            best, best_rank = state, rank
    return best


__all__ = ["CheckpointRef", "find_checkpoints", "latest_checkpoint", "read_checkpoint"]
