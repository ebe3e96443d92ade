"""Bookkeeping commands: no torch or Ray imported, `study list`, `STUDY_STORAGE`,
stale `running` trials, cluster flags refused before anything starts."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from study.results.tables import part_path, write_part
from study.status.bookkeeping import STALE_MIN_S, shown_status, status_table

HEAVY = ("torch", "ray", "optuna")


def _run(args, cwd, *, importtime=False, env=None):
    full_env = {**os.environ, **(env or {})}
    full_env.pop("RAY_ADDRESS", None)
    if env is None or "STUDY_STORAGE" not in env:
        full_env.pop("STUDY_STORAGE", None)
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), *args]
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def _run_row(trial_id, *, status="finished", epochs_done=2, device_seconds=4.0, updated_at=None, **kw):
    return {
        "trial_id": trial_id,
        "study": "s",
        "name": "SA",
        "status": status,
        "epochs_done": epochs_done,
        "epochs": 2,
        "best_test_acc": 0.5,
        "device_seconds": device_seconds,
        "world_size": 1,
        "attempts": 1,
        "updated_at": time.time() if updated_at is None else updated_at,
        **kw,
    }


def make_study(storage: Path, name: str, rows: list[dict], planned: int) -> Path:
    root = storage / name
    root.mkdir(parents=True)
    (root / "study.json").write_text(json.dumps({"name": name, "num_trials": planned}))
    for r in rows:
        write_part(part_path(root / "tables", "runs", r["trial_id"]), [r])
    return root


@pytest.fixture
def storage(tmp_path):
    st = tmp_path / "st"
    make_study(st, "done", [_run_row("c000-s000"), _run_row("c001-s000")], 2)
    old = time.time() - 10 * STALE_MIN_S
    make_study(
        st,
        "dead",
        [
            _run_row("c000-s000"),
            _run_row("c001-s000", status="running", epochs_done=1, device_seconds=2.0, updated_at=old),
        ],
        3,
    )
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ndata: synthetic:100\nepochs: 1\n")
    return st


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["status", "--help"],
        ["run", "--help"],
        ["list", "--help"],
        ["validate", "s.yaml"],
        ["status", "done", "--storage", "st"],
        ["status", "dead", "--storage", "st"],
        ["list", "--storage", "st"],
    ],
    ids=lambda a: "-".join(a),
)
def test_bookkeeping_commands_import_neither_torch_nor_ray(storage, args):
    r = _run(["-m", "study", *args], storage.parent, importtime=True)
    assert r.returncode == 0, r.stderr[-2000:]
    heavy = {m for m in _imported(r.stderr) if m.split(".")[0] in HEAVY}
    assert not heavy, sorted(heavy)[:10]


def test_status_shows_a_dead_drivers_trial_as_stale(storage):
    r = _run(["-m", "study", "status", "dead", "--storage", "st"], storage.parent)
    assert r.returncode == 0, r.stderr
    assert "2 trials recorded of 3 planned: 1 finished, 1 stale" in r.stdout, r.stdout
    assert "study resume" in r.stdout
    r = _run(["-m", "study", "status", "done", "--storage", "st"], storage.parent)
    assert "2 finished" in r.stdout and "stale" not in r.stdout


def test_stale_threshold_follows_the_epoch_time():
    import pandas as pd

    now = 1_000_000.0
    runs = pd.DataFrame(
        [
            _run_row("fresh", status="running", updated_at=now - 10),
            # 10 s epochs: stale after max(300 s, 30 s) = 300 s
            _run_row("short", status="running", epochs_done=2, device_seconds=20.0, updated_at=now - 400),
            # 1000 s epochs: stale only after 3000 s
            _run_row("long", status="running", epochs_done=2, device_seconds=2000.0, updated_at=now - 2000),
            _run_row(
                "long-dead", status="running", epochs_done=2, device_seconds=2000.0, updated_at=now - 3100
            ),
            # no epoch yet: the study's longest epoch (1000 s) x 3
            _run_row("first", status="running", epochs_done=0, device_seconds=0.0, updated_at=now - 2000),
            # DDP: device-seconds count every rank
            _run_row(
                "ddp",
                status="running",
                epochs_done=1,
                device_seconds=400.0,
                world_size=4,
                updated_at=now - 250,
            ),
            _run_row("ended", status="finished", updated_at=now - 10**6),
        ]
    )
    shown = dict(zip(runs.trial_id, shown_status(runs, now=now)))
    assert shown == {
        "fresh": "running",
        "short": "stale",
        "long": "running",
        "long-dead": "stale",
        "first": "running",
        "ddp": "running",
        "ended": "finished",
    }
    assert "stale" in status_table(runs, 7, now=now)


def test_stale_before_any_epoch_uses_an_hour():
    import pandas as pd

    now = 1_000_000.0
    runs = pd.DataFrame(
        [
            _run_row("a", status="running", epochs_done=0, device_seconds=0.0, updated_at=now - 3000),
            _run_row("b", status="running", epochs_done=0, device_seconds=0.0, updated_at=now - 4000),
        ]
    )
    assert shown_status(runs, now=now).tolist() == ["running", "stale"]


def test_study_list(storage):
    r = _run(["-m", "study", "list", "--storage", "st"], storage.parent)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["name", "trials", "statuses", "last_update"]
    assert lines[1].split()[:4] == ["dead", "2/3", "1", "finished,"] and "1 stale" in lines[1]
    assert lines[2].split()[:4] == ["done", "2/2", "2", "finished"]
    r = _run(["-m", "study", "list", "--storage", "nowhere"], storage.parent)
    assert r.returncode == 2 and r.stderr.strip() == "study list: error: --storage: no folder nowhere"


def test_study_storage_sets_the_default_of_every_command(storage, tmp_path):
    env = {"STUDY_STORAGE": str(storage)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert "2 finished" in _run(["-m", "study", "status", "done"], elsewhere, env=env).stdout
    assert "done" in _run(["-m", "study", "list"], elsewhere, env=env).stdout
    q = _run(
        ["-m", "analysis", "query", "done", "SELECT count(*) AS n FROM runs", "--format", "csv"],
        elsewhere,
        env=env,
    )
    assert q.returncode == 0 and q.stdout.split() == ["n", "2"], q.stderr
    # study run and resume look there too (refused before Ray starts: the name exists / is not a study)
    (elsewhere / "done.yaml").write_text("name: done\ndata: synthetic:100\nepochs: 1\n")
    r = _run(["-m", "study", "run", "done.yaml"], elsewhere, env=env)
    assert r.returncode == 2 and f"already exists in {storage}" in r.stderr, r.stderr
    r = _run(["-m", "study", "resume", "nosuch"], elsewhere, env=env)
    assert r.returncode == 2 and f"no study 'nosuch' in {storage}" in r.stderr
    # an explicit --storage wins
    r = _run(["-m", "study", "status", "done", "--storage", str(elsewhere)], elsewhere, env=env)
    assert r.returncode == 2 and "no study 'done'" in r.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--address", "auto"], "--address auto: RAY_ADDRESS is not set"),
        (["--address", "10.0.0.1:6379"], "--shared-storage"),
        (["--address", "10.0.0.1:6379", "--storage", "st"], "is a local folder"),
    ],
)
@pytest.mark.parametrize("command", ["run", "resume"])
def test_cluster_flags_refused_in_one_line(storage, args, needle, command):
    target = ["s.yaml", "--name", "fresh"] if command == "run" else ["done", "--storage", "st"]
    r = _run(["-m", "study", command, *target, *args], storage.parent)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"study {command}: error: "), (
        r.stderr
    )
    assert needle in lines[0]
    assert not (storage / "fresh").exists() and not Path(storage.parent / "results").exists()


@pytest.mark.parametrize("mode", ["disabled", "k8s"])
@pytest.mark.parametrize("command", ["run", "resume"])
def test_local_ray_without_token_auth_refused_in_one_line(storage, mode, command):
    """The local Ray's servers listen on loopback: without the token every user of the
    host could run code in it, so `RAY_AUTH_MODE` other than `token` is refused for it,
    before Ray starts."""
    target = ["s.yaml", "--name", "fresh"] if command == "run" else ["done", "--storage", "st"]
    r = _run(["-m", "study", command, *target], storage.parent, env={"RAY_AUTH_MODE": mode})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"study {command}: error: "), (
        r.stderr
    )
    assert f"RAY_AUTH_MODE={mode}" in lines[0] and "token" in lines[0]
    assert not (storage / "fresh").exists() and not Path(storage.parent / "results").exists()


def test_token_auth_check_is_for_the_local_ray_only(monkeypatch):
    from study.tuning.cluster import ClusterError, check_local_auth

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for mode in (None, "token", "TOKEN"):
        if mode is None:
            monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
        else:
            monkeypatch.setenv("RAY_AUTH_MODE", mode)
        check_local_auth(None)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    check_local_auth("10.0.0.1:6379")  # a cluster's owner decides for the cluster
    for local in (None, "local"):
        with pytest.raises(ClusterError, match="RAY_AUTH_MODE=disabled"):
            check_local_auth(local)


@pytest.mark.parametrize("args", [["status", "done", "--storage", "st"], ["list", "--storage", "st"]])
def test_output_into_a_closed_pipe_is_quiet(storage, args):
    """`study status … | head -1`: the reader closes the pipe; no traceback, SIGPIPE's status."""
    env = {**os.environ}
    env.pop("STUDY_STORAGE", None)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        r = subprocess.run(
            [sys.executable, "-m", "study", *args],
            cwd=storage.parent,
            env=env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert r.returncode == 141 and r.stderr == "", r.stderr


def test_status_marks_a_trial_that_did_not_train_and_says_why():
    """runs.failed_to_train (study.trial.verdict) shows beside the trial's state and under the table."""
    why = "test accuracy 10.0 % within noise of chance (10 % ± 0.9 pp on 10000 images) after the warm-up"
    runs = pd.DataFrame([_run_row("c0-s0", failed_to_train=why), _run_row("c1-s0", failed_to_train=None)])
    text = status_table(runs, 2)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("c0-s0"))
    assert "finished (did not train)" in row
    assert "did not train" not in next(
        line for line in text.splitlines() if line.lstrip().startswith("c1-s0")
    )
    assert "did not train: 1 of 2 trials" in text and f"c0-s0: {why}" in text


def test_status_of_tables_written_before_the_verdict_marks_nothing():
    assert "did not train" not in status_table(pd.DataFrame([_run_row("c0-s0")]), 1)
