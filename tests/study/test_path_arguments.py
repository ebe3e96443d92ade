"""A path argument the file system cannot take (empty or blank, a component longer than NAME_MAX)
is one line naming the flag, exit 2, before anything is read or written: it was an OSError
traceback (File name too long) in five commands, and an empty --out wrote into the current folder."""

from __future__ import annotations

import pytest

from tests.helpers import REPO_ROOT, run_cli

LONG = "a" * 300  # one component longer than NAME_MAX (255 bytes on Linux and macOS)
TRAIN = ["train", "--data", "synthetic:64", "--epochs", "1", "--hidden", "16", "--layers", "1"]
CASES = {
    "train_out_long": ("study", [*TRAIN, "--out", f"o/{LONG}"], "--out"),
    "train_out_empty": ("study", [*TRAIN, "--out", ""], "--out"),
    "train_out_blank": ("study", [*TRAIN, "--out", " "], "--out"),
    "run_storage_long": (
        "study",
        ["run", str(REPO_ROOT / "search_spaces/smoke.yaml"), "--storage", LONG],
        "--storage",
    ),
    "export_out_long": ("study", ["export", "s", "--best", "--out", f"{LONG}.pt"], "--out"),
    "figures_out_long": ("analysis", ["figures", "s", "--out", f"f/{LONG}"], "--out"),
    "figures_out_empty": ("analysis", ["figures", "s", "--out", ""], "--out"),
    "report_out_long": ("analysis", ["report", "s", "--out", f"{LONG}.html"], "--out"),
    "query_study_long": ("analysis", ["query", f"./{LONG}", "SELECT 1"], "study"),
    "query_study_empty": ("analysis", ["query", "", "SELECT 1"], "study"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_path_the_file_system_cannot_take_is_one_line_exit_2_nothing_written(tmp_path, case):
    module, argv, named = CASES[case]
    r = run_cli(tmp_path, *argv, module=module, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr[-2000:]
    assert named in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == [], "nothing written"
