"""The on-disk tensor cache: one ``.pt`` file per decoded source, keyed by content
(docs/study-files.md, "Data"); written atomically, read with ``weights_only=True``.  torch is
imported on first use (and pyarrow, by study.results.atomicio): :func:`cache_path` serves the quick
checks of a source."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

ENV_VAR = "STUDY_CACHE_DIR"
FORMAT = 1  # bump when the cached content changes meaning


def default_cache_dir() -> Path:
    """``$STUDY_CACHE_DIR`` if set, else ``~/.cache/attention-cnn-study``."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "attention-cnn-study"


def cache_path(cache_dir: Path, *, kind: str, digest: str) -> Path:
    """Where the tensors of the source with content ``digest`` are cached."""
    return cache_dir / f"{kind}-v{FORMAT}-{digest}.pt"


def load_cached(path: Path, *, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The cached dict at ``path`` holding ``keys``, or None if absent or unreadable (then it is rebuilt)."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # absent, truncated or foreign file: rebuild it
        return None
    return (
        obj if isinstance(obj, dict) and obj.get("format") == FORMAT and all(k in obj for k in keys) else None
    )


def save_atomic(obj: dict[str, Any], path: Path) -> bool:
    """Write ``obj`` to ``path`` atomically; False (no file left) when the folder is not writable."""
    import torch

    from study.results.atomicio import write_atomic

    try:  # mode 0644: mkstemp's 0600 would hide a shared cache from other users
        write_atomic(
            path,
            lambda f: torch.save({**obj, "format": FORMAT}, f),
            prefix=path.name + ".",
            suffix=".tmp",
            mode=0o644,
        )
        return True
    except (OSError, RuntimeError):  # disk full, read-only, …
        return False


@contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``<path>.lock`` while building ``path``, so trials
    starting together decode a source once (without ``fcntl`` or a writable folder: no lock).
    The lock file (and a cache folder this call created, if empty) is removed while still
    held, so a refused source leaves nothing behind; a waiter re-checks the cache after."""
    created = not path.parent.exists()
    lock = path.with_name(path.name + ".lock")
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(lock, "a")
    except (ImportError, OSError):
        yield
        return
    with f:
        with suppress(OSError):  # e.g. a file system without locks
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield  # closing the file releases the lock
        finally:
            with suppress(OSError):
                if os.path.samestat(os.fstat(f.fileno()), os.stat(lock)):
                    os.unlink(lock)
            with suppress(OSError):
                if created:
                    path.parent.rmdir()  # only if still empty
