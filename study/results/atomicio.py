"""Whole-file writes: readers see the old file or the new one (docs/reliability.md, "Whole files")."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from study.results.filesystem import file_system, is_remote

Writer = Callable[[IO[bytes]], object]


def write_atomic(
    path: str | os.PathLike,
    write: Writer | bytes,
    *,
    prefix: str = ".tmp-",
    suffix: str = "",
    mode: int | None = None,
    before_replace: Callable[[], object] | None = None,
) -> str:
    """Write ``path`` in one step: ``write`` is the content or a function writing it to a
    binary file.  Local files only: ``mode`` (default 0600) and ``before_replace``, called
    before the new content replaces the old."""
    fill = (lambda f: f.write(write)) if isinstance(write, (bytes, bytearray)) else write
    if is_remote(path):
        fs, p = file_system(path)
        with fs.open_output_stream(p) as f:  # one PUT / multipart upload: appears whole
            fill(f)
        return str(path)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(path)
