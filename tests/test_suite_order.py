"""The suite starts its longest files first (tests/conftest.py, tests/file_seconds.json): given
in the other order, a measured long file is collected before a short one."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO_ROOT

SECONDS = json.loads((REPO_ROOT / "tests" / "file_seconds.json").read_text())


def test_the_longest_file_is_collected_first():
    short, long = "tests/study/test_api.py", "tests/study/tuning/test_runner.py"
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
