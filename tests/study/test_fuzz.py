"""Adversarial data sources and flags through ``study train`` (issue 17, items 5-8):
each bad input is refused with ONE line ``study train: error: ...``, exit status 2,
before anything is written: no ``--out`` folder, nothing (no ``.pt``, no stale
``.lock``) in the data cache, and never a file outside it.

Every case here failed that contract before its fix (a traceback, a silent run on a
hostile archive, a diverged run instead of a refusal, or an hour-long run).  The CLI
runs in this process (``study.cli.main``) on tiny sources built in ``tmp_path``.
"""

from __future__ import annotations

import io
import pickle
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from study import limits
from study.cli import main
from tests.data_helpers import image_array, make_tree
from tests.helpers import code_payload

TINY = [
    "--hidden",
    "16",
    "--layers",
    "1",
    "--intermediate",
    "16",
    "--num-heads",
    "2",
    "--epochs",
    "1",
    "--batch-size",
    "10",
    "--quiet",
]


@pytest.fixture
def train(capsys, monkeypatch, tmp_path):
    """``study train TINY ARGS --out tmp_path/out`` in this process: (exit status, stderr lines)."""
    monkeypatch.setenv("STUDY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)

    def run(*args, out: Path | None = None):
        capsys.readouterr()
        argv = ["train", *TINY, *map(str, args), "--out", str(out or tmp_path / "out")]
        t0 = time.monotonic()
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        assert time.monotonic() - t0 < 20
        return code, capsys.readouterr().err.strip().splitlines()

    return run


def assert_refused(code, lines, tmp_path: Path, needle: str, *, decoded: bool = False) -> None:
    """``decoded``: the source itself was good, so its complete decoded ``.pt`` may stay
    cached (keyed by content); never a ``.lock`` or temporary file."""
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("study train: error: "), lines
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "out").exists(), "a refused input created the --out folder"
    cache = tmp_path / "cache"
    left = sorted(p.name for p in cache.rglob("*")) if cache.exists() else []
    if decoded:
        left = [n for n in left if not (n.startswith("imagefolder-") and n.endswith(".pt"))]
    assert left == [], f"the refused input left {left} in the cache"


# --------------------------------------------------------------------------- archives
def _png() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image_array(7)).save(buf, format="PNG")
    return buf.getvalue()


def _hostile_tar(tmp_path: Path, member: str, *, fmt=tarfile.GNU_FORMAT) -> Path:
    """A valid two-class tree as a tar, plus one regular member named ``member``."""
    src = tmp_path / "src"
    make_tree(src, classes=("cat", "dog"), n_train=5, n_test=2)
    archive = tmp_path / "hostile.tar"
    data = _png()
    with tarfile.open(archive, "w", format=fmt) as tf:
        for p in sorted(src.rglob("*")):
            tf.add(p, arcname=p.relative_to(src).as_posix(), recursive=False)
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return archive


@pytest.mark.parametrize(
    "member, needle",
    [
        (f"/tmp/escape-{id(object())}.png", "points outside the archive (absolute path or '..')"),
        ("../../escape.png", "points outside the archive (absolute path or '..')"),
        ("train/../train/cat/x.png", "points outside the archive (absolute path or '..')"),
        ("train/cat/00.png", "appears twice in the archive"),
        ("./train/cat/01.png", "appears twice in the archive"),
    ],
    ids=["absolute", "dotdot", "dotdot_inside", "duplicate", "duplicate_dot_prefix"],
)
def test_hostile_archive_member(train, tmp_path, member, needle):
    archive = _hostile_tar(tmp_path, member)
    code, lines = train("--data", archive)
    assert_refused(code, lines, tmp_path, needle)
    assert not Path(member).is_absolute() or not Path(member).exists()
    assert not (tmp_path.parent / "escape.png").exists()


# --------------------------------------------------------------------------- trees
def test_animated_gif(train, tmp_path):
    make_tree(tmp_path / "t", classes=("cat", "dog"), n_train=5)
    frames = [Image.fromarray(image_array(i)) for i in range(3)]
    frames[0].save(tmp_path / "t/train/cat/anim.gif", save_all=True, append_images=frames[1:])
    code, lines = train("--data", tmp_path / "t")
    assert_refused(
        code, lines, tmp_path, "train/cat/anim.gif: image has shape (3, 3, 32, 32) (an animation?)"
    )


def test_batch_larger_than_the_folder_source(train, tmp_path):
    make_tree(tmp_path / "t", classes=("my cat", "dög 犬"), n_train=4)  # 8 training images, unicode classes
    code, lines = train("--data", tmp_path / "t")
    assert_refused(
        code,
        lines,
        tmp_path,
        "--batch-size: 10 images per step is more than the 8 training images",
        decoded=True,
    )


# --------------------------------------------------------------------------- cifar10:ROOT
def _cifar(tmp_path: Path, *, meta, as_dirs: bool = False) -> Path:
    folder = tmp_path / "c" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batch = pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]})
    for f in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        (folder / f).mkdir() if as_dirs else (folder / f).write_bytes(batch)
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return tmp_path / "c"


@pytest.mark.parametrize(
    "meta, as_dirs, needle",
    [
        ({"label_names": []}, False, "batches.meta: label_names must list at least 2 distinct classes"),
        (
            {"label_names": ["a", "a"]},
            False,
            "batches.meta: label_names must list at least 2 distinct classes",
        ),
        ({"label_names": ["a", "b"]}, True, "data_batch_1: not a regular file"),
    ],
    ids=["no_classes", "duplicate_classes", "folders_for_files"],
)
def test_bad_cifar_folder(train, tmp_path, meta, as_dirs, needle):
    code, lines = train("--data", f"cifar10:{_cifar(tmp_path, meta=meta, as_dirs=as_dirs)}")
    assert_refused(code, lines, tmp_path, needle)
    assert "download" not in lines[0]


# --------------------------------------------------------------------------- flags
@pytest.mark.parametrize(
    "flag, value, needle",
    [
        ("--lr", "inf", "--lr: must be a finite non-negative number, got inf"),
        ("--lr", "1e400", "--lr: must be a finite non-negative number, got inf"),
        ("--weight-decay", "inf", "--weight-decay: must be a finite non-negative number"),
        ("--epochs", "99999999999", f"--epochs: must be <= {limits.MAX_EPOCHS} (MAX_EPOCHS)"),
        ("--seed", "99999999999999999999999", f"--seed: must be <= {limits.MAX_SEED} (MAX_SEED)"),
        ("--batch-size", str(limits.MAX_BATCH_SIZE + 1), "(MAX_BATCH_SIZE)"),
        ("--num-heads", "100000", "--num-heads: must be <= 1024 (MAX_MODEL_FIELD)"),
    ],
    ids=lambda v: v if not str(v).startswith("-") or len(str(v)) < 16 else str(v)[:16],
)
def test_numeric_flag(train, tmp_path, flag, value, needle):
    code, lines = train("--data", "synthetic:60", flag, value)
    assert_refused(code, lines, tmp_path, needle)


@pytest.mark.parametrize("trial_id", ["../../escape", "a/b", "..", ".hidden", "x" * 129, "tab\tid"])
def test_trial_id_cannot_name_a_path(train, tmp_path, trial_id):
    code, lines = train("--data", "synthetic:60", "--trial-id", trial_id)
    assert_refused(code, lines, tmp_path, "--trial-id: must be 1 to 128 letters, digits")
    assert list(tmp_path.iterdir()) == [], "a --trial-id wrote outside --out/tables"


def test_out_under_a_file(train, tmp_path):
    (tmp_path / "afile").write_text("x")
    code, lines = train("--data", "synthetic:60", out=tmp_path / "afile" / "sub")
    assert_refused(code, lines, tmp_path, f"--out: {tmp_path / 'afile'} is not a directory")
    assert (tmp_path / "afile").read_text() == "x"


def test_out_that_cannot_be_created(train, tmp_path):
    code, lines = train("--data", "synthetic:60", out=Path("/proc/no-such-study-out"))
    assert_refused(code, lines, tmp_path, "--out: cannot create /proc/no-such-study-out")


# --------------------------------------------------------------------------- --storage / $STUDY_STORAGE
@pytest.mark.parametrize(
    "argv",
    [
        ["study", "list"],
        ["study", "status", "x"],
        ["study", "resume", "x"],
        ["study", "export", "x"],
        ["analysis", "query", "x", "select 1"],
        ["analysis", "figures", "x"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
@pytest.mark.parametrize(
    "storage, via_env, needle",
    [
        ("s3://", False, "--storage: 's3://' names no bucket"),
        ("s3:///prefix", False, "--storage: 's3:///prefix' names no bucket"),
        ("ftp://host/dir", False, "--storage: unsupported storage scheme 'ftp'"),
        ("ftp://host/dir", True, "$STUDY_STORAGE: unsupported storage scheme 'ftp'"),
        ("s3://", True, "$STUDY_STORAGE: 's3://' names no bucket"),
    ],
    ids=["s3_no_bucket", "s3_empty_bucket", "ftp", "env_ftp", "env_s3_no_bucket"],
)
def test_malformed_storage(capsys, monkeypatch, tmp_path, argv, storage, via_env, needle):
    from analysis.cli import main as analysis_main

    monkeypatch.chdir(tmp_path)
    if via_env:
        monkeypatch.setenv("STUDY_STORAGE", storage)
    prog, *args = argv
    args = [*args] if via_env else [*args, "--storage", storage]
    try:
        code = (main if prog == "study" else analysis_main)(args)
    except SystemExit as e:
        code = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith(f"{prog} {argv[1]}: error: "), lines
    assert needle in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- analysis query: reads only
@pytest.mark.parametrize(
    "sql, needle",
    [
        ("COPY (SELECT 1) TO '{tmp}/written.csv'", "refusing COPY statement"),
        ("SELECT 1; COPY (SELECT 1) TO '{tmp}/written.csv'", "refusing COPY statement"),
        ("ATTACH '{tmp}/written.db' AS x", "refusing ATTACH statement"),
        ("EXPORT DATABASE '{tmp}/written'", "refusing EXPORT statement"),
        ("CREATE TABLE t AS SELECT 1", "refusing CREATE statement"),
        ("SET enable_external_access = true", "refusing SET statement"),
        ("INSTALL httpfs", "statement"),
        ("SELECT * FROM read_csv('{tmp}/secret.txt')", "Permission Error"),
        ("SELECT * FROM read_text('{tmp}/secret.txt')", "Permission Error"),
        ("SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')", "Permission Error"),
    ],
    ids=[
        "copy",
        "copy_after_select",
        "attach",
        "export",
        "create",
        "set",
        "install",
        "read_csv",
        "read_text",
        "http",
    ],
)
def test_query_reads_only_the_tables(capsys, tmp_path, sql, needle):
    from analysis.cli import main as analysis_main

    study = tmp_path / "s"
    (study / "tables").mkdir(parents=True)
    (study / "study.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("top-secret\n")
    before = sorted(tmp_path.rglob("*"))
    try:
        code = analysis_main(["query", str(study), sql.format(tmp=tmp_path)])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "", (out, lines)
    assert len(lines) == 1 and lines[0].startswith("analysis query: error: "), lines
    assert needle in lines[0], lines[0]
    assert sorted(tmp_path.rglob("*")) == before, "a query wrote a file"
    assert "top-secret" not in err


def test_query_still_reads_its_tables(capsys, tmp_path):
    from analysis.cli import main as analysis_main

    study = tmp_path / "s"
    study.mkdir()
    (study / "study.json").write_text("{}")
    code = analysis_main(
        ["query", str(study), "WITH r AS (SELECT * FROM runs) SELECT count(*) AS n FROM r", "--format", "csv"]
    )
    assert code == 0 and capsys.readouterr().out.splitlines() == ["n", "0"]
    code = analysis_main(["query", str(study), "EXPLAIN SELECT * FROM epochs"])
    assert code == 0
    capsys.readouterr()
    # the read-only statements DuckDB users reach for: all run
    for sql, first_line in [
        ("DESCRIBE runs", "column_name"),
        ("SUMMARIZE epochs", "column_name"),
        ("PRAGMA table_info('heads')", "cid"),
        ("FROM runs SELECT count(*) AS n", "n"),
        ("PIVOT (SELECT 'a' AS k, 1 AS v UNION ALL SELECT 'b', 2) ON k USING sum(v)", "a,b"),
    ]:
        code = analysis_main(["query", str(study), sql, "--format", "csv"])
        out, err = capsys.readouterr()
        assert code == 0 and out.splitlines()[0].startswith(first_line), (sql, out, err)
    # a pragma that would change a setting is refused (and meets the locked configuration): one line, exit 2
    try:
        code = analysis_main(["query", str(study), "PRAGMA enable_profiling"])
    except SystemExit as e:
        code = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "refusing PRAGMA statement" in lines[0], lines


# --------------------------------------------------------------------------- study evaluate: foreign files
@pytest.mark.parametrize(
    "kind, needle",
    [
        ("pickle_payload", "not a model export (refused by the weights-only unpickler: "),
        ("random_bytes", "not a model export (not a PyTorch file: not a zip archive)"),  # told before torch
        ("empty", "not a model export (an empty file)"),
        ("folder", "not a file"),
    ],
)
def test_evaluate_foreign_file(capsys, tmp_path, kind, needle):
    f = tmp_path / "model.pt"
    marker = tmp_path / "PWNED"
    if kind == "pickle_payload":
        f.write_bytes(code_payload(marker))
    elif kind == "random_bytes":
        f.write_bytes(b"P" + bytes(range(256)) * 4)
    elif kind == "empty":
        f.write_bytes(b"")
    else:
        f.mkdir()
    try:
        code = main(["evaluate", str(f), "--data", "synthetic:60"])
    except SystemExit as e:
        code = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"study evaluate: error: {f}: ") and needle in lines[0], lines[0]
    assert len(lines[0]) < 200 and not marker.exists()


# --------------------------------------------------------------------------- analysis figures/report --out
@pytest.mark.parametrize(
    "command, out, needle",
    [
        ("figures", "afile", "--out: afile is a file, not a folder"),
        ("figures", "afile/sub", "afile is not a folder"),
        ("report", "s", "--out: s is a folder, not a file"),
        ("report", "afile/r.html", "afile is not a folder"),
        ("report", "/proc/no-such-report.html", "--out: cannot write /proc/no-such-report.html"),
    ],
    ids=["figures_file", "figures_under_file", "report_folder", "report_under_file", "report_proc"],
)
def test_analysis_out(capsys, monkeypatch, tmp_path, command, out, needle):
    from analysis.cli import main as analysis_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.json").write_text("{}")
    (tmp_path / "afile").write_text("x")
    before = sorted(tmp_path.rglob("*"))
    try:
        code = analysis_main([command, "s", "--storage", str(tmp_path), "--out", out])
    except SystemExit as e:
        code = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"analysis {command}: error: "), lines
    assert needle in lines[0], lines[0]
    assert sorted(tmp_path.rglob("*")) == before and (tmp_path / "afile").read_text() == "x"


# --------------------------------------------------------------------------- study run / validate flags
@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "{spec}", "--name", "", "--storage", "st"], "--name: must be 1 to 100 letters"),
        (["validate", "{spec}", "--gpus", "-1"], "argument --gpus: must be >= 0, got -1"),
        (["validate", "{spec}", "--cpus", "-2"], "argument --cpus: must be >= 0, got -2"),
        (
            ["run", "{spec}", "--name", "h", "--data", "{archive}", "--storage", "st"],
            "points outside the archive",
        ),
    ],
    ids=["run_empty_name", "validate_negative_gpus", "validate_negative_cpus", "run_hostile_archive"],
)
def test_study_flags(capsys, monkeypatch, tmp_path, args, needle):
    from study.tuning import runner
    from tests.helpers import write_spec

    def no_ray(*a, **k):
        raise AssertionError("a refused study started Ray")

    monkeypatch.setattr(runner, "init_ray", no_ray)
    monkeypatch.setenv("STUDY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, "sp")
    archive = _hostile_tar(tmp_path, "/escape.png")
    before = sorted(tmp_path.rglob("*"))
    try:
        code = main([a.format(spec=spec, archive=archive) for a in args])
    except SystemExit as e:
        code = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"study {args[0]}: error: "), lines
    assert needle in lines[0], lines[0]
    assert sorted(tmp_path.rglob("*")) == before, "a refused command wrote something"
