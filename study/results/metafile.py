"""Reading a study's small JSON files as the inputs they are: a bad one is a one-line
:class:`MetaFileError`, never a block or an unbounded read (docs/reliability.md, "Metadata files
are inputs")."""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from typing import Any

import pyarrow.fs as pafs

from study import limits
from study.errors import EXIT_USAGE, PathError
from study.results.filesystem import file_system

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_KINDS = {"d": "a folder", "p": "a FIFO", "c": "a character device", "b": "a block device", "s": "a socket"}


class MetaFileError(PathError, ValueError):
    """A metadata file that cannot be used: bad input (exit 2)."""

    exit_code = EXIT_USAGE


def file_kind(mode: int) -> str:
    """What the file of ``mode`` is, in words, when it is not a regular file (``a FIFO``, ``a folder``...)."""
    return _KINDS.get(stat.filemode(mode)[0], "not a regular file")


def _regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise MetaFileError(path, f"is {file_kind(mode)}, not a regular file")


def _too_big(path: str, max_bytes: int, size: int | None = None) -> MetaFileError:
    what = (
        f"is {size:,} bytes, more than the {max_bytes:,}" if size else f"is more than the {max_bytes:,} bytes"
    )
    return MetaFileError(path, f"{what} a metadata file may have (MAX_META_FILE_BYTES)")


def read_bytes(path: str | os.PathLike, *, max_bytes: int = limits.MAX_META_FILE_BYTES) -> bytes:
    """The bytes of a regular file (local or a URI) of at most ``max_bytes``: FileNotFoundError
    when it does not exist, :class:`MetaFileError` otherwise."""
    path = str(path)
    if "://" in path:
        fs, p = file_system(path)
        info = fs.get_file_info(p)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        if info.type != pafs.FileType.File:
            raise MetaFileError(path, "is not a regular file")
        if info.size is not None and info.size > max_bytes:
            raise _too_big(path, max_bytes, info.size)
        with fs.open_input_stream(p) as f:
            data = f.read(max_bytes + 1)
    else:
        st = os.stat(path)  # follows a symlink: its target is what would be read; checked before open
        _regular(path, st.st_mode)
        if st.st_size > max_bytes:
            raise _too_big(path, max_bytes, st.st_size)
        try:
            # O_NONBLOCK: a file swapped for a FIFO since the stat cannot block the open
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except IsADirectoryError:
            raise MetaFileError(path, "is a folder, not a regular file") from None
        with os.fdopen(fd, "rb") as f:
            _regular(path, os.fstat(fd).st_mode)  # what was opened, not what was stat'ed a moment ago
            data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _too_big(path, max_bytes)
    return data


def _depth(text: str) -> int:
    """Deepest nesting of JSON brackets outside strings (a bound checked before parsing,
    so ``[[[…]]]`` 100,000 deep never reaches the recursive parser)."""
    brackets = [1 if c in "[{" else -1 for c in _STRING.sub("", text) if c in "[]{}"]
    return max(itertools.accumulate(brackets), default=0)


def read_json(path: str | os.PathLike, *, max_bytes: int = limits.MAX_META_FILE_BYTES) -> Any:
    """The JSON value of a metadata file at most :data:`study.limits.MAX_META_DEPTH` deep."""
    path = str(path)
    data = read_bytes(path, max_bytes=max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MetaFileError(path, f"not UTF-8 text (byte {e.start})") from None
    if _depth(text) > limits.MAX_META_DEPTH:
        raise MetaFileError(path, f"JSON nested deeper than {limits.MAX_META_DEPTH} levels (MAX_META_DEPTH)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise MetaFileError(path, f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except (RecursionError, ValueError) as e:  # e.g. an integer of more than 4,300 digits
        raise MetaFileError(path, f"not valid JSON ({' '.join(str(e).split())[:120]})") from None


def read_object(
    path: str | os.PathLike,
    *,
    fields: dict[str, type | tuple[type, ...]] | None = None,
    max_bytes: int = limits.MAX_META_FILE_BYTES,
) -> dict[str, Any]:
    """:func:`read_json` of a JSON object whose ``fields`` present have their type (a bool is no int)."""
    value = read_json(path, max_bytes=max_bytes)
    if not isinstance(value, dict):
        raise MetaFileError(str(path), f"holds a JSON {type(value).__name__}, not an object")
    for name, types in (fields or {}).items():
        if (v := value.get(name)) is None:
            continue
        types = types if isinstance(types, tuple) else (types,)
        if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
            want = " or ".join(
                {
                    int: "an integer",
                    float: "a number",
                    str: "a string",
                    dict: "an object",
                    list: "a list",
                    bool: "true/false",
                }.get(t, t.__name__)
                for t in types
            )
            raise MetaFileError(str(path), f"{name}: must be {want}, got {json.dumps(v)[:60]}")
    return value
