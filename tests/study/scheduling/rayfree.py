"""Runs code that exercises the scheduler in a fresh interpreter and says which Ray modules it
imported: the scheduler's tests run without Ray, and this checks that nothing they drive
imports it (another test's imports in this worker cannot hide it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.helpers import REPO_ROOT

MARK = "--- modules ---"


def ray_modules_after(code: str) -> list[str]:
    """The ``ray`` modules loaded once ``code`` ran in a fresh interpreter (it must run cleanly)."""
    listed = "print('\\n'.join(m for m in sys.modules if m.split('.')[0] == 'ray'))"
    script = f"{textwrap.dedent(code)}\nimport sys\nprint({MARK!r})\n{listed}\n"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, cwd=REPO_ROOT
    )
    assert r.returncode == 0 and MARK in r.stdout, r.stderr
    return r.stdout.split(MARK, 1)[1].split()
