"""`analysis query` (and ``Study.sql``) only read: no statement, of any DuckDB type or
hidden inside a read, changes a byte of the study or writes a file anywhere.

Two layers are tested separately: the statement check (each hostile query is refused in
one line, exit 2) and the structural one (the same statements run straight on
``Study.connection()``, past the check, still leave every file byte-identical, because
that connection has no file system)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import duckdb
import pytest

import analysis
from analysis.cli import main as analysis_main
from analysis.io import AnalysisError
from study.results.tables import TableWriter

LAYERS, HEADS = 2, 3


def _study(root: Path) -> Path:
    """A study folder: two trials, compacted files, parts beside them, a runs part each."""
    study = root / "s"
    tables = study / "tables"
    for trial, acc in (("c000-s000", 0.15), ("c001-s000", 0.25)):
        w = TableWriter(tables, trial_id=trial, compact_every=3)
        for epoch in range(4):  # 3 compacted, 1 part
            w.rows("epochs", epoch, [{"test_acc": acc + epoch / 100, "train_loss": 1.0 - epoch / 10}])
            w.rows(
                "heads",
                epoch,
                [{"layer": ly, "head": h, "entropy": 1.0 + h} for ly in range(LAYERS) for h in range(HEADS)],
            )
            w.rows(
                "maps",
                epoch,
                [
                    {"layer": ly, "head": h, "window": 3, "probs": [1 / 9] * 9}
                    for ly in range(LAYERS)
                    for h in range(HEADS)
                ],
            )
        w.run({"status": "finished", "best_test_acc": acc, "num_heads": HEADS, "encoding": "learned"})
    (study / "study.json").write_text('{"name": "s"}')
    (study / "report.html").write_text("<html></html>")
    (root / "outside.txt").write_text("not the study's\n")
    return study


def tree(root: Path) -> dict[str, str]:
    """Every file and folder under ``root``: its sha256 (folders: "dir")."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    return _study(tmp_path_factory.mktemp("readonly"))


RUN = "{T}/runs/c000-s000.parquet"
COPY_BACK = (
    "(SELECT * REPLACE (0.999 AS best_test_acc) FROM read_parquet('"
    + RUN
    + "')) TO '"
    + RUN
    + "' (FORMAT parquet)"
)
PIVOT = "PIVOT (SELECT status FROM runs) ON status USING count(*)"

#: (id, SQL): {T} is the study's tables folder, {S} the study, {X} a folder outside it.
HOSTILE = [
    # COPY, and COPY hidden in reads
    ("copy_over_a_part", "COPY " + COPY_BACK),
    ("explain_analyze_copy", "EXPLAIN ANALYZE COPY " + COPY_BACK),  # the case
    ("explain_analyse_copy", "explain analyse copy " + COPY_BACK),
    ("explain_paren_analyze_copy", "EXPLAIN (ANALYZE) COPY " + COPY_BACK),
    ("explain_analyze_format_copy", "EXPLAIN (ANALYZE, FORMAT JSON) COPY " + COPY_BACK),
    ("explain_comment_analyze_copy", "EXPLAIN /* x */ ANALYZE COPY " + COPY_BACK),
    ("explain_copy", "EXPLAIN COPY " + COPY_BACK),
    ("select_then_copy", "SELECT 1; COPY " + COPY_BACK),
    ("select_then_copy_newlines", "SELECT count(*) FROM runs;\n\n  COPY " + COPY_BACK + " ;"),
    ("comment_then_copy", "/* read only */ COPY " + COPY_BACK),
    ("line_comment_then_copy", "-- SELECT\nCOPY " + COPY_BACK),
    ("mixed_case_copy", "cOpY " + COPY_BACK),
    ("copy_quoted_name", "COPY (SELECT 1 AS x) TO '{T}/runs/it''s.parquet' (FORMAT parquet)"),
    ("copy_escape_string", "COPY (SELECT 1 AS x) TO E'{T}/runs/e\\x41.csv'"),
    ("copy_outside", "COPY (SELECT * FROM runs) TO '{X}/leak.csv'"),
    ("copy_relative", "COPY runs TO 'leak.parquet'"),
    (
        "copy_partitioned_into_tables",
        "COPY (SELECT * FROM epochs) TO '{T}/epochs' "
        "(FORMAT parquet, PARTITION_BY (trial_id), OVERWRITE_OR_IGNORE)",
    ),
    ("copy_from_file", "COPY runs FROM '{X}/outside.txt'"),
    ("copy_pivot", "COPY (" + PIVOT + ") TO '{T}/runs/p.csv'"),
    ("explain_analyze_copy_pivot", "EXPLAIN ANALYZE COPY (" + PIVOT + ") TO '{T}/runs/p.csv'"),
    ("with_copy", "WITH r AS (SELECT 1) COPY (SELECT * FROM r) TO '{T}/runs/w.csv'"),
    ("copy_database", "COPY FROM DATABASE memory TO x (SCHEMA)"),
    ("copy_database_pragma", "COPY FROM DATABASE memory TO x"),
    # prepared statements
    ("prepare_copy", "PREPARE p AS COPY (SELECT 1) TO '{T}/runs/prep.csv'"),
    ("prepare_execute", "PREPARE p AS SELECT 1; EXECUTE p"),
    ("execute", "EXECUTE p"),
    ("deallocate", "DEALLOCATE p"),
    # files through reads
    ("read_parquet_part", "SELECT * FROM read_parquet('" + RUN + "')"),
    ("replacement_scan_path", "SELECT * FROM '" + RUN + "'"),
    ("read_csv_outside", "SELECT * FROM read_csv('{X}/outside.txt')"),
    ("read_text", "SELECT * FROM read_text('{S}/study.json')"),
    ("read_blob", "SELECT * FROM read_blob('{S}/study.json')"),
    ("glob", "SELECT * FROM glob('{T}/*')"),
    ("parquet_metadata", "SELECT * FROM parquet_metadata('" + RUN + "')"),
    ("sniff_csv", "SELECT * FROM sniff_csv('{X}/outside.txt')"),
    ("http", "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')"),
    # the catalogue and the session
    ("create_table", "CREATE TABLE t AS SELECT * FROM runs"),
    ("create_table_pivot", "CREATE TABLE t AS " + PIVOT),
    ("insert_pivot", "INSERT INTO runs " + PIVOT),
    ("create_view_over_runs", "CREATE OR REPLACE VIEW runs AS SELECT 0.999 AS best_test_acc"),
    ("create_macro", "CREATE MACRO m() AS 1"),
    ("create_function", "CREATE FUNCTION f(a) AS a + 1"),
    ("create_type", "CREATE TYPE e AS ENUM ('a')"),
    ("create_sequence", "CREATE SEQUENCE q"),
    ("create_schema", "CREATE SCHEMA x"),
    ("create_index", "CREATE INDEX i ON runs(trial_id)"),
    ("create_secret", "CREATE SECRET (TYPE s3, KEY_ID 'a', SECRET 'b')"),
    ("create_persistent_secret", "CREATE PERSISTENT SECRET p (TYPE s3, KEY_ID 'a', SECRET 'b')"),
    ("insert", "INSERT INTO runs SELECT * FROM runs"),
    ("with_insert", "WITH r AS (SELECT * FROM runs) INSERT INTO runs SELECT * FROM r"),
    ("update", "UPDATE runs SET best_test_acc = 0.999"),
    ("delete", "DELETE FROM runs"),
    ("truncate", "TRUNCATE runs"),
    ("merge_into", "MERGE INTO runs USING runs s ON true WHEN MATCHED THEN DELETE"),
    ("alter", "ALTER VIEW runs RENAME TO r"),
    ("comment_on", "COMMENT ON VIEW runs IS 'x'"),
    ("drop", "DROP VIEW runs"),
    ("begin", "BEGIN TRANSACTION"),
    ("commit", "COMMIT"),
    ("rollback", "ROLLBACK"),
    ("vacuum", "VACUUM"),
    ("analyze", "ANALYZE"),
    ("checkpoint", "CHECKPOINT"),
    ("force_checkpoint", "FORCE CHECKPOINT"),
    ("call_checkpoint", "CALL checkpoint()"),
    ("call_enable_logging_file", "CALL enable_logging(storage = 'file', storage_path = '{T}/log')"),
    ("export_database", "EXPORT DATABASE '{T}/exported'"),
    ("export_database_outside", "EXPORT DATABASE '{X}/exported' (FORMAT parquet)"),
    ("attach_new", "ATTACH '{T}/x.duckdb' AS x"),
    ("attach_part", "ATTACH '" + RUN + "' AS x"),
    ("attach_then_create", "ATTACH '{X}/x.duckdb' AS x; CREATE TABLE x.t AS SELECT 1"),
    ("detach", "DETACH memory"),
    ("use", "USE system"),
    ("install", "INSTALL httpfs"),
    ("force_install", "FORCE INSTALL httpfs"),
    ("install_from_url", "INSTALL httpfs FROM 'http://127.0.0.1:9'"),
    ("load", "LOAD httpfs"),
    ("load_path", "LOAD '{X}/outside.txt'"),
    ("update_extensions", "UPDATE EXTENSIONS"),
    ("set_external_access", "SET enable_external_access = true"),
    ("set_filesystems", "SET disabled_filesystems = ''"),
    ("set_allowed_directories", "SET allowed_directories = ['{T}']"),
    ("set_temp_directory", "SET temp_directory = '{T}'"),
    ("set_profiling_output", "SET profiling_output = '{T}/profile.json'"),
    ("set_log_query_path", "SET log_query_path = '{T}/queries.log'"),
    ("set_unlock", "SET lock_configuration = false"),
    ("reset_all", "RESET ALL"),
    ("set_variable", "SET VARIABLE x = 1"),
    ("pragma_threads", "PRAGMA threads = 1"),
    ("pragma_enable_profiling", "PRAGMA enable_profiling = 'json'"),
    ("pragma_profile_output", "PRAGMA profile_output = '{T}/profile.json'"),
    ("pragma_import_database", "PRAGMA import_database('{X}')"),
    ("pragma_checkpoint", "PRAGMA force_checkpoint"),
]

#: StatementType members no SQL text yields in this DuckDB: its parser gives ANALYZE as
#: VACUUM, SET VARIABLE as SET, CREATE FUNCTION as CREATE; the rest are not SQL.
NOT_FROM_SQL = {"INVALID", "RELATION", "LOGICAL_PLAN", "EXTENSION", "ANALYZE", "VARIABLE_SET", "CREATE_FUNC"}


def _sql(template: str, study: Path) -> str:
    return (
        template.replace("{T}", str(study / "tables"))
        .replace("{S}", str(study))
        .replace("{X}", str(study.parent))
    )


def _types(sql: str) -> set[str]:
    con = duckdb.connect()
    try:
        return {st.type.name for st in con.extract_statements(sql)}
    except ValueError:  # UPDATE EXTENSIONS: a type the Python enum lacks
        return {"<unnamed>"}
    except duckdb.Error:
        return set()
    finally:
        con.close()


def test_the_hostile_statements_cover_every_statement_type(study):
    seen = set().union(*(_types(_sql(sql, study)) for _, sql in HOSTILE), _types(PIVOT), _types("SELECT 1"))
    members = set(duckdb.StatementType.__members__)
    missing = members - NOT_FROM_SQL - seen
    assert not missing, f"no hostile statement of type {sorted(missing)}: add one"
    assert "<unnamed>" in seen  # a type newer than the Python API is refused too


@pytest.mark.parametrize("sql", [s for _, s in HOSTILE], ids=[i for i, _ in HOSTILE])
def test_a_hostile_statement_is_refused_in_one_line_and_writes_nothing(study, sql, capsys, monkeypatch):
    monkeypatch.chdir(study.parent)  # relative paths land beside the study, inside the hashed tree
    before = tree(study.parent)
    try:
        code = analysis_main(["query", str(study), _sql(sql, study)])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "", (out, lines)
    assert len(lines) == 1 and lines[0].startswith("analysis query: error: "), lines
    assert tree(study.parent) == before, "a query changed a file"


@pytest.mark.parametrize("sql", [s for _, s in HOSTILE], ids=[i for i, _ in HOSTILE])
def test_the_connection_itself_cannot_write(study, sql, monkeypatch):
    """Past the statement check, straight on the connection: nothing is written."""
    monkeypatch.chdir(study.parent)
    before = tree(study.parent)
    con = analysis.load(study).connection()
    for st in _statements(con, _sql(sql, study)):
        try:
            con.execute(st)
        except duckdb.Error:
            pass
    assert tree(study.parent) == before, "the connection wrote a file"
    # and it still refuses to widen its own access
    with pytest.raises(duckdb.Error):
        con.execute("SET disabled_filesystems = ''")
    with pytest.raises(duckdb.Error):
        con.execute(f"COPY (SELECT 1) TO '{study.parent}/written.csv'")


def _statements(con, sql: str) -> list[str]:
    try:
        return [st.query for st in con.extract_statements(sql)]
    except (ValueError, duckdb.Error):
        return [sql]


def test_python_api_refuses_the_same(study):
    s = analysis.load(study)
    before = tree(study.parent)
    with pytest.raises(AnalysisError, match="refusing EXPLAIN COPY statement"):
        s.sql(_sql("EXPLAIN ANALYZE COPY " + COPY_BACK, study))
    with pytest.raises(AnalysisError, match="Permission Error"):
        s.sql(_sql("SELECT * FROM read_parquet('" + RUN + "')", study))
    assert tree(study.parent) == before
    assert list(s.sql("SELECT best_test_acc FROM runs ORDER BY 1").best_test_acc) == [0.15, 0.25]


READS = [  # (sql, first csv line, answer lines)
    (
        "SELECT trial_id, best_test_acc FROM runs ORDER BY 1",
        "trial_id,best_test_acc",
        ["c000-s000,0.15", "c001-s000,0.25"],
    ),
    ("FROM epochs SELECT count(*) AS n", "n", ["8"]),
    ("WITH e AS (SELECT * FROM epochs) SELECT max(epoch) AS m FROM e", "m", ["3"]),
    ("TABLE runs", "trial_id", None),
    ("VALUES (1, 'a')", "col0,col1", ["1,a"]),
    ("SELECT count(*) AS n FROM heads WHERE epoch = 3", "n", [str(2 * LAYERS * HEADS)]),
    ("SELECT round(sum(list_sum(probs)), 6) AS mass FROM maps", "mass", [str(8 * LAYERS * HEADS * 1.0)]),
    ("DESCRIBE runs", "column_name", None),
    ("DESCRIBE SELECT * FROM heads", "column_name", None),
    ("SUMMARIZE epochs", "column_name", None),
    ("SHOW TABLES", "name", None),
    ("PRAGMA table_info('heads')", "cid", None),
    ("PRAGMA show_tables", "name", None),
    (
        "SELECT * FROM checkpoint()",
        None,
        None,
    ),  # a table function that would write a database file: none here
    (PIVOT + " ORDER BY ALL", "finished", ["2"]),
    ("WITH p AS (" + PIVOT + ") SELECT * FROM p", "finished", ["2"]),
    ("PIVOT (SELECT status FROM runs) ON status IN ('finished') USING count(*)", "finished", ["2"]),
    ("UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b", "name,value", ["a,1", "b,2"]),
    ("EXPLAIN SELECT * FROM runs", "explain_key,explain_value", None),
    ("EXPLAIN ANALYZE SELECT count(*) FROM heads", "explain_key,explain_value", None),
    ("EXPLAIN ANALYZE " + PIVOT, None, None),
    ("SELECT 1 AS a; SELECT 2 AS b", "b", ["2"]),
    ("/* a comment */ SELECT 'x;y' AS s -- and another", "s", ["x;y"]),
    ("SELECT * FROM query_table('runs') ORDER BY trial_id LIMIT 1", "trial_id", None),
]


@pytest.mark.parametrize("sql, header, rows", READS, ids=[r[0][:40] for r in READS])
def test_reads_still_work(study, sql, header, rows, capsys):
    before = tree(study.parent)
    code = analysis_main(["query", str(study), sql, "--format", "csv"])
    out, err = capsys.readouterr()
    assert code == 0 and err == "", err
    lines = out.splitlines()
    if header is not None:
        assert lines[0].startswith(header), lines[:2]
    if rows is not None:
        assert lines[1:] == rows, lines
    if "TABLES" in sql.upper():
        assert {"runs", "epochs", "heads", "maps"} <= set(lines[1:]), lines
    assert tree(study.parent) == before


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment", ";"])
def test_a_query_without_a_statement_is_one_line(study, sql, capsys):
    """It printed nothing and exited 0."""
    with pytest.raises(SystemExit) as e:
        analysis_main(["query", str(study), sql])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "no SQL statement in the query" in err, err


def test_a_result_larger_than_the_row_limit_is_one_line_before_memory_runs_out(study, capsys):
    """``SELECT * FROM range(100000000000)`` was read whole into memory and the command was killed
    (out of memory, after minutes); it is now refused once the rows pass MAX_QUERY_ROWS."""
    from study.limits import MAX_QUERY_ROWS

    with pytest.raises(SystemExit) as e:
        analysis_main(["query", str(study), "SELECT * FROM range(100000000000)", "--format", "csv"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert f"more than {MAX_QUERY_ROWS:,} rows (MAX_QUERY_ROWS)" in err, err
