"""The project's formatter and linter, ruff, with the line length and rules of
pyproject.toml's ``[tool.ruff]``: every Python file of the repository is formatted as
``ruff format`` writes it and passes ``ruff check``.  Run ``ruff format . && ruff check --fix .``
to fix what these report."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.helpers import REPO_ROOT


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_ruff_declares_a_line_length_of_at_most_110():
    ruff = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["line-length"] <= 110
    assert "E501" not in ruff["lint"].get("ignore", []), "the line length must be checked"


def test_every_file_is_formatted_by_ruff():
    r = _ruff("format", "--check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_file_passes_ruff_check():
    r = _ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_check_finds_a_line_too_long(tmp_path):
    """The check is live: a line over the project's length is reported with the project's settings."""
    (tmp_path / "long.py").write_text("x = " + "1 + " * 40 + "1\n")
    r = _ruff("check", "--no-cache", "--config", str(REPO_ROOT / "pyproject.toml"), str(tmp_path / "long.py"))
    assert r.returncode == 1 and "E501" in r.stdout, r.stdout + r.stderr
