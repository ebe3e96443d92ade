"""Helpers shared by the tests that drive the real CLI (``python -m study ...``) and the
processes it starts: tiny study files, subprocesses in their own session, waiting on
tables, and killing only what a test started (by session id, never ``ray stop``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

#: a tiny self-attention model: a study of it trains in seconds on one CPU
TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}

#: the repository's root folder (tests live in tests/<package>/...)
REPO_ROOT = Path(__file__).resolve().parents[1]


def write_spec(tmp_path: Path, name: str, **doc) -> Path:
    """``<tmp_path>/<name>.yaml``: a tiny study (``synthetic:100``, batch 25, one CPU per
    trial) with ``doc``'s keys added or replaced."""
    p = tmp_path / f"{name}.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "data": "synthetic:100",
                "batch_size": 25,
                "model": TINY,
                "training": {"head_images": 4},
                "resources": {"cpus_per_trial": 1},
                **doc,
            }
        )
    )
    return p


def corpus_expectation(path: Path) -> str:
    """The ``# expect: TEXT`` of a ``tests/bad_inputs`` file's first line."""
    return Path(path).read_text(encoding="utf-8").splitlines()[0].split("# expect:", 1)[1].strip()


def meets_expectation(path: Path, message: str, *, anywhere: bool = False) -> bool:
    """Whether a refusal's message (what follows ``FILE: ``) is the one the corpus file
    expects: it starts with TEXT (or holds it, ``anywhere``), or, for ``re:PATTERN``,
    matches PATTERN from its start.  A pattern states a contract that more than one
    layer may meet (e.g. "names line 4 and says nesting", whether the project's depth
    check or the YAML scanner's own limit refuses first)."""
    want = corpus_expectation(path)
    if want.startswith("re:"):
        return re.match(want[3:], message) is not None
    return want in message if anywhere else message.startswith(want)


def cli_env(env: dict | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}


def run_cli(cwd, *args, timeout: float = 600, module: str = "study", env: dict | None = None):
    """``python -m <module> ARGS`` to its end: the CompletedProcess (text stdout/stderr)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(env),
    )


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test will Ctrl-C: SIGINT's default disposition.
    A pytest started in the background by a non-interactive shell (``pytest &``)
    ignores SIGINT, its children inherit that, and Python then installs no
    KeyboardInterrupt handler: the signal the test sends would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen(*args, cwd, env: dict | None = None) -> subprocess.Popen:
    """``python -m study ARGS`` in a new session (so that it and the local Ray it starts
    can be killed together), stdout and stderr merged, text; SIGINT as at a terminal."""
    return subprocess.Popen(
        [sys.executable, "-m", "study", *args],
        cwd=cwd,
        start_new_session=True,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    )


def session_pids(sid: int) -> list[int]:
    """Every process of session ``sid``."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                    pids.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def kill_session(session) -> None:
    """SIGKILL every process of a session: a session id, or the Popen that leads it."""
    sid = session if isinstance(session, int) else session.pid
    for pid in session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def process_name(pid: int) -> str:
    """A process's title (``ray::ImplicitFunc.train`` for a trial), '' if it is gone."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def processes(title: str, *, session: int) -> list[int]:
    """PIDs of session ``session`` whose process title is ``title``."""
    return [p for p in session_pids(session) if process_name(p) == title]


def wait_for(predicate, proc, timeout: float = 300, every: float = 0.1) -> bool:
    """Poll ``predicate`` until it holds (True), ``proc`` ends or ``timeout`` passes (False)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(every)
    return False


def images_lasting(seconds: float, *, model: dict = TINY, batch_size: int = 25, least: int = 1000) -> int:
    """A number of training images (a multiple of ``batch_size``, at least ``least``)
    that one epoch of ``model`` takes about ``seconds`` or longer to train on one CPU
    thread, measured here and now: SGD steps on random CIFAR-shaped batches for half a
    second.  A trial does more per image (data, augmentation, bookkeeping), so its epoch
    lasts at least that long, on a quiet machine or a loaded one."""
    import torch

    from study.models import build_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net = build_model(**model)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        x, y = torch.randn(batch_size, 3, 32, 32), torch.randint(0, 10, (batch_size,))

        def step() -> None:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()

        step()  # warm-up
        steps, start = 0, time.perf_counter()
        while steps < 3 or time.perf_counter() - start < 0.5:
            step()
            steps += 1
        per_second = steps * batch_size / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return max(least, int(per_second * seconds) // batch_size * batch_size)


def ledger_seconds(*ledgers: Path) -> float:
    """The largest ``device_seconds`` of these attempt ledgers (``trials/<key>.json``,
    ``trial.json``) and of the ``*.json`` in those of them that are folders; 0 if none is
    written yet.  Above 0 while the first epoch runs: its clock has been saved."""
    seconds = 0.0
    for p in ledgers:
        for f in sorted(p.glob("*.json")) if p.is_dir() else [p]:
            try:
                seconds = max(seconds, float(json.loads(f.read_text()).get("device_seconds", 0.0)))
            except (OSError, ValueError, AttributeError):
                pass
    return seconds


class Output:
    """A child's text stdout read in a background thread, so that a test can wait for a
    line while the child runs (``wait_for_line``) and read it all once it has ended."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines, self._new = proc, [], threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._new:
                self.lines.append(line)
                self._new.notify_all()
        with self._new:
            self.lines.append(None)  # end of output
            self._new.notify_all()

    def wait_for_line(self, text: str, timeout: float = 120) -> bool:
        """Whether a line holding ``text`` appears before the output ends or ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                if any(ln is not None and text in ln for ln in self.lines):
                    return True
                if self.lines and self.lines[-1] is None:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._new.wait(left)

    def text(self, timeout: float = 300) -> str:
        """Everything the child wrote, once it has ended (waits for it)."""
        self.proc.wait(timeout=timeout)
        self._thread.join(timeout=timeout)
        with self._new:
            return "".join(ln for ln in self.lines if ln is not None)


class _CodePayload:
    """Unpickling it runs ``touch MARKER``: a file that must never appear."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def code_payload(marker: Path, **obj) -> bytes:
    """A pickle that creates ``marker`` when loaded (alone, or as the values ``obj``
    of a dict holding it under the key ``payload``)."""
    import pickle

    payload = _CodePayload(marker)
    return pickle.dumps({**obj, "payload": payload} if obj else payload, protocol=4)


def free_ports(n: int, host: str = "") -> list[int]:
    """``n`` distinct TCP ports the kernel says are free on ``host`` (all interfaces by
    default), all held open together while they are picked."""
    import socket

    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((host, 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def read_until(proc, needle: str, timeout: float = 300) -> list[str]:
    """Lines of ``proc``'s stdout up to and including the first holding ``needle`` (all
    of them if it ends first, or those read in ``timeout`` seconds)."""
    lines, deadline = [], time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            break
    return lines


def fill_disk(disk: Path) -> Path:
    """Write zeros under ``disk`` until it is full; returns the file (delete it to free
    the space)."""
    filler = disk / "filler"
    # Unbuffered: a buffered file keeps the tail of a partly written chunk and raises
    # ENOSPC again when `with` closes it (whenever the free space ends 60 KiB into a chunk).
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
        except OSError:
            pass
    return filler
