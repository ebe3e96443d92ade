"""The run contract as a plain state machine (study/scheduling/contract.py), on real tables and
ledgers: the stop-all decision, what each failure says and writes, and the exit status.  Through
the real CLI and Ray: tests/study/tuning/test_contract.py."""

from __future__ import annotations

import errno
import os
import signal

import pytest

from study.errors import EXIT_OK, EXIT_STORAGE, EXIT_TRIAL_ERROR
from study.results.tables import read_table
from study.scheduling import contract
from study.scheduling.ledger import trial_ledger
from study.scheduling.rows import write_row
from tests.study.scheduling.rayfree import ray_modules_after


@pytest.fixture
def run(tmp_path):
    """A contract over a study folder in ``tmp_path``; ``run.said``: its lines."""
    (tmp_path / "trials").mkdir()
    meta = {"name": "s", "root": str(tmp_path), "tables": str(tmp_path / "tables")}
    c = contract.RunContract(meta=meta, prog="study run")
    c.said = []
    c.say = c.said.append
    return c


def _status(c) -> dict:
    return read_table(c.tables, "runs").set_index("trial_id").status.to_dict()


def _running(c, key, done=1, epochs=3):
    write_row(c.tables, {"trial_id": key, "status": "running", "epochs_done": done, "epochs": epochs})


def test_a_signal_delivered_twice_is_one_request_a_later_one_stops_at_once(monkeypatch, run):
    """SLURM's scancel signals every process of a job, and the batch script passes its
    own signal on to the driver: the copy within ``DUPLICATE_SIGNAL_S`` is the same
    request (the study still stops cleanly); a signal after that stops at once."""
    clock = [100.0]
    monkeypatch.setattr(contract.time, "monotonic", lambda: clock[0])
    exits = []
    monkeypatch.setattr(contract.os, "_exit", lambda code: exits.append(code))
    assert not run.stopping
    run.on_signal(signal.SIGTERM, None)
    assert run.signal == signal.SIGTERM and run.stopping and not exits
    assert run.said == ["SIGTERM received: stopping the study (continue with `study resume s`)"]
    clock[0] += 0.5
    run.on_signal(signal.SIGTERM, None)  # the batch script's copy
    assert not exits and len(run.said) == 1 and run.signal == signal.SIGTERM
    clock[0] += contract.DUPLICATE_SIGNAL_S
    run.on_signal(signal.SIGINT, None)  # a second request: now
    assert exits == [128 + signal.SIGINT]


def test_install_takes_the_signals_and_keeps_a_reserve_until_the_storage_fails(run):
    """Installed: SIGINT/SIGTERM are the contract's, and 1 MiB is reserved in the study folder;
    a storage failure frees it (room for the trials' marks) and stops every trial, said once."""
    reserve = os.path.join(run.root, contract.RESERVE)
    run.install()
    try:
        assert signal.getsignal(signal.SIGINT) == run.on_signal == signal.getsignal(signal.SIGTERM)
        assert os.path.getsize(reserve) == contract.RESERVE_BYTES
        run.storage_failed(OSError(errno.ENOSPC, "No space left on device", "/st/tables/runs/x.parquet"))
        run.storage_failed("a second failure")
        assert run.stopping and not os.path.exists(reserve)
        assert run.said == [
            "storage failed: /st/tables/runs/x.parquet: No space left on device; stopping the study"
        ]
        assert run.storage_error == "/st/tables/runs/x.parquet: No space left on device"
    finally:
        run.uninstall()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_failed_attempt_is_retried_and_the_last_one_writes_the_error_row(run):
    """The cause and attempt count are the trial's ledger's; the row keeps what the trial wrote."""
    book = trial_ledger(run.root, "c000-s000")
    book.start()
    book.fail("ValueError: bad value")
    _running(run, "c000-s000")
    config = {"key": "c000-s000", "cell": 0, "sample": 0}
    run.trial_failed(config, ray_trial_id="r1", failures=1, final=False)
    assert _status(run) == {"c000-s000": "running"}
    assert run.said[-1] == (
        "trial c000-s000 failed (attempt 1): ValueError: bad value; retrying from its last checkpoint"
    )
    run.trial_failed(config, ray_trial_id="r1", failures=2, final=True)
    row = read_table(run.tables, "runs").iloc[0]
    assert (row.status, row.error, row.attempts, row.epochs_done) == ("error", "ValueError: bad value", 1, 1)
    assert run.said[-1] == "trial c000-s000 error after 1 attempt(s): ValueError: bad value"
    assert not run.stopping and run.exit_code(read_table(run.tables, "runs")) == EXIT_TRIAL_ERROR


def test_a_trial_that_died_without_a_cause_is_an_error_of_a_dead_worker(run):
    """No ledger (killed before it counted the attempt): the cause is a dead worker, the count the
    scheduler's, and the row is made from the trial's configuration."""
    run.trial_failed({"key": "c001-s000", "cell": 1, "sample": 0}, ray_trial_id="r2", failures=3, final=True)
    row = read_table(run.tables, "runs").iloc[0]
    assert (row.trial_id, row.status, row.error, row.attempts, row.cell) == (
        "c001-s000",
        "error",
        contract.DIED,
        3,
        1,
    )
    run.trial_failed({}, ray_trial_id="r3", failures=1, final=True)  # not a study trial: nothing
    assert len(read_table(run.tables, "runs")) == 1


def test_a_trial_failing_on_the_storage_stops_the_study(run):
    book = trial_ledger(run.root, "c000-s000")
    book.start()
    book.fail("StorageError: /st/tables: No space left on device")
    run.trial_failed({"key": "c000-s000"}, ray_trial_id="r1", failures=1, final=False)
    assert run.stopping and run.storage_error == "/st/tables: No space left on device"
    assert run.exit_code(read_table(run.tables, "runs")) == EXIT_STORAGE


def test_a_trial_the_scheduler_ended_early_is_stopped_and_the_rest_interrupted(run):
    """ASHA ended c000 mid-way (its last report still ``running``): stopped at once; c001 ended by
    its own final report: as it wrote it; c002 never seen to end: interrupted when the run settles."""
    _running(run, "c000-s000")
    write_row(run.tables, {"trial_id": "c001-s000", "status": "finished", "epochs_done": 3, "epochs": 3})
    _running(run, "c002-s000")
    run.trial_ended("c000-s000", "running")
    run.trial_ended("c001-s000", "finished")
    assert _status(run) == {"c000-s000": "stopped", "c001-s000": "finished", "c002-s000": "running"}
    run.settle()
    assert _status(run) == {"c000-s000": "stopped", "c001-s000": "finished", "c002-s000": "interrupted"}
    assert run.exit_code(read_table(run.tables, "runs")) == EXIT_OK


def test_after_a_signal_every_running_trial_is_interrupted_and_the_exit_status_names_it(run):
    """Stopping: a trial Tune ends now was stopped by the contract, not by the scheduler's decision."""
    _running(run, "c000-s000")
    run.on_signal(signal.SIGINT, None)
    run.trial_ended("c000-s000", "running")
    run.settle()
    assert _status(run) == {"c000-s000": "interrupted"}
    assert run.exit_code(read_table(run.tables, "runs")) == 128 + signal.SIGINT


def test_a_warning_a_trial_reports_is_said_once_per_report(run):
    run.trial_reported("c000-s000", {"epoch": 0})
    run.trial_reported("c000-s000", {"epoch": 0, "warning": "attention maps skipped"})
    assert run.said == ["trial c000-s000: warning: attention maps skipped"]


def test_the_contract_runs_without_ray(tmp_path):
    code = f"""
        import signal
        from study.scheduling.contract import RunContract
        meta = {{"name": "s", "root": {str(tmp_path)!r}, "tables": {str(tmp_path / "t")!r}}}
        c = RunContract(meta=meta, prog="p")
        c.install()
        c.trial_failed({{"key": "c000-s000"}}, ray_trial_id="r", failures=1, final=True)
        c.on_signal(signal.SIGTERM, None)
        c.settle()
        c.uninstall()
        assert c.stopping
    """
    assert ray_modules_after(code) == []
