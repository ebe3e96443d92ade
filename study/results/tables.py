"""Result tables of a study (docs/design.md §8): Parquet files per trial, compacted as it runs.
Layout, compaction, map encoding, readers' invariants and column conventions (0-based ``epoch``,
:data:`INIT_EPOCH`): docs/results.md, "The results store" and "What the columns mean"."""

from __future__ import annotations

import contextlib
import math
import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from study.errors import UsageError
from study.results.atomicio import write_atomic
from study.results.columns import COLUMNS
from study.results.filesystem import file_system, is_remote

if TYPE_CHECKING:  # pandas is imported where a DataFrame is built: `analysis query` never needs it
    import pandas as pd

TABLES = ("runs", "epochs", "heads", "maps")
EPOCH_TABLES = ("epochs", "heads", "maps")

#: Columns of each table: the ones :mod:`study.results.columns` describes (``runs`` also has each
#: encoding's own fields and ``sampled_<field>`` per sampled axis; a study written before a column
#: lacks it)
SCHEMA: dict[str, tuple[str, ...]] = {
    table: tuple(name for name, _, _ in described if "<" not in name) for table, described in COLUMNS.items()
}
#: the columns that name a row of each table: a key is read once
_KEYS = {
    "runs": ["trial_id"],
    "epochs": ["trial_id", "epoch"],
    "heads": ["trial_id", "epoch", "layer", "head"],
    "maps": ["trial_id", "epoch", "layer", "head"],
}

#: Trial states recorded in ``runs.status`` (docs/reliability.md says which event leaves which).
STATUSES = ("running", "finished", "diverged", "stopped", "interrupted", "error")

#: A trial's parts of a table are compacted whenever this many have accumulated.
COMPACT_EVERY = 10
COMPACTED = "compacted.parquet"
#: the ``epoch`` of the untrained model's ``heads`` and ``maps`` rows
INIT_EPOCH = -1
_PART = re.compile(r"^(?:\d{5,}|-0001)\.parquet$")
#: a file or folder under ``tables/`` whose name starts with one of these is never read
#: (a write in progress, ``.tmp-*``, or hidden bookkeeping): no trial id may start so
SKIPPED_PREFIXES = (".", "_")
_Q_MAX = 65535


class TableWarning(UserWarning):
    """A file under ``tables/`` was skipped (foreign, or not readable Parquet)."""


_warned: set[str] = set()


def _skip(path: str, why: str) -> None:
    if path not in _warned:
        _warned.add(path)
        warnings.warn(f"skipped {path}: {why}", TableWarning, stacklevel=3)


def warnings_as_lines(prog: str) -> None:
    """Show :class:`TableWarning` as one line ``PROG: warning: …`` on stderr."""
    default = warnings.formatwarning

    def one_line(message, category, *args, **kwargs):
        if issubclass(category, TableWarning):
            return f"{prog}: warning: {message}\n"
        return default(message, category, *args, **kwargs)

    warnings.formatwarning = one_line
    warnings.simplefilter("always", TableWarning)


#: reads of a remote file before it counts as damaged (:func:`_read_file`)
_REMOTE_READS = 3


def _join(root: str | os.PathLike, rel: str) -> str:
    return f"{str(root).rstrip('/')}/{rel}" if is_remote(root) else str(Path(root) / rel)


def part_path(root: str | os.PathLike, table: str, trial_id: str, epoch: int | None = None) -> str:
    """Where a part lives: a local path or a URI (``s3://…``) under ``root``."""
    rel = f"runs/{trial_id}.parquet" if table == "runs" else f"{table}/{trial_id}/{epoch:05d}.parquet"
    return _join(root, rel)


def compacted_path(root: str | os.PathLike, table: str, trial_id: str) -> str:
    return _join(root, f"{table}/{trial_id}/{COMPACTED}")


def write_part(path: str | os.PathLike, rows: list[dict[str, Any]] | pa.Table) -> str:
    """Write ``rows`` to ``path`` whole (:func:`study.results.atomicio.write_atomic`)."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    return write_atomic(path, lambda f: pq.write_table(table, f), suffix=".parquet")


# --------------------------------------------------------------------------- maps
def encode_maps(rows: list[dict[str, Any]]) -> pa.Table:
    """``maps`` rows with ``probs`` (floats) → a table with ``probs_q`` (uint16) and
    ``probs_scale`` (``probs ≈ probs_q * probs_scale``, error ≤ probs_scale / 2)."""
    q, scales = [], []
    for r in rows:
        p = np.clip(np.asarray(r["probs"], dtype=np.float64), 0.0, None)
        top = float(p.max()) if p.size else 0.0
        scales.append(top / _Q_MAX if top > 0 and math.isfinite(top) else 1.0)
        q.append(np.rint(np.nan_to_num(p / scales[-1])).astype(np.uint16))
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "probs"} for r in rows])
    return table.append_column("probs_scale", pa.array(scales, pa.float64())).append_column(
        "probs_q", pa.array(q, type=pa.list_(pa.uint16()))
    )


def decode_maps(table: pa.Table) -> pa.Table:
    """Inverse of :func:`encode_maps` (tables written before maps were quantised hold ``probs``)."""
    import pyarrow.compute as pc

    if "probs_q" not in table.column_names:
        return table
    q = table.column("probs_q").combine_chunks()
    scale = table.column("probs_scale").combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(q), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.cast(pc.list_flatten(q), pa.float64())
    per_value = pa.array(np.repeat(pc.fill_null(scale, 0.0).to_numpy(zero_copy_only=False), lengths))
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    probs = pa.ListArray.from_arrays(offsets, pc.multiply(values, per_value), mask=q.is_null())
    if "probs" in table.column_names:  # a mix of old and new rows
        probs = pc.if_else(q.is_null(), table.column("probs").combine_chunks().cast(probs.type), probs)
        table = table.drop_columns(["probs"])
    table = table.drop_columns(["probs_q", "probs_scale"])
    return table.append_column("probs", probs)


# --------------------------------------------------------------------------- listing
class LinkOutError(UsageError, ValueError):
    """A link in a study's tables folder that leads out of the study (or loops)."""


def check_links(tables: str | os.PathLike) -> None:
    """Refuse (:class:`LinkOutError`) a symbolic link to a folder under a local ``tables``
    folder that leads out of the study folder (its parent) or back to a folder it is in.
    The walk never follows a link, so a link to ``/`` costs one ``readlink``, not a walk
    of the disk (pyarrow's recursive listing follows them)."""
    if is_remote(tables):
        return
    study = Path(tables).resolve().parent
    for folder, dirs, files in os.walk(tables, followlinks=False):  # nothing when there is no folder
        for path in (Path(folder, name) for name in dirs + files):
            if not path.is_symlink() or not (target := path.resolve()).is_dir():
                continue  # a file's link is listed like any file (never a walk): a damaged part at worst
            if not target.is_relative_to(study):
                raise LinkOutError(
                    f"{path}: a link out of the study (to {target}); a study's tables are its own "
                    "files: replace the link by the files or remove it"
                )
            if path.parent.resolve().is_relative_to(target):
                raise LinkOutError(
                    f"{path}: a link to a folder it is in (to {target}): the tables would never end"
                )


def list_table(
    root: str | os.PathLike, table: str, *, trial_id: str | None = None
) -> tuple[list[str], list[str]]:
    """(compacted files, parts) of ``table`` under ``root`` (one trial's with ``trial_id``);
    foreign files skipped."""
    base = _join(root, table if trial_id is None else f"{table}/{trial_id}")
    check_links(root)
    fs, p = file_system(base)
    try:
        infos = fs.get_file_info(pafs.FileSelector(p, recursive=True, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    out, listed, prefix = {"compacted": [], "parts": []}, p.rstrip("/"), base.rstrip("/")
    for info in sorted(infos, key=lambda i: i.path):
        rel = info.path[len(listed) + 1 :] if info.path.startswith(listed) else info.base_name
        parts = rel.split("/")
        if info.type != pafs.FileType.File or any(x.startswith(SKIPPED_PREFIXES) for x in parts):
            continue  # a folder, a write in progress (``.tmp-*``) or hidden bookkeeping
        if table == "runs":
            kind = "parts" if trial_id is None and len(parts) == 1 and rel.endswith(".parquet") else None
        elif len(parts) != (1 if trial_id is not None else 2):
            kind = None
        else:
            kind = "compacted" if parts[-1] == COMPACTED else "parts" if _PART.match(parts[-1]) else None
        if kind:
            out[kind].append(f"{prefix}/{rel}")
        else:
            _skip(f"{prefix}/{rel}", f"not a file of the {table} table")
    return out["compacted"], out["parts"]


def _read_file(path: str, *, schema: bool = False) -> pa.Table | pa.Schema:
    """One file (or its schema), one version of it: a file replaced meanwhile is read whole, old or
    new.  Locally through one open handle (``pq.read_table(path)`` opens it twice, footer and pages);
    remotely a table in one GET parsed from memory, and either read again when its requests straddled
    a replacement (an object store replaces an object whole, but a size request and ranged reads see
    each version)."""
    fs, p = file_system(path)
    if not is_remote(path):
        with fs.open_input_file(p) as f:
            return pq.read_schema(f) if schema else pq.ParquetFile(f).read()
    for attempt in range(_REMOTE_READS):
        try:
            if schema:
                return pq.read_schema(p, filesystem=fs)
            with fs.open_input_stream(p) as f:
                return pq.ParquetFile(pa.BufferReader(f.read())).read()
        except (OSError, pa.ArrowException) as exc:
            if isinstance(exc, FileNotFoundError) or attempt + 1 == _REMOTE_READS:
                raise


def read_file(path: str, *, schema: bool = False) -> pa.Table | pa.Schema | None:
    """``path`` read whole or its schema (:func:`_read_file`); None when gone or damaged (named
    in a warning)."""
    try:
        return _read_file(path, schema=schema)
    except (OSError, pa.ArrowException) as exc:
        gone = isinstance(exc, FileNotFoundError)
        with contextlib.suppress(OSError):  # not known to be gone: named
            fs, p = file_system(path)
            gone = gone or fs.get_file_info(p).type == pafs.FileType.NotFound
        if not gone:
            _skip(path, f"not readable Parquet ({' '.join(str(exc).split())})")
        return None


def read_parts(
    root, table: str, *, trial_id: str | None = None
) -> tuple[list[str], list[pa.Table], list[str]]:
    """(compacted files, to read after; the tables of the parts; the parts read), damaged files skipped. Parts
    are read first: one unread (compacted since the listing: docs/results.md, "Live reads") adds its trial's
    compacted file, which holds its rows (a damaged part's may not exist: it reads as none)."""
    compacted, listed = list_table(root, table, trial_id=trial_id)
    parts, read = [], []
    for path in listed:
        if (part := read_file(path)) is not None:
            parts.append(part)
            read.append(path)
        elif table != "runs" and (c := compacted_path(root, table, path.split("/")[-2])) not in compacted:
            compacted.append(c)
    return compacted, parts, read


def _concat(tables: list[pa.Table | None]) -> pa.Table | None:
    tables = [t for t in tables if t is not None and t.num_rows]
    return pa.concat_tables(tables, promote_options="permissive") if tables else None


def _merge(
    root: str | os.PathLike, table: str, *, trial_id: str | None = None
) -> tuple[pa.Table | None, list[str]]:
    """(rows of the parts, and of the compacted files for every (trial, epoch) no part holds;
    the parts read)."""
    import pyarrow.compute as pc  # lazily: 0.2-0.4 s of every command's start-up

    def keys(t: pa.Table) -> pa.Array:
        return pc.binary_join_element_wise(
            pc.cast(t.column("trial_id"), pa.string()), pc.cast(t.column("epoch"), pa.string()), "\x00"
        )

    compacted, parts, read = read_parts(root, table, trial_id=trial_id)
    old, new = _concat([read_file(path) for path in compacted]), _concat(parts)
    if old is not None and new is not None:
        old = old.filter(pc.invert(pc.is_in(keys(old), value_set=pc.unique(keys(new)))))
    return _concat([old, new]), read


def read_table(root: str | os.PathLike, table: str) -> pd.DataFrame:
    """All rows of ``table`` under ``root`` as one DataFrame (empty if none yet), each key once."""
    import pandas as pd

    merged, _ = _merge(root, table)
    if merged is None or merged.num_rows == 0:
        return pd.DataFrame(columns=list(SCHEMA[table]))
    frame = (decode_maps(merged) if table == "maps" else merged).to_pandas()
    return frame.sort_values(_KEYS[table], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- compaction
def compact(root: str | os.PathLike, table: str, trial_id: str) -> str | None:
    """Merge ``trial_id``'s parts of ``table`` into its compacted file, then delete them;
    the compacted file's path, or None when there was nothing to compact."""
    merged, read = _merge(root, table, trial_id=trial_id)
    if not read or merged is None:
        return None
    out = write_part(
        compacted_path(root, table, trial_id), merged.sort_by([(k, "ascending") for k in _KEYS[table]])
    )
    for path in read:
        _delete(path)
    return out


def _delete(path: str) -> None:
    fs, p = file_system(path)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(p)


def compact_all(root: str | os.PathLike) -> int:
    """Compact every trial's remaining parts; how many (trial, table) pairs were compacted."""
    return sum(
        compact(root, table, trial_id) is not None
        for table in EPOCH_TABLES
        for trial_id in sorted({p.split("/")[-2] for p in list_table(root, table)[1]})
    )


class TableWriter:
    """Writes one trial's rows under a table root (only rank 0 should own one): a part per
    ``rows``, compacted every ``compact_every`` parts of a table and at ``close()``."""

    def __init__(self, root: str | os.PathLike, *, trial_id: str, compact_every: int = COMPACT_EVERY):
        self.root = root
        self.trial_id = trial_id
        self.compact_every = compact_every
        self._pending: dict[str, int] = {}

    def run(self, row: dict[str, Any]) -> str:
        return write_part(part_path(self.root, "runs", self.trial_id), [{"trial_id": self.trial_id, **row}])

    def rows(self, table: str, epoch: int, rows: Iterable[dict[str, Any]]) -> str | None:
        rows = [{"trial_id": self.trial_id, "epoch": epoch, **r} for r in rows]
        if not rows:
            return None
        data = encode_maps(rows) if table == "maps" else rows
        path = write_part(part_path(self.root, table, self.trial_id, epoch), data)
        if table not in self._pending:  # parts left by an earlier attempt count too
            self._pending[table] = len(list_table(self.root, table, trial_id=self.trial_id)[1])
        else:
            self._pending[table] += 1
        if self.compact_every and self._pending[table] >= self.compact_every:
            compact(self.root, table, self.trial_id)
            self._pending[table] = 0
        return path

    def close(self) -> None:
        for table in EPOCH_TABLES:
            compact(self.root, table, self.trial_id)
        self._pending.clear()
