"""tests/install-system-deps.sh: the system programs the suite needs (Chromium, ``ss``,
a single-node SLURM), installed by the README's test command where missing; one line
and exit 0 where they cannot be.  The paths that cannot install run the script with a
PATH of fakes (``id``, ``sudo``, ``apt-get``) and without the real programs on it."""

import subprocess

from tests.helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "tests" / "install-system-deps.sh"
PACKAGES = ["chromium", "iproute2", "slurmctld", "slurmd", "slurm-client", "munge"]


def run(*args, path: str | None = None):
    env = {"PATH": path} if path is not None else None
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=600, env=env
    )


def fakes(tmp_path, **scripts) -> str:
    """A folder of fake programs (name -> shell body) for PATH; ``apt-get`` is always one
    that logs its arguments to ``apt.log`` (and runs the given body, if any)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "apt.log"
    scripts = {**scripts, "apt-get": f'echo "$*" >> {log}\n' + scripts.get("apt-get", "")}
    for name, body in scripts.items():
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    return str(bin_)


def apt_calls(tmp_path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def check(path: str | None = None) -> dict[str, str]:
    """``--check``'s verdict per package: 'present' or 'missing'."""
    r = run("--check", path=path)
    rows = dict(reversed(line.split()[:2]) for line in r.stdout.splitlines())
    assert sorted(rows) == sorted(PACKAGES), r.stdout
    assert r.returncode == (1 if "missing" in rows.values() else 0), r
    return rows


def test_everything_the_suite_needs_is_present_after_the_readme_command(tmp_path):
    """The README's test command runs the script before pytest (so does .ci/run): every
    program is there now, and a second run is silent and runs no apt-get."""
    r = run("--check")
    assert r.returncode == 0 and r.stdout.count("present ") == len(PACKAGES), (
        f"{r.stdout}(run tests/install-system-deps.sh as root)"
    )
    assert "present chromium " in r.stdout
    again = run(path=fakes(tmp_path) + ":/usr/bin:/bin")
    assert (again.returncode, again.stdout, again.stderr) == (0, "", ""), again
    assert apt_calls(tmp_path) == []


def test_not_root_prints_one_line_installs_nothing_and_exits_0(tmp_path):
    path = fakes(tmp_path, id="echo 1000", sudo="exit 1")
    missing = [p for p, v in check(path).items() if v == "missing"]
    assert "chromium" in missing  # not on this PATH
    r = run(path=path)
    assert r.returncode == 0 and r.stderr == "", r
    assert len(r.stdout.splitlines()) == 1, r.stdout
    line = r.stdout.strip()
    assert line.startswith("tests/install-system-deps.sh: not root"), line
    assert f"cannot install {' '.join(missing)} " in line and "tests/analysis/test_report.py" in line, line
    assert apt_calls(tmp_path) == []


def test_without_apt_get_prints_one_line_and_exits_0(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(path=str(empty))
    assert r.returncode == 0 and r.stderr == "", r
    assert len(r.stdout.splitlines()) == 1, r.stdout
    assert r.stdout.startswith("tests/install-system-deps.sh: no apt-get: cannot install chromium"), r.stdout
    assert "the tests that need them will fail: tests/analysis/test_report.py" in r.stdout


def test_apt_get_failing_prints_its_reason_in_one_line_and_exits_0(tmp_path):
    path = fakes(
        tmp_path, id="echo 0", **{"apt-get": 'echo "E: Unable to locate package chromium" >&2; exit 100'}
    )
    r = run(path=path)
    assert r.returncode == 0 and r.stderr == "", r
    assert len(r.stdout.splitlines()) == 1, r.stdout
    assert "apt-get failed (E: Unable to locate package chromium)" in r.stdout, r.stdout
    assert apt_calls(tmp_path) == ["-qq -o DPkg::Lock::Timeout=300 update"]


def test_installs_exactly_what_is_missing(tmp_path):
    """As root, apt-get is asked for the missing packages only (here apt-get is a fake
    that installs nothing, so the script then says they are still not found)."""
    path = fakes(tmp_path, id="echo 0")
    missing = [p for p in PACKAGES if check(path)[p] == "missing"]
    r = run(path=path)
    assert apt_calls(tmp_path) == [
        "-qq -o DPkg::Lock::Timeout=300 update",
        f"-qq -o DPkg::Lock::Timeout=300 install -y {' '.join(missing)}",
    ]
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1 and "yet no program of theirs" in r.stdout, r


def test_unknown_argument_is_a_usage_error():
    r = run("--nope")
    assert r.returncode == 2 and r.stderr.strip() == "usage: tests/install-system-deps.sh [--check]"


def test_readme_test_command_runs_it_and_says_what_it_installs():
    readme = (SCRIPT.parent.parent / "README.md").read_text()
    command = readme.split("Set up and run the tests:", 1)[1].split("\n\n", 2)[1]
    assert "tests/install-system-deps.sh && python -m pytest" in command, command
    ci = (SCRIPT.parent.parent / ".ci" / "run").read_text().splitlines()
    assert command.strip() in ci, "`.ci/run` does not run the README's test command as written"
    installing = readme.split("## Installing", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{pkg}`" in installing for pkg in PACKAGES), installing
