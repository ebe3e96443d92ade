"""Open a study's tables: pandas frames and DuckDB SQL over the Parquet parts.

A study is found by name under a storage folder (``<storage>/<NAME>/tables``) or by
path: a study folder (``<dir>/tables``), a tables folder itself, or a
``study train --out`` folder.  Storage URIs (``s3://…``, ``file://…``) work too.

Only ``study.tables`` (pyarrow/pandas) is used from the study package: no torch,
no training code.  Temporary parts (``.tmp-*``) are never read, and tables no trial
has written yet are empty (0 rows, the columns of :data:`study.tables.SCHEMA`), so a
study that is still running can be queried at any time.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from study.tables import SCHEMA, TABLES, read_table

DEFAULT_STORAGE = "results"

#: DuckDB types of the guaranteed columns, used for tables with no part yet.
_TEXT = {"trial_id", "study", "name", "arch", "encoding", "data", "status", "device", "schedule"}
_INT = {"num_heads", "pos_dim", "hidden", "layers", "batch_size", "epochs", "seed", "epochs_done",
        "n_params", "flops", "world_size", "attempts", "cell", "subset", "epoch", "layer", "head", "window"}
_TYPES = {"isotropic": "BOOLEAN", "probs": "DOUBLE[]"}


def _sql_type(column: str) -> str:
    if column in _TYPES:
        return _TYPES[column]
    return "VARCHAR" if column in _TEXT else "BIGINT" if column in _INT else "DOUBLE"


class AnalysisError(Exception):
    """A user-facing error (missing study, bad SQL, …): one line, exit status 2."""


def _remote(path: str) -> bool:
    return "://" in path


def _one_line(message: str) -> str:
    """DuckDB messages span lines (a ``LINE 1:`` excerpt, a caret): keep the words."""
    lines = [ln.strip() for ln in str(message).splitlines()]
    keep = [ln for ln in lines if ln and not ln.startswith("LINE ") and set(ln) != {"^"}]
    return " ".join(keep) or "unknown error"


#: Columns whose names are reserved SQL keywords in DuckDB: they must be quoted.
KEYWORD_COLUMNS = ("window",)


def _sql_error(exc: Exception, query: str = "") -> str:
    """One line for a DuckDB error; an unknown table names the tables there are; a
    syntax error near an unquoted keyword column says how to quote it."""
    import re

    text = _one_line(exc)
    m = re.search(r"Table with name (\S+) does not exist", text)
    if m:
        return f"unknown table {m.group(1)} (tables: {', '.join(TABLES)})"
    if "syntax error" in text.lower():
        unquoted = [c for c in KEYWORD_COLUMNS if re.search(rf'(?<!["\w]){c}(?!["\w])', query, re.IGNORECASE)]
        if unquoted:
            c = unquoted[0]
            return (f'{text} (hint: {c} is an SQL keyword; write the column in double quotes, "{c}", '
                    f'e.g. SELECT "{c}" FROM maps)')
    return text


def _remote_kind(uri: str) -> str | None:
    """'study' / 'tables' / None for a storage URI."""
    import pyarrow.fs as pafs

    try:
        fs, p = pafs.FileSystem.from_uri(uri)
        infos = fs.get_file_info([f"{p}/tables"] + [f"{p}/{t}" for t in TABLES] + [f"{p}/study.json"])
    except Exception as exc:  # bad scheme, no credentials, …
        raise AnalysisError(f"cannot open {uri}: {_one_line(exc)}") from None
    is_dir = [i.type == pafs.FileType.Directory for i in infos]
    if is_dir[0]:
        return "study"
    if any(is_dir[1:1 + len(TABLES)]):
        return "tables"
    if infos[-1].type == pafs.FileType.File:
        return "study"
    return None


def resolve(target: str, storage: str = DEFAULT_STORAGE) -> tuple[str, str]:
    """``(tables_root, study_folder)`` for a study NAME under ``storage`` or a PATH.

    PATH may be a study folder (``<dir>/tables``), a ``study train --out`` folder
    (the same layout), or a tables folder (``runs/``, ``epochs/``, … inside)."""
    target = str(target)
    candidates: list[str] = []
    if _remote(target):
        candidates.append(target.rstrip("/"))
    else:
        if Path(target).is_dir():
            candidates.append(str(Path(target).resolve()))
        if target and "/" not in target and target not in (".", ".."):
            under = f"{storage.rstrip('/')}/{target}" if _remote(storage) else str(Path(storage).resolve() / target)
            if under not in candidates:
                candidates.append(under)
    for c in candidates:
        if _remote(c):
            kind = _remote_kind(c)
            if kind == "study":
                return f"{c}/tables", c
            if kind == "tables":
                return c, c.rsplit("/", 1)[0]
            continue
        p = Path(c)
        if (p / "tables").is_dir() or (p / "study.json").is_file() or (p / "study.yaml").is_file():
            return str(p / "tables"), str(p)
        if any((p / t).is_dir() for t in TABLES):
            return str(p), str(p.parent)
    if _remote(target):
        raise AnalysisError(f"no study tables at {target}")
    if Path(target).is_dir():
        raise AnalysisError(f"{target} is not a study folder (no tables/, runs/ or epochs/ inside)")
    raise AnalysisError(f"no study {target!r} in {storage} (and no folder {target})")


@dataclass
class Study:
    """The tables of one study.

    ``runs``, ``epochs``, ``heads``, ``maps``: pandas DataFrames (read once, on first
    use); ``sql(query)``: a DuckDB query over the same tables, as a DataFrame.  On a
    running study, ``refresh()`` makes both see the parts written since."""

    root: str
    folder: str = ""
    _con: object = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        runs = self.runs
        if "study" in runs and runs["study"].notna().any() and str(runs["study"].dropna().iloc[0]):
            return str(runs["study"].dropna().iloc[0])
        base = self.folder.rstrip("/").rsplit("/", 1)[-1] if self.folder else ""
        return base or "study"

    @property
    def remote(self) -> bool:
        return _remote(self.root)

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise AnalysisError(f"unknown table {name!r} (tables: {', '.join(TABLES)})")
        return getattr(self, name)

    @cached_property
    def runs(self) -> pd.DataFrame:
        return read_table(self.root, "runs")

    @cached_property
    def epochs(self) -> pd.DataFrame:
        return read_table(self.root, "epochs")

    @cached_property
    def heads(self) -> pd.DataFrame:
        return read_table(self.root, "heads")

    @cached_property
    def maps(self) -> pd.DataFrame:
        return read_table(self.root, "maps")

    def refresh(self) -> "Study":
        """Forget what was read: the next access reads the tables again."""
        for name in TABLES:
            self.__dict__.pop(name, None)
        if self._con is not None:
            self._con.close()
            self._con = None
        return self

    # -- SQL ---------------------------------------------------------------------------
    def connection(self):
        """A DuckDB connection with one view per table (created on first use)."""
        if self._con is None:
            import duckdb

            con = duckdb.connect()
            for table in TABLES:
                self._view(con, table)
            self._con = con
        return self._con

    def _view(self, con, table: str) -> None:
        if self.remote:
            dataset = _arrow_dataset(self.root, table)
            if dataset is not None:
                con.register(f"_{table}_parts", dataset)
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM _{table}_parts")
                return
        else:
            pattern = f"{table}/[!.]*.parquet" if table == "runs" else f"{table}/*/[!.]*.parquet"
            # Python's glob, like the pattern, never matches ``.tmp-*`` parts
            if glob.glob(os.path.join(glob.escape(self.root), pattern)):
                path = os.path.join(self.root, pattern).replace("'", "''")
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM "
                            f"read_parquet('{path}', union_by_name=true)")
                return
        cols = ", ".join(f'CAST(NULL AS {_sql_type(c)}) AS "{c}"' for c in SCHEMA[table])
        con.execute(f"CREATE VIEW {table} AS SELECT {cols} WHERE false")

    def sql(self, query: str) -> pd.DataFrame:
        """Run ``query`` (DuckDB SQL over ``runs``, ``epochs``, ``heads``, ``maps``)."""
        import duckdb

        try:
            result = self.connection().sql(query)
            if result is None:  # a statement without a result (e.g. SET)
                return pd.DataFrame()
            return result.df()
        except duckdb.Error as exc:
            raise AnalysisError(_sql_error(exc, query)) from None

    def sql_records(self, query: str) -> tuple[list[str], list[tuple]]:
        """Column names and rows (tuples of plain Python values; lists for list columns)."""
        import duckdb

        try:
            result = self.connection().sql(query)
            if result is None:
                return [], []
            table = result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.fetch_arrow_table()
        except duckdb.Error as exc:
            raise AnalysisError(_sql_error(exc, query)) from None
        return table.column_names, list(zip(*(col.to_pylist() for col in table.columns)))


def _arrow_dataset(root: str, table: str):
    """A pyarrow dataset of ``table``'s parts on object storage (schemas unified),
    or None when no part exists yet."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    fs, p = pafs.FileSystem.from_uri(f"{root.rstrip('/')}/{table}")
    try:
        data = ds.dataset(p, filesystem=fs, format="parquet", ignore_prefixes=[".", "_"])
        schemas = [f.physical_schema for f in data.get_fragments()]
    except FileNotFoundError:
        return None
    if not schemas:
        return None
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    return ds.dataset(p, filesystem=fs, format="parquet", ignore_prefixes=[".", "_"], schema=schema)


def load(target: str | os.PathLike, storage: str = DEFAULT_STORAGE) -> Study:
    """Open a study by NAME (under ``storage``, default ``./results``) or PATH (a study
    folder, its ``tables`` folder, or a ``study train --out`` folder; local or a URI).

    >>> s = load("results/smoke")            # doctest: +SKIP
    >>> s.epochs.groupby("trial_id").test_acc.max()
    >>> s.sql("SELECT name, best_test_acc FROM runs ORDER BY 2 DESC")
    """
    root, folder = resolve(str(target), storage)
    return Study(root=root, folder=folder)
