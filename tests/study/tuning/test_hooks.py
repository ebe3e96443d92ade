"""The Ray Tune adapter (study/tuning/hooks.py): each Tune hook becomes the scheduler's call,
on real tables, without starting Ray; and what Tune pickles of them when a Tuner is made
(its ``tuner.pkl``) pickles as they are, with no pickling hook of their own."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import ray.cloudpickle
from optuna.trial import TrialState
from ray.tune.search import Searcher

from study.cost.plan import launch_order, plan_trials
from study.results.tables import read_table
from study.scheduling.contract import RunContract
from study.scheduling.rows import config_row, write_row
from study.scheduling.sampler import GridSampler
from study.spec.studyfile import load_spec, validate
from study.tuning.hooks import ContractCallback, GridSearcher, ProgressReporter, StopAll
from study.tuning.lock import StudyLock

SMOKE = "search_spaces/smoke.yaml"


def _trial(key, *, cell=0, last=None, failures=0, config=None):
    return SimpleNamespace(
        trial_id=f"ray-{key}",
        config=config or {"key": key, "cell": cell},
        last_result=last or {},
        num_failures=failures,
    )


def _contract(tmp_path, lock=None):
    (tmp_path / "trials").mkdir(exist_ok=True)
    meta = {"name": "s", "root": str(tmp_path), "tables": str(tmp_path / "tables")}
    return RunContract(meta=meta, prog="study run", lock=lock)


def test_the_stopper_stops_every_trial_once_the_contract_stops(tmp_path):
    contract = _contract(tmp_path)
    stopper = StopAll(contract=contract)
    assert not stopper.stop_all() and not stopper("trial", {})
    contract.on_signal(signal.SIGTERM, None)
    assert stopper.stop_all() and stopper("trial", {})


def test_tunes_trial_events_become_the_contracts_transitions(tmp_path, capsys):
    """An error -> the ``error`` row (cause: a dead worker, no ledger), a trial Tune completed while
    its last report said running -> ``stopped``, a report's warning -> one line."""
    contract = _contract(tmp_path)
    hooks = ContractCallback(contract=contract)
    sampler = GridSampler(spec=load_spec(SMOKE), todo=[(0, 0), (1, 0)])
    configs = [sampler.ask("ray-c000-s000"), sampler.ask("ray-c001-s000")]
    row = config_row(configs[1], key="c001-s000", ray_trial_id="ray-c001-s000", study="s")
    write_row(contract.tables, {**row, "status": "running", "epochs_done": 1})
    hooks.on_trial_error(0, [], _trial("c000-s000", failures=2, config=configs[0]))
    hooks.on_trial_complete(0, [], _trial("c001-s000", cell=1, last={"status": "running"}))
    hooks.on_trial_result(0, [], _trial("c001-s000"), {"warning": "no attention maps"})
    hooks.on_step_end(0, [])
    runs = read_table(contract.tables, "runs").set_index("trial_id")
    assert runs.status.to_dict() == {"c000-s000": "error", "c001-s000": "stopped"}
    assert runs.attempts["c000-s000"] == 2 and runs.ray_trial_id["c000-s000"] == "ray-c000-s000"
    assert "study run: trial c001-s000: warning: no attention maps" in capsys.readouterr().err


def test_tunes_trial_events_become_progress_rows(capsys):
    """A trial Tune completed while its last report said running was stopped early; an errored
    trial's row says error; each counts as done."""
    plan = launch_order(plan_trials(load_spec(SMOKE)))
    rep = ProgressReporter(plan=plan, meta={"num_trials": len(plan)}, interval=0.0)
    rep.setup()
    a, b = _trial(plan[0].key, cell=plan[0].cell), _trial(plan[1].key, cell=plan[1].cell)
    rep.on_trial_start(0, [], a)
    a.last_result = {"epoch": 0, "status": "running", "test_acc": 0.5, "best_test_acc": 0.5}
    rep.on_trial_result(0, [], a, a.last_result)
    rep.on_trial_complete(0, [], a)
    rep.on_trial_error(0, [], b)
    rows = [ln.split() for ln in capsys.readouterr().err.splitlines() if not ln.startswith("  ")]
    assert [r[:3] for r in rows[1:]] == [
        [plan[0].key, str(plan[0].cell), "running"],
        [plan[0].key, str(plan[0].cell), "stopped"],
        [plan[1].key, str(plan[1].cell), "error"],
    ]
    assert rep.status_line().startswith(f"2 of {len(plan)} trials done")


def test_the_searcher_hands_out_the_samplers_trials_then_finishes_and_tells_optuna():
    raw = {
        "data": "synthetic",
        "epochs": 1,
        "model": {"hidden": 16, "layers": 1, "intermediate": 16},
        "sample": {"lr": {"loguniform": [0.01, 0.1]}},
    }
    spec = validate(raw, file="f.yaml", default_name="f")
    sampler = GridSampler(spec=spec, todo=[(0, 0)], metric="val_acc", mode="max")
    searcher = GridSearcher(sampler=sampler)
    assert searcher.metric == "val_acc" and searcher.mode == "max"
    assert searcher.suggest("t0")["key"] == "c000-s000"
    assert searcher.suggest("t1") == Searcher.FINISHED
    searcher.on_trial_complete("t0", {"val_acc": 0.25, "best_val_acc": 0.5})
    (told,) = sampler.study(0).trials
    assert told.state == TrialState.COMPLETE and told.value == 0.5


def test_what_tune_pickles_pickles_without_pickling_hooks(tmp_path):
    """Tune writes its run config and searcher into ``tuner.pkl`` when the Tuner is made: the
    adapters, the contract (with the study's lock held) and the sampler pickle as they are."""
    lock = StudyLock(root=str(tmp_path), name="s").acquire()
    try:
        contract = _contract(tmp_path, lock=lock)
        spec = load_spec(SMOKE)
        plan = launch_order(plan_trials(spec))
        sampler = GridSampler(spec=spec, todo=[(0, 0)], journal=str(tmp_path / "optuna.journal"))
        objects = [
            StopAll(contract=contract),
            ContractCallback(contract=contract),
            ProgressReporter(plan=plan, meta={**contract.meta, "num_trials": 4}),
            GridSearcher(sampler=sampler),
        ]
        for obj in objects:
            assert "__reduce__" not in vars(type(obj)) and "__getstate__" not in vars(type(obj))
            copy = ray.cloudpickle.loads(ray.cloudpickle.dumps(obj))
            assert type(copy) is type(obj)
        for plain in (RunContract, GridSampler, StudyLock):
            assert "__reduce__" not in vars(plain) and "__getstate__" not in vars(plain)
    finally:
        lock.release()
