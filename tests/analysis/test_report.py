"""`analysis report`: one self-contained page; `--serve` keeps it current while a study
runs.  Checked in a real headless Chromium (Debian's `chromium`, installed by
tests/install-system-deps.sh)."""

import base64
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from study.results.tables import part_path, read_table, write_part
from tests.helpers import kill_session, popen, processes, session_pids

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, (
        "headless Chromium is required: tests/install-system-deps.sh installs it "
        "(Debian: apt-get install -y chromium)"
    )
    return exe


def browse(url: str, profile: Path, *, screenshot: Path | None = None) -> str:
    """The DOM Chromium built from ``url`` (and a screenshot of it)."""
    exe = chromium()
    base = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "<html" in dom.stdout, dom.stderr[-2000:]
    if screenshot is not None:
        shot = subprocess.run(
            [*base, f"--screenshot={screenshot}", "--window-size=1200,1800", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
    return dom.stdout


def images_are_png(dom: str) -> int:
    """Every <img> is a data: URI holding a PNG that decodes; returns how many."""
    from PIL import Image

    srcs = re.findall(r"<img\b[^>]*\bsrc=\"([^\"]*)\"", dom)
    for src in srcs:
        assert src.startswith("data:image/png;base64,"), src[:80]
        Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).verify()
    return len(srcs)


def epochs_shown(dom: str) -> int:
    m = re.search(r"(\d+) epochs? recorded", dom)
    assert m, dom[:2000]
    return int(m[1])


def _wait(predicate, timeout: float, what: str, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"`study run` ended (status {proc.returncode}) while waiting for {what}: "
                f"{proc.stdout.read()[-3000:]}"
            )
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_served_report_follows_a_running_study_in_chromium(tmp_path):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    doc = {
        "name": "live",
        "data": "synthetic:300",
        "epochs": 4,
        "batch_size": 25,
        "training": {"head_images": 4},
        "model": {"hidden": 16, "layers": 2, "intermediate": 16, "num_heads": 4},
        "resources": {"cpus_per_trial": 1},
    }
    (tmp_path / "live.yaml").write_text(yaml.safe_dump(doc))
    root = tmp_path / "results" / "live"
    study = popen("run", "live.yaml", "--num-cpus", "1", "--quiet", cwd=tmp_path, env=env)
    server, trial = None, []
    try:
        _wait(lambda: (root / "study.json").exists(), 600, "the study to start (Ray starts first)", study)
        # the trial is paused (SIGSTOP) until the first page load: the page sees the study
        # unfinished however fast this machine trains and however slowly Chromium starts
        trial = _wait(
            lambda: processes("ray::ImplicitFunc.train", session=study.pid), 600, "the trial", study
        )
        for pid in trial:
            os.kill(pid, signal.SIGSTOP)
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "analysis",
                "report",
                "live",
                "--serve",
                "--port",
                "0",
                "--interval",
                "0.5",
            ],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = server.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line  # loopback only
        url = m[0]
        version = lambda: urllib.request.urlopen(url + "version", timeout=10).read().decode()  # noqa: E731

        before = browse(url, tmp_path / "profile", screenshot=tmp_path / "before.png")
        n_before, v_before = epochs_shown(before), version()
        assert n_before < 4, "the study ended before the first page load: nothing to compare"
        for pid in trial:
            os.kill(pid, signal.SIGCONT)
        assert "setInterval" in before and "data-version" in before  # the page polls /version
        images_are_png(before)

        # an epoch lands in the tables -> the server rebuilds -> the page shows it
        _wait(lambda: len(read_table(root / "tables", "epochs")) > n_before, 240, "an epoch to land", study)
        page = lambda: urllib.request.urlopen(url, timeout=30).read().decode()  # noqa: E731
        _wait(lambda: epochs_shown(page()) > n_before, 120, "the server to rebuild the page")
        assert version() != v_before
        after = browse(url, tmp_path / "profile", screenshot=tmp_path / "after.png")
        assert epochs_shown(after) > n_before
        assert (
            after != before
            and (tmp_path / "after.png").read_bytes() != (tmp_path / "before.png").read_bytes()
        )
        assert images_are_png(after) >= 1, "the accuracy figure once an epoch is recorded"
        assert "synthetic:300" in after and "Study file" in after and "Table 1" in after
        if os.environ.get("REPORT_SCREENSHOTS"):
            for name in ("before.png", "after.png"):
                shutil.copy(tmp_path / name, Path(os.environ["REPORT_SCREENSHOTS"]) / name)
        assert study.wait(timeout=300) == 0, study.stdout.read()[-3000:]
    finally:
        for proc in (server, study):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
        kill_session(study)  # the study's local Ray with it


def _run_row(trial_id, status, **extra):
    return {
        "trial_id": trial_id,
        "study": "f",
        "name": "SA quadratic isotropic (N_h=4)",
        "arch": "sa",
        "encoding": "quadratic",
        "isotropic": True,
        "num_heads": 4,
        "status": status,
        "epochs_done": 1,
        "epochs": 3,
        "best_test_acc": 0.25,
        "final_test_acc": 0.25,
        "n_params": 100,
        "flops": 1000,
        "device_seconds": 1.0,
        "updated_at": time.time(),
        **extra,
    }


def test_report_lists_failures_with_their_cause_and_embeds_only_pngs(tmp_path):
    tables = tmp_path / "f" / "tables"
    write_part(
        part_path(tables, "runs", "c000-s000"),
        [_run_row("c000-s000", "error", error="RuntimeError: CUDA out of memory <tried 2 GiB>")],
    )
    write_part(part_path(tables, "runs", "c001-s000"), [_run_row("c001-s000", "diverged", error=None)])
    write_part(part_path(tables, "runs", "c002-s000"), [_run_row("c002-s000", "finished", error=None)])
    write_part(
        part_path(tables, "epochs", "c002-s000", 0),
        [{"trial_id": "c002-s000", "epoch": 0, "test_acc": 0.25, "train_loss": 2.0, "seconds": 1.0}],
    )
    (tmp_path / "f" / "study.yaml").write_text("name: f\ndata: synthetic\n")
    out = tmp_path / "page.html"
    # a fresh interpreter: the report reads tables only (no torch, no training code)
    code = (
        "import sys\nfrom analysis.cli import main\n"
        f"rc = main(['report', {str(tmp_path / 'f')!r}, '--out', {str(out)!r}])\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('study.trial.', 'study.data'))\n"
        "       and m != 'study.trial.config']  # the config dataclasses are torch-free\n"
        "sys.exit(f'imported {bad}' if bad else rc)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    page = out.read_text()
    failures = page.split("<h2>Failures</h2>", 1)[1].split("<h2>", 1)[0]
    assert "RuntimeError: CUDA out of memory &lt;tried 2 GiB&gt;" in failures  # the cause, escaped
    assert "c001-s000" in failures and "non-finite training loss" in failures
    assert "c002-s000" not in failures
    assert "3 trials: " in page and "1 epoch recorded" in page and "name: f" in page
    assert images_are_png(page) >= 1
    assert 'src="http' not in page and "<link" not in page  # self-contained


def test_report_bad_inputs_are_one_line_exit_2(tmp_path, capsys):
    from analysis.cli import main

    with pytest.raises(SystemExit) as e:
        main(["report", str(tmp_path / "nothing")])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        main(["report", str(tmp_path), "--serve", "--port", "70000"])
    assert e.value.code == 2 and "--port" in capsys.readouterr().err


def _study_with_figures(folder: Path) -> Path:
    tables = folder / "tables"
    for trial in ("c000-s000", "c001-s000"):
        write_part(part_path(tables, "runs", trial), [_run_row(trial, "finished", error=None)])
        for epoch in range(3):
            write_part(
                part_path(tables, "epochs", trial, epoch),
                [
                    {
                        "trial_id": trial,
                        "epoch": epoch,
                        "test_acc": 0.2 + 0.1 * epoch,
                        "train_loss": 2.0 - epoch / 2,
                        "seconds": 1.0,
                    }
                ],
            )
    (folder / "study.yaml").write_text(f"name: {folder.name}\ndata: synthetic\n")
    return folder


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_report_serve_on_a_busy_port_is_refused_before_anything_is_drawn(tmp_path):
    """The port is bound first: a taken one is one line, exit 2, and the study folder
    holds exactly what it held (the refusal used to come after six figure files)."""
    import socket

    study = _study_with_figures(tmp_path / "busy")
    before = _files(study)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "analysis", "report", str(study), "--serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert (
        r.returncode == 2
        and r.stderr.count("\n") == 1
        and f"--port: cannot serve on 127.0.0.1:{port}" in r.stderr
    ), r.stderr
    assert _files(study) == before


@pytest.mark.parametrize("interval", ["1e300", "inf", "nan", "0", "-1", "1e-300", "1e6"])
def test_report_serve_interval_out_of_bounds_is_one_line_exit_2(tmp_path, interval):
    study = _study_with_figures(tmp_path / "iv")
    before = _files(study)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "report",
            str(study),
            "--serve",
            "--port",
            "0",
            "--interval",
            interval,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--interval: must be" in r.stderr, r.stderr
    assert _files(study) == before


@pytest.mark.slow
def test_report_serve_stopped_by_sigterm_leaves_no_process_behind(tmp_path):
    """SIGTERM (``kill``, a service manager) stops ``analysis report --serve`` as Ctrl-C does,
    also while it draws figures on its ``spawn`` pool: the pool's workers end with it.  The
    landed code died at once and its workers stayed, blocked, for good (found after the
    served-report test: three orphans of the killed server, 800 s later)."""
    from study.device.cpus import local_cpus

    if local_cpus() < 2:
        pytest.skip("figures are drawn in this process on one CPU: no pool to leave behind")

    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "study",
            "train",
            "--hidden",
            "16",
            "--layers",
            "1",
            "--intermediate",
            "16",
            "--num-heads",
            "2",
            "--data",
            "synthetic:100",
            "--batch-size",
            "25",
            "--epochs",
            "1",
            "--quiet",
            "--out",
            "t",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, (
        r.stderr
    )  # a trained model's tables: every figure of the report, drawn on a pool
    server = subprocess.Popen(
        [sys.executable, "-m", "analysis", "report", "t", "--serve", "--port", "0"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline, kids = time.monotonic() + 120, set()
        while time.monotonic() < deadline and server.poll() is None and len(kids) < 2:
            kids = set(session_pids(server.pid)) - {server.pid}  # the pool's workers and resource tracker
            time.sleep(0.02)
        assert len(kids) >= 2, "the first build drew on no pool: the case was not exercised"
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(k) for k in kids):
            time.sleep(0.1)
        assert not [k for k in kids if alive(k)], "the server's workers outlived it"
        assert "Traceback" not in server.stderr.read()
    finally:
        kill_session(server.pid)
