"""Grid x Optuna ask/tell (study/scheduling/sampler.py) with a real journal in tmp_path: each trial's
configuration, what Optuna is told, and what a resumed driver continues."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from study.scheduling.rows import write_row
from study.scheduling.sampler import GridSampler
from study.spec.studyfile import load_spec, validate
from tests.study.scheduling.rayfree import ray_modules_after

RAW = {
    "data": "synthetic",
    "epochs": 2,
    "model": {"hidden": 16, "layers": 1, "intermediate": 16},
    "grid": {"num_heads": [1, 2]},
    "num_samples": 2,
    "sample": {"lr": {"loguniform": [0.01, 0.1]}},
}


def _sampler(tmp_path, todo=None):
    spec = validate(RAW, file="f.yaml", default_name="f")
    todo = todo or [(0, 0), (1, 0), (0, 1), (1, 1)]
    journal, tables = str(tmp_path / "optuna.journal"), str(tmp_path / "tables")
    return GridSampler(spec=spec, todo=todo, metric="test_acc", mode="max", tables=tables, journal=journal)


def test_each_trial_gets_its_configuration_resolved_in_the_order_given():
    """The pending trials in their launch order, each with its resolved training configuration;
    None once every trial was handed out."""
    spec = load_spec("search_spaces/smoke.yaml")
    s = GridSampler(spec=spec, todo=[(3, 0), (1, 0)])
    first = s.ask("t0")
    assert first["key"] == "c003-s000" and first["train"] == spec.train_config(spec.cells[3]).to_dict()
    assert (first["cell"], first["sample"], first["sampled"]) == (3, 0, {})
    assert all(v is not None for v in first["hparams"].values())
    assert s.ask("t1")["key"] == "c001-s000" and s.ask("t2") is None


def test_sampled_values_come_from_optuna_and_it_is_told_each_result(tmp_path):
    """Each cell's samples are asked of that cell's Optuna study within the declared range; a
    result is told as ``best_<metric>``, a failure or a missing metric as a failed trial."""
    s = _sampler(tmp_path)
    configs = [s.ask(f"t{i}") for i in range(4)]
    for c in configs:
        assert 0.01 <= c["sampled"]["lr"] <= 0.1 and c["train"]["lr"] == c["sampled"]["lr"]
    s.tell("t0", {"test_acc": 0.4, "best_test_acc": 0.5})
    s.tell("t1", {"test_acc": 0.3}, error=True)
    s.tell("t2", {"epoch": 0})  # no metric reported (diverged in its first epoch)
    s.tell("t9", {"test_acc": 0.9})  # not handed out here: nothing
    cell0 = s.study(0).trials
    assert [(t.state, t.value) for t in cell0] == [(TrialState.COMPLETE, 0.5), (TrialState.FAIL, None)]
    assert [t.state for t in s.study(1).trials] == [TrialState.FAIL, TrialState.RUNNING]
    assert (tmp_path / "optuna.journal").stat().st_size > 0


def test_a_resumed_driver_continues_the_same_optuna_trials(tmp_path):
    """From the journal: a trial asked but never told (its driver died) keeps its Optuna trial; a
    failed one is tried again with the same values; one whose row ended is told from its row."""
    s = _sampler(tmp_path)
    asked = {c["key"]: c for c in (s.ask(f"t{i}") for i in range(4))}
    s.tell("t1", None, error=True)  # c001-s000 failed
    write_row(str(tmp_path / "tables"), {"trial_id": "c001-s001", "status": "finished", "best_test_acc": 0.7})
    again = _sampler(tmp_path, todo=[(0, 0), (1, 0)])  # the trials whose rows did not end
    c000, c001 = again.ask("n0"), again.ask("n1")
    assert (
        c000["sampled"] == asked["c000-s000"]["sampled"] and c001["sampled"] == asked["c001-s000"]["sampled"]
    )
    cell1 = again.study(1).trials
    assert [t.user_attrs["key"] for t in cell1] == ["c001-s000", "c001-s001", "c001-s000"]
    assert [t.state for t in cell1] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.RUNNING]
    assert cell1[1].value == pytest.approx(0.7)
    assert len(again.study(0).trials) == 2, "c000-s000 kept its Optuna trial"


def test_the_sampler_runs_without_ray(tmp_path):
    code = f"""
        from study.scheduling.sampler import GridSampler
        from study.spec.studyfile import validate
        spec = validate({RAW!r}, file="f.yaml", default_name="f")
        s = GridSampler(spec=spec, todo=[(0, 0)], journal={str(tmp_path / "j")!r})
        s.tell("t", s.ask("t") and {{"test_acc": 0.5}})
        assert s.ask("u") is None
    """
    assert ray_modules_after(code) == []
