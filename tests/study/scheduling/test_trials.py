"""Which trials a study runs and which are left (study/scheduling/trials.py), read from real tables."""

from __future__ import annotations

from study.results.tables import part_path, write_part
from study.scheduling.trials import ended_rows, launch_plan, pending, trial_key
from study.spec.studyfile import load_spec, validate
from tests.study.scheduling.rayfree import ray_modules_after

SMOKE = "search_spaces/smoke.yaml"


def _row(tables, key, status):
    write_part(part_path(tables, "runs", key), [{"trial_id": key, "status": status}])


def test_a_trials_key_is_its_cell_and_sample():
    assert trial_key(3, 0) == "c003-s000" and trial_key(12, 7) == "c012-s007"


def test_pending_trials_go_longest_predicted_first_and_a_resume_leaves_out_the_ended(tmp_path):
    """The trials still to run, longest predicted first; a row that ended (finished, diverged,
    stopped) is not run again, an interrupted or failed one is."""
    spec = load_spec(SMOKE)
    tables = str(tmp_path / "tables")
    plan = launch_plan(spec)
    todo = pending(spec, tables, plan)
    assert todo[0] == (3, 0), "learned + content (6.1x the others) first"
    assert sorted(todo) == [(c, 0) for c in range(4)]
    for key, status in (("c003-s000", "finished"), ("c001-s000", "interrupted"), ("c002-s000", "stopped")):
        _row(tables, key, status)
    _row(tables, "c000-s000", "error")
    assert sorted(ended_rows(tables).trial_id) == ["c002-s000", "c003-s000"]
    assert pending(spec, tables, plan) == [t for t in todo if t not in ((3, 0), (2, 0))]


def test_without_a_cost_model_the_trials_run_in_grid_order(tmp_path):
    """An empty plan (the cost model failed): every trial in grid order, the samples round-robin."""
    raw = {
        "data": "synthetic",
        "epochs": 1,
        "model": {"hidden": 16, "layers": 1, "intermediate": 16},
        "grid": {"num_heads": [1, 2]},
        "num_samples": 2,
        "sample": {"lr": {"loguniform": [0.01, 0.1]}},
    }
    spec = validate(raw, file="f.yaml", default_name="f")
    tables = str(tmp_path / "tables")
    assert pending(spec, tables, []) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    _row(tables, "c001-s000", "diverged")
    assert pending(spec, tables, []) == [(0, 0), (0, 1), (1, 1)]


def test_trials_run_without_ray(tmp_path):
    code = f"""
        from study.scheduling.trials import launch_plan, pending
        from study.spec.studyfile import load_spec
        spec = load_spec({SMOKE!r})
        assert len(pending(spec, {str(tmp_path / "tables")!r}, launch_plan(spec))) == 4
    """
    assert ray_modules_after(code) == []
