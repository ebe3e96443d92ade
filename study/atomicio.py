"""Whole-file writes: a reader (or a resumed driver) sees the old file or the new one,
never a part of one.

* Local paths: a temporary file in the target's folder (``.tmp-*`` by default, a name
  readers skip), flushed and ``fsync``-ed, then ``os.replace`` onto the target.  A
  failure (a full disk, a killed copy) leaves the previous file intact and removes
  the temporary one.
* Object storage (``s3://…`` through pyarrow): one upload, which S3 makes visible only
  once complete (there is no rename there).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Callable

from study.storage import is_remote

Writer = Callable[[IO[bytes]], object]


def write_atomic(path: str | os.PathLike, write: Writer | bytes, *, prefix: str = ".tmp-", suffix: str = "",
                 mode: int | None = None, filesystem=None, before_replace: Callable[[], object] | None = None) -> str:
    """Write ``path`` in one step: ``write`` is the content or a function writing it to
    the binary file it is given; ``filesystem``: pyarrow's for ``path`` (default: from an
    ``s3://…`` URI, else local).  Local files only: ``mode`` (default ``mkstemp``'s 0600)
    and ``before_replace``, called once the new content is on disk, before it replaces
    the old.  Returns ``path``."""
    fill = (lambda f: f.write(write)) if isinstance(write, (bytes, bytearray)) else write
    if filesystem is not None or is_remote(path):
        import pyarrow.fs as pafs

        fs, p = (filesystem, str(path)) if filesystem is not None else pafs.FileSystem.from_uri(str(path))
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
