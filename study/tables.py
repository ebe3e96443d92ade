"""Result tables of a study (docs/design.md §8; layout and readers: docs/results.md):
Parquet files per trial, compacted as it runs.

Layout under a table root (``<storage>/<study>/tables`` or ``study train --out DIR``)::

    runs/<trial_id>.parquet                       one row, rewritten (atomically) as the trial runs
    <table>/<trial_id>/<epoch:05d>.parquet        a *part*: one epoch's rows, written as the epoch ends
    <table>/<trial_id>/compacted.parquet          the trial's compacted epochs (one file per trial and table)

for ``<table>`` in ``epochs`` (one row per (trial, epoch)), ``heads`` (one row per
(trial, epoch, layer, head), every epoch) and ``maps`` (the attention window per
(trial, epoch, layer, head), only at the epochs of the trial's map schedule, see
:func:`map_epochs`).  ``epoch`` is 0-based: the row of epoch e holds the state after
e + 1 epochs of training.  ``heads`` and ``maps`` also hold the untrained model, at
``epoch`` = :data:`INIT_EPOCH` (−1, part ``-0001.parquet``), written once before the
first training step (and again, identical, by an attempt that restarts from
scratch: the same part, overwritten); ``epochs`` has rows of trained epochs only.

``heads`` columns: ``attention_distance`` / ``attention_entropy`` are the grid locality
(the attention-weighted distance between query and key tokens, grid cells, and the
attention's entropy, nats, averaged over every query token of the head-statistics test
images on the real grid: one measure for every encoding); ``center_*``, ``cov_*``,
``entropy``, ``mean_distance`` and ``max_prob`` are the canvas (centre-query) moments
(see :mod:`study.trial.headstats`).  Studies written before ``attention_distance``
existed lack it (and the init rows): readers fall back to ``mean_distance`` and say so.

Compaction: every :data:`COMPACT_EVERY` parts of a table, and when the trial ends
(:meth:`TableWriter.close`; ``study run`` also compacts every trial once the study
ends), the trial's parts and its compacted file are merged into a new
``compacted.parquet``, which replaces the old one in one step, and only then are
the merged parts deleted.  A finished study therefore holds one file per (trial,
table): O(trials) files, whatever the number of epochs.

Invariants (what readers may rely on):

* **Whole files only.**  Locally every file is written to a temporary name
  (``.tmp-*``, never read) in its folder and renamed into place.  On object storage
  an object becomes visible only when its upload completes (a single PUT or a
  completed multipart upload), and an overwrite replaces the object for readers at
  once; there is no rename, so no temporary object is made.
* **One row per key.**  A part's name is its (trial, epoch), so a retried or
  resumed trial overwrites, never adds, the part of an epoch it trains again.  A
  part and the compacted file may both hold an epoch (a part written after the
  last compaction by a retried trial, or a part whose deletion a crash prevented):
  readers take a (trial, epoch) from its part when there is one, else from the
  compacted file — the part is never older than the compacted copy of its epoch.
* **Live reads.**  A reader lists the files, then reads them; a part deleted by a
  compaction in between is noticed (file not found) and the listing is taken again.
* **Foreign or damaged files are skipped.**  A file in a table's folder that is not
  a part, a compacted file or a temporary file, or that is not readable Parquet, is
  named in a :class:`TableWarning` and skipped; every other row stays readable.

Maps are stored compactly: ``probs_q`` (uint16) and ``probs_scale`` (float64) with
``probs = probs_q * probs_scale`` (scale = the window's maximum / 65535, so every
probability is within ``probs_scale / 2`` of the computed one); readers
(:func:`read_table`, ``analysis``) return ``probs`` as float64 arrays.

DuckDB reads the same files (``analysis.io``: ``read_parquet`` over the listed files
with ``union_by_name``, parts preferred over compacted rows by an anti-join).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from study.atomicio import write_atomic
from study.errors import UsageError
from study.storage import is_remote

if TYPE_CHECKING:  # pandas is imported where a DataFrame is built: `analysis query` never needs it
    import pandas as pd

TABLES = ("runs", "epochs", "heads", "maps")
EPOCH_TABLES = ("epochs", "heads", "maps")

#: Columns of each table (configuration columns of ``runs`` follow the model and
#: training configs and may grow; these are the ones every reader may rely on).
SCHEMA: dict[str, tuple[str, ...]] = {
    "runs": (
        "trial_id", "study", "name", "arch", "encoding", "isotropic", "num_heads", "pos_dim",
        "hidden", "layers", "lr", "weight_decay", "batch_size", "epochs", "warmup", "seed",
        "data", "status", "epochs_done", "n_params", "flops", "best_test_acc", "final_test_acc",
        "device_seconds", "device", "world_size", "attempts", "cell", "schedule", "subset", "updated_at",
        "momentum", "intermediate", "dropout", "attention_dropout", "validation", "data_source",
        "n_train", "n_val", "n_test", "best_val_acc", "final_val_acc",
        "error",
        # the training protocol (study.trial.protocol; all off in a study written before it)
        "cutmix_alpha", "mixup_alpha", "randaugment_ops", "randaugment_magnitude", "autoaugment",
        "label_smoothing",
    ),
    "epochs": (
        "trial_id", "epoch", "train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc", "lr",
        "seconds", "images_per_s", "head_stats_seconds",
    ),
    "heads": (
        "trial_id", "epoch", "layer", "head", "center_x", "center_y", "cov_xx", "cov_xy",
        "cov_yy", "entropy", "mean_distance", "max_prob", "attention_distance", "attention_entropy",
        "param_center_x", "param_center_y", "param_inv_cov_xx", "param_inv_cov_xy", "param_inv_cov_yy",
        "gate",
    ),
    "maps": ("trial_id", "epoch", "layer", "head", "window", "probs"),
}

#: Trial states recorded in ``runs.status``: ``stopped`` is ASHA's early stop,
#: ``interrupted`` a study stopped by a signal or a storage failure (``study resume``
#: continues it), ``error`` a trial that failed (``runs.error`` holds the cause).
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
    """Warn once per process about a skipped file."""
    if path not in _warned:
        _warned.add(path)
        warnings.warn(f"skipped {path}: {why}", TableWarning, stacklevel=3)


def warnings_as_lines(prog: str) -> None:
    """Show :class:`TableWarning` as one line ``PROG: warning: …`` on stderr."""
    import sys

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, TableWarning):
            print(f"{prog}: warning: {message}", file=sys.stderr, flush=True)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.simplefilter("always", TableWarning)


def _join(root: str | os.PathLike, rel: str) -> str:
    if is_remote(root):
        return f"{str(root).rstrip('/')}/{rel}"
    return str(Path(root) / rel)


def part_path(root: str | os.PathLike, table: str, trial_id: str, epoch: int | None = None) -> str:
    """Where a part lives: a local path or a URI (``s3://…``) under ``root``."""
    rel = f"runs/{trial_id}.parquet" if table == "runs" else f"{table}/{trial_id}/{epoch:05d}.parquet"
    return _join(root, rel)


def compacted_path(root: str | os.PathLike, table: str, trial_id: str) -> str:
    return _join(root, f"{table}/{trial_id}/{COMPACTED}")


def _fs(path: str) -> tuple[pafs.FileSystem, str]:
    if is_remote(path):
        return pafs.FileSystem.from_uri(str(path))
    return pafs.LocalFileSystem(), str(path)


def write_part(path: str | os.PathLike, rows: list[dict[str, Any]] | pa.Table) -> str:
    """Write ``rows`` to ``path`` so that readers only ever see the whole file: locally
    a temporary file and a rename; on object storage one upload (PUT or multipart),
    which becomes visible only once complete."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    return write_atomic(path, lambda f: pq.write_table(table, f), suffix=".parquet")


# --------------------------------------------------------------------------- maps
def encode_maps(rows: list[dict[str, Any]]) -> pa.Table:
    """``maps`` rows with ``probs`` (floats) → a table with ``probs_q`` (uint16) and
    ``probs_scale`` (``probs ≈ probs_q * probs_scale``, error ≤ probs_scale / 2)."""
    out = []
    for r in rows:
        r = dict(r)
        p = np.clip(np.asarray(r.pop("probs"), dtype=np.float64), 0.0, None)
        top = float(p.max()) if p.size else 0.0
        scale = top / _Q_MAX if top > 0 and math.isfinite(top) else 1.0
        r["probs_q"] = np.rint(np.nan_to_num(p / scale)).astype(np.uint16)
        r["probs_scale"] = scale
        out.append(r)
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "probs_q"} for r in out])
    q = pa.array([r["probs_q"] for r in out], type=pa.list_(pa.uint16()))
    return table.append_column("probs_q", q)


def decode_maps(table: pa.Table) -> pa.Table:
    """Inverse of :func:`encode_maps`: ``probs`` as float64 lists (tables written before
    maps were quantised already hold ``probs`` and pass through)."""
    import pyarrow.compute as pc  # lazily: 0.2-0.4 s of every command's start-up
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


def map_epochs(schedule: str | Iterable[int], epochs: int) -> list[int]:
    """The 0-based epochs at which a trial of ``epochs`` epochs stores attention maps.

    ``"auto"`` (the default): the first ten epochs, ten more spaced evenly on a log
    scale up to the last, and the last (≤ 21 epochs: 21 of 300); ``"all"``; ``"last"``;
    ``"none"``; or an explicit list of epochs.  Head statistics are stored every epoch
    regardless."""
    if isinstance(schedule, str):
        if schedule == "all":
            return list(range(epochs))
        if schedule == "none":
            return []
        if schedule == "last":
            return [epochs - 1]
        if schedule == "auto":
            first = set(range(min(10, epochs)))
            if epochs > 10:
                first |= {int(round(x)) for x in np.geomspace(10, epochs - 1, num=10)}
            return sorted(first | {epochs - 1})
        raise ValueError(f"unknown map schedule {schedule!r} (auto, all, last, none or a list of epochs)")
    return sorted({int(e) for e in schedule if 0 <= int(e) < epochs})


# --------------------------------------------------------------------------- listing
@dataclass
class Listing:
    """The readable files of one table: compacted files and parts (paths or URIs)."""

    compacted: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return self.compacted + self.parts


class LinkOutError(UsageError, ValueError):
    """A link in a study's tables folder that leads out of the study (or loops): one line,
    exit 2 (a :class:`~study.errors.UsageError`)."""


def check_links(tables: str | os.PathLike) -> None:
    """Refuse (:class:`LinkOutError`) a symbolic link to a folder under a local ``tables``
    folder that leads out of the study folder (its parent) or back to a folder it is in.
    A link to a file is not refused here: the listing takes it as one file (a device,
    FIFO or unreadable target is a damaged part, skipped with a warning).  The walk
    never follows a link, so a link to ``/`` costs one ``readlink``, not a walk of the disk
    (pyarrow's recursive listing follows them)."""
    if "://" in str(tables):
        return
    base = Path(tables)
    if not base.is_dir():
        return
    study = base.resolve().parent
    for folder, dirs, files in os.walk(base, followlinks=False):
        for name in dirs + files:
            path = Path(folder, name)
            if not path.is_symlink():
                continue
            target = path.resolve()
            if not target.is_dir():
                continue  # a file's link is listed like any file (never a walk): a damaged part at worst
            if not target.is_relative_to(study):
                raise LinkOutError(f"{path}: a link out of the study (to {target}); a study's tables are its own "
                                   "files: replace the link by the files or remove it")
            if path.parent.resolve().is_relative_to(target):
                raise LinkOutError(f"{path}: a link to a folder it is in (to {target}): the tables would never end")


def list_table(root: str | os.PathLike, table: str, *, trial_id: str | None = None,
               exclude: Iterable[str] = ()) -> Listing:
    """List ``table``'s files under ``root`` (one trial's with ``trial_id``).  Temporary
    files are ignored; foreign files are skipped with a :class:`TableWarning`."""
    base = _join(root, table if trial_id is None else f"{table}/{trial_id}")
    check_links(root)
    fs, p = _fs(base)
    try:
        infos = fs.get_file_info(pafs.FileSelector(p, recursive=True, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return Listing()
    exclude = set(exclude)
    out = Listing()
    prefix = base.rstrip("/")
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(p.rstrip("/")) + 1:] if info.path.startswith(p.rstrip("/")) else info.base_name
        parts = rel.split("/")
        full = f"{prefix}/{rel}"
        if any(x.startswith(SKIPPED_PREFIXES) for x in parts):
            continue  # a write in progress (``.tmp-*``) or hidden bookkeeping
        if full in exclude:
            continue
        if table == "runs":
            if trial_id is None and len(parts) == 1 and rel.endswith(".parquet"):
                out.parts.append(full)
                continue
        else:
            depth = 1 if trial_id is not None else 2
            if len(parts) == depth and parts[-1] == COMPACTED:
                out.compacted.append(full)
                continue
            if len(parts) == depth and _PART.match(parts[-1]):
                out.parts.append(full)
                continue
        _skip(full, f"not a file of the {table} table")
    return out


def _read_file(path: str) -> pa.Table:
    """One file, read through one open handle: a compacted file replaced meanwhile is
    read whole, old or new (``pq.read_table(path)`` opens it twice, footer and pages)."""
    fs, p = _fs(path)
    with fs.open_input_file(p) as f:
        return pq.ParquetFile(f).read()


def _vanished(path: str) -> bool:
    fs, p = _fs(path)
    try:
        return fs.get_file_info(p).type == pafs.FileType.NotFound
    except OSError:
        return False


def _read_all(root, table: str, *, trial_id: str | None = None) -> tuple[list[pa.Table], list[pa.Table], Listing]:
    """(compacted tables, part tables, listing); unreadable files are skipped (warned).

    Parts are read before compacted files, so a part a compaction deletes between the
    listing and its read needs no retry: the compaction wrote the trial's compacted
    file (holding the part's rows) before deleting it, and that file is read after."""
    listing = list_table(root, table, trial_id=trial_id)
    compacted_paths, parts, kept = list(listing.compacted), [], []
    for path in listing.parts:
        try:
            parts.append(_read_file(path))
            kept.append(path)
        except (FileNotFoundError, OSError, pa.ArrowException) as exc:
            if isinstance(exc, FileNotFoundError) or _vanished(path):
                if table != "runs":  # compacted since the listing: its rows are in the compacted file
                    c = _join(root, f"{table}/{path.rstrip('/').split('/')[-2]}/{COMPACTED}")
                    if c not in compacted_paths:
                        compacted_paths.append(c)
                continue
            _skip(path, f"not readable Parquet ({' '.join(str(exc).split())})")
    compacted, kept_compacted = [], []
    for path in compacted_paths:
        try:
            compacted.append(_read_file(path))
            kept_compacted.append(path)
        except (FileNotFoundError, OSError, pa.ArrowException) as exc:
            if isinstance(exc, FileNotFoundError) or _vanished(path):
                continue
            _skip(path, f"not readable Parquet ({' '.join(str(exc).split())})")
    return compacted, parts, Listing(compacted=kept_compacted, parts=kept)


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def _merge(compacted: list[pa.Table], parts: list[pa.Table], table: str) -> pa.Table | None:
    """Rows of the parts, and of the compacted files for every (trial, epoch) no part holds."""
    if table == "maps":
        compacted, parts = [decode_maps(t) for t in compacted], [decode_maps(t) for t in parts]
    old, new = _concat(compacted), _concat(parts)
    if old is None or new is None or table == "runs":
        return _concat([t for t in (old, new) if t is not None])
    return _concat([_without(old, new), new])


def _epoch_keys(t: pa.Table) -> pa.Array:
    import pyarrow.compute as pc  # lazily: 0.2-0.4 s of every command's start-up
    return pc.binary_join_element_wise(pc.cast(t.column("trial_id"), pa.string()),
                                       pc.cast(t.column("epoch"), pa.string()), "\x00")


def _without(old: pa.Table, new: pa.Table) -> pa.Table:
    """Rows of ``old`` whose (trial, epoch) ``new`` does not hold."""
    import pyarrow.compute as pc  # lazily: 0.2-0.4 s of every command's start-up
    return old.filter(pc.invert(pc.is_in(_epoch_keys(old), value_set=pc.unique(_epoch_keys(new)))))


def _keys(table: str) -> list[str]:
    return ["trial_id"] + (["epoch"] if table != "runs" else []) + (["layer", "head"] if table in ("heads", "maps") else [])


def read_table(root: str | os.PathLike, table: str) -> pd.DataFrame:
    """All rows of ``table`` under ``root`` as one DataFrame (empty if none yet): each
    key once, temporary files never read, foreign or damaged files skipped with a
    :class:`TableWarning`; ``maps.probs`` decoded to float64 arrays."""
    import pandas as pd

    compacted, parts, _ = _read_all(root, table)
    merged = _merge(compacted, parts, table)
    if merged is None or merged.num_rows == 0:
        return pd.DataFrame(columns=list(SCHEMA[table]))
    frame = merged.to_pandas()
    return frame.sort_values(_keys(table), kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- compaction
def compact(root: str | os.PathLike, table: str, trial_id: str) -> str | None:
    """Merge ``trial_id``'s parts of ``table`` into its compacted file, then delete them.

    The new compacted file replaces the old one in one step before any part is
    deleted; a crash in between leaves parts that duplicate compacted rows, which
    readers resolve (a part wins, with the same content).  Returns the compacted
    file's path, or None when there was nothing to compact."""
    compacted, parts, listing = _read_all(root, table, trial_id=trial_id)
    if not listing.parts:
        return None
    old, new = _concat(compacted), _concat(parts)
    if old is not None and new is not None:
        old = _without(old, new)
    merged = _concat([t for t in (old, new) if t is not None])
    if merged is None:
        return None
    merged = merged.sort_by([(k, "ascending") for k in _keys(table)])
    out = write_part(compacted_path(root, table, trial_id), merged)
    for path in listing.parts:
        _delete(path)
    return out


def _delete(path: str) -> None:
    fs, p = _fs(path)
    try:
        fs.delete_file(p)
    except FileNotFoundError:
        pass


def trials_with_parts(root: str | os.PathLike, table: str) -> list[str]:
    """Trials that have parts of ``table`` not compacted yet."""
    listing = list_table(root, table)
    return sorted({p.rstrip("/").split("/")[-2] for p in listing.parts})


def compact_all(root: str | os.PathLike) -> int:
    """Compact every trial's remaining parts (e.g. when a study ends); returns how many
    (trial, table) pairs were compacted."""
    n = 0
    for table in EPOCH_TABLES:
        for trial_id in trials_with_parts(root, table):
            n += compact(root, table, trial_id) is not None
    return n


class TableWriter:
    """Writes one trial's rows under a table root (only rank 0 should own one).

    ``rows(table, epoch, rows)`` writes one part; every ``compact_every`` parts of a
    table the trial's parts are compacted; ``close()`` compacts what is left."""

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
            self._pending[table] = len(list_table(self.root, table, trial_id=self.trial_id).parts)
        else:
            self._pending[table] += 1
        if self.compact_every and self._pending[table] >= self.compact_every:
            self.compact(table)
        return path

    def compact(self, table: str | None = None) -> None:
        for t in [table] if table else EPOCH_TABLES:
            compact(self.root, t, self.trial_id)
            self._pending[t] = 0

    def close(self) -> None:
        """Compact every table of this trial (the trial ended)."""
        self.compact()
