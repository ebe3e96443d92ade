"""Result tables of a study (DESIGN §7): Parquet part files, append-only, per trial.

Layout under a table root (``<storage>/<study>/tables`` or ``study train --out DIR``)::

    runs/<trial_id>.parquet                one row, rewritten (atomically) as the trial runs
    epochs/<trial_id>/<epoch:05d>.parquet  one row per (trial, epoch)
    heads/<trial_id>/<epoch:05d>.parquet   one row per (trial, epoch, layer, head)
    maps/<trial_id>/<epoch:05d>.parquet    attention window per (trial, epoch, layer, head)

Every part is written to a temporary name in the same folder and renamed into
place, so readers never see a half-written file.  Because a part's name is its
key, a retried or resumed trial overwrites, never duplicates, (trial, epoch) rows.
DuckDB reads the tables directly: ``read_parquet('<root>/epochs/*/*.parquet')``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

TABLES = ("runs", "epochs", "heads", "maps")

#: Columns of each table (configuration columns of ``runs`` follow the model and
#: training configs and may grow; these are the ones every reader may rely on).
SCHEMA: dict[str, tuple[str, ...]] = {
    "runs": (
        "trial_id", "study", "name", "arch", "encoding", "isotropic", "num_heads", "pos_dim",
        "hidden", "layers", "lr", "weight_decay", "batch_size", "epochs", "warmup", "seed",
        "data", "status", "epochs_done", "n_params", "flops", "best_test_acc", "final_test_acc",
        "device_seconds", "device", "world_size", "attempts", "cell", "schedule", "subset", "updated_at",
        "error",
    ),
    "epochs": (
        "trial_id", "epoch", "train_loss", "train_acc", "test_loss", "test_acc", "lr",
        "seconds", "images_per_s", "head_stats_seconds",
    ),
    "heads": (
        "trial_id", "epoch", "layer", "head", "center_x", "center_y", "cov_xx", "cov_xy",
        "cov_yy", "entropy", "mean_distance", "max_prob",
        "param_center_x", "param_center_y", "param_inv_cov_xx", "param_inv_cov_xy", "param_inv_cov_yy",
    ),
    "maps": ("trial_id", "epoch", "layer", "head", "window", "probs"),
}

#: Trial states recorded in ``runs.status``: ``stopped`` is ASHA's early stop,
#: ``interrupted`` a study stopped by a signal or a storage failure (``study resume``
#: continues it), ``error`` a trial that failed (``runs.error`` holds the cause).
STATUSES = ("running", "finished", "diverged", "stopped", "interrupted", "error")


def _remote(root: str | os.PathLike) -> bool:
    return "://" in str(root)


def part_path(root: str | os.PathLike, table: str, trial_id: str, epoch: int | None = None) -> str:
    """Where a part lives: a local path or a URI (``s3://…``) under ``root``."""
    rel = f"runs/{trial_id}.parquet" if table == "runs" else f"{table}/{trial_id}/{epoch:05d}.parquet"
    if _remote(root):
        return f"{str(root).rstrip('/')}/{rel}"
    return str(Path(root) / rel)


def write_part(path: str | os.PathLike, rows: list[dict[str, Any]] | pa.Table) -> str:
    """Write ``rows`` to ``path`` atomically: locally a temporary file and a rename;
    on object storage a single PUT (objects appear whole)."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    if _remote(path):
        fs, p = pafs.FileSystem.from_uri(str(path))
        pq.write_table(table, p, filesystem=fs)
        return str(path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(path)


def read_table(root: str | os.PathLike, table: str) -> pd.DataFrame:
    """All parts of ``table`` under ``root`` as one DataFrame (empty if none yet).

    Temporary files (``.tmp-*``) are never read, so a reader running beside a
    writing study sees only whole parts."""
    import pyarrow.dataset as ds

    base = f"{str(root).rstrip('/')}/{table}"
    if _remote(base):
        fs, p = pafs.FileSystem.from_uri(base)
    else:
        fs, p = pafs.LocalFileSystem(), base
        if not Path(base).is_dir():
            return pd.DataFrame(columns=list(SCHEMA[table]))
    try:
        data = ds.dataset(p, filesystem=fs, format="parquet", ignore_prefixes=[".", "_"])
        # parts may disagree on a column's type (e.g. all-null in one trial): unify
        schemas = [f.physical_schema for f in data.get_fragments()]
        if schemas:
            schema = pa.unify_schemas(schemas, promote_options="permissive")
            data = ds.dataset(p, filesystem=fs, format="parquet", ignore_prefixes=[".", "_"], schema=schema)
        frame = data.to_table().to_pandas()
    except FileNotFoundError:
        return pd.DataFrame(columns=list(SCHEMA[table]))
    if frame.empty:
        return pd.DataFrame(columns=list(SCHEMA[table]))
    keys = ["trial_id"] + (["epoch"] if table != "runs" else []) + (["layer", "head"] if table in ("heads", "maps") else [])
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


class TableWriter:
    """Writes one trial's parts under a table root (only rank 0 should own one)."""

    def __init__(self, root: str | os.PathLike, *, trial_id: str):
        self.root = root
        self.trial_id = trial_id

    def run(self, row: dict[str, Any]) -> str:
        return write_part(part_path(self.root, "runs", self.trial_id), [{"trial_id": self.trial_id, **row}])

    def rows(self, table: str, epoch: int, rows: Iterable[dict[str, Any]]) -> str | None:
        rows = [{"trial_id": self.trial_id, "epoch": epoch, **r} for r in rows]
        if not rows:
            return None
        return write_part(part_path(self.root, table, self.trial_id, epoch), rows)
