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
from typing import Any, Callable

from study.limits import MAX_META_FILE_BYTES

CHECKPOINT_FILE = "checkpoint.pt"
PREVIOUS_FILE = "checkpoint.prev.pt"  # kept beside it by study.trial.checkpoint
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
            if info.size is not None and info.size > MAX_META_FILE_BYTES:
                continue  # not Tune's: a folder of something else
            with fs.open_input_stream(info.path) as f:
                try:  # any JSON: too deep, not an object, not text → not a trial folder
                    key = json.loads(f.read(MAX_META_FILE_BYTES + 1)).get("key")
                except (ValueError, AttributeError, RecursionError):
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


def read_checkpoint(root: str, ref: CheckpointRef | str) -> dict[str, Any]:
    """Load one checkpoint (``weights_only=True``: tensors and plain containers only);
    one that cannot be read or is not a training checkpoint is an ``ExportError``
    naming the file."""
    from study.models.trained import ExportError, load_payload

    path = ref.path if isinstance(ref, CheckpointRef) else ref
    fs, _ = _fs(root)
    try:
        with fs.open_input_stream(path) as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"{path}: cannot be read ({' '.join(str(e).split())[:120]})") from None
    state = load_payload(io.BytesIO(data), where=path)
    if "epoch" not in state or "model" not in state:
        raise ExportError(f"{path}: not a training checkpoint (no epoch or model)")
    return state


def _candidates(root: str, refs: list[CheckpointRef]) -> list[str]:
    """One Ray folder's checkpoint files, newest first: each ``checkpoint_*`` by name
    (latest first), its ``checkpoint.pt`` then the ``checkpoint.prev.pt`` beside it."""
    import pyarrow.fs as pafs

    fs, _ = _fs(root)
    out = []
    for ref in sorted(refs, key=lambda r: r.order, reverse=True):
        out.append(ref.path)
        prev = ref.path.rsplit("/", 1)[0] + "/" + PREVIOUS_FILE
        if fs.get_file_info(prev).type == pafs.FileType.File:
            out.append(prev)
    return out


def latest_checkpoint(root: str, key: str, *, check: Callable[[dict, str], None] | None = None,
                      warn: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The checkpoint of trial ``key`` with the most epochs, or None if it has none.
    Within one Ray folder the last ``checkpoint_*`` by name is its latest; across
    folders (a re-created trial) the epochs stored in the files decide.

    A damaged latest checkpoint (truncated, not torch's, not a checkpoint, or refused
    by ``check(state, path)``) falls back to the previous one of its folder, as
    ``study resume`` does, and ``warn`` is told which file was skipped; when none is
    intact, ``ExportError`` names the damaged file."""
    from study.models.trained import ExportError

    refs = find_checkpoints(root).get(key, [])
    if not refs:
        return None
    folders: dict[str, list[CheckpointRef]] = {}
    for ref in refs:
        folders.setdefault(ref.path.rsplit("/", 2)[0], []).append(ref)
    damaged: list[str] = []
    best, best_rank, best_path = None, None, None
    for folder_refs in folders.values():
        mtime = max(r.mtime for r in folder_refs)
        for path in _candidates(root, folder_refs):
            try:
                state = read_checkpoint(root, path)
                if check is not None:
                    check(state, path)
            except (ExportError, ValueError) as e:
                text = " ".join(str(e).split())
                damaged.append(text if text.startswith(path) else f"{path}: {text}")
                continue
            rank = (state["epoch"] if isinstance(state["epoch"], int) else 0, mtime)
            if best_rank is None or rank > best_rank:
                best, best_rank, best_path = state, rank, path
            break
    if best is None:
        raise ExportError(f"no intact checkpoint of trial {key} (the latest: {damaged[0]})")
    if damaged and warn is not None:
        warn(f"damaged checkpoint skipped: {damaged[0]}; using the previous one, {best_path} (epoch {best['epoch']})")
    return best


__all__ = ["CheckpointRef", "find_checkpoints", "latest_checkpoint", "read_checkpoint"]
