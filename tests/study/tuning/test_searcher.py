"""The Optuna studies of a study live in Optuna's own storage (``optuna.journal``) and
survive a killed driver: after ``study resume`` Optuna's API finds every finished
trial exactly once; the searcher state Tune saves is JSON."""

import os
import subprocess
import sys
import time

import pytest
import yaml

from study.tables import read_table
from tests.helpers import kill_session as _kill_session

TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}


def _study(cwd, *args):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("STUDY_STORAGE", None)
    return subprocess.Popen([sys.executable, "-m", "study", *args], cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_optuna_journal_after_killed_driver_and_resume(tmp_path):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    f = tmp_path / "opt.yaml"
    f.write_text(yaml.safe_dump({
        "name": "opt", "data": "synthetic:200", "epochs": 2, "batch_size": 25, "model": TINY,
        "training": {"head_images": 4}, "resources": {"cpus_per_trial": 1}, "max_concurrent": 1,
        "grid": {"num_heads": [1, 2]}, "sample": {"lr": {"loguniform": [0.01, 0.2]}}, "num_samples": 2}))
    root = tmp_path / "results" / "opt"
    driver = _study(tmp_path, "run", str(f), "--num-cpus", "2")
    try:
        deadline = time.time() + 240
        while time.time() < deadline and driver.poll() is None:
            runs = read_table(root / "tables", "runs")
            if (runs.status == "finished").sum() >= 1 and len(runs) >= 2:
                break
            time.sleep(0.2)
        assert driver.poll() is None, "study ended before the kill:\n" + driver.stdout.read()
    finally:
        _kill_session(driver)
        driver.wait(timeout=30)
    resumed = _study(tmp_path, "resume", "opt", "--num-cpus", "2")
    try:
        out, _ = resumed.communicate(timeout=300)
    finally:
        _kill_session(resumed)
    assert resumed.returncode == 0, out
    runs = read_table(root / "tables", "runs").set_index("trial_id")
    assert len(runs) == 4 and (runs.status == "finished").all(), runs

    # Optuna's own API, as optuna-dashboard opens it
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(root / "optuna.journal")))
    assert sorted(optuna.get_all_study_names(storage)) == ["opt/cell-000", "opt/cell-001"]
    complete = []
    for name in ("opt/cell-000", "opt/cell-001"):
        study = optuna.load_study(study_name=name, storage=storage)
        assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,)), "a trial was never told"
        done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        complete += done
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
