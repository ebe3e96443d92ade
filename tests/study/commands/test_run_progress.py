"""Command-line conventions and progress (issue 14): `study` alone, `--version`,
defaults in `--help`, loggers in the study file, progress with ETA, decode progress."""

import argparse
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import time
from types import SimpleNamespace

import pytest
import yaml

from study.cli import build_parser, main
from tests.helpers import run_cli


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


@pytest.mark.parametrize("prog", ["study", "analysis"])
def test_alone_lists_the_commands_and_exits_2(prog, capsys):
    if prog == "study":
        code = main([])
    else:
        from analysis.cli import main as amain

        code = amain([])
    err = capsys.readouterr().err
    assert code == 2
    assert "COMMAND" in err and ("export" in err if prog == "study" else "report" in err)


@pytest.mark.parametrize("prog", ["study", "analysis"])
def test_version(prog, capsys):
    from analysis.cli import main as amain

    with pytest.raises(SystemExit) as e:
        (main if prog == "study" else amain)(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.split()
    assert out[0] == prog and out[1][0].isdigit() or out[1] == "unknown"


def _all_parsers():
    from analysis.cli import build_parser as abuild

    for top in (build_parser(), abuild()):
        yield top.prog, top
        for name, sub in _subparsers(top).items():
            yield f"{top.prog} {name}", sub


def test_every_flag_default_is_in_help():
    """A flag whose default is a value (not None / a switch) shows it in --help."""
    checked = 0
    for prog, parser in _all_parsers():
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if not action.option_strings or any(
                action.default is v for v in (None, False, argparse.SUPPRESS)
            ):
                continue
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            default = action.default
            shown = str(default) if not isinstance(default, argparse.Namespace) else None
            own = " ".join((action.help or "").split())
            assert ("default" in own.lower() and own in text) or f"(default: {shown})" in text, (
                prog,
                action.option_strings,
                default,
            )
            checked += 1
    assert checked > 20


def _spec_file(tmp_path, **extra):
    doc = {"name": "l", "data": "synthetic:100", "epochs": 1, **extra}
    p = tmp_path / "l.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_loggers_key_validated(tmp_path):
    from study.spec.studyfile import SpecError, load_spec

    assert load_spec(_spec_file(tmp_path)).study.loggers == ["tensorboard"]
    assert load_spec(_spec_file(tmp_path, loggers=["mlflow"])).study.loggers == ["mlflow"]
    assert load_spec(_spec_file(tmp_path, loggers=[])).study.loggers == []
    with pytest.raises(SpecError, match=r"loggers\.1: unknown logger 'comet'"):
        load_spec(_spec_file(tmp_path, loggers=["tensorboard", "comet"]))
    with pytest.raises(SpecError, match="loggers: repeats"):
        load_spec(_spec_file(tmp_path, loggers=["wandb", "wandb"]))
    with pytest.raises(SpecError, match="loggers: must be list"):
        load_spec(_spec_file(tmp_path, loggers="tensorboard"))


@pytest.mark.parametrize(
    "logger,module", [("mlflow", "mlflow"), ("wandb", "wandb"), ("tensorboard", "tensorboardX")]
)
def test_missing_logger_package_names_the_extra(tmp_path, capsys, monkeypatch, logger, module):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    f = _spec_file(tmp_path, loggers=[logger])
    for command in (["validate", str(f)], ["run", str(f), "--storage", str(tmp_path / "st")]):
        with pytest.raises(SystemExit) as e:
            main(command)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert f"loggers.0: logger {logger} needs the {module} package" in err
        assert f".[{logger}]" in err
    assert not (tmp_path / "st").exists(), "nothing written"


def test_progress_counts_trials_and_estimates_from_epoch_times(monkeypatch):
    """The ETA simulates the rest of the schedule from predicted costs (equal here)
    calibrated on the measured epochs (tests/study/scheduling/test_progress.py: unequal costs)."""
    import study.tuning.hooks as progress

    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    raw = {"data": "synthetic", "epochs": 4, "model": {"hidden": 16, "layers": 1, "intermediate": 16}}
    raw2 = {**raw, "seeds": [0, 1, 2, 3]}
    from study.spec.studyfile import validate
    from study.tuning.runner import launch_plan

    rep = progress.ProgressReporter(
        plan=launch_plan(validate(raw2, file="f.yaml", default_name="p")),
        meta={"num_trials": 4},
        enabled=False,
    )
    t = [
        SimpleNamespace(trial_id=f"r{i}", config={"cell": i, "key": f"c{i:03d}-s000"}, last_result={})
        for i in range(4)
    ]
    assert (
        rep.status_line().startswith("0 of 4 trials done")
        and "ETA after the first epoch" in rep.status_line()
    )
    rep.on_trial_start(0, t, t[0])
    rep.on_trial_start(0, t, t[1])
    now[0] = 3.0
    rep.on_trial_result(0, t, t[0], {"epoch": 0, "seconds": 3.0, "status": "running"})
    rep.on_trial_result(0, t, t[1], {"epoch": 0, "seconds": 3.0, "status": "running"})
    # 3 epochs left of the two running (9 s each), then two pending trials of 12 s each on 2 workers
    assert rep.status_line().endswith("ETA 0:00:21")
    now[0] = 12.0
    rep.on_trial_complete(0, t, t[0])  # ended: a free worker takes a pending trial
    line = rep.status_line()
    assert line.startswith("1 of 4 trials done, elapsed 0:00:12") and line.endswith("ETA 0:00:12"), line


def test_first_decode_prints_progress(tmp_path, monkeypatch):
    import study.data.imagefolder as imagefolder
    from study.data import load_splits
    from tests.data_helpers import make_tar, make_tree

    make_tree(tmp_path / "tree", n_train=10, n_test=4, ext="jpg")
    archive = make_tar(tmp_path / "tree", tmp_path / "d.tar.gz")
    lines = []
    load_splits(str(archive), cache_dir=tmp_path / "small", progress=lines.append)
    assert lines == [], "a source this small decodes silently"
    monkeypatch.setattr(imagefolder, "PROGRESS_MIN_IMAGES", 10)  # as if it were a large one
    load_splits(str(archive), cache_dir=tmp_path / "cache", progress=lines.append)
    assert any("train images: 100%" in ln for ln in lines), lines
    lines.clear()
    load_splits(str(archive), cache_dir=tmp_path / "cache", progress=lines.append)
    assert not any("%" in ln for ln in lines), "cached: nothing decoded"


#: a small `study train` whose epochs take about a second on a quiet CPU: room for a few redraws
TRAIN_ARGS = [
    "train",
    "--data",
    "synthetic:600",
    "--hidden",
    "16",
    "--layers",
    "1",
    "--intermediate",
    "24",
    "--num-heads",
    "2",
    "--epochs",
    "2",
    "--batch-size",
    "20",
    "--no-head-stats",
    "--map-epochs",
    "none",
]
#: tqdm's bar of the running epoch: images done/total, elapsed<ETA, images/s
BAR = re.compile(r"epoch (\d)/2: +\d+%\|[^|]*\| *(\d+)/(\d+) \[\d\d:\d\d<\d\d:\d\d, +[\d.]+img/s\]")


def _on_a_terminal(cwd, args) -> tuple[int, str, float]:
    """``python -m study ARGS`` with stdout and stderr on a pseudo-terminal: exit status,
    everything it wrote there, wall seconds."""
    from tests.helpers import cli_env

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 x 100 like a terminal's
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "study", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=cli_env(),
    )
    os.close(slave)
    out = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out.append(chunk)
    code = p.wait(timeout=300)
    os.close(master)
    return code, b"".join(out).decode(errors="replace"), time.monotonic() - t0


def test_study_train_shows_progress_inside_an_epoch_on_a_terminal(tmp_path):
    code, text, seconds = _on_a_terminal(tmp_path, [*TRAIN_ARGS, "--out", str(tmp_path / "o")])
    assert code == 0, text
    frames = BAR.findall(text)
    assert any(int(done) > 0 for _, done, _ in frames), text  # counted on the way, not only at 0
    assert {epoch for epoch, _, _ in frames} == {"1", "2"}
    assert all(total == "600" for _, _, total in frames)  # the epoch's training images
    assert "\r" in text  # redrawn in place
    assert len(frames) <= 4 * seconds + 8, (len(frames), seconds)  # at most ~4 redraws a second
    # the per-epoch summary lines are as without a terminal, each on a line of its own
    lines = [ln.split("\r")[-1] for ln in text.replace("\r\n", "\n").split("\n")]
    assert sum(1 for ln in lines if re.match(r"(\x1b\[A)?epoch \d/2  train_loss ", ln.strip())) == 2, lines


def test_study_train_prints_no_progress_bar_into_a_pipe(tmp_path):
    r = run_cli(tmp_path, *TRAIN_ARGS, "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert not BAR.search(r.stderr) and "\r" not in r.stderr and "img/s]" not in r.stderr
    assert [ln.split("  ")[0] for ln in r.stderr.splitlines()] == ["epoch 1/2", "epoch 2/2"]
