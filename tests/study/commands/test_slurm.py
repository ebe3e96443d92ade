"""``study slurm`` against a real SLURM (Debian's slurmctld, slurmd and munge on loopback,
see tests/slurm_daemons.py): one SLURM set-up shared by the module's tests.

1. A tiny study submitted through the launcher runs to its end on the allocation, its
   Ray head started again after a first ``ray start`` that failed: the
   Ray cluster the job started has the allocation's node count (read from Ray's GCS by
   the job), the trials ran on those nodes, every (trial, epoch) row is there once, and
   no process of the job is left.
2. A second submission is ``scancel``ed mid-study (after some epoch rows exist): the
   driver stops it cleanly (the running trial ``interrupted``, exit 143, nothing of the
   job left running: found by the job's id in their environment and by the files they
   hold in the job's Ray temp dirs, not by ``ray status``); ``scontrol requeue`` runs
   the job again, which resumes the study (``study resume``); then the time limit's
   warning (SIGUSR1 to the batch shell) stops it again and the job requeues itself;
   its third run finishes the study with every (trial, epoch) row exactly once.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from study.results.tables import read_table
from tests.helpers import TINY
from tests.slurm_daemons import Slurm, missing_binaries, slurm_cluster

#: when the test lets a requeued job start again (see its use)
REQUEUED_START = "StartTime=now+2"
ENDED = (
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"SLURM is not installed ({', '.join(missing)} missing): "
            "apt-get install slurmctld slurmd slurm-client munge (tests/install-system-deps.sh)"
        )
    if os.geteuid() != 0:
        pytest.skip("the test's slurmd and slurmctld run as root (SlurmUser=root): run the tests as root")
    cpus = min(2, len(os.sched_getaffinity(0)))
    with slurm_cluster(tmp_path_factory.mktemp("slurm"), cpus=cpus) as s:
        yield s


def _spec(folder: Path, name: str, epochs: int) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "data": "synthetic:200",
                "epochs": epochs,
                "batch_size": 25,
                "model": TINY,
                "training": {"head_images": 4},
                "resources": {"cpus_per_trial": 1},
                "grid": {"num_heads": [1, 2]},
            }
        )
    )
    return path


def _submit(slurm: Slurm, folder: Path, spec: Path, *sbatch: str, python: str = sys.executable) -> str:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "study",
            "slurm",
            str(spec),
            "--storage",
            str(folder / "shared"),
            "--python",
            python,
            "--submit",
            "--",
            f"--output={folder}/job-%j.out",
            *sbatch,
        ],
        env={**slurm.env, "PYTHONUNBUFFERED": "1"},
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and re.fullmatch(r"\d+", r.stdout.strip()), (r.returncode, r.stdout, r.stderr)
    return r.stdout.strip()


def _wait_state(slurm: Slurm, job: str, done, timeout: float, folder: Path) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = slurm.job_state(job)
        if done(state):
            return state
        time.sleep(0.5)
    raise AssertionError(
        f"job {job}: still {slurm.job_state(job)} after {timeout:.0f} s\n{_output(folder, job)}{slurm.logs()}"
    )


def _wait_rows(slurm: Slurm, job: str, tables: Path, rows: int, folder: Path) -> None:
    """Until the study's ``epochs`` table holds at least ``rows`` rows, the job still
    pending or running (its output in the failure)."""
    deadline = time.time() + 600
    while len(read_table(tables, "epochs")) < rows:
        assert time.time() < deadline and slurm.job_state(job) in ("PENDING", "CONFIGURING", "RUNNING"), (
            _output(folder, job)
        )
        time.sleep(0.5)


def _output(folder: Path, job: str) -> str:
    path = folder / f"job-{job}.out"
    return path.read_text(errors="replace") if path.exists() else "(no job output)"


def _job_processes(job: str) -> list[str]:
    """Live processes of SLURM job ``job``: its slurmstepd, those whose environment says so
    (every process of a job inherits ``SLURM_JOB_ID``) and those holding a file under the job's Ray temp
    dirs (``/tmp/ray-JOB-…``: every Ray process keeps its log files open there; a process
    title set with setproctitle can overwrite the environment)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            env = (d / "environ").read_bytes().split(b"\0")
            mine = f"SLURM_JOB_ID={job}".encode() in env
            # the job's slurmstepd ("slurmstepd: [JOB.batch]"): until it has exited, slurmd
            # still holds the job, and a requeued start of it can fail to launch
            mine = mine or (d / "cmdline").read_bytes().startswith(f"slurmstepd: [{job}.".encode())
            if not mine:
                for fd in (d / "fd").iterdir():
                    with contextlib.suppress(OSError):
                        if os.readlink(fd).startswith(f"/tmp/ray-{job}-"):
                            mine = True
                            break
            if mine:
                found.append(f"{d.name} {(d / 'cmdline').read_bytes()[:120].rstrip(bytes(1))!r}")
        except (OSError, IndexError):
            pass
    return found


def _wait_gone(job: str, timeout: float = 60) -> list[str]:
    """The job's processes, once none is left or ``timeout`` passed (a SIGKILLed
    process can take a moment to be reaped)."""
    deadline = time.time() + timeout
    while (left := _job_processes(job)) and time.time() < deadline:
        time.sleep(0.5)
    return left


def _host_addresses() -> set[str]:
    """Addresses of this host: where a Ray node of this one-host SLURM can be."""
    addrs = {"127.0.0.1"}
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # a route lookup: nothing is sent
            addrs.add(s.getsockname()[0])
    except OSError:
        pass
    return addrs | set(socket.gethostbyname_ex(socket.gethostname())[2])


def _ray_nodes(output: str) -> list[str]:
    """The Ray nodes the job saw alive in its cluster's GCS before starting the driver."""
    found = re.findall(r"study slurm: (\d+) Ray node\(s\) up: (.*)", output)
    assert found, output
    count, addresses = found[-1]
    assert int(count) == len(addresses.split()), found
    return addresses.split()


def _python_whose_first_ray_start_fails(folder: Path) -> str:
    """A ``--python`` (this one, through a wrapper) whose ``ray`` beside it fails its first
    ``ray start`` as a node that missed Ray's 30 s registration window does, then is Ray's."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    python, ray = bin_dir / "python", bin_dir / "ray"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    ray.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {folder}/ray-failed ]; then : > {folder}/ray-failed\n"
        '  echo "Exception: The current node timed out during startup." >&2; exit 1\nfi\n'
        f'exec {Path(sys.executable).with_name("ray")} "$@"\n'
    )
    python.chmod(0o755)
    ray.chmod(0o755)
    return str(python)


@pytest.mark.slow
def test_slurm_runs_a_study_on_its_allocation_after_a_failed_ray_start(slurm, tmp_path):
    """The study runs on the allocation, its Ray head started again after its first
    ``ray start`` failed (the failure said in the job's output, its logs kept)."""
    t0 = time.time()
    n_epochs = 3
    spec = _spec(tmp_path, "onslurm", n_epochs)
    python = _python_whose_first_ray_start_fails(tmp_path)
    job = _submit(slurm, tmp_path, spec, f"--cpus-per-task={slurm.cpus}", python=python)
    state = _wait_state(slurm, job, lambda s: s in ENDED, 600, tmp_path)
    out = _output(tmp_path, job)
    assert state == "COMPLETED" and slurm.job_field(job, "ExitCode") == "0:0", out + slurm.logs()
    took = time.time() - t0
    assert "ray start exited with status 1:" in out and "timed out during startup" in out, out
    assert "starting the Ray head node again (start 2 of 3)" in out, out
    assert (tmp_path / f"ray-{job}-0" / "studynode1.start2" / "raylet.out").exists(), out

    nodes = _ray_nodes(out)
    assert len(nodes) == int(slurm.job_field(job, "NumNodes")) == 1, (nodes, out)
    assert set(nodes) <= _host_addresses(), nodes  # the node is this host
    assert f"Ray head node at 127.0.0.1: {slurm.cpus} CPUs, 0 GPUs" in out, out  # the allocation's CPUs

    tables = tmp_path / "shared" / "onslurm" / "tables"
    runs, epochs = read_table(tables, "runs"), read_table(tables, "epochs")
    assert len(runs) == 2 and (runs.status == "finished").all(), (runs, out)
    assert set(runs.node_ip) <= set(nodes), (runs.node_ip, nodes)  # trained on the job's Ray nodes
    assert len(epochs) == 2 * n_epochs and not epochs.duplicated(["trial_id", "epoch"]).any(), epochs
    assert not _wait_gone(job), _job_processes(job)
    logs = list((tmp_path / f"ray-{job}-0").glob("*/raylet.out"))
    assert logs, sorted(p.name for p in tmp_path.iterdir())  # each node's Ray logs, copied beside the job
    print(f"job {job}: {took:.0f} s from submission to the end")


@pytest.mark.long
def test_slurm_scancel_mid_study_then_requeue_resumes(slurm, tmp_path):
    """One CPU for two one-CPU trials: they run one after the other, so the cancel finds
    the first running and the second not started."""
    t0 = time.time()
    n_epochs = 8
    job = _submit(slurm, tmp_path, _spec(tmp_path, "requeued", n_epochs), "--cpus-per-task=1")
    tables = tmp_path / "shared" / "requeued" / "tables"
    _wait_rows(slurm, job, tables, 2, tmp_path)
    before = read_table(tables, "epochs")
    slurm.run("scancel", job)
    cancelled_at = time.time() - t0
    state = _wait_state(slurm, job, lambda s: s in ENDED, 300, tmp_path)
    out = _output(tmp_path, job)
    assert state == "CANCELLED", out
    assert "the study's driver exited with status 143" in out, out  # it stopped the study itself
    assert not _wait_gone(job), _job_processes(job)  # nothing of the job, Ray's processes included
    runs = read_table(tables, "runs")
    assert set(runs.status) == {"interrupted"} and len(runs) == 1, (runs, out)
    stopped = read_table(tables, "epochs")
    assert len(stopped) >= len(before) and not stopped.duplicated(["trial_id", "epoch"]).any(), stopped

    slurm.run("scontrol", "requeue", job)
    # SLURM holds a requeued job back a while; start it sooner, but not within the second
    # of the requeue: slurmd refuses a credential issued in the second its job's old one
    # was revoked ("Killing non-startable batch JobId=N: Job credential revoked")
    slurm.run("scontrol", "update", f"JobId={job}", REQUEUED_START)

    # the time limit's warning (the script asks for SIGUSR1 to the batch shell), sent by hand once the
    # resumed study has trained more: the study stops the same way and the job requeues itself
    _wait_rows(slurm, job, tables, len(stopped) + 1, tmp_path)
    slurm.run("scancel", "--batch", "--signal=USR1", job)
    warned_at = time.time() - t0
    deadline = time.time() + 300
    while not (slurm.job_field(job, "Restarts") == "2" and slurm.job_state(job) == "PENDING"):
        assert time.time() < deadline and slurm.job_state(job) not in ENDED, _output(tmp_path, job)
        time.sleep(0.5)
    out = _output(tmp_path, job)
    assert "SIGUSR1 received" in out and f"requeueing job {job}" in out, out
    assert "study requeued exists" in out, out  # the first requeue resumed the study
    assert out.count("the study's driver exited with status 143") == 2, out
    assert "running" not in set(read_table(tables, "runs").status), read_table(tables, "runs")
    assert not _wait_gone(job), _job_processes(job)
    slurm.run("scontrol", "update", f"JobId={job}", REQUEUED_START)
    state = _wait_state(slurm, job, lambda s: s in ENDED, 600, tmp_path)
    out = _output(tmp_path, job)
    assert state == "COMPLETED" and slurm.job_field(job, "ExitCode") == "0:0", out + slurm.logs()

    runs = read_table(tables, "runs").set_index("trial_id")
    epochs = read_table(tables, "epochs")
    assert len(runs) == 2 and (runs.status == "finished").all(), runs
    interrupted = stopped.trial_id.iloc[0]
    # each interruption stopped the trial then running, which went on in a new attempt
    assert runs.attempts[interrupted] >= 2 and 3 <= runs.attempts.sum() <= 4, runs.attempts
    assert not epochs.duplicated(["trial_id", "epoch"]).any() and len(epochs) == 2 * n_epochs, epochs
    # the rows written before the cancel are kept, not trained again (all but, at most, the
    # last: its checkpoint may not have been saved yet when the cancel came)
    kept = epochs.merge(before, on=["trial_id", "epoch"], suffixes=("", "_before"))
    assert (kept.seconds == kept.seconds_before).sum() >= max(1, len(before) - 1), kept
    assert not _wait_gone(job), _job_processes(job)
    print(
        f"job {job}: cancelled at {cancelled_at:.0f} s after {len(before)} epoch rows, requeued, warned "
        f"(SIGUSR1) at {warned_at:.0f} s, requeued itself, done at {time.time() - t0:.0f} s"
    )


@pytest.mark.slow
def test_sigterm_to_the_batch_shell_alone_stops_the_study_cleanly(slurm, tmp_path):
    """``scancel --batch --signal=TERM`` (or a ``--signal=B:TERM@N`` time-limit warning)
    reaches the batch shell only: the script passes it on, the driver stops the study
    (trials ``interrupted``, exit 143) and the job does not requeue itself."""
    job = _submit(slurm, tmp_path, _spec(tmp_path, "termed", 12), "--cpus-per-task=1")
    tables = tmp_path / "shared" / "termed" / "tables"
    _wait_rows(slurm, job, tables, 1, tmp_path)
    slurm.run("scancel", "--batch", "--signal=TERM", job)
    state = _wait_state(slurm, job, lambda s: s in ENDED, 300, tmp_path)
    out = _output(tmp_path, job)
    assert (
        "SIGTERM received: stopping the study" in out and "the study's driver exited with status 143" in out
    ), out
    assert "requeueing" not in out and slurm.job_field(job, "Restarts") == "0", out
    assert state == "FAILED" and slurm.job_field(job, "ExitCode") == "143:0", (state, out)
    runs = read_table(tables, "runs")
    assert "interrupted" in set(runs.status) and "running" not in set(runs.status), (runs, out)
    assert len(read_table(tables, "epochs")) < 2 * 12, out  # it stopped, it did not train to the end
    assert not _wait_gone(job), _job_processes(job)


# ---------------------------------------------------------------- the command itself, no SLURM needed
def _slurm_cli(capsys, *args: str) -> tuple[int, str, str]:
    from study.cli import main

    with pytest.raises(SystemExit) as exit_:
        sys.exit(main(["slurm", *args]))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_slurm_script_carries_the_study_and_the_sbatch_options(tmp_path, capsys, monkeypatch):
    """The printed script is valid bash, runs the validated study against the given storage
    with the user's sbatch options after the script's defaults, and changes no file."""
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    spec = _spec(tmp_path, "printed", 2)
    code, out, err = _slurm_cli(
        capsys, str(spec), "--storage", str(tmp_path / "shared"), "--", "--nodes=3", "--time=1:00:00"
    )
    assert code == 0 and err == "", err
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0
    sbatch = [line for line in out.splitlines() if line.startswith("#SBATCH ")]
    assert sbatch[0] == "#SBATCH --job-name=study-printed" and sbatch[-2:] == [
        "#SBATCH --nodes=3",
        "#SBATCH --time=1:00:00",
    ]
    assert {"#SBATCH --ntasks-per-node=1", "#SBATCH --requeue", "#SBATCH --signal=B:USR1@120"} <= set(sbatch)
    assert f"STORAGE={tmp_path / 'shared'}" in out and f"RUN=({spec})" in out and "NAME=printed" in out
    assert not (tmp_path / "shared").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        ((), "--storage: required"),
        (("--storage", "{tmp}/s", "--", "--ntasks-per-node=4"), "--ntasks-per-node is set by the script"),
        (("--storage", "{tmp}/s", "--", "nodes=2"), "'nodes=2' is not an option"),
        (("--storage", "{tmp}/s", "--resume"), "no study"),
        (("--storage", "{tmp}/s", "--name", "a b"), "--name: must be"),
    ],
)
def test_slurm_refuses_bad_input_in_one_line(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    spec = _spec(tmp_path, "refused", 2)
    target = "refused" if "--resume" in extra else str(spec)
    code, out, err = _slurm_cli(capsys, target, *(e.format(tmp=tmp_path) for e in extra))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists()


def test_slurm_refuses_a_study_that_exists(tmp_path, capsys, monkeypatch):
    """A new submission never resumes someone's study by accident: `--resume` says it."""
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    spec = _spec(tmp_path, "taken", 2)
    (tmp_path / "s" / "taken").mkdir(parents=True)
    (tmp_path / "s" / "taken" / "study.json").write_text("{}")
    code, _, err = _slurm_cli(capsys, str(spec), "--storage", str(tmp_path / "s"))
    assert code == 2 and "already exists" in err and "--resume" in err, err
    code, out, _ = _slurm_cli(capsys, "taken", "--resume", "--storage", str(tmp_path / "s"))
    assert code == 0 and "NAME=taken" in out


# ---------------------------------------------------------------- the generated script is code
def sbatch_directives(script: str) -> list[str]:
    """The options sbatch reads from ``script``: the ``#SBATCH`` lines before the first line
    that is neither blank nor a comment, each split as sbatch's ``_get_argument`` does
    (blanks separate, quotes group, a backslash keeps the next character, an unquoted
    ``#`` ends the line)."""
    words: list[str] = []
    for line in script.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if not line.startswith("#SBATCH"):
            continue
        word, quote, escaped, started = "", "", False, False
        for c in line[len("#SBATCH") :] + " ":
            if escaped:
                word, escaped, started = word + c, False, True
            elif c == "\\":
                escaped = True
            elif quote:
                if c == quote:
                    quote = ""
                else:
                    word += c
            elif c in "\"'":
                quote, started = c, True
            elif c == "#":
                break
            elif c.isspace():
                if started:
                    words.append(word)
                word, started = "", False
            else:
                word, started = word + c, True
        if started:
            words.append(word)
    return words


def _bash_values(script: str, cwd: Path) -> dict:
    """Run the script's assignments (everything before its first export) in bash: what
    PYTHON, STORAGE, NAME, RUN and RAY_LOGS hold, and nothing else runs."""
    head = script[: script.index("\nexport ")]
    body = head.split("set -u\n", 1)[1]
    probe = body + '\nprintf "%s\\0" "$PYTHON" "$STORAGE" "$NAME" "$RAY_LOGS" "${RUN[@]}"\n'
    r = subprocess.run(["bash", "-c", probe], cwd=cwd, capture_output=True, timeout=30)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    python, storage, name, ray_logs, *run = r.stdout.decode().split("\0")[:-1]
    return {"python": python, "storage": storage, "name": name, "ray_logs": ray_logs, "run": run}


HOSTILE = ["$(touch pwned)", "`touch pwned`", "x'; touch pwned; '", 'x"; touch pwned; "', "a b #c", "\\$HOME"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_slurm_script_holds_hostile_values_as_data(tmp_path, capsys, monkeypatch, hostile):
    """Storage, Python, data source, Ray log folder and sbatch options built to inject: the
    script parses (bash -n), bash reads every value back unchanged without running
    anything, and sbatch reads exactly the given options, each as one word."""
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, "inert", 2)
    storage, logs = tmp_path / f"st{hostile}", tmp_path / f"logs{hostile}"
    data = tmp_path / f"data{hostile}"
    data.mkdir()
    options = [f"--comment={hostile}", f"--job-name={hostile}", f"-J{hostile}", "--nodes=2"]
    code, out, err = _slurm_cli(
        capsys,
        str(spec),
        "--storage",
        str(storage),
        "--python",
        f"/opt/py{hostile}",
        "--data",
        str(data),
        "--ray-logs",
        str(logs),
        "--",
        *options,
    )
    assert code == 0 and err == "", err
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0
    assert sbatch_directives(out) == [
        "--job-name=study-inert",
        "--ntasks-per-node=1",
        "--requeue",
        "--open-mode=append",
        "--signal=B:USR1@120",
        *options,
    ]
    values = _bash_values(out, tmp_path)
    assert values == {
        "python": f"/opt/py{hostile}",
        "storage": str(storage),
        "name": "inert",
        "ray_logs": str(logs),
        "run": [str(spec), "--data", str(data)],
    }
    assert not (tmp_path / "pwned").exists() and not storage.exists()


@pytest.mark.parametrize(
    "name",
    [
        "a\ntouch pwned",
        "a\rb",
        "..",
        ".",
        "/",
        "../other",
        "a/../../x",
        ".hidden",
        "x" * 101,
        "a b",
        "tab\tname",
    ],
)
def test_slurm_resume_refuses_a_name_no_study_can_have(tmp_path, capsys, monkeypatch, name):
    """--resume NAME: a name `study run` cannot make (control characters, '/', '.', '..',
    a leading '.') is refused in one line, exit 2, even when a folder of that name exists."""
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    storage = tmp_path / "st"
    storage.mkdir()
    if "/" not in name and name not in (".", ".."):
        (storage / name).mkdir()
        (storage / name / "study.json").write_text("{}")
    code, out, err = _slurm_cli(capsys, name, "--resume", "--storage", str(storage))
    assert code == 2 and out == "" and err.count("\n") == 1 and "NAME:" in err, err


def test_slurm_resume_refuses_a_study_folder_linked_out_of_the_storage(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "study.json").write_text("{}")
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "linked").symlink_to(tmp_path / "elsewhere")
    code, out, err = _slurm_cli(capsys, "linked", "--resume", "--storage", str(tmp_path / "st"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "leads out of" in err, err


@pytest.mark.parametrize(
    "option, refused",
    [
        ("-a5", "-a"),
        ("-a", "-a"),
        ("-Qa5", "-a"),
        ("-vHa1-3", "-a"),
        ("--array=1-3", "--array"),
        ("--arr=1-3", "--array"),
        ("--a=1", "--array"),
        ("--ntasks-per-node=2", "--ntasks-per-node"),
        ("--ntasks-per-n=2", "--ntasks-per-node"),
        ("--ntasks-per-=2", "--ntasks-per-node"),
        ("--wrap=hostname", "--wrap"),
        ("--wra=hostname", "--wrap"),
        ("--wr", "--wrap"),
    ],
)
def test_slurm_refuses_an_option_sbatch_reads_as_a_refused_one(
    tmp_path, capsys, monkeypatch, option, refused
):
    """sbatch reads its options with getopt_long: bundled short flags, attached values,
    unique prefixes of long options; every spelling of a refused option is refused."""
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    spec = _spec(tmp_path, "opts", 2)
    code, out, err = _slurm_cli(capsys, str(spec), "--storage", str(tmp_path / "s"), "--", option)
    assert code == 2 and out == "" and err.count("\n") == 1 and f"{refused} is set by the script" in err, err


@pytest.mark.parametrize(
    "option", ["--comment=x\n#SBATCH --array=1-3", "--comment=x\rtouch pwned", "--", "-", "--comment=\x00"]
)
def test_slurm_refuses_an_option_that_is_not_one_sbatch_word(tmp_path, capsys, monkeypatch, option):
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    spec = _spec(tmp_path, "opts", 2)
    code, out, err = _slurm_cli(capsys, str(spec), "--storage", str(tmp_path / "s"), "--", option)
    assert code == 2 and out == "" and err.count("\n") == 1 and "sbatch options:" in err, err


@pytest.mark.parametrize(
    "option",
    ["--ntasks=2", "-n2", "-N2", "-Jarray", "-J-a5", "--nodes=2", "--time=1:00:00", "--comment=--array=1"],
)
def test_slurm_passes_options_sbatch_reads_as_allowed_ones(tmp_path, capsys, monkeypatch, option):
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    spec = _spec(tmp_path, "opts", 2)
    code, out, err = _slurm_cli(capsys, str(spec), "--storage", str(tmp_path / "s"), "--", option)
    assert code == 0 and err == "" and sbatch_directives(out)[-1] == option, err


@pytest.mark.slow
def test_slurm_refuses_a_storage_that_is_a_regular_file(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("STUDY_STORAGE", raising=False)
    spec = _spec(tmp_path, "filed", 2)
    (tmp_path / "file").write_text("x")
    for storage in (tmp_path / "file", tmp_path / "file" / "below"):
        code, out, err = _slurm_cli(capsys, str(spec), "--storage", str(storage))
        assert code == 2 and out == "" and err.count("\n") == 1 and "--storage" in err, err
