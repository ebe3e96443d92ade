"""The ``runs`` rows' transitions the driver writes (study/scheduling/rows.py), on real tables:
``error``, ``stopped`` when the scheduler ended a trial early, and no row left ``running``."""

from __future__ import annotations

import math

import pytest

from study.results.tables import read_table
from study.scheduling.rows import config_row, mark_error, mark_stopped, settle_rows, write_row
from study.scheduling.sampler import GridSampler
from study.spec.studyfile import load_spec
from tests.study.scheduling.rayfree import ray_modules_after


def _running(tables, key, *, done=1, epochs=3, seconds=5.0):
    write_row(
        tables,
        {
            "trial_id": key,
            "status": "running",
            "epochs_done": done,
            "epochs": epochs,
            "device_seconds": seconds,
        },
    )


def _row(tables, key) -> dict:
    return read_table(tables, "runs").set_index("trial_id").loc[key].to_dict()


def test_a_row_is_written_as_plain_values_keeping_the_larger_device_seconds(tmp_path):
    tables = str(tmp_path)
    write_row(tables, {"trial_id": "c000-s000", "status": "error", "error": math.nan, "device_seconds": 4.0})
    row = _row(tables, "c000-s000")
    assert row["error"] is None or row["error"] != row["error"]  # no "nan" text
    assert row["device_seconds"] == 4.0 and row["updated_at"] > 0
    write_row(tables, {**row, "trial_id": "c000-s000"}, spent=9.5)  # the ledger counted more
    assert _row(tables, "c000-s000")["device_seconds"] == 9.5
    write_row(tables, {**row, "trial_id": "c000-s000", "device_seconds": 12.0}, spent=9.5)
    assert _row(tables, "c000-s000")["device_seconds"] == 12.0


def test_a_failed_trial_with_a_row_becomes_error_with_its_cause_and_attempts(tmp_path):
    tables = str(tmp_path)
    _running(tables, "c001-s000")
    mark_error(tables, "c001-s000", why="ValueError: bad", attempts=2, spent=7.0, otherwise=dict)
    row = _row(tables, "c001-s000")
    assert (row["status"], row["error"], row["attempts"]) == ("error", "ValueError: bad", 2)
    assert row["device_seconds"] == 7.0 and row["epochs_done"] == 1


def test_a_trial_that_failed_before_writing_a_row_gets_one_from_its_configuration(tmp_path):
    """Its resolved configuration (the sampler's), cell, sample and sampled values: the row
    says which model failed."""
    spec = load_spec("search_spaces/smoke.yaml")
    config = GridSampler(spec=spec, todo=[(2, 0)]).ask("ray-1")
    tables = str(tmp_path)
    mark_error(
        tables,
        "c002-s000",
        why="OSError: gone",
        attempts=1,
        spent=None,
        otherwise=lambda: config_row(config, key="c002-s000", ray_trial_id="ray-1", study="smoke"),
    )
    row = _row(tables, "c002-s000")
    cfg = spec.train_config(spec.cells[2])
    assert (row["status"], row["error"], row["ray_trial_id"], row["study"]) == (
        "error",
        "OSError: gone",
        "ray-1",
        "smoke",
    )
    assert (row["cell"], row["sample"], row["epochs_done"], row["epochs"]) == (2, 0, 0, cfg.epochs)
    assert row["encoding"] == cfg.model.encoding and row["name"]


@pytest.mark.parametrize(
    "status, done, changed",
    [("running", 1, True), ("running", 3, False), ("finished", 3, False), ("diverged", 1, False)],
)
def test_only_a_running_row_short_of_its_epochs_becomes_stopped(tmp_path, status, done, changed):
    """ASHA ended it: ``stopped`` at once (a resume after a lost driver keeps that); a row the
    trial ended itself stays as it wrote it."""
    tables = str(tmp_path)
    _running(tables, "c000-s000", done=done)
    if status != "running":
        write_row(tables, {**_row(tables, "c000-s000"), "trial_id": "c000-s000", "status": status})
    assert mark_stopped(tables, "c000-s000") is changed
    assert _row(tables, "c000-s000")["status"] == ("stopped" if changed else status)
    assert mark_stopped(tables, "c009-s000") is False  # no row


def test_settling_leaves_no_row_running(tmp_path):
    """Ended early by the scheduler -> stopped; never seen to end -> interrupted, with the
    device-seconds of its ledger (an epoch cut short); ended rows as they are."""
    tables = str(tmp_path)
    _running(tables, "c000-s000")  # the scheduler ended it early
    _running(tables, "c001-s000", seconds=5.0)  # never seen to end
    write_row(tables, {"trial_id": "c002-s000", "status": "finished", "epochs_done": 3, "epochs": 3})
    settle_rows(
        tables,
        completed={"c000-s000"},
        stopping=False,
        storage_error=None,
        spent=lambda key: {"c001-s000": 8.5}.get(key),
    )
    runs = read_table(tables, "runs").set_index("trial_id")
    assert runs.status.to_dict() == {
        "c000-s000": "stopped",
        "c001-s000": "interrupted",
        "c002-s000": "finished",
    }
    assert runs.device_seconds["c001-s000"] == 8.5 and runs.device_seconds["c000-s000"] == 5.0


def test_a_stopping_run_interrupts_every_running_row_and_names_a_storage_failure(tmp_path):
    """While stopping (a signal, a storage failure) even a trial the scheduler saw end is
    interrupted: it did not end by its own decision; a storage failure is each row's cause."""
    tables = str(tmp_path)
    _running(tables, "c000-s000")
    _running(tables, "c001-s000")
    settle_rows(
        tables,
        completed={"c000-s000"},
        stopping=True,
        storage_error="/st/tables: No space left on device",
        spent=lambda key: None,
    )
    runs = read_table(tables, "runs").set_index("trial_id")
    assert set(runs.status) == {"interrupted"}
    assert set(runs.error) == {"StorageError: /st/tables: No space left on device"}


def test_row_transitions_run_without_ray(tmp_path):
    code = f"""
        from study.scheduling.rows import mark_stopped, settle_rows, write_row
        t = {str(tmp_path / "t")!r}
        write_row(t, {{"trial_id": "c000-s000", "status": "running", "epochs_done": 1, "epochs": 2}})
        assert mark_stopped(t, "c000-s000")
        settle_rows(t, completed=set(), stopping=False, storage_error=None, spent=lambda k: None)
    """
    assert ray_modules_after(code) == []
