"""Where studies live: the default storage, study folders, the studies under a storage.

Pure Python + pyarrow (no torch, no Ray), so bookkeeping commands (``study status``,
``study list``, ``analysis``) start fast.

``$STUDY_STORAGE`` sets the default ``--storage`` of every ``study`` and ``analysis``
command (a folder or ``s3://bucket/prefix``); without it the default is ``./results``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STORAGE_ENV = "STUDY_STORAGE"
META_FILE = "study.json"


def default_storage() -> str:
    """``$STUDY_STORAGE`` if set and not empty, else ``results``."""
    return os.environ.get(STORAGE_ENV) or "results"


#: object stores a storage URI may name (pyarrow's file systems); anything else is refused
REMOTE_SCHEMES = ("s3", "gs", "gcs")


def storage_problem(storage: str) -> str | None:
    """Why ``storage`` cannot be a storage (one line), or None: an empty value, a URI
    of a scheme other than :data:`REMOTE_SCHEMES`, or one without a bucket."""
    text = str(storage)
    if not text.strip():
        return "must be a folder or s3://bucket/prefix, got ''"
    if "://" not in text:
        return None
    scheme, rest = text.split("://", 1)
    if scheme.lower() not in REMOTE_SCHEMES:
        return f"unsupported URI scheme {scheme!r} in {text!r} (use a folder or s3://bucket/prefix)"
    if not rest.split("/", 1)[0].split("?", 1)[0]:
        return f"{text!r} names no bucket (use s3://bucket/prefix)"
    return None


def resolve_storage(storage: str | None) -> str:
    """``--storage`` (``storage``), else ``$STUDY_STORAGE``, else ``results``; a malformed
    one raises ``ValueError`` with one line naming where it came from."""
    value = storage or default_storage()
    problem = storage_problem(value)
    if problem:
        raise ValueError(f"--storage: {problem}" if storage else f"${STORAGE_ENV}: {problem}")
    return value


def file_in_the_way(path: str | os.PathLike) -> Path | None:
    """The nearest existing ancestor of ``path`` if it is not a folder (so ``path`` can
    never be created), else None."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def is_remote(storage: str) -> bool:
    return "://" in str(storage)


def study_root(storage: str, name: str) -> str:
    return f"{storage.rstrip('/')}/{name}" if is_remote(storage) else str(Path(storage).resolve() / name)


def list_studies(storage: str) -> list[str]:
    """Names of the study folders (those holding ``study.json``) directly under ``storage``."""
    if is_remote(storage):
        import pyarrow.fs as pafs

        fs, base = pafs.FileSystem.from_uri(storage.rstrip("/"))
        try:
            infos = fs.get_file_info(pafs.FileSelector(base, recursive=False, allow_not_found=True))
        except (FileNotFoundError, OSError):
            return []
        names = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
        metas = fs.get_file_info([f"{base}/{n}/{META_FILE}" for n in names])
        return sorted(n for n, m in zip(names, metas) if m.type == pafs.FileType.File)
    root = Path(storage)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / META_FILE).is_file())


def resolve(root: str, meta: dict) -> dict:
    """``meta`` with its paths under ``root`` (where the study is now): ``study.json``
    stores them relative to the study folder, so a moved or copied study resumes there."""
    return {**meta, "root": root, "tables": f"{root}/tables", "ddp_storage": f"{root}/ddp",
            "optuna_journal": f"{root}/{meta.get('optuna_journal') or 'optuna.journal'}"}


def study_exists(root: str) -> bool:
    """Whether anything is stored under a study's folder (local or object storage)."""
    if not is_remote(root):
        return Path(root).exists() and any(Path(root).iterdir())
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(root)
    return bool(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))


def read_meta(root: str) -> dict:
    """The study's ``study.json`` (written by ``study run``), paths resolved under ``root``."""
    if is_remote(root):
        import pyarrow.fs as pafs

        fs, path = pafs.FileSystem.from_uri(root)
        with fs.open_input_stream(f"{path}/{META_FILE}") as f:
            return resolve(root, json.loads(f.read()))
    return resolve(root, json.loads((Path(root) / META_FILE).read_text()))
