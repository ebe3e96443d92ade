"""The suite starts its longest files first (tests/conftest.py, tests/file_seconds.json): given
in the other order, a measured long file is collected before a short one."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO_ROOT

SECONDS = json.loads((REPO_ROOT / "tests" / "file_seconds.json").read_text())


def test_the_longest_file_is_collected_first():
    long, short = max(SECONDS, key=SECONDS.get), min(SECONDS, key=SECONDS.get)
    assert SECONDS[long] > 10 * SECONDS[short]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-o",
            "addopts=",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            short,
            long,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    files = [line.split("::")[0] for line in r.stdout.splitlines() if "::" in line]
    assert files and list(dict.fromkeys(files)) == [long, short], r.stdout + r.stderr


def test_every_measured_file_exists():
    """A file renamed or removed leaves no stale entry behind (rerun tests/file_seconds.py)."""
    assert [f for f in SECONDS if not (REPO_ROOT / f).is_file()] == []


def _collected(*args: str) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [line for line in r.stdout.splitlines() if "::" in line]


def test_the_suite_leaves_the_long_drills_out_and_marker_long_runs_them():
    """The README's command (pyproject's addopts) collects no ``long`` test; ``-m long`` collects
    exactly those, so each still runs somewhere."""
    path = "tests/study/cost/test_plan.py"
    long = f"{path}::test_predicted_over_measured_device_seconds_of_a_finished_cpu_study"
    suite, drills = _collected(path), _collected("-m", "long", path)
    assert long not in suite and len(suite) > 10, suite
    assert drills == [long], drills
