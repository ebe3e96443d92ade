"""The run contract (issue #17): each case through the real CLI on tiny studies, asserting
the one line, the exit status and what is on disk.

Findings -> tests:
  trial failing at start invisible, exit 0            test_failed_trial_then_tamper_move_and_resume
  cause masked by Ray's copy of the exception          test_every_project_exception_pickles,
                                                       test_cause_survives_rays_copy
  Ctrl-C / SIGTERM: stopped vs interrupted, attempts,  test_sigkill_in_epoch0_sigterm_lock_and_resume
    device_seconds, Tuner.restore advice, SIGABRT      (+ SIGINT: tests/study/tuning/test_runner.py::
                                                       test_interrupt_then_resume_keeps_the_study_that_started)
  study train --out reuses another configuration       test_train_refuses_another_configuration_and_falls_
                                                       back_to_the_previous_checkpoint
  GPU request fails after 72 s; hangs on cpus/address  test_preflight_refusals_are_fast
  pickle payload in Ray's state runs on resume         test_failed_trial_then_tamper_move_and_resume
                                                       (no Ray file is read back)
  two drivers of one study                             test_sigkill_in_epoch0_sigterm_lock_and_resume,
                                                       test_lock_*
  moved study writes into its old place                test_failed_trial_then_tamper_move_and_resume
  0-byte experiment state after a full disk            test_failed_trial_then_tamper_move_and_resume
  truncated last checkpoint not falling back           test_train_refuses_another_configuration_and_falls_
                                                       back_to_the_previous_checkpoint
  worker SIGKILLed in epoch 0 keeps attempts 1         test_sigkill_in_epoch0_sigterm_lock_and_resume
  Ctrl-C mid-epoch: its time missing from              test_ctrl_c_mid_epoch_then_resume_
    device_seconds                                     accumulates_device_seconds
  storage failing mid-study leaves trials running      test_storage_failure_stops_the_study
  cpus_per_trial beyond every node of a cluster        test_cluster_resources_are_checked_per_node
  Ray's pickles on S3 never loaded                     tests/study/results/test_storage_s3.py::
                                                       test_killed_driver_on_s3_resumes_from_the_projects_own_objects
"""

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from study.results.tables import read_table
from tests.helpers import (
    TINY,
    Output,
    code_payload,
    default_sigint,
    fill_disk,
    images_lasting,
    kill_session,
    ledger_seconds,
    popen,
    processes,
    read_until,
    run_cli,
    session_pids,
    wait_for,
    write_spec,
)

TRAIN = [
    "--hidden",
    "16",
    "--layers",
    "1",
    "--intermediate",
    "16",
    "--data",
    "synthetic:100",
    "--batch-size",
    "50",
    "--quiet",
    "--no-head-stats",
    "--epochs",
    "2",
]


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")


def study(*args, cwd, timeout=300, env=None):
    return run_cli(cwd, *args, timeout=timeout, env=env)


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ": error: " in ln]


# ---------------------------------------------------------------- exceptions
def _project_exceptions():
    import importlib
    import pkgutil

    import analysis
    import study

    found = set()
    for pkg in (study, analysis):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if ".commands." in info.name or info.name.endswith("__main__"):
                continue
            try:
                mod = importlib.import_module(info.name)
            except ImportError:
                continue
            for obj in vars(mod).values():
                if (
                    isinstance(obj, type)
                    and issubclass(obj, BaseException)
                    and obj.__module__.split(".")[0] in ("study", "analysis")
                ):
                    found.add(obj)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__name__}")


def _instance(cls):
    import inspect

    params = [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self"
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
    ]
    return cls(*[f"{p.name} value" for p in params]) if params else cls("a message: got 'learnd'")


def test_every_project_exception_pickles():
    classes = _project_exceptions()
    names = {c.__name__ for c in classes}
    assert {"ConfigError", "SpecError", "DataError", "StorageError", "CheckpointError"} <= names, names
    for cls in classes:
        e = _instance(cls)
        copy = pickle.loads(pickle.dumps(e))
        assert type(copy) is cls and str(copy) == str(e), cls


def test_cause_survives_rays_copy():
    """A trial's exception crosses processes as Ray's RayTaskError(cause) (cloudpickle):
    the copy keeps the real message, and the contract's one-line cause names it."""
    import ray.cloudpickle as cloudpickle
    from ray.exceptions import RayTaskError

    from study.errors import cause
    from study.models import ModelConfig
    from study.models.config import ConfigError

    with pytest.raises(ConfigError) as info:
        ModelConfig(encoding="learnd")
    wrapped = RayTaskError("ImplicitFunc.train", "Traceback ...", info.value)
    copy = cloudpickle.loads(cloudpickle.dumps(wrapped.as_instanceof_cause()))
    line = cause(copy)
    assert line.startswith("ConfigError: encoding: must be one of") and "got 'learnd'" in line, line
    assert "missing" not in line


# ---------------------------------------------------------------- study train checkpoints
@pytest.mark.slow
def test_train_refuses_another_configuration_and_falls_back_to_the_previous_checkpoint(tmp_path, study_here):
    """One `study train --out DIR` folder, trained once (N_h=4): a train of another
    configuration into it is refused (one line, exit 2, no size mismatch), nothing
    rewritten, an unfinished folder too; then its last checkpoint cut short (as by a full
    disk): the same command falls back to the previous one with one warning; both
    damaged: one line naming the file, exit 2."""
    from study.trial.checkpoint import load_checkpoint

    out = tmp_path / "t"
    r = study_here("train", *TRAIN, "--num-heads", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr
    # its lock is released when the command ends (not left for the next one to take over)
    assert not (out / ".study.lock").exists()
    ckpt = (out / "checkpoint" / "checkpoint.pt").read_bytes()
    runs = read_table(out / "tables", "runs")
    for flags, field in ((["--num-heads", "9"], "num_heads: 4 -> 9"), (["--lr", "0.05"], "lr: 0.1 -> 0.05")):
        r = study_here("train", *TRAIN, "--num-heads", "4", *flags, "--out", str(out))
        assert r.returncode == 2, r.stderr
        assert error_lines(r.stderr) == r.stderr.strip().splitlines() and len(error_lines(r.stderr)) == 1, (
            r.stderr
        )
        assert field in r.stderr and "size mismatch" not in r.stderr
        # nothing rewritten: the checkpoint and the tables are those of the N_h=4 run
        assert (out / "checkpoint" / "checkpoint.pt").read_bytes() == ckpt
        assert read_table(out / "tables", "runs").equals(runs)
    # an unfinished folder too (no silent reuse, no size mismatch)
    r = study_here("train", *TRAIN[:-1], "4", "--num-heads", "9", "--out", str(out))
    assert r.returncode == 2 and "num_heads: 4 -> 9" in r.stderr, r.stderr

    # the same folder's last checkpoint cut short: the previous one
    ckpt = out / "checkpoint" / "checkpoint.pt"
    assert load_checkpoint(out / "checkpoint")["model_config"]["num_classes"] == 10
    assert set(load_checkpoint(out / "checkpoint")["train_config"]) >= {"lr", "epochs", "batch_size"}
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])  # cut short, as by a full disk
    r = study_here("train", *TRAIN, "--num-heads", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr
    warning = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(warning) == 1 and str(ckpt) in warning[0] and "checkpoint.prev.pt" in warning[0], r.stderr
    runs = read_table(out / "tables", "runs")
    assert runs.status.tolist() == ["finished"] and runs.attempts.tolist() == [2]
    assert len(read_table(out / "tables", "epochs")) == 2
    # both damaged: one line naming the file, exit 2
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        (out / "checkpoint" / name).write_bytes(b"PK\x03\x04 cut")
    r = study_here("train", *TRAIN, "--num-heads", "4", "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and str(ckpt) in r.stderr, r.stderr


@pytest.mark.long
def test_train_refuses_a_second_train_into_the_same_folder(tmp_path):
    """Two `study train --out DIR` at once would train one trial twice into one folder
    (the second superseding the first): the second is refused in one line, exit 2,
    and the first finishes as if alone."""
    out = tmp_path / "t"
    args = [
        sys.executable,
        "-m",
        "study",
        "train",
        *TRAIN[:-1],
        "3",
        "--data",
        "synthetic:2000",
        "--out",
        str(out),
    ]
    first = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (out / "tables" / "runs").exists(), first), "the first train did not start"
        second = study("train", *TRAIN[:-1], "3", "--data", "synthetic:2000", "--out", str(out), cwd=tmp_path)
        _, err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert second.returncode == 2, second.stderr
    assert second.stderr.strip().splitlines() == [
        f"study train: error: --out: {out} is being trained into by another study train "
        f"(pid {first.pid} on {os.uname().nodename}, "
        f"since {second.stderr.split(', since ')[1].split(')')[0]}); "
        f"lock {out / '.study.lock'}"
    ], second.stderr
    assert first.returncode == 0, err
    runs = read_table(out / "tables", "runs")
    assert runs.status.tolist() == ["finished"] and runs.attempts.tolist() == [1]
    assert sorted(read_table(out / "tables", "epochs").epoch) == [0, 1, 2]


#: a model about ten times the cost per image of TINY (three layers): the interrupted
#: epochs below are sized by measured throughput with few images (cheap to generate)
DEEP = {**TINY, "layers": 3}


def _epoch_images(batch_size: int) -> int:
    """Images for an epoch of DEEP that lasts ~6 s or more here (measured now; a trial's epoch
    lasts ~1.8x the measured time, a quiet machine's included): long enough to see its clock
    (saved every second) saved twice and stop it, on a fast machine or a loaded one."""
    return images_lasting(6.0, model=DEEP, batch_size=batch_size, least=500)


@pytest.mark.long
def test_train_ctrl_c_mid_epoch_keeps_its_time(tmp_path):
    """Ctrl-C during `study train`'s epoch: one line, exit 130, the row `interrupted`; the
    same command continues (attempts 2) and `device_seconds` holds both attempts' time.
    Acts on events, not on a fixed sleep: Ctrl-C once the running epoch's clock has been
    saved twice (``trial.json``), so the epoch has started and has not ended."""
    out = tmp_path / "t"
    data = f"synthetic:{_epoch_images(50)}"
    args = [
        sys.executable,
        "-m",
        "study",
        "train",
        *TRAIN[:-1],
        "1",
        "--layers",
        str(DEEP["layers"]),
        "--data",
        data,
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        assert wait_for(lambda: ledger_seconds(out / "trial.json") > 0, proc), (
            "the epoch's clock was never saved"
        )
        seen, since = ledger_seconds(out / "trial.json"), time.monotonic()
        assert wait_for(lambda: ledger_seconds(out / "trial.json") > seen, proc), "the epoch's clock stopped"
        proc.send_signal(signal.SIGINT)
        trained = seen + time.monotonic() - since  # the epoch had run at least this long
        _, err = proc.communicate(timeout=120)
        ended = seen + time.monotonic() - since + 0.5  # and at most this long (+ the polls' lag)
    finally:
        proc.kill()
    assert not (out / "tables" / "epochs").exists(), "the epoch ended before Ctrl-C: not exercised"
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        f"study train: interrupted; the same command continues from the last checkpoint in {out}"
    ], err
    runs = read_table(out / "tables", "runs")
    assert runs.status.tolist() == ["interrupted"] and runs.attempts.tolist() == [1]
    first = float(runs.device_seconds.iloc[0])
    # saved when the Ctrl-C is handled (a loaded machine can take a while: the op in progress ends first)
    assert trained - 1.5 <= first <= ended, (first, trained, ended)
    r = study(
        "train",
        *TRAIN[:-1],
        "1",
        "--layers",
        str(DEEP["layers"]),
        "--data",
        data,
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    runs = read_table(out / "tables", "runs")
    epoch = float(read_table(out / "tables", "epochs").seconds.iloc[0])
    assert runs.status.tolist() == ["finished"] and runs.attempts.tolist() == [2]
    assert first + epoch - 0.01 <= float(runs.device_seconds.iloc[0]) <= first + epoch + 1
    print(
        f"study train: Ctrl-C after {trained:.1f} s, recorded {first:.1f} s; then the epoch {epoch:.1f} s; "
        f"device_seconds {float(runs.device_seconds.iloc[0]):.1f} s"
    )


# ---------------------------------------------------------------- preflight: fast one-liners, no orphans
@pytest.mark.parametrize("flags", [["--num-cpus", "0"], ["--num-cpus", "-1"]])
def test_num_cpus_must_be_positive(flags, capsys):
    from study.cli import build_parser

    for command in (["run", "f.yaml"], ["resume", "x"]):
        with pytest.raises(SystemExit) as info:
            build_parser().parse_args([*command, *flags])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--num-cpus: must be >= 1" in err, err


@pytest.mark.parametrize("case", ["gpu", "cpus", "address"])
def test_preflight_refusals_are_fast(tmp_path, case):
    doc, flags, needle = {}, [], ""
    if case == "gpu":
        doc, needle = {"resources": {"gpus_per_trial": 1}}, "gpus_per_trial"
    elif case == "cpus":
        doc, needle = {"resources": {"cpus_per_trial": 4096}}, "cpus_per_trial"
    else:
        flags, needle = ["--address", "127.0.0.1:1"], "--address"
    import resource

    f = write_spec(tmp_path, "pre", epochs=1, **doc)
    t0 = time.monotonic()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "study", "run", str(f), "--storage", str(tmp_path / "st"), *flags],
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        leftover = session_pids(proc.pid)
        kill_session(proc)
    elapsed = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err and err.startswith("study run: error: "), err
    # no Ray was started or waited for: the CLI's own start-up (importing torch) is most of it;
    # wall time is generous for a loaded shared machine, CPU time is what the command costs
    assert elapsed < 60 and cpu < 15, f"took {elapsed:.1f} s, {cpu:.1f} s CPU"
    assert not leftover, "processes left behind"
    assert not (tmp_path / "st").exists()


def test_cluster_resources_are_checked_per_node(monkeypatch):
    """--address: a trial runs on one node, so the cluster's total is not enough (two
    2-CPU nodes cannot run a 4-CPU trial: Tune would wait forever); DDP workers each
    need their share on one node.  One line naming the field; None when it fits."""
    from study.tuning.preflight import check_cluster_resources

    monkeypatch.delenv("STUDY_SKIP_RESOURCE_CHECK", raising=False)
    two = [{"CPU": 2.0}, {"CPU": 2.0}]
    why = check_cluster_resources(two, cpus_per_trial=4, gpus_per_trial=0)
    assert (
        why.startswith("resources.cpus_per_trial: a trial needs 4 CPUs on one node")
        and "4 CPUs in all" in why
    )
    assert check_cluster_resources(two, cpus_per_trial=2, gpus_per_trial=0) is None
    assert check_cluster_resources(two, cpus_per_trial=4, gpus_per_trial=0, workers_per_trial=2) is None
    why = check_cluster_resources(two, cpus_per_trial=6, gpus_per_trial=0, workers_per_trial=3)
    assert why.startswith("resources.workers_per_trial: the cluster's nodes hold 2 of a trial's 3 workers"), (
        why
    )
    gpus = [{"CPU": 8.0}, {"CPU": 1.0, "GPU": 1.0}]
    assert check_cluster_resources(gpus, cpus_per_trial=1, gpus_per_trial=0.5) is None
    why = check_cluster_resources(gpus, cpus_per_trial=2, gpus_per_trial=1)
    assert why.startswith("resources.gpus_per_trial: a trial needs 1 GPU(s) and 2 CPUs on one node"), why
    monkeypatch.setenv("STUDY_SKIP_RESOURCE_CHECK", "1")  # a cluster with an autoscaler
    assert check_cluster_resources(two, cpus_per_trial=64, gpus_per_trial=0) is None


# ---------------------------------------------------------------- lock
def test_lock_refuses_a_second_driver_and_takes_over_a_dead_ones(tmp_path):
    from study.errors import LockError
    from study.tuning.lock import LOCK, StudyLock

    root = str(tmp_path / "s")
    first = StudyLock(root=root, name="s").acquire()
    with pytest.raises(LockError, match=f"already being run by another driver .pid {os.getpid()}"):
        StudyLock(root=root, name="s").acquire()
    first.release()
    assert not (Path(root) / LOCK).exists()
    # a driver SIGKILLed while holding it: its lock dies with it
    code = (
        f"from study.tuning.lock import StudyLock; StudyLock(root={root!r}, name='s').acquire(); import os; "
        "os.kill(os.getpid(), 9)"
    )
    subprocess.run([sys.executable, "-c", code], env=os.environ)
    assert (Path(root) / LOCK).exists()
    StudyLock(root=root, name="s").acquire().release()


def test_lock_on_object_storage_is_a_conditional_create(tmp_path, monkeypatch):
    moto = pytest.importorskip("moto")
    import boto3

    from study.errors import LockError
    from study.tuning import lock as lockmod

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="study-bucket")
        first = lockmod.StudyLock(root="s3://study-bucket/studies/x", name="x").acquire()
        with pytest.raises(LockError, match="already being run"):
            lockmod.StudyLock(root="s3://study-bucket/studies/x", name="x").acquire()
        # a holder whose heartbeat stopped long ago is taken over
        body = json.loads(s3.get_object(Bucket="study-bucket", Key="studies/x/.study.lock")["Body"].read())
        s3.put_object(
            Bucket="study-bucket",
            Key="studies/x/.study.lock",
            Body=json.dumps({**body, "host": "elsewhere", "heartbeat": time.time() - 10 * lockmod.STALE_S}),
        )
        second = lockmod.StudyLock(root="s3://study-bucket/studies/x", name="x").acquire()
        second.release()
        first._s3 = None
        assert "Contents" not in s3.list_objects_v2(Bucket="study-bucket", Prefix="studies/x/")


# ---------------------------------------------------------------- studies through the CLI (Ray)
@pytest.mark.long
def test_failed_trial_then_tamper_move_and_resume(tmp_path, monkeypatch):
    """A trial failing at start (its data source vanished after the driver's check) is an
    `error` row with its cause and attempts, exit 1, one line per failure; Ray's pickles
    carrying code are refused on resume (nothing runs); a 0-byte experiment state is
    repaired; the moved study resumes where it now is and writes nothing to the old place."""
    from tests.data_helpers import make_tree

    tree = tmp_path / "data"
    make_tree(tree, n_train=10, n_test=4)
    f = write_spec(tmp_path, "fail", data=str(tree), batch_size=10, epochs=1, max_failures=1)
    old = tmp_path / "st" / "fail"
    env = {"STUDY_CACHE_DIR": str(tmp_path / "cache")}
    monkeypatch.setenv("STUDY_CACHE_DIR", env["STUDY_CACHE_DIR"])  # this process too; restored after the test
    proc = popen("run", str(f), "--storage", "st", "--num-cpus", "1", cwd=tmp_path)
    try:
        head = read_until(proc, "study fail: 1 trials")
        tree.rename(tmp_path / "data-away")  # the source vanishes before the trial reads it
        out, _ = proc.communicate(timeout=300)
    finally:
        kill_session(proc)
    out = "".join(head) + out
    assert proc.returncode == 1, out
    assert "Traceback" not in out and "\x1b[" not in out, out
    failures = [ln for ln in out.splitlines() if "trial c000-s000" in ln]
    assert len(failures) == 2 and "attempt 1" in failures[0] and "error after 2 attempt(s)" in failures[1], (
        out
    )
    # the cause: the project's own error (the trial re-checks its data source), one line
    assert all(
        "Error: " in ln and f"{tree}" in ln and "no such file or directory" in ln for ln in failures
    ), out
    assert "errors:" in out and "trials: 1 error" in out
    runs = read_table(old / "tables", "runs")
    assert runs.status.tolist() == ["error"] and runs.attempts.tolist() == [2], runs
    assert runs.error.iloc[0].split(":")[0] in ("SpecError", "DataError") and str(tree) in runs.error.iloc[0]
    assert runs.error.iloc[0] in failures[1]
    assert (
        runs.epochs_done.tolist() == [0]
        and runs.num_heads.tolist() == [2]
        and runs.batch_size.tolist() == [10]
    )
    meta = json.loads((old / "study.json").read_text())
    assert meta["tables"] == "tables" and not any(
        str(tmp_path) in str(v) for k, v in meta.items() if k not in ("file", "raw")
    )

    # Ray's own files are never read back: each replaced by a pickle carrying code (or
    # emptied, as a full disk leaves them), the study resumes from what the project wrote
    marker = tmp_path / "pwned"
    ray_files = [p for p in (old / "tune").rglob("*") if p.is_file()]
    assert {"tuner.pkl"} <= {p.name for p in ray_files}, ray_files
    for i, p in enumerate(ray_files):
        p.write_bytes(code_payload(marker) if i % 2 == 0 else b"")
    # then the study is moved
    (tmp_path / "moved").mkdir()
    shutil.move(old, tmp_path / "moved" / "fail")
    (tmp_path / "data-away").rename(tree)
    r = study("resume", "fail", "--storage", "moved", "--num-cpus", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists()
    assert not old.exists(), "the resumed study wrote into its old place"
    runs = read_table(tmp_path / "moved" / "fail" / "tables", "runs")
    assert runs.status.tolist() == ["finished"] and runs.attempts.tolist() == [3], runs
    assert runs.error.isna().all()


@pytest.mark.slow
def test_sigkill_in_epoch0_sigterm_lock_and_resume(tmp_path):
    """A worker SIGKILLed during epoch 0 counts its attempt; a second driver is refused by
    the lock; SIGTERM stops the study cleanly (exit 143, trial `interrupted`, pointer to
    `study resume`); the resume continues it with attempts and device-seconds accumulated."""
    # 4 epochs: once the retried trial has an epoch row, 3 remain before it could finish, so
    # the SIGTERM finds it running on a loaded machine too (with 2 it once finished first)
    f = write_spec(
        tmp_path,
        "term",
        data="synthetic:1000",
        epochs=4,
        grid={"num_heads": [1, 2]},
        max_failures=2,
        max_concurrent=1,
    )
    root = tmp_path / "results" / "term"
    tables = root / "tables"
    proc = popen("run", str(f), "--num-cpus", "2", cwd=tmp_path)
    try:

        def started():
            runs = read_table(tables, "runs")
            return len(runs) and (runs.status == "running").any()

        assert wait_for(started, proc), "no trial started"
        runs = read_table(tables, "runs")
        victim = runs.trial_id.iloc[0]
        workers = processes("ray::ImplicitFunc.train", session=proc.pid)
        assert workers
        for p in workers:
            os.kill(p, signal.SIGKILL)
        in_epoch0 = not (tables / "epochs" / victim).exists()

        # one study, one driver
        r = study("resume", "term", cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "already being run by another driver" in r.stderr and f"pid {proc.pid}" in r.stderr

        def retried():
            runs = read_table(tables, "runs")
            row = runs[runs.trial_id == victim]
            return (
                len(row)
                and row.attempts.iloc[0] == 2
                and row.status.iloc[0] == "running"
                and (tables / "epochs" / victim).exists()
            )

        assert wait_for(retried, proc), "the killed trial was not retried"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    finally:
        kill_session(proc)
    assert in_epoch0, "the worker was not killed in epoch 0 (timing): the case was not exercised"
    assert proc.returncode == 143, out
    assert "study resume term" in out and "Tuner.restore" not in out and "Traceback" not in out, out
    assert "Failed to fetch metrics" not in out
    runs = read_table(tables, "runs").set_index("trial_id")
    assert runs.loc[victim, "status"] == "interrupted" and runs.loc[victim, "attempts"] == 2, runs
    assert not (runs.status == "running").any()
    spent = runs.loc[victim, "device_seconds"]
    assert spent > 0

    r = study("resume", "term", "--num-cpus", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Tuner.restore" not in r.stderr and "Failed to fetch metrics" not in r.stderr
    runs = read_table(tables, "runs").set_index("trial_id")
    assert len(runs) == 2 and (runs.status == "finished").all(), runs
    assert runs.loc[victim, "attempts"] == 3
    assert runs.loc[victim, "device_seconds"] >= spent
    epochs = read_table(tables, "epochs")
    assert not epochs.duplicated(["trial_id", "epoch"]).any() and len(epochs) == 8
    assert not (root / ".study.lock").exists()


@pytest.mark.long
def test_storage_failure_stops_the_study(tmp_path, small_disk):
    """The storage fills up mid-study: one line naming the path, exit 3, no trial left
    `running`; space freed, `study resume` finishes it (attempts 2, nothing duplicated)."""
    f = write_spec(tmp_path, "full", data="synthetic:400", epochs=3, max_failures=2)
    tables = small_disk / "full" / "tables"
    proc = popen("run", str(f), "--storage", str(small_disk), "--num-cpus", "1", cwd=tmp_path)
    try:
        assert wait_for(lambda: (tables / "epochs" / "c000-s000").exists(), proc), "no epoch written"
        filler = fill_disk(small_disk)
        out, _ = proc.communicate(timeout=300)
    finally:
        kill_session(proc)
    assert proc.returncode == 3, out
    errors = error_lines(out) + [ln for ln in out.splitlines() if "storage failed" in ln]
    assert errors and "No space left on device" in errors[0] and str(small_disk) in errors[0], out
    assert "Traceback" not in out and "EOFError" not in out, out
    runs = read_table(tables, "runs")
    assert len(runs) == 1 and runs.status.iloc[0] in ("interrupted", "error"), runs
    assert "No space left on device" in runs.error.iloc[0]
    status = study("status", "full", "--storage", str(small_disk), cwd=tmp_path)
    assert "running" not in status.stdout

    filler.unlink()
    r = study("resume", "full", "--storage", str(small_disk), "--num-cpus", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = read_table(tables, "runs")
    assert runs.status.tolist() == ["finished"] and runs.attempts.iloc[0] >= 2 and runs.error.isna().all(), (
        runs
    )
    epochs = read_table(tables, "epochs")
    assert len(epochs) == 3 and not epochs.duplicated(["trial_id", "epoch"]).any()


@pytest.mark.long
def test_ctrl_c_mid_epoch_then_resume_accumulates_device_seconds(tmp_path):
    """Ctrl-C during an epoch; the trial's process is stopped before the epoch ends (Tune
    kills it after a few seconds' grace; here the test kills it once the driver has taken
    the signal, so the epoch is cut short whatever the machine's speed).  The time that
    attempt trained is in `device_seconds` (of the `interrupted` row, and after `study
    resume` beside the resumed attempt's epoch); `attempts` counts both.  Events, not
    sleeps: the epoch is sized by measured throughput (~6 s or more), Ctrl-C comes once
    its clock has been saved twice (the trial is inside the epoch), the kill once the
    driver has said it received SIGINT (so Tune does not retry the killed trial)."""
    f = write_spec(
        tmp_path, "midep", data=f"synthetic:{_epoch_images(25)}", model=DEEP, epochs=1, max_failures=1
    )
    root = tmp_path / "results" / "midep"
    tables = root / "tables"
    proc = popen("run", str(f), "--num-cpus", "1", cwd=tmp_path)
    output = Output(proc)
    try:
        assert wait_for(lambda: ledger_seconds(root / "trials") > 0, proc), (
            "the epoch's clock was never saved"
        )
        seen, since = ledger_seconds(root / "trials"), time.monotonic()
        assert wait_for(lambda: ledger_seconds(root / "trials") > seen, proc), "the epoch's clock stopped"
        workers = processes("ray::ImplicitFunc.train", session=proc.pid)
        assert workers, "no trial process"
        proc.send_signal(signal.SIGINT)
        assert output.wait_for_line("SIGINT received"), output.text()
        for w in workers:
            os.kill(w, signal.SIGKILL)
        trained = seen + time.monotonic() - since  # the epoch had run at least this long
        out = output.text()
    finally:
        kill_session(proc)
    assert proc.returncode == 130, out
    runs = read_table(tables, "runs")
    assert len(read_table(tables, "epochs")) == 0, (
        "the epoch ended before the trial was stopped: not exercised"
    )
    assert runs.status.tolist() == ["interrupted"] and runs.attempts.tolist() == [1], runs
    # the running epoch's clock is saved every second (ledger.CLOCK_S): all but the last second
    first = float(runs.device_seconds.iloc[0])
    assert trained - 2.0 <= first <= trained + 1, (
        f"device_seconds {first}, the attempt trained {trained:.1f} s"
    )

    r = study("resume", "midep", "--num-cpus", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = read_table(tables, "runs")
    epochs = read_table(tables, "epochs")
    assert runs.status.tolist() == ["finished"] and runs.attempts.tolist() == [2], runs
    assert len(epochs) == 1  # trained by the second attempt, from the start (no checkpoint)
    second = float(epochs.seconds.iloc[0])
    total = float(runs.device_seconds.iloc[0])
    assert first + second - 0.01 <= total <= first + second + 5, (total, first, second)
    print(
        f"attempt 1 trained {trained:.1f} s, recorded {first:.1f} s; attempt 2 epoch {second:.1f} s; "
        f"device_seconds {total:.1f} s"
    )
