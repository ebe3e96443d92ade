"""Ray Tune's hooks turned into calls to the study's scheduler (:mod:`study.scheduling`): each
method here only reads what Tune hands it (a trial's config, ids, last result) and delegates.

Tune pickles these objects into its ``tuner.pkl`` when the Tuner is made (nothing reads it back:
``study resume`` starts from the study's own state), so what they hold is picklable then: the
contract's plain data and the sampler before its Optuna storage opens (at the first ask)."""

from __future__ import annotations

import time
from typing import Any

from ray.tune import Callback, Stopper
from ray.tune.search import Searcher

from study.scheduling.contract import RunContract
from study.scheduling.progress import Progress
from study.scheduling.sampler import GridSampler


def _config(trial) -> dict[str, Any]:
    return trial.config or {}


class StopAll(Stopper):
    """Every trial stops once the contract is :attr:`~RunContract.stopping` (a signal, a storage failure)."""

    def __init__(self, *, contract: RunContract):
        self.contract = contract

    def __call__(self, trial_id: str, result: dict) -> bool:
        return self.contract.stopping

    def stop_all(self) -> bool:
        return self.contract.stopping


class ContractCallback(Callback):
    """Tune's trial events as the run contract's transitions."""

    def __init__(self, *, contract: RunContract):
        self.contract = contract

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.contract.trial_failed(
            _config(trial), ray_trial_id=trial.trial_id, failures=trial.num_failures, final=False
        )

    def on_trial_error(self, iteration, trials, trial, **info):
        self.contract.trial_failed(
            _config(trial), ray_trial_id=trial.trial_id, failures=trial.num_failures, final=True
        )

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.contract.trial_reported(_config(trial).get("key"), result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.contract.trial_ended(_config(trial).get("key"), (trial.last_result or {}).get("status"))

    def on_step_end(self, iteration, trials, **info):
        self.contract.heartbeat()


class ProgressReporter(Callback):
    """Tune's trial events as the console's progress rows (:class:`study.scheduling.progress.Progress`,
    on this process's monotonic clock); the arguments: as :class:`Progress`'s."""

    def __init__(
        self,
        *,
        plan: list,
        meta: dict[str, Any],
        pending: list[str] | None = None,
        enabled: bool = True,
        interval: float = 30.0,
    ):
        self.progress = Progress(
            plan=plan, meta=meta, now=time.monotonic(), pending=pending, enabled=enabled, interval=interval
        )

    def setup(self, **info):
        self.progress.began = time.monotonic()

    def status_line(self) -> str:
        return self.progress.status_line(time.monotonic())

    def _key(self, trial) -> str:
        return str(_config(trial).get("key", trial.trial_id))

    def on_trial_start(self, iteration, trials, trial, **info):
        self.progress.started(self._key(trial), time.monotonic())

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.progress.reported(self._key(trial), _config(trial).get("cell"), result, time.monotonic())

    def on_trial_complete(self, iteration, trials, trial, **info):
        status = (trial.last_result or {}).get("status", "done")
        self._ended(trial, "stopped" if status == "running" else status)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._ended(trial, "error")

    def _ended(self, trial, state: str) -> None:
        self.progress.ended(
            self._key(trial), _config(trial).get("cell"), state, trial.last_result, time.monotonic()
        )


class GridSearcher(Searcher):
    """Tune's searcher: the :class:`GridSampler` asked for each trial's configuration, told each result."""

    def __init__(self, *, sampler: GridSampler):
        super().__init__(metric=sampler.metric, mode=sampler.mode)
        self.sampler = sampler

    def suggest(self, trial_id: str) -> dict | None:
        config = self.sampler.ask(trial_id)
        return Searcher.FINISHED if config is None else config

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.sampler.tell(trial_id, result, error=error)
