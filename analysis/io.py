"""Open a study's tables: pandas frames and DuckDB SQL over the Parquet parts.

A study is found by name under a storage folder (``<storage>/<NAME>/tables``) or by
path: a study folder (``<dir>/tables``), a tables folder itself, or a
``study train --out`` folder.  Storage URIs (``s3://…``, ``file://…``) work too.

Only ``study.tables`` (pyarrow/pandas) is used from the study package: no torch,
no training code.  The layout and its invariants are ``study.tables``'s: each SQL view
reads the listed files of its table (locally DuckDB's ``read_parquet`` with
``union_by_name``; on object storage a pyarrow dataset), parts preferred over
compacted rows of the same (trial, epoch).  Temporary files (``.tmp-*``) are never
read; a foreign or damaged file is named in a :class:`study.tables.TableWarning` and
skipped (also when DuckDB only finds it damaged while querying); a part deleted by a
compaction after the listing makes the views be listed again; tables no trial has
written yet are empty (0 rows, the columns of :data:`study.tables.SCHEMA`), so a
study that is still running can be queried at any time.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from study.storage import default_storage, is_remote
from study.tables import SCHEMA, TABLES, list_table, read_table

if TYPE_CHECKING:  # imported where a DataFrame is built: `analysis query` never needs pandas
    import pandas as pd


#: DuckDB types of the guaranteed columns, used for tables with no part yet.
_TEXT = {"trial_id", "study", "name", "arch", "encoding", "data", "status", "device", "schedule", "error"}
_INT = {"num_heads", "pos_dim", "hidden", "layers", "batch_size", "epochs", "seed", "epochs_done",
        "n_params", "flops", "world_size", "attempts", "cell", "subset", "epoch", "layer", "head", "window"}
_TYPES = {"isotropic": "BOOLEAN", "probs": "DOUBLE[]"}


def _sql_type(column: str) -> str:
    if column in _TYPES:
        return _TYPES[column]
    return "VARCHAR" if column in _TEXT else "BIGINT" if column in _INT else "DOUBLE"


class AnalysisError(Exception):
    """A user-facing error (missing study, bad SQL, …): one line, exit status 2."""


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


def resolve(target: str, storage: str | None = None) -> tuple[str, str]:
    """``(tables_root, study_folder)`` for a study NAME under ``storage`` or a PATH.

    PATH may be a study folder (``<dir>/tables``), a ``study train --out`` folder
    (the same layout), or a tables folder (``runs/``, ``epochs/``, … inside)."""
    storage = storage or default_storage()
    target = str(target)
    candidates: list[str] = []
    if is_remote(target):
        candidates.append(target.rstrip("/"))
    else:
        if Path(target).is_dir():
            candidates.append(str(Path(target).resolve()))
        if target and "/" not in target and target not in (".", ".."):
            under = f"{storage.rstrip('/')}/{target}" if is_remote(storage) else str(Path(storage).resolve() / target)
            if under not in candidates:
                candidates.append(under)
    for c in candidates:
        if is_remote(c):
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
    if is_remote(target):
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
    _bad: set = field(default_factory=set, init=False, repr=False)

    @property
    def name(self) -> str:
        runs = self.runs
        if "study" in runs and runs["study"].notna().any() and str(runs["study"].dropna().iloc[0]):
            return str(runs["study"].dropna().iloc[0])
        base = self.folder.rstrip("/").rsplit("/", 1)[-1] if self.folder else ""
        return base or "study"

    @property
    def remote(self) -> bool:
        return is_remote(self.root)

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
            _confine(con, None if self.remote else self.root)
            for table in TABLES:
                self._view(con, table)
            self._con = con
        return self._con

    def _view(self, con, table: str) -> None:
        """``table`` as a view over its listed files: the parts, and the compacted rows
        of every (trial, epoch) no part holds (``study.tables`` invariants)."""
        listing = list_table(self.root, table, exclude=self._bad)
        sources = {}
        for kind, files in (("compacted", listing.compacted), ("parts", listing.parts)):
            if files:
                sources[kind] = f"_{table}_{kind}"
                self._source(con, sources[kind], files)
        if not sources:
            cols = ", ".join(f'CAST(NULL AS {_sql_type(c)}) AS "{c}"' for c in SCHEMA[table])
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT {cols} WHERE false")
            return
        if len(sources) == 1:
            body = f"SELECT * FROM {next(iter(sources.values()))}"
        else:
            c, p = sources["compacted"], sources["parts"]
            body = (f"SELECT * FROM {p} UNION ALL BY NAME SELECT c.* FROM {c} c ANTI JOIN "
                    f"(SELECT DISTINCT trial_id, epoch FROM {p}) k ON c.trial_id = k.trial_id AND c.epoch = k.epoch")
        if table == "maps":  # quantised windows back to probabilities
            cols = {r[0] for r in con.execute(f"DESCRIBE {body}").fetchall()}
            if "probs_q" in cols:
                decoded = 'list_transform(probs_q, lambda x: CAST(x AS DOUBLE) * probs_scale)'
                if "probs" in cols:
                    decoded = f"coalesce({decoded}, probs)"
                keep = "probs_q, probs_scale" + (", probs" if "probs" in cols else "")
                body = f"SELECT * EXCLUDE ({keep}), {decoded} AS probs FROM ({body})"
        con.execute(f"CREATE OR REPLACE VIEW {table} AS {body}")

    def _source(self, con, name: str, files: list[str]) -> None:
        """A view ``name`` over ``files``: DuckDB's Parquet reader locally, a pyarrow
        dataset on object storage (DuckDB's httpfs is an extension download)."""
        if self.remote:
            import pyarrow as pa
            import pyarrow.dataset as ds

            fs, paths, schemas = None, [], []
            for f in files:
                fs, path = _filesystem(f)
                try:
                    schemas.append(pq_schema(fs, path))
                except FileNotFoundError:
                    continue
                except Exception as exc:  # not Parquet: skip it, named
                    self._mark_bad(f, exc)
                    continue
                paths.append(path)
            if not paths:
                con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT NULL AS trial_id, NULL AS epoch WHERE false")
                return
            schema = pa.unify_schemas(schemas, promote_options="permissive")
            con.register(f"{name}_arrow", ds.dataset(paths, filesystem=fs, format="parquet", schema=schema))
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {name}_arrow")
            return
        quoted = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet([{quoted}], union_by_name=true)")

    def _mark_bad(self, path: str, exc: Exception) -> None:
        from study.tables import _skip

        self._bad.add(path)
        _skip(path, f"not readable Parquet ({_one_line(exc)})")

    def _recover(self, exc: Exception) -> bool:
        """After a DuckDB error naming one of the study's files: a file deleted by a
        compaction since the listing (list again) or a damaged one (skip it, named).
        True when the query is worth running again."""
        known = {}
        for table in TABLES:
            for f in list_table(self.root, table, exclude=self._bad).files:
                known[f.split("://", 1)[-1]] = f
                if not self.remote:
                    known[os.path.realpath(f)] = f
        text = str(exc)
        for groups in re.findall(r"'([^']+\.parquet)'|\"([^\"]+\.parquet)\"|(\S+\.parquet)", text):
            named = next(g for g in groups if g)
            path = known.get(named.split("://", 1)[-1]) or known.get(os.path.realpath(named) if not self.remote else "")
            if path is None:
                root = self.root.rstrip("/").split("://", 1)[-1]
                if named.split("://", 1)[-1].startswith(root if self.remote else os.path.realpath(root)):
                    self._rebuild()  # listed before, gone now: a compaction deleted it
                    return True
                continue
            if path in self._bad:
                return False
            self._mark_bad(path, exc)
            self._rebuild()
            return True
        return False

    def _rebuild(self) -> None:
        if self._con is not None:
            for table in TABLES:
                self._view(self._con, table)

    def _run(self, fn, query: str = ""):
        import duckdb

        for _ in range(50):
            try:
                return fn(self.connection())
            except duckdb.Error as exc:
                if not self._recover(exc):
                    raise AnalysisError(_sql_error(exc, query)) from None
        raise AnalysisError("tables kept changing while being queried; try again")

    def sql(self, query: str) -> pd.DataFrame:
        """Run ``query`` (DuckDB SQL over ``runs``, ``epochs``, ``heads``, ``maps``)."""
        import pandas as pd

        def go(con):
            _only_reads(con, query)
            result = con.sql(query)
            if result is None:  # a statement without a result (e.g. SET)
                return pd.DataFrame()
            return result.df()

        return self._run(go, query)

    def sql_records(self, query: str) -> tuple[list[str], list[tuple]]:
        """Column names and rows (tuples of plain Python values; lists for list columns)."""
        def go(con):
            _only_reads(con, query)
            result = con.sql(query)
            if result is None:
                return [], []
            table = result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.fetch_arrow_table()
            return table.column_names, list(zip(*(col.to_pylist() for col in table.columns)))

        return self._run(go, query)


#: statements a query may run: it reads the tables, never writes a file or changes settings.
#: SELECT covers WITH, FROM-first, DESCRIBE, SHOW, SUMMARIZE, VALUES, UNPIVOT; MULTI is
#: DuckDB's PIVOT (an in-memory enum type, then a SELECT); PRAGMA reads the catalogue
#: (``PRAGMA table_info('runs')``), and the pragmas that set options fail on the locked
#: configuration (:func:`_confine`)
READ_STATEMENTS = ("SELECT", "EXPLAIN", "MULTI", "PRAGMA")


def _confine(con, root: str | None) -> None:
    """Let SQL read only the study's tables: no other file (``read_csv('/etc/passwd')``),
    no network (``INSTALL``/``LOAD`` of extensions, ``http://`` URLs); settings are then
    locked, so a query cannot undo this.  ``root``: the local tables folder (None for a
    study on object storage, whose tables DuckDB scans through registered Arrow datasets)."""
    if root is not None:
        folder = str(root).rstrip("/") + "/"
        con.execute("SET allowed_directories = [" + "'" + folder.replace("'", "''") + "']")
    for setting in ("enable_external_access = false", "autoinstall_known_extensions = false",
                    "autoload_known_extensions = false", "lock_configuration = true"):
        con.execute(f"SET {setting}")


def _only_reads(con, query: str) -> None:
    """Refuse (one line) any statement but :data:`READ_STATEMENTS`: COPY ... TO, ATTACH, EXPORT
    DATABASE, CREATE, SET, INSTALL ... would write files, change the session or reach
    the network; ``analysis`` reads tables only."""
    import duckdb

    try:
        statements = con.extract_statements(query)
    except duckdb.Error:
        return  # a syntax error: the query itself reports it, with its hint
    for st in statements:
        kind = getattr(st.type, "name", str(st.type))
        if kind not in READ_STATEMENTS:
            raise AnalysisError("only reading queries are run (SELECT, EXPLAIN, PIVOT, PRAGMA; the tables are "
                                f"never written): refusing {kind} statement")


def _filesystem(uri: str):
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(uri)


def pq_schema(fs, path: str):
    """The Arrow schema of one Parquet file (reads its footer)."""
    import pyarrow.parquet as pq

    return pq.read_schema(path, filesystem=fs)


def load(target: str | os.PathLike, storage: str | None = None) -> Study:
    """Open a study by NAME (under ``storage``, default ``$STUDY_STORAGE`` or ``./results``) or PATH (a study
    folder, its ``tables`` folder, or a ``study train --out`` folder; local or a URI).

    >>> s = load("results/smoke")            # doctest: +SKIP
    >>> s.epochs.groupby("trial_id").test_acc.max()
    >>> s.sql("SELECT name, best_test_acc FROM runs ORDER BY 2 DESC")
    """
    root, folder = resolve(str(target), storage)
    return Study(root=root, folder=folder)
