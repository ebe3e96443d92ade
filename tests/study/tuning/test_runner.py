"""Studies on Ray Tune (local Ray, CPU): DDP trial, grid x Optuna, interrupt + resume."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from study.results.tables import read_table
from study.spec.studyfile import load_spec
from tests.helpers import Output, default_sigint, kill_session, popen, processes, wait_for

#: a Python warning as the console shows it (`…: FutureWarning: Tip: …`)
WARNING_LINE = r"\b\w*Warning: |\bTip: "
TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}
BASE = {
    "data": "synthetic:100",
    "epochs": 1,
    "batch_size": 25,
    "training": {"head_images": 4},
    "model": TINY,
    "resources": {"cpus_per_trial": 1},
}


@pytest.fixture(scope="module")
def ray_local():
    import ray

    from study.tuning.runner import init_ray

    init_ray(None, num_cpus=2)
    yield
    ray.shutdown()


def test_importing_the_runner_writes_no_ray_setting():
    """Ray's settings are the function's that starts Ray (a fresh interpreter: nothing imported before)."""
    code = (
        "import os, sys; before = dict(os.environ); import study.tuning.runner; "
        "print(sorted(set(os.environ.items()) ^ set(before.items())))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_starting_ray_sets_rays_documented_settings_first(monkeypatch):
    """:func:`init_ray` sets them before it starts Ray; a setting the environment gives is kept,
    except those the run contract needs (Tune's own SIGINT handler off, no default loggers)."""
    import ray

    from study.tuning import runner

    for name in (*runner.RAY_DEFAULTS, *runner.RAY_SETTINGS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_DEDUP_LOGS", "0")
    monkeypatch.setenv("TUNE_DISABLE_SIGINT_HANDLER", "0")
    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(os.environ))
    runner.init_ray(None, num_cpus=1)
    assert seen["RAY_DEDUP_LOGS"] == "0" and seen["RAY_TRAIN_V2_ENABLED"] == "1"
    assert seen["TUNE_DISABLE_STRICT_METRIC_CHECKING"] == "1" and seen["RAY_AIR_NEW_OUTPUT"] == "0"
    assert seen["TUNE_DISABLE_SIGINT_HANDLER"] == "1" and seen["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] == "1"


def spec_file(tmp_path, doc, name="s"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"name": name, **doc}))
    return p


@pytest.mark.long
def test_two_trial_study_with_a_ddp_trial(tmp_path, ray_local):
    from study.tuning.runner import run_study

    doc = {
        **BASE,
        "models": [{"encoding": "quadratic"}, {"encoding": "learned", "pos_dim": 4}],
        "resources": {"cpus_per_trial": 1, "workers_per_trial": 2},
    }
    spec = load_spec(spec_file(tmp_path, doc, "ddp"))
    runs = run_study(spec, storage=str(tmp_path / "st"), verbose=False)
    assert len(runs) == 2 and (runs.status == "finished").all()
    assert (runs.world_size == 2).all(), "each trial ran as 2 DDP ranks"
    epochs = read_table(tmp_path / "st" / "ddp" / "tables", "epochs")
    assert len(epochs) == 2 and not epochs.duplicated(["trial_id", "epoch"]).any()


@pytest.mark.long
def test_grid_axis_times_sampled_axis(tmp_path, ray_local):
    from study.tuning.runner import run_study

    doc = {
        **BASE,
        "grid": {"num_heads": [1, 3]},
        "sample": {"lr": {"loguniform": [0.01, 0.2]}},
        "num_samples": 3,
    }
    spec = load_spec(spec_file(tmp_path, doc, "mixed"))
    runs = run_study(spec, storage=str(tmp_path / "st"), verbose=False)
    assert len(runs) == 6 and (runs.status == "finished").all()
    per_cell = runs.groupby("num_heads").size().to_dict()
    assert per_cell == {1: 3, 3: 3}, per_cell
    # Optuna sampled the lr of every trial, within bounds, distinct within a cell
    assert runs.lr.between(0.01, 0.2).all()
    assert (runs.groupby("num_heads").lr.nunique() == 3).all()
    assert (runs.sampled_lr == runs.lr).all()


def _study(tmp_path, *args, **kw):
    # Ray's default (token authentication, with its notice) whatever this shell sets
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "study", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.mark.long
def test_interrupt_then_resume_keeps_the_study_that_started(tmp_path):
    """Run with command-line overrides, SIGINT once a trial has finished, change the study
    file: `study resume NAME` (no overrides on its command line) runs the study that
    started (its overrides, from study.json), under the same trial ids, trains only what was
    left (finished trials untouched: same ledgers, same epoch parts; the interrupted ones one
    attempt more) and `study status` says so.  Both consoles are quiet (no Ray log line, no
    Python warning); the trials ran on the local Ray's loopback node address."""
    import json
    import re

    doc = {
        **BASE,
        "epochs": 2,
        "data": "synthetic:200",
        "models": [{"encoding": "quadratic"}],
        "grid": {"num_heads": [1, 2]},
        "max_concurrent": 1,
    }
    f = spec_file(tmp_path, doc, "intr")
    overrides = ["model.hidden=8", "seeds=[0,1]", "models[0].isotropic=true"]
    root = tmp_path / "results" / "intr"
    tables = root / "tables"
    driver = _study(
        tmp_path,
        "run",
        str(f),
        *overrides,
        "--num-cpus",
        "2",
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    output = Output(driver)
    finished, frozen = set(), []

    def one_finished_one_frozen_running():
        """A trial takes well under a second here, less than the driver may take to act on
        SIGINT: the running trial's process is frozen (SIGSTOP) first, and kept frozen only
        if its row still says `running` once it is (else thawed, and the next one tried)."""
        nonlocal finished, frozen
        runs = read_table(tables, "runs")
        if not ((runs.status == "finished").any() and (runs.status == "running").any()):
            return False
        frozen = processes("ray::ImplicitFunc.train", session=driver.pid)
        for p in frozen:
            os.kill(p, signal.SIGSTOP)
        runs = read_table(tables, "runs")
        finished = set(runs.trial_id[runs.status == "finished"])
        if frozen and (runs.status == "running").any():
            return True
        for p in frozen:
            os.kill(p, signal.SIGCONT)
        return False

    try:
        if not wait_for(one_finished_one_frozen_running, driver, timeout=240, every=0.05):
            kill_session(driver)
            pytest.fail("study ended before it could be interrupted:\n" + output.text())
        driver.send_signal(signal.SIGINT)
        # Tune would stop the trial after its grace period; the frozen process is killed at once
        assert output.wait_for_line("SIGINT received"), output.text()
        for p in frozen:
            os.kill(p, signal.SIGKILL)
        driver.wait(timeout=120)
        out = output.text()
    finally:
        kill_session(driver)
    assert driver.returncode == 130, out  # interrupted by SIGINT (study.errors)
    assert "study resume intr" in out and "Tuner.restore" not in out
    assert not re.search(WARNING_LINE, out), out
    before = read_table(tables, "runs")
    assert 1 <= (before.status == "finished").sum() < 4
    # the trial that was running is `interrupted` (not ASHA's `stopped`), none left `running`
    assert set(before.status) <= {"finished", "interrupted"} and (before.status == "interrupted").sum() >= 1
    mtimes = {p: p.stat().st_mtime_ns for t in finished for p in (tables / "epochs" / t).glob("*.parquet")}
    ledgers = {p.stem: p.read_text() for p in (root / "trials").glob("*.json")}
    interrupted = set(before.trial_id[before.status == "interrupted"])
    assert finished | interrupted <= set(ledgers), (sorted(ledgers), before)
    meta = json.loads((root / "study.json").read_text())
    assert (
        meta["overrides"] == overrides
        and meta["raw"]["seeds"] == [0, 1]
        and meta["raw"]["model"]["hidden"] == 8
    )
    saved = yaml.safe_load((root / "study.yaml").read_text())
    assert saved["model"]["hidden"] == 8 and saved["models"] == [{"encoding": "quadratic", "isotropic": True}]
    # the file changes after the run started: resume must not read it again
    f.write_text(yaml.safe_dump({"name": "intr", **doc, "model": {**TINY, "hidden": 32}, "seeds": [7]}))

    resumed = _study(tmp_path, "resume", "intr")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    assert "(overrides: model.hidden=8 'seeds=[0,1]' 'models[0].isotropic=true')" in out
    # Ray's lines: in logs/ray.log (in its format), none on the console; no Python warning there either
    assert not re.search(r"\b(INFO|WARNING|ERROR)\b\s+[\w.]+\.py:\d+ -- |\(pid=", out), out
    assert not re.search(WARNING_LINE, out), out
    ray_log = (root / "logs" / "ray.log").read_text()
    assert re.search(r"^\S+ \S+\t(INFO|WARNING|ERROR) [\w.]+\.py:\d+ -- ", ray_log, flags=re.M), ray_log
    after = read_table(tables, "runs")
    assert len(after) == 4 and (after.status == "finished").all(), after
    # the same study: every trial id it had, its ledger for each; the finished trials' ledgers untouched,
    # the interrupted ones counted one attempt more
    assert set(before.trial_id) <= set(after.trial_id), (before, after)
    assert {p.stem for p in (root / "trials").glob("*.json")} == set(after.trial_id)
    for t in finished:
        assert (root / "trials" / f"{t}.json").read_text() == ledgers[t], t
    for t in interrupted:
        now = (root / "trials" / f"{t}.json").read_text()
        assert json.loads(now)["attempts"] == json.loads(ledgers[t])["attempts"] + 1, (t, ledgers[t], now)
    assert all(ip.startswith("127.") for ip in after.node_ip), after.node_ip  # the local Ray's loopback node
    assert sorted(after.seed) == [0, 0, 1, 1] and set(after.hidden) == {8} and set(after.isotropic) == {True}
    # finished trials did not run again: same attempt count, untouched epoch parts
    assert (after.set_index("trial_id").loc[sorted(finished), "attempts"] == 1).all()
    assert all(p.stat().st_mtime_ns == m for p, m in mtimes.items())
    epochs = read_table(tables, "epochs")
    assert not epochs.duplicated(["trial_id", "epoch"]).any()
    assert len(epochs) == 4 * 2

    status = subprocess.run(
        [sys.executable, "-m", "study", "status", "intr"], cwd=tmp_path, capture_output=True, text=True
    )
    assert status.returncode == 0 and "4 trials recorded of 4 planned: 4 finished" in status.stdout
    assert "overrides: model.hidden=8 'seeds=[0,1]' 'models[0].isotropic=true'" in status.stdout


@pytest.mark.long
def test_asha_decisions_survive_a_lost_driver(tmp_path):
    """ASHA stops the trial that is worse at its first rung, and the row says `stopped`
    at once; the driver SIGKILLed after that, `study resume` keeps the decision (the
    stopped trial is not trained on, its epochs untouched) and continues the rest.
    ASHA's rungs start empty after a resume (docs/reliability.md), so the decision
    kept is the one recorded in `runs`."""
    doc = {
        **BASE,
        "epochs": 3,
        "data": "synthetic:400",
        "grid": {"lr": [0.1, 1e-7, 0.05]},
        "max_concurrent": 1,
        "validation": 100,
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 2},
    }
    f = spec_file(tmp_path, doc, "asha")
    tables = tmp_path / "results" / "asha" / "tables"
    driver = popen("run", str(f), "--num-cpus", "2", cwd=tmp_path)
    deadline = time.time() + 300
    runs = None
    while time.time() < deadline and driver.poll() is None:
        runs = read_table(tables, "runs")
        if (runs.status == "stopped").any():
            break
        time.sleep(0.2)
    assert driver.poll() is None and (runs.status == "stopped").any(), (
        driver.stdout.read() if driver.poll() else runs
    )
    kill_session(driver)
    driver.wait()
    stopped = runs[runs.status == "stopped"].iloc[0]
    assert stopped.lr == 1e-7 and stopped.epochs_done == 1, (
        runs
    )  # the learning rate that cannot learn, at rung 1
    rows = read_table(tables, "epochs").query("trial_id == @stopped.trial_id")
    assert len(rows) == 1

    resumed = _study(tmp_path, "resume", "asha", "--num-cpus", "2")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    after = read_table(tables, "runs").set_index("trial_id")
    assert after.loc[stopped.trial_id, "status"] == "stopped" and after.loc[stopped.trial_id, "attempts"] == 1
    assert after.loc[stopped.trial_id, "epochs_done"] == 1
    again = read_table(tables, "epochs").query("trial_id == @stopped.trial_id")
    assert again.reset_index(drop=True).equals(rows.reset_index(drop=True))  # not trained on
    others = after.drop(index=stopped.trial_id)
    assert len(others) == 2 and set(others.status) <= {"finished", "stopped"}, after
    epochs = read_table(tables, "epochs")
    assert not epochs.duplicated(["trial_id", "epoch"]).any()
    assert (epochs.groupby("trial_id").epoch.max() + 1).to_dict() == after.epochs_done.to_dict()
