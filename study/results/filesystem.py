"""A path or a URI as pyarrow reaches it: the one rule for local versus object storage, below
every module that reads or writes a study's files (storage, metadata files, tables, whole-file writes)."""

from __future__ import annotations

import os

import pyarrow.fs as pafs

from study import limits


def is_remote(storage: str | os.PathLike) -> bool:
    """Whether ``storage`` is a URI (``s3://``, ``gs://``...) rather than a local path."""
    return "://" in str(storage)


def file_system(path: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
    """(pyarrow file system, path on it) of a local path or a URI (pyarrow's own waits; bounded
    waits for reaching a store: :mod:`study.results.storage`)."""
    if is_remote(path):
        return pafs.FileSystem.from_uri(str(path))
    return pafs.LocalFileSystem(), str(path)


def local_path_problem(text: str) -> str | None:
    """Why ``text`` cannot name a local file or folder (one line), or None: empty, starting or ending
    with a blank, a NUL (no system call takes one), or longer than the file system takes (a name over
    ``MAX_PATH_COMPONENT_BYTES``, NAME_MAX; the whole over ``MAX_PATH_BYTES``, PATH_MAX)."""
    if not text.strip() or text != text.strip():
        return f"must name a file or folder, without blanks around it, got {text[:40]!r}"
    if "\0" in text:
        return "contains a NUL character"
    encoded = os.fsencode(text)
    if len(encoded) > limits.MAX_PATH_BYTES:
        return (
            f"is {len(encoded)} bytes long, more than a path may be ({limits.MAX_PATH_BYTES}, MAX_PATH_BYTES)"
        )
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > limits.MAX_PATH_COMPONENT_BYTES:
        return (
            f"has a name of {len(longest)} bytes ({os.fsdecode(longest[:20])}...), more than a file "
            f"or folder name may be ({limits.MAX_PATH_COMPONENT_BYTES}, MAX_PATH_COMPONENT_BYTES)"
        )
    return None
