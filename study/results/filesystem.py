"""A path or a URI as pyarrow reaches it: the one rule for local versus object storage, below
every module that reads or writes a study's files (storage, metadata files, tables, whole-file writes)."""

from __future__ import annotations

import os

import pyarrow.fs as pafs


def is_remote(storage: str | os.PathLike) -> bool:
    """Whether ``storage`` is a URI (``s3://``, ``gs://``...) rather than a local path."""
    return "://" in str(storage)


def file_system(path: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
    """(pyarrow file system, path on it) of a local path or a URI (pyarrow's own waits; bounded
    waits for reaching a store: :mod:`study.results.storage`)."""
    if is_remote(path):
        return pafs.FileSystem.from_uri(str(path))
    return pafs.LocalFileSystem(), str(path)
