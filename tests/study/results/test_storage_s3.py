"""S3-compatible storage, for real: a local moto server (127.0.0.1, free port, dummy
credentials, ``AWS_ENDPOINT_URL``) under ``study run | status | resume`` and
``analysis query | figures``, a killed driver resumed, and the requests a small study
makes counted."""

import time
import warnings

import numpy as np
import pytest

from tests.helpers import code_payload, kill_session, popen, run_cli, write_spec

pytest.importorskip("moto")

#: requests a 4-trial, 2-epoch study may make (the landed code made 1,983 here, and
#: 19,951 where the issue measured it, with Tune saving its state every second): a fixed
#: part and a part per second of the run.  The project's own requests (study.json, tables,
#: trials/, the lock) do not depend on the time the run takes (~610 here, a quiet 40 s run
#: or a 61 s one on one core alike); Tune's periodic uploads of `tune/` (experiment state,
#: each trial's result/progress/params files, their folder markers) do, ~2.6 per second
#: (281 requests in 40 s, 336 in 61 s): a loaded machine's slower run made 1,748 with the
#: same code.  A Tune state save every second costs more than 10 requests a second.
REQUEST_BUDGET = 1000
REQUESTS_PER_SECOND = 10


def objects(prefix: str) -> list[str]:
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(prefix)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1 :] for i in infos if i.type == pafs.FileType.File)


def test_tables_on_s3_compact_and_skip_a_damaged_object(s3):
    import pyarrow.fs as pafs

    import analysis
    from study.results import tables as T

    root = "s3://studies/unit/tables"
    for t in ("a", "b"):
        w = T.TableWriter(root, trial_id=t, compact_every=2)
        for epoch in range(3):
            w.rows("epochs", epoch, [{"test_acc": epoch / 10}])
            w.rows("maps", epoch, [{"layer": 0, "head": 0, "window": 2, "probs": [0.1, 0.2, 0.3, 0.4]}])
            w.run({"status": "running", "epochs_done": epoch + 1})
    assert objects(root) == sorted(
        [
            f"{tb}/{t}/{f}"
            for tb in ("epochs", "maps")
            for t in ("a", "b")
            for f in ("00002.parquet", "compacted.parquet")
        ]
        + ["runs/a.parquet", "runs/b.parquet"]
    )
    study = analysis.load(root)
    assert len(T.read_table(root, "epochs")) == 6 and study.sql("SELECT count(*) AS n FROM epochs").n[0] == 6
    probs = study.sql("SELECT probs FROM maps").probs
    assert len(probs) == 6 and all(np.allclose(p, [0.1, 0.2, 0.3, 0.4], atol=0.4 / 65535) for p in probs)
    fs, path = pafs.FileSystem.from_uri(root)
    with fs.open_output_stream(f"{path}/epochs/b/00001.parquet") as f:
        f.write(b"not parquet")  # a damaged part over a compacted epoch
    with fs.open_output_stream(f"{path}/epochs/a/00007.parquet") as f:
        f.write(b"PAR1 also not parquet")  # a damaged part of its own epoch
    T._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(T.read_table(root, "epochs")) == 6
        assert analysis.load(root).sql("SELECT count(*) AS n FROM epochs").n[0] == 6
    named = [str(w.message) for w in caught if issubclass(w.category, T.TableWarning)]
    for bad in ("epochs/b/00001.parquet", "epochs/a/00007.parquet"):
        assert any(m.startswith(f"skipped {root}/{bad}: not readable Parquet") for m in named), named


@pytest.mark.slow
def test_study_on_s3_run_status_query_figures_and_request_count(tmp_path, s3):
    storage = "s3://studies/st"
    f = write_spec(tmp_path, "hyg", epochs=2, grid={"num_heads": [1, 2, 3, 4]})
    s3.reset()
    started = time.monotonic()
    r = run_cli(tmp_path, "run", str(f), "--storage", storage, "--num-cpus", "2", "--quiet")
    seconds = time.monotonic() - started
    requests = s3.count()
    print(f"requests of the 4-trial, 2-epoch study: {requests} in {seconds:.0f} s {s3.by_method()}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trials: 4 finished" in r.stdout
    assert requests <= REQUEST_BUDGET + REQUESTS_PER_SECOND * seconds, (round(seconds), s3.by_method())
    # a finished study holds one object per (trial, table)
    tables = objects(f"{storage}/hyg/tables")
    trials = [f"c{i:03d}-s000" for i in range(4)]
    assert tables == sorted(
        [f"runs/{t}.parquet" for t in trials]
        + [f"{tb}/{t}/compacted.parquet" for tb in ("epochs", "heads", "maps") for t in trials]
    )

    r = run_cli(tmp_path, "status", "hyg", "--storage", storage)
    assert r.returncode == 0 and r.stdout.startswith("4 trials recorded of 4 planned: 4 finished"), (
        r.stdout + r.stderr
    )
    r = run_cli(
        tmp_path,
        "query",
        "hyg",
        "--storage",
        storage,
        "SELECT count(*) AS n, count(DISTINCT trial_id) AS t FROM epochs",
        "--format",
        "csv",
        module="analysis",
    )
    assert r.returncode == 0 and r.stdout.split() == ["n,t", "8,4"], r.stdout + r.stderr
    r = run_cli(
        tmp_path, "figures", f"{storage}/hyg", "--out", str(tmp_path / "figs"), "--no-pdf", module="analysis"
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "figs" / "fig2_accuracy.png").stat().st_size > 1000
    assert len(list((tmp_path / "figs").glob("maps_*.png"))) == 4

    # an existing name is refused, as on a local disk: one line, exit 2, nothing written
    before = objects(f"{storage}/hyg")
    r = run_cli(tmp_path, "run", str(f), "--storage", storage, "--num-cpus", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"study run: error: --name: study 'hyg' already exists in {storage} "
        "(continue it with `study resume hyg` or pick another --name)"
    ]
    assert objects(f"{storage}/hyg") == before
    r = run_cli(tmp_path, "status", "nothere", "--storage", storage)
    assert r.returncode == 2 and "no study 'nothere'" in r.stderr


@pytest.mark.long
def test_killed_driver_on_s3_resumes_from_the_projects_own_objects(tmp_path, s3):
    """A study on S3 keeps its state in its own objects (study.json, tables, trials/,
    the Optuna journal): its driver and local Ray SIGKILLed mid-study, and every object
    of Ray's (``tune/``) then replaced by a pickle carrying code or cut short, `study
    resume` runs nothing of Ray's files, trains only what was left, and writes each
    (trial, epoch) row once."""
    import pyarrow.fs as pafs

    from study.results.tables import read_table

    storage = "s3://studies/kill"
    root = f"{storage}/drv"
    tables = f"{root}/tables"
    f = write_spec(
        tmp_path, "drv", epochs=3, data="synthetic:200", grid={"num_heads": [1, 2, 3]}, max_concurrent=1
    )
    driver = popen("run", str(f), "--storage", storage, "--num-cpus", "2", cwd=tmp_path)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and driver.poll() is None:
            runs = read_table(tables, "runs")
            if len(runs) >= 2 and (runs.status == "finished").sum() >= 1:
                break
            time.sleep(0.5)
        assert driver.poll() is None, "the study ended before the kill: " + driver.stdout.read()
        kill_session(driver)  # the driver and its local Ray
        driver.wait(timeout=30)
    finally:
        kill_session(driver)
    finished = set(read_table(tables, "runs").query("status == 'finished'").trial_id)
    assert finished
    names = objects(root)
    assert "tune/tuner.pkl" in names, names
    assert any(n.startswith("trials/") and n.endswith("/checkpoint.pt") for n in names), names
    fs, base = pafs.FileSystem.from_uri(root)
    marker = tmp_path / "pwned"
    for i, name in enumerate(n for n in names if n.startswith("tune/")):
        with fs.open_output_stream(f"{base}/{name}") as fh:
            fh.write(code_payload(marker) if i % 2 == 0 else b"\x80")
    r = run_cli(tmp_path, "resume", "drv", "--storage", storage, "--num-cpus", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists(), "a pickle payload ran"
    runs = read_table(tables, "runs").set_index("trial_id")
    assert len(runs) == 3 and (runs.status == "finished").all(), runs
    assert (runs.loc[sorted(finished), "attempts"] == 1).all(), "a finished trial ran again"
    epochs = read_table(tables, "epochs")
    assert len(epochs) == 9 and not epochs.duplicated(["trial_id", "epoch"]).any()
    heads = read_table(tables, "heads")
    assert not heads.duplicated(["trial_id", "epoch", "layer", "head"]).any()
    assert [
        p for p in objects(tables) if not p.endswith(("compacted.parquet",)) and not p.startswith("runs/")
    ] == []
