"""Open a study's tables: pandas frames and DuckDB SQL over the Parquet parts.

Readers' guarantees (live reads, skipped files, read-only SQL): docs/results.md,
"The results store (`study/results/tables.py`)" and "Queries".
"""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from study.limits import MAX_QUERY_ROWS
from study.results.columns import COLUMNS
from study.results.filesystem import file_system, is_remote, local_path_problem
from study.results.storage import default_storage, study_root
from study.results.tables import (
    SCHEMA,
    TABLES,
    LinkOutError,
    check_links,
    read_file,
    read_parts,
    read_table,
)

if TYPE_CHECKING:  # imported where a DataFrame is built: `analysis query` never needs pandas
    import pandas as pd


#: DuckDB types of the documented column types (:mod:`study.results.columns`; others DOUBLE),
#: used for tables with no part yet.
_SQL_TYPES = {"text": "VARCHAR", "int": "BIGINT", "bool": "BOOLEAN", "list<float>": "DOUBLE[]"}


class AnalysisError(Exception):
    """A user-facing error (missing study, bad SQL, …): one line, exit status 2."""


def check_table(name: str) -> None:
    if name not in TABLES:
        raise AnalysisError(f"unknown table {name!r} (tables: {', '.join(TABLES)})")


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
    text = _one_line(exc)
    m = re.search(r"Table with name (\S+) does not exist", text)
    if m:
        return f"unknown table {m.group(1)} (tables: {', '.join(TABLES)})"
    if "syntax error" in text.lower():
        for c in KEYWORD_COLUMNS:
            if re.search(rf'(?<!["\w]){c}(?!["\w])', query, re.IGNORECASE):
                return (
                    f'{text} (hint: {c} is an SQL keyword; write the column in double quotes, "{c}", '
                    f'e.g. SELECT "{c}" FROM maps)'
                )
    return text


def _kind(folder: str) -> str | None:
    """'study' / 'tables' / None for a local folder or a storage URI."""
    import pyarrow.fs as pafs

    try:
        fs, p = file_system(folder)
        infos = fs.get_file_info([f"{p}/{name}" for name in ("tables", *TABLES, "study.json", "study.yaml")])
    except Exception as exc:  # bad scheme, no credentials, …
        raise AnalysisError(f"cannot open {folder}: {_one_line(exc)}") from None
    if infos[0].type == pafs.FileType.Directory or any(i.type == pafs.FileType.File for i in infos[-2:]):
        return "study"
    return "tables" if any(i.type == pafs.FileType.Directory for i in infos[1:-2]) else None


def resolve(target: str, storage: str | None = None) -> tuple[str, str]:
    """``(tables_root, study_folder)`` for a study NAME under ``storage`` or a PATH:
    a study folder, a ``study train --out`` folder or a tables folder."""
    storage = storage or default_storage()
    target = str(target)
    if is_remote(target):
        candidates = [target.rstrip("/")]
    elif why := local_path_problem(target):
        raise AnalysisError(f"study {target[:60]!r}: {why}")
    else:
        candidates = [str(Path(target).resolve())] if Path(target).is_dir() else []
        if target and "/" not in target and target not in (".", ".."):
            candidates.append(study_root(storage, target))
    for c in dict.fromkeys(candidates):
        kind = _kind(c)
        if kind == "study":
            return f"{c}/tables", c
        if kind == "tables":
            return c, c.rsplit("/", 1)[0]
    if is_remote(target):
        raise AnalysisError(f"no study tables at {target}")
    if Path(target).is_dir():
        raise AnalysisError(f"{target} is not a study folder (no tables/, runs/ or epochs/ inside)")
    raise AnalysisError(f"no study {target!r} in {storage} (and no folder {target})")


@dataclass
class Study:
    """The tables of one study: ``runs``, ``epochs``, ``heads``, ``maps`` as pandas
    DataFrames (read once), ``sql(query)`` over the same; ``refresh()`` sees new parts."""

    root: str
    folder: str = ""
    _con: object = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        studies = self.runs["study"].dropna() if "study" in self.runs else ()
        if len(studies) and str(studies.iloc[0]):
            return str(studies.iloc[0])
        return self.folder.rstrip("/").rsplit("/", 1)[-1] or "study"

    @property
    def remote(self) -> bool:
        return is_remote(self.root)

    def table(self, name: str) -> pd.DataFrame:
        check_table(name)
        return getattr(self, name)

    runs = cached_property(lambda self: read_table(self.root, "runs"))
    epochs = cached_property(lambda self: read_table(self.root, "epochs"))
    heads = cached_property(lambda self: read_table(self.root, "heads"))
    maps = cached_property(lambda self: read_table(self.root, "maps"))

    def refresh(self) -> Study:
        """Forget what was read: the next access reads the tables again."""
        for name in TABLES:
            self.__dict__.pop(name, None)
        if self._con is not None:
            self._con.close()
            self._con = None
        return self

    # -- SQL ---------------------------------------------------------------------------
    def connection(self):
        """A DuckDB connection with one view per table, confined by :data:`CONFINEMENT`."""
        if self._con is None:
            import duckdb

            con = duckdb.connect()
            for name, value in CONFINEMENT:
                con.execute(f"SET {name} = {value}")
            try:
                for table in TABLES:
                    self._view(con, table)
            except BaseException:
                con.close()
                raise
            self._con = con
            weakref.finalize(self, con.close)  # closed before the interpreter ends (else nanobind warns)
        return self._con

    def _view(self, con, table: str) -> None:
        """``table`` as a view over a snapshot of its files (:func:`study.results.tables.read_parts`: parts
        read now, compacted files when scanned): the parts, and the compacted rows of every
        (trial, epoch) no part holds (``study.results.tables`` invariants)."""
        compacted, parts, _ = read_parts(self.root, table)
        compacted = [
            (path, schema) for path in compacted if (schema := read_file(path, schema=True)) is not None
        ]
        sources = {}
        for kind, files in (("compacted", compacted), ("parts", [(t, t.schema) for t in parts])):
            if files:  # a view over the files, scanned with their unified schema
                sources[kind] = f"_{table}_{kind}"
                con.register(sources[kind], _Scan(files))
        if not sources:
            types = {c: _SQL_TYPES.get(ty, "DOUBLE") for c, ty, _ in COLUMNS[table]}
            cols = ", ".join(f'CAST(NULL AS {types.get(c, "DOUBLE")}) AS "{c}"' for c in SCHEMA[table])
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT {cols} WHERE false")
            return
        if len(sources) == 1:
            body = f"SELECT * FROM {next(iter(sources.values()))}"
        else:
            c, p = sources["compacted"], sources["parts"]
            body = (
                f"SELECT * FROM {p} UNION ALL BY NAME SELECT c.* FROM {c} c ANTI JOIN "
                f"(SELECT DISTINCT trial_id, epoch FROM {p}) k "
                "ON c.trial_id = k.trial_id AND c.epoch = k.epoch"
            )
        if (
            table == "maps"
        ):  # quantised windows back to probabilities, in SQL: pyarrow.compute would import pandas
            cols = {r[0] for r in con.execute(f"DESCRIBE {body}").fetchall()}
            if "probs_q" in cols:
                decoded = "list_transform(probs_q, lambda x: CAST(x AS DOUBLE) * probs_scale)"
                if "probs" in cols:
                    decoded = f"coalesce({decoded}, probs)"
                keep = "probs_q, probs_scale" + (", probs" if "probs" in cols else "")
                body = f"SELECT * EXCLUDE ({keep}), {decoded} AS probs FROM ({body})"
        con.execute(f"CREATE OR REPLACE VIEW {table} AS {body}")

    def _query(self, query: str, convert, empty):
        import duckdb

        con = self.connection()
        _only_reads(con, query)
        try:
            result = con.sql(query)
            return empty() if result is None else convert(result)  # None: a statement without a result
        except duckdb.Error as exc:
            raise AnalysisError(_sql_error(exc, query)) from None

    def sql(self, query: str) -> pd.DataFrame:
        """Run ``query`` (DuckDB SQL over ``runs``, ``epochs``, ``heads``, ``maps``)."""
        import pandas as pd

        return self._query(query, lambda r: r.df(), pd.DataFrame)

    def sql_records(self, query: str) -> tuple[list[str], list[tuple]]:
        """Column names and rows (tuples of plain Python values; lists for list columns)."""

        def records(result):  # read in batches: a result past MAX_QUERY_ROWS is refused, not held whole
            import pyarrow as pa

            read = result.to_arrow_reader if hasattr(result, "to_arrow_reader") else result.fetch_record_batch
            reader, batches, rows = read(100_000), [], 0  # (an older duckdb: fetch_record_batch)
            for batch in reader:
                rows += batch.num_rows
                if rows > MAX_QUERY_ROWS:
                    raise AnalysisError(
                        f"the result has more than {MAX_QUERY_ROWS:,} rows (MAX_QUERY_ROWS): add a LIMIT, "
                        "aggregate, or read it with the Python API (analysis.load(...).sql)"
                    )
                batches.append(batch)
            table = pa.Table.from_batches(batches, schema=reader.schema)
            return table.column_names, list(zip(*(col.to_pylist() for col in table.columns)))

        return self._query(query, records, lambda: ([], []))


#: DuckDB settings of every ``analysis`` connection (what each forbids: docs/results.md, "Queries"),
#: in this order: each later one forbids changing the earlier ones, and ``disabled_filesystems``
#: cannot be given to ``duckdb.connect``.
CONFINEMENT = (
    ("temp_directory", "''"),
    ("disabled_filesystems", "'LocalFileSystem'"),
    ("enable_external_access", "false"),
    ("autoinstall_known_extensions", "false"),
    ("autoload_known_extensions", "false"),
    ("lock_configuration", "true"),
)

#: Pragmas that only read the catalogue (``PRAGMA table_info('runs')``, ``PRAGMA show_tables``).
READ_PRAGMAS = (
    "table_info",
    "show",
    "show_tables",
    "show_tables_expanded",
    "show_databases",
    "database_list",
    "database_size",
    "storage_info",
    "version",
    "platform",
    "functions",
    "collations",
    "user_agent",
    "metadata_info",
)

#: How a MULTI statement (DuckDB's rewrite of a PIVOT whose columns come from the data)
#: may begin: a PIVOT or a query holding one; ``COPY (PIVOT …) TO``, ``CREATE TABLE … AS
#: PIVOT``, ``INSERT INTO … PIVOT`` are MULTI statements too, and refused.
MULTI_READS = ("PIVOT", "PIVOT_WIDER", "PIVOT_LONGER", "UNPIVOT", "SELECT", "FROM", "WITH", "VALUES", "TABLE")

_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^()]*\)\s*)?", re.IGNORECASE)
_PRAGMA = re.compile(r"^\s*PRAGMA\s+(\w+)\s*(?:\(.*\))?\s*;?\s*$", re.IGNORECASE | re.DOTALL)


def _only_reads(con, query: str, label: str = "") -> None:
    """Refuse, in one line, any statement docs/results.md ("Queries") does not list as run: a second
    guard beside :data:`CONFINEMENT` that names what was refused; ``label``: ``"EXPLAIN "`` inside one."""
    import duckdb

    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:  # a syntax error: said as the query would say it
        raise AnalysisError(_sql_error(exc, query)) from None
    for st in statements:
        try:
            kind, text, detail = st.type.name, st.query, ""
        except ValueError as exc:  # a statement type this duckdb package cannot name (UPDATE EXTENSIONS)
            raise AnalysisError(
                f"refusing a statement of a type DuckDB's Python API cannot name ({_one_line(exc)})"
            ) from None
        if kind == "SELECT":
            continue
        if kind == "EXPLAIN" and not label:
            inner = _EXPLAIN.sub("", text, count=1)
            if inner != text:
                _only_reads(con, inner, label="EXPLAIN ")
                continue
            detail = " (cannot tell what it explains)"
        elif kind == "PRAGMA":
            m = _PRAGMA.match(text)
            if m and m.group(1).lower() in READ_PRAGMAS:
                continue
            detail = f" ({' '.join(text.split())[:60]})"
        elif kind == "MULTI":  # a PIVOT somewhere inside; what runs is the statement around it
            first = re.match(r"[\s(]*([A-Za-z_]+)", _EXPLAIN.sub("", text, count=1))
            if first and first.group(1).upper() in MULTI_READS:
                continue
            kind, detail = (first.group(1).upper() if first else kind), " (around a PIVOT)"
        raise AnalysisError(
            "only reading queries are run (SELECT, EXPLAIN, PIVOT, catalogue PRAGMAs; the tables "
            f"are never written): refusing {label}{kind} statement{detail}"
        )
    if not statements:  # it would print nothing and succeed
        raise AnalysisError(f"no SQL statement in the query {' '.join(query.split())[:60]!r}")


class _Scan:
    """Tables, or compacted files read whole one at a time when scanned, as an Arrow stream that
    DuckDB reads once per scan, each batch aligned to the unified schema (a column a file lacks
    is null; not ``pyarrow.dataset``, which would import pandas into ``analysis query``)."""

    def __init__(self, files: list[tuple[object, object]]):
        import pyarrow as pa

        self.sources = [source for source, _ in files]
        self.schema = pa.unify_schemas([schema for _, schema in files], promote_options="permissive")

    def _batches(self):
        for source in self.sources:
            table = read_file(source) if isinstance(source, str) else source  # None: damaged since, named
            for batch in table.to_batches() if table is not None else ():
                yield batch if batch.schema.equals(self.schema) else self._aligned(batch)

    def _aligned(self, batch):
        import pyarrow as pa

        columns = []
        for f in self.schema:
            col = batch.column(f.name) if f.name in batch.schema.names else pa.nulls(batch.num_rows, f.type)
            columns.append(col if col.type == f.type else col.cast(f.type))  # a cast imports pyarrow.compute
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def __arrow_c_stream__(self, requested_schema=None):
        import pyarrow as pa

        reader = pa.RecordBatchReader.from_batches(self.schema, self._batches())
        return reader.__arrow_c_stream__(requested_schema)


def load(target: str | os.PathLike, storage: str | None = None) -> Study:
    """Open a study by NAME (under ``storage``, default ``$STUDY_STORAGE`` or ``./results``) or PATH
    (a study folder, its ``tables`` folder, or a ``study train --out`` folder; local or a URI).
    Usage: docs/results.md, "Queries"."""
    root, folder = resolve(str(target), storage)
    try:
        check_links(root)
    except LinkOutError as e:
        raise AnalysisError(str(e)) from None
    return Study(root=root, folder=folder)
