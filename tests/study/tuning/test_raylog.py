"""A quiet console (issue 31, item 4): on the default local path ``study run`` prints
only the project's own lines.  Ray's own log lines (its notice that token
authentication is on, ``Started a local Ray instance``, Tune's warnings) go to the
study's log file ``STUDY/logs/ray.log``; ``--verbose`` prints them too.  Token
authentication stays on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TINY = {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2}
DOC = {
    "name": "q",
    "data": "synthetic:100",
    "epochs": 1,
    "batch_size": 25,
    "training": {"head_images": 4},
    "model": TINY,
    "models": [{"encoding": "quadratic"}],
    "resources": {"cpus_per_trial": 1},
}

#: a line of Ray's logging format (``WARNING authentication_token_setup.py:85 -- ...``),
#: a worker's line forwarded to the driver, Ray's start-up line
RAY_LINE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b\s+[\w.]+\.py:\d+ -- |\(pid=|INFO worker\.py")
#: every line the project prints on this tiny study: the compute line, the study's line, the
#: progress table (header, trial rows, "N of M trials done"), the end-of-study summary
OWN = re.compile(
    r"plan: 1 trial, |study q: 1 trials |trial +cell +state |c000-s000 +0 +(running|finished) |"
    r"  [01] of 1 trials done, elapsed |trials: 1 finished$|best trial per model configuration |"
    r"  SA quadratic isotropic \(N_h=2\) +c000-s000 +best test acc "
)


def _study(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"
    }  # Ray's default: token auth, with its notice
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "study", *args, "--storage", str(tmp_path / "st"), "--num-cpus", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


@pytest.mark.long
def test_console_has_only_the_projects_lines_ray_lines_go_to_the_study_log_and_verbose_prints_them(tmp_path):
    """One study: ``study run`` (quiet) prints only the project's lines, Ray's go to
    ``logs/ray.log``; then ``study resume --verbose`` of it (which starts Ray again, as
    every resume does) also prints Ray's lines on the console, and adds them to the log."""
    f = tmp_path / "q.yaml"
    f.write_text(yaml.safe_dump(DOC))
    root = tmp_path / "st" / "q"
    done = _study(tmp_path, "run", str(f))
    console = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, "\n".join(console)
    ray_lines = [ln for ln in console if RAY_LINE.search(ln)]
    assert ray_lines == [], "Ray's own lines on the console:\n" + "\n".join(ray_lines)
    others = [ln for ln in console if not OWN.match(ln)]
    assert others == [], "lines that are not the project's own:\n" + "\n".join(others)
    assert any(ln.startswith("study q: 1 trials") for ln in console), (
        console
    )  # the project's own lines remain
    log = (root / "logs" / "ray.log").read_text()
    assert re.search(r"WARNING authentication_token_setup\.py:\d+ -- Token authentication is enabled", log), (
        log
    )
    assert re.search(r"INFO worker\.py:\d+ -- Started a local Ray instance", log), log
    # token authentication is still on: the notice says so, and the driver's environment asks for it
    assert "RAY_AUTH_MODE=disabled to opt out" in log

    # --verbose: Ray's lines on the console too, and still in the study's log (appended: now twice)
    done = _study(tmp_path, "resume", "q", "--verbose")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"WARNING authentication_token_setup\.py:\d+ -- Token authentication is enabled", done.stderr
    )
    assert (root / "logs" / "ray.log").read_text().count("Token authentication is enabled") == 2


def test_a_log_file_that_cannot_be_written_prints_no_traceback(capfd):
    """The study's ``ray.log`` lives in the study folder: on a full disk each record Ray logs
    (its syncer failing, say) failed to flush and Python's logging printed ``--- Logging
    error ---`` and two tracebacks on the console of a study that then stopped with its own
    one-line storage error.  ``/dev/full`` fails every write with ENOSPC, as a full disk does."""
    import logging

    from study.tuning import raylog

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    raylog.capture()
    try:
        raylog.to_file("/dev/full")
        logging.getLogger("ray").error("Ray's syncer failed: [Errno 28] No space left on device")
        raylog.release()
    finally:
        raylog.restore()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err, err
