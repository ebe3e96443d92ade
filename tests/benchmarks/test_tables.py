"""benchmarks/tables.py at its smallest: the synthetic study holds the trials and epochs
asked for, and a bad size is one line, exit 2."""

from __future__ import annotations

import json
import sys

import pytest

from study.results.tables import read_table
from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))  # importable by name: its writers run in spawned processes
import tables as bench  # noqa: E402

SMALL = ["--trials", "2", "--layers", "1", "--heads", "1", "--window", "3", "--repeats", "1", "--keep"]


def test_a_run_shorter_than_two_compactions_writes_only_its_epochs(tmp_path, capsys):
    """3 epochs: the "running" snapshot (before the writers close) may hold all 3, never
    more (the mid-way point, epochs // 2 + 5, was past the end and wrote epochs 3 and 4)."""
    assert bench.main(["--out", str(tmp_path), "--epochs", "3", *SMALL]) == 0
    reports = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [r["state"] for r in reports] == ["running", "finished"]
    assert [r["queries"]["count epochs"]["answer"] for r in reports] == ["6", "6"]
    epochs = read_table(tmp_path / "bench" / "tables", "epochs")
    assert sorted(epochs.epoch.unique()) == [0, 1, 2] and len(epochs) == 2 * 3


@pytest.mark.parametrize(
    "flag", ["--trials", "--epochs", "--layers", "--heads", "--window", "--repeats", "--jobs"]
)
@pytest.mark.parametrize("value", ["0", "-3", "x"])
def test_a_size_that_is_not_a_positive_integer_is_one_line_exit_2(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as e:
        bench.main(["--out", str(tmp_path), flag, value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and flag in err, err
    assert not (tmp_path / "bench").exists()


def test_the_synthetic_study_is_the_same_in_every_run(tmp_path, capsys):
    """Its numbers come from the trial ids, not from Python's per-process string hash."""
    for run in ("a", "b"):
        assert bench.main(["--out", str(tmp_path / run), "--epochs", "2", *SMALL]) == 0
    capsys.readouterr()
    a, b = (read_table(tmp_path / run / "bench" / "tables", "heads") for run in ("a", "b"))
    assert len(a) and a.sort_values(list(a.columns)).reset_index(drop=True).equals(
        b.sort_values(list(b.columns)).reset_index(drop=True)
    )
