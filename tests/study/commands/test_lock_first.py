"""One study, one driver (issue 45, finding 4): every command that takes a study's lock takes it
before Ray or torch is imported, so a second driver is refused in one line naming the holder in
the time the CLI takes to start, not after starting a Ray of its own (10-19 s, 3.7 s CPU, 833 MB)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import yaml

from study.tuning.lock import LOCK, StudyLock

DOC = {
    "name": "lk",
    "data": "synthetic:100",
    "epochs": 1,
    "batch_size": 25,
    "training": {"head_images": 4},
    "model": {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2},
    "models": [{"encoding": "quadratic"}],
    "resources": {"cpus_per_trial": 1},
}

#: each command through study.cli.main in ONE child (one interpreter start for all of them): its exit
#: status, stderr and CPU seconds, then which of Ray and torch the child imported
CHILD = """
import contextlib, io, json, sys, time
from study.cli import main
done = []
for argv in json.loads(sys.argv[1]):
    err, t0 = io.StringIO(), time.process_time()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    done.append({"argv": argv, "code": code, "err": err.getvalue(), "cpu": time.process_time() - t0})
print(json.dumps({"done": done, "imported": [m for m in ("ray", "torch") if m in sys.modules]}))
"""


def refused_under_locks(tmp_path, roots, commands, *, cpu: float):
    """``commands`` (each ``study`` argv) run in one child while this process holds the lock of each of
    ``roots``: each must be refused in one line naming this process and that root's lock, exit 2, with
    Ray and torch never imported, nothing written, and in less than ``cpu`` seconds of child CPU."""
    locks = [StudyLock(root=str(p), name=p.name).acquire() for p in dict.fromkeys(roots)]
    before = sorted(tmp_path.rglob("*"))
    try:
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(commands)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "STUDY_CACHE_DIR": str(tmp_path / "cache")},
        )
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        after = sorted(tmp_path.rglob("*"))
    finally:
        for lock in locks:
            lock.release()
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    holder = f"(pid {os.getpid()} on {os.uname().nodename}, since "
    for run, root in zip(report["done"], roots, strict=True):
        lines = run["err"].strip().splitlines()
        assert run["code"] == 2 and len(lines) == 1, run
        assert lines[0].startswith(f"study {run['argv'][0]}: error: "), run
        assert holder in lines[0] and lines[0].endswith(f"; lock {root / LOCK}"), run
    assert report["imported"] == [], "a refused second driver imported " + " and ".join(report["imported"])
    child_cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    assert child_cpu < cpu, (
        f"{len(commands)} refusals took {child_cpu:.2f} s CPU (with the interpreter's start)"
    )
    assert after == before, "a refused driver wrote something"


def test_a_locked_study_is_refused_before_ray_or_torch(tmp_path):
    """The test holds the lock of a new study (as a first `study run` does from its start), of a
    stored one and of a `study train --out` folder: a second `study run` / `study resume`, local or
    with --address (a cluster to join), and a second `study train` are refused by the lock before
    Ray or torch is imported (train's was after the model's size check and the data's loading:
    3.9 s CPU; run's after starting Ray)."""
    f = tmp_path / "lk.yaml"
    f.write_text(yaml.safe_dump(DOC))
    new, stored, out = tmp_path / "st" / "lk", tmp_path / "st" / "old", tmp_path / "out"
    stored.mkdir(parents=True)
    (stored / "study.json").write_text(
        json.dumps({"name": "old", "file": str(f), "raw": DOC, "num_trials": 1})
    )
    cluster = ["--address", "127.0.0.1:1", "--shared-storage"]
    storage = ["--storage", str(tmp_path / "st")]
    train = [
        "train",
        "--data",
        "synthetic:100",
        "--epochs",
        "1",
        "--hidden",
        "16",
        "--layers",
        "1",
        "--out",
        str(out),
    ]
    refused_under_locks(
        tmp_path,
        [new, new, stored, stored, out],
        [
            ["run", str(f), *storage],
            ["run", str(f), *storage, *cluster],
            ["resume", "old", *storage],
            ["resume", "old", *storage, *cluster],
            train,
        ],
        cpu=1.5,
    )


def test_a_folder_holding_only_a_dead_drivers_lock_is_no_study(study_in_process, tmp_path):
    """A driver killed after taking the lock (while it checked the data, now after the lock) leaves the
    folder with its lock file only: the next `study run` of that name goes on (here to the data check,
    which refuses an empty folder), not "already exists" with no study.json to resume."""
    f = tmp_path / "lk.yaml"
    f.write_text(yaml.safe_dump(DOC))
    (tmp_path / "empty").mkdir()
    root = tmp_path / "st" / "lk"
    root.mkdir(parents=True)
    (root / LOCK).write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": 0}))
    code, out, err, _ = study_in_process("run", f, "--data", tmp_path / "empty", "--storage", tmp_path / "st")
    assert code == 2 and len(err) == 1 and f"{f}: data: " in err[0], err
    assert list(root.iterdir()) == []
    (root / "study.json").write_text("{}")  # a study that started: kept
    code, out, err, _ = study_in_process("run", f, "--storage", tmp_path / "st")
    assert code == 2 and err == [
        f"study run: error: --name: study 'lk' already exists in {tmp_path / 'st'} "
        "(continue it with `study resume lk` or pick another --name)"
    ], err
