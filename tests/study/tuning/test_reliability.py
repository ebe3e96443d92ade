"""Fault injection and bad input: nothing is lost, nothing runs twice, nothing half-written.

Each test asserts figures (row counts, attempt counts, file times), not just "no crash".
"""

import io
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from study.results.tables import read_table
from tests.helpers import (
    REPO_ROOT,
    code_payload,
    kill_session,
    meets_expectation,
    popen,
    processes,
    wait_for,
    write_spec,
)

BAD = REPO_ROOT / "tests" / "bad_inputs"


DATA = "synthetic:400"  # the studies here train a few epochs: enough images to kill a trial mid-way


def _query_while_it_runs(root: Path, driver, seen: dict) -> None:
    """Readers during writes: the study's tables queried (in this process and, every tenth
    time, by ``analysis query`` as a user runs it) until the driver ends; each query sees
    whole parts only (no missing value, each (trial, epoch) once)."""
    import analysis

    while driver.poll() is None:
        if (root / "study.json").exists():
            study = analysis.load(str(root))
            epochs = study.sql("SELECT trial_id, epoch, test_acc, train_loss FROM epochs")
            assert epochs.test_acc.notna().all() and epochs.train_loss.notna().all()
            assert not epochs.duplicated(["trial_id", "epoch"]).any()
            heads = study.sql("SELECT count(*) AS n, count(entropy) AS e FROM heads")
            assert heads.n.iloc[0] == heads.e.iloc[0]
            study.sql("SELECT trial_id, status, epochs_done FROM runs")
            seen["queries"] += 1
            seen["rows"] = max(seen["rows"], len(epochs))
            if seen["queries"] % 10 == 0:  # the command line too, as a user runs it
                r = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "analysis",
                        "query",
                        str(root),
                        "SELECT count(*) FROM epochs",
                        "--format",
                        "csv",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert r.returncode == 0, r.stderr
                seen["cli_runs"] += 1
        time.sleep(0.05)


@pytest.mark.slow
def test_killed_trial_resumes_from_its_checkpoint_and_queries_meanwhile_never_see_half_written_parts(
    tmp_path,
):
    """A trial's process SIGKILLed after 2 epochs: Tune retries it from its checkpoint (its
    earlier epochs' rows untouched) and the study finishes.  All the while (before the kill,
    through the retry, to the end) the study's tables are queried: no query sees a
    half-written part."""
    import analysis

    f = write_spec(tmp_path, "kill", data=DATA, epochs=6, grid={"num_heads": [1, 2]}, max_failures=2)
    root = tmp_path / "results" / "kill"
    tables = root / "tables"
    driver = popen("run", str(f), "--num-cpus", "2", cwd=tmp_path)
    seen, failed = {"queries": 0, "rows": 0, "cli_runs": 0}, []

    def readers():
        try:
            _query_while_it_runs(root, driver, seen)
        except BaseException as e:  # noqa: BLE001 - raised again in the test's thread
            failed.append(e)

    reader = threading.Thread(target=readers, daemon=True)
    reader.start()
    try:
        victims: list[int] = []

        def trial_with_two_epochs_training():
            """The process (titled so while it trains, not between reports) of a trial with
            2 epochs done: Tune runs a trial in its folder, named after its key."""
            runs = read_table(tables, "runs")
            keys = (
                set(runs.trial_id[(runs.epochs_done >= 2) & (runs.status == "running")])
                if len(runs)
                else set()
            )
            for pid in processes("ray::ImplicitFunc.train", session=driver.pid):
                try:
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    continue
                if any(f"/{k}_" in cwd for k in keys):
                    victims.append(pid)
                    return True
            return False

        assert wait_for(trial_with_two_epochs_training, driver, every=0.05), (
            driver.stdout.read() if driver.poll() is not None else "timeout"
        )
        before = read_table(tables, "epochs")  # rows of the epochs done before the kill
        os.kill(victims[0], signal.SIGKILL)
        out, _ = driver.communicate(timeout=300)
        assert driver.returncode == 0, out
        reader.join(timeout=120)
    finally:
        kill_session(driver)
    if failed:
        raise failed[0]
    assert not reader.is_alive()
    runs = read_table(tables, "runs")
    epochs = read_table(tables, "epochs")
    assert len(runs) == 2 and (runs.status == "finished").all(), runs
    assert (runs.epochs_done == 6).all()
    assert runs.attempts.max() == 2, "the killed trial was retried once"
    assert not epochs.duplicated(["trial_id", "epoch"]).any()
    assert epochs.groupby("trial_id").size().tolist() == [6, 6]
    # resumed from the checkpoint: earlier epochs were not trained again (their rows,
    # wall-clock seconds included, are exactly the ones written before the kill; parts
    # may since have been compacted, so compare rows, not files)
    killed = runs.trial_id[runs.attempts == 2].iloc[0]
    cols = ["epoch", "train_loss", "test_acc", "seconds"]
    old = before[before.trial_id == killed][cols].sort_values("epoch").reset_index(drop=True)
    old = old[old.epoch < old.epoch.max()]  # the last may have been rewritten by the retry
    new = epochs[(epochs.trial_id == killed) & epochs.epoch.isin(old.epoch)][cols]
    assert len(old) >= 1
    pd.testing.assert_frame_equal(new.sort_values("epoch").reset_index(drop=True), old)
    # the readers: queries and `analysis query` runs while it wrote, and what they saw
    assert seen["queries"] >= 20 and seen["cli_runs"] >= 1 and 0 < seen["rows"]
    final = analysis.load(str(root))
    assert len(final.epochs) == 2 * 6 and not final.epochs.duplicated(["trial_id", "epoch"]).any()


@pytest.mark.long
def test_killed_driver_then_resume_runs_nothing_twice(tmp_path):
    """SIGKILL the driver and its local Ray mid-study (a grid of two cells, two Optuna
    samples each), ``mv`` the storage, ``study resume NAME --storage NEW``: finished
    trials are not run again, every (trial, epoch) row exists once, nothing is written to
    the old place, and Optuna's own API (as optuna-dashboard opens the journal) finds
    every finished trial exactly once, told the value the study selects on.  (The landed
    code once failed the first trial Tune created after a moved study's restore three
    times with "Unable to set up cluster storage … old": its pickled experiment still
    named the old folder.)"""
    import shutil

    import optuna
    from optuna.storages.journal import JournalFileBackend

    f = write_spec(
        tmp_path,
        "drv",
        data="synthetic:200",
        epochs=2,
        grid={"num_heads": [1, 2]},
        sample={"lr": {"loguniform": [0.01, 0.2]}},
        num_samples=2,
        max_concurrent=1,
    )
    tables = tmp_path / "results" / "drv" / "tables"
    driver = popen("run", str(f), "--num-cpus", "2", cwd=tmp_path)
    try:

        def one_done_one_running():
            runs = read_table(tables, "runs")
            return (runs.status == "finished").sum() >= 1 and len(runs) >= 2

        assert wait_for(one_done_one_running, driver), "study ended before the kill"
        kill_session(driver)  # SIGKILL the driver and the local Ray it started (the whole machine "dies")
        driver.wait(timeout=30)
    finally:
        kill_session(driver)
    finished = set(read_table(tables, "runs").query("status == 'finished'").trial_id)
    shutil.move(tmp_path / "results", tmp_path / "moved")
    root = tmp_path / "moved" / "drv"
    tables = root / "tables"
    resumed = popen("resume", "drv", "--storage", "moved", "--num-cpus", "2", cwd=tmp_path)
    try:
        out, _ = resumed.communicate(timeout=300)
    finally:
        kill_session(resumed)
    assert resumed.returncode == 0, out
    assert "Unable to set up cluster storage" not in out
    assert not (tmp_path / "results").exists(), "the resumed study wrote into its old place"
    runs = read_table(tables, "runs").set_index("trial_id")
    assert len(runs) == 4 and (runs.status == "finished").all(), runs
    assert (runs.loc[sorted(finished), "attempts"] == 1).all(), "a finished trial started again"
    epochs = read_table(tables, "epochs")
    assert not epochs.duplicated(["trial_id", "epoch"]).any() and len(epochs) == 8

    # Optuna's own API, as optuna-dashboard opens it
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(root / "optuna.journal")))
    assert sorted(optuna.get_all_study_names(storage)) == ["drv/cell-000", "drv/cell-001"]
    complete = []
    for name in ("drv/cell-000", "drv/cell-001"):
        study = optuna.load_study(study_name=name, storage=storage)
        assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,)), "a trial was never told"
        complete += study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        frame = study.trials_dataframe()
        assert (frame.state == "COMPLETE").sum() == 2 and "params_lr" in frame
        assert set(optuna.importance.get_param_importances(study)) == {"lr"}
    keys = [t.user_attrs["key"] for t in complete]
    assert sorted(keys) == sorted(runs.index), "every finished trial exactly once"
    for t in complete:
        row = runs.loc[t.user_attrs["key"]]
        # Optuna was told the best value of the metric the study selects on (validation by default)
        assert row.selection_metric == "val_acc"
        assert t.params["lr"] == pytest.approx(row.sampled_lr) and t.value == pytest.approx(row.best_val_acc)


@pytest.mark.long
def test_diverging_trial_is_recorded_and_others_finish(tmp_path):
    import ray

    from study.spec.studyfile import load_spec
    from study.tuning.runner import init_ray, run_study

    f = write_spec(tmp_path, "div", data=DATA, epochs=2, grid={"lr": [0.05, 1.0e6]}, schedule={"warmup": 0.0})
    init_ray(None, num_cpus=2)
    try:
        runs = run_study(load_spec(f), storage=str(tmp_path / "st"), verbose=False)
    finally:
        ray.shutdown()
    bad, good = runs[runs.lr > 1], runs[runs.lr < 1]
    assert bad.status.tolist() == ["diverged"] and good.status.tolist() == ["finished"]
    assert good.epochs_done.tolist() == [2] and bad.epochs_done.iloc[0] < 2
    epochs = read_table(tmp_path / "st" / "div" / "tables", "epochs")
    assert len(epochs[epochs.trial_id == bad.trial_id.iloc[0]]) == bad.epochs_done.iloc[0]


# ---------------------------------------------------------------- bad input corpus
CORPUS = sorted(BAD.glob("*.yaml"))


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 20


# every corpus file through `study run` (one line, exit 2, nothing in storage, CPU time):
# tests/study/test_bad_inputs.py; here a sample as real processes
@pytest.mark.parametrize("path", CORPUS[::12], ids=[p.stem for p in CORPUS[::12]])
def test_bad_study_file(tmp_path, path):
    storage = tmp_path / "st"
    r = subprocess.run(
        [sys.executable, "-m", "study", "run", str(path), "--storage", str(storage)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    message = lines[0].split(f"{path}: ", 1)[-1]
    assert str(path) in lines[0] and meets_expectation(path, message, anywhere=True), lines[0]
    assert not storage.exists(), "a rejected study created something in storage"


def _jpeg(size=(32, 32), colour=(200, 10, 10)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="JPEG")
    return buf.getvalue()


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _good(split, cls, i):
    return {f"{split}/{cls}/{i}.jpg": _jpeg(colour=(40 * i % 255, 30, 200))}


def _two_classes():  # a one-class source is refused on its own
    return {
        **_good("train", "cat", 1),
        **_good("test", "cat", 1),
        **_good("train", "dog", 3),
        **_good("test", "dog", 3),
    }


DATA_CASES = {
    "corrupt_jpeg": ({**_two_classes(), "train/cat/2.jpg": b"\xff\xd8not a jpeg"}, "2.jpg"),
    "wrong_image_size": ({**_two_classes(), "train/cat/big.jpg": _jpeg((40, 40))}, "big.jpg"),
    "no_test_split": ({**_good("train", "cat", 1), **_good("train", "dog", 2)}, "test"),
    "classes_differ": ({**_good("train", "cat", 1), **_good("test", "dog", 1)}, "class"),
}


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_bad_data(tmp_path, case, monkeypatch):
    members, needle = DATA_CASES[case]
    archive = _archive(tmp_path / f"{case}.tar.gz", members)
    f = write_spec(tmp_path, case, data=DATA, epochs=1)
    storage = tmp_path / "st"
    env = {**os.environ, "STUDY_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run(
        [sys.executable, "-m", "study", "run", str(f), "--data", str(archive), "--storage", str(storage)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "data" in lines[0], r.stderr
    assert not storage.exists()


def test_unwritable_storage(tmp_path):
    f = write_spec(tmp_path, "ok", data=DATA, epochs=1)
    if os.geteuid() == 0:  # root ignores permission bits: a path under a regular file
        (tmp_path / "file").write_text("x")
        storage = tmp_path / "file" / "st"
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        storage = tmp_path / "ro" / "st"
    r = subprocess.run(
        [sys.executable, "-m", "study", "run", str(f), "--storage", str(storage)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--storage" in r.stderr and str(storage) in r.stderr
    assert not storage.exists()


# ---------------------------------------------------------------- security defaults
def test_cache_and_checkpoint_refuse_pickled_code(tmp_path):
    from study.errors import CheckpointError
    from study.trial.checkpoint import load_checkpoint

    (tmp_path / "checkpoint.pt").write_bytes(code_payload(tmp_path / "pwned", model=None))
    with pytest.raises(CheckpointError, match="checkpoint.pt.*UnpicklingError"):
        load_checkpoint(tmp_path)
    assert not (tmp_path / "pwned").exists()


def test_local_ray_is_loopback_and_starts_no_dashboard(monkeypatch):
    import ray

    from study.tuning import runner

    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    runner.init_ray(None, num_cpus=1)
    # a new local Ray (never an existing cluster or $RAY_ADDRESS), through ray.init's public parameters only
    # (its loopback sockets: tests/study/tuning/test_cluster.py)
    assert seen["include_dashboard"] is False and seen["address"] == "local"
    assert not [k for k in seen if k.startswith("_")], seen


def test_cluster_yaml_holds_no_secrets():
    import re

    text = (REPO_ROOT / "cluster.yaml").read_text()
    patterns = [
        r"AKIA[0-9A-Z]{16}",
        r"(?i)aws_secret_access_key",
        r"(?i)aws_access_key_id",
        r"(?i)password\s*:",
        r"(?i)secret\s*:",
        r"(?i)token\s*:",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        r"ssh_private_key",
    ]
    for p in patterns:
        assert not re.search(p, text), p
