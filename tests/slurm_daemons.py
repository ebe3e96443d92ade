"""A real single-node SLURM on loopback for the tests (Debian's ``slurmctld``,
``slurmd``, ``slurm-client`` and ``munge``): a ``slurm.conf``, a munge key of its own,
state, spool and log folders, all under one temporary folder; the three daemons run in
the foreground (``-D``/``-F``) as children of the test, and only they are stopped, by
PID.  Clients find this cluster through ``SLURM_CONF`` (:attr:`Slurm.env`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import free_ports

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel", "squeue", "sinfo")
NODE = "studynode1"


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class Slurm:
    root: Path
    env: dict[str, str]
    cpus: int
    procs: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        r = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}{self.logs()}")
        return r.stdout

    def show_job(self, job_id: str, timeout: float = 180) -> dict[str, str]:
        """``scontrol show job``'s fields; a slurmctld slow to answer on a loaded machine is
        asked again (until ``timeout``), never read as a state."""
        deadline = time.time() + timeout
        while True:
            r = subprocess.run(
                ["scontrol", "show", "job", "-o", job_id],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            if r.returncode == 0 and "JobState=" in r.stdout:
                return dict(w.split("=", 1) for w in r.stdout.split() if "=" in w)
            if time.time() > deadline:
                raise AssertionError(
                    f"scontrol show job {job_id}: exit {r.returncode}: {r.stderr.strip()}{self.logs()}"
                )
            time.sleep(1)

    def job_state(self, job_id: str) -> str:
        """The job's state (``PENDING``, ``RUNNING``, ``COMPLETED``, ``CANCELLED``…), as slurmctld
        knows it."""
        return self.show_job(job_id)["JobState"]

    def job_field(self, job_id: str, name: str) -> str | None:
        return self.show_job(job_id).get(name)

    def stop_jobs(self, timeout: float = 180) -> None:
        """Cancel every job of this cluster and wait until none is left; then SIGKILL any
        process still carrying this cluster's ``SLURM_CONF`` (a job's, if SLURM could not)."""
        subprocess.run(["scancel", "--user", str(os.getuid())], env=self.env, capture_output=True, timeout=60)
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = subprocess.run(
                ["squeue", "-h", "-t", "all", "-o", "%T"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if r.returncode == 0 and not {"RUNNING", "COMPLETING", "CONFIGURING", "PENDING"} & set(
                r.stdout.split()
            ):
                break
            time.sleep(1)
        mark = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        daemons = {p.pid for p in self.procs} | {os.getpid()}
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) not in daemons:
                with contextlib.suppress(OSError):
                    if mark in (d / "environ").read_bytes().split(b"\0"):
                        os.kill(int(d.name), signal.SIGKILL)

    def logs(self) -> str:
        text = ""
        for log in sorted(self.root.glob("log/*.log")):
            text += f"\n--- {log.name} (last 3000 chars)\n{log.read_text(errors='replace')[-3000:]}"
        return text


def _wait(predicate, timeout: float, what: str, procs) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        dead = [p.args[0] for p in procs if p.poll() is not None]
        if dead:
            raise AssertionError(f"{dead} exited while waiting for {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextlib.contextmanager
def slurm_cluster(root: Path, *, cpus: int, timeout: float = 120):
    """Start munged, slurmctld and slurmd (root on loopback, node ``studynode1`` at
    127.0.0.1 with ``cpus`` CPUs) under ``root``; yield a :class:`Slurm` once the node is
    idle; stop the three daemons (by PID) and remove nothing else."""
    for d in ("state", "spool", "log", "munge"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = root / "munge" / "munge.socket"
    ctld_port, slurmd_port = free_ports(2, "127.0.0.1")
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    # sched_interval=1: SLURM's main scheduling pass every second (its default: every 60 s); a job
    # becomes eligible at its StartTime without an event that schedules it, so a requeued job whose
    # start the tests move up waited for the next pass, up to a minute, each time
    conf.write_text(f"""\
ClusterName=studytest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/state/slurmctld.pid
SlurmdPidFile={root}/spool/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
JobRequeue=1
KillWait=60
MinJobAge=3600
MessageTimeout=60
MailProg=/bin/true
SlurmctldTimeout=120
SlurmdTimeout=300
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={cpus} State=UNKNOWN
PartitionName=studytest Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for k in [
        k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF"
    ]:
        del env[k]  # a test run inside a SLURM job must not hand that job's settings to these clients
    slurm = Slurm(root=root, env=env, cpus=cpus)
    log = lambda name: open(root / "log" / f"{name}.out", "w")  # noqa: E731 - stdout/stderr of each daemon
    try:
        slurm.procs.append(
            subprocess.Popen(
                [
                    _binary("munged"),
                    "-F",
                    "--force",
                    f"--socket={sock}",
                    f"--key-file={key}",
                    f"--pid-file={root}/munge/munged.pid",
                    f"--seed-file={root}/munge/munged.seed",
                    f"--log-file={root}/log/munged.log",
                ],
                stdout=log("munged"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        _wait(sock.exists, timeout, "munged's socket", slurm.procs)
        slurm.procs.append(
            subprocess.Popen(
                [_binary("slurmctld"), "-D", "-i"],
                env=env,
                stdout=log("slurmctld"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        slurm.procs.append(
            subprocess.Popen(
                [_binary("slurmd"), "-D", "-N", NODE],
                env=env,
                stdout=log("slurmd"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

        def idle() -> bool:
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True)
            return r.returncode == 0 and r.stdout.strip() == "idle"

        _wait(idle, timeout, "the SLURM node to be idle", slurm.procs)
        yield slurm
    finally:
        if all(p.poll() is None for p in slurm.procs):
            with contextlib.suppress(Exception):
                slurm.stop_jobs()
        for p in reversed(slurm.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                # slurmctld, once slurmd is gone, saves its state and then often hangs: 30 s were lost here
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=30)
