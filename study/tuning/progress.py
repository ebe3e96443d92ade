"""Quiet, readable progress for ``study run``: one table of trial events on stderr,
each row followed by where the study stands: ``k of N trials done``, the elapsed
time and an ETA.

ETA = epochs still to train × mean measured epoch time ÷ trials running at once
(:func:`eta_seconds`).  Every trial's epoch count comes from the study file; a trial
that ended early (ASHA, divergence, error) counts as done, so under ASHA the ETA is
an upper bound that shrinks as trials are stopped.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ray.tune import Callback


class ProgressReporter(Callback):
    """Prints a header once, then one row when a trial finishes an epoch (at most one
    row per trial every ``interval`` seconds, always its last) or ends, each followed
    by :meth:`status_line`."""

    COLUMNS = ("trial", "cell", "state", "epoch", "test_acc", "best_acc", "img/s")

    def __init__(self, *, meta: dict[str, Any], enabled: bool = True, interval: float = 30.0):
        self.enabled = enabled
        self.interval = interval
        self.total = meta.get("num_trials")
        self.done = 0
        self._last: dict[str, float] = {}
        self._header = False
        self._cell_epochs = _cell_epochs(meta)
        self._trained: dict[str, int] = {}  # trial key -> epochs done (ended trials: all of them)
        self._running: set[str] = set()
        self._epoch_seconds: list[float] = []
        self._start = time.monotonic()

    def setup(self, **info):
        self._start = time.monotonic()

    def planned_epochs(self) -> int | None:
        """Epochs of all trials (trial k trains grid cell k mod the number of cells)."""
        if not self._cell_epochs or not self.total:
            return None
        n = len(self._cell_epochs)
        return sum(self._cell_epochs[k % n] for k in range(self.total))

    def status_line(self) -> str:
        """``k of N trials done, elapsed H:MM:SS, ETA H:MM:SS``."""
        elapsed = time.monotonic() - self._start
        planned = self.planned_epochs()
        eta = None
        if planned is not None and self._epoch_seconds:
            eta = eta_seconds(remaining_epochs=max(planned - sum(self._trained.values()), 0),
                              mean_epoch_seconds=sum(self._epoch_seconds) / len(self._epoch_seconds),
                              parallel=len(self._running))
        return (f"{self.done} of {self.total} trials done, elapsed {_hms(elapsed)}, "
                f"ETA {_hms(eta) if eta is not None else 'after the first epoch'}")

    def _key(self, trial) -> str:
        return str((trial.config or {}).get("key", trial.trial_id))

    def _ended(self, trial) -> None:
        key = self._key(trial)
        self._running.discard(key)
        cell = (trial.config or {}).get("cell")
        if isinstance(cell, int) and 0 <= cell < len(self._cell_epochs):
            self._trained[key] = self._cell_epochs[cell]

    def _row(self, trial, state: str, result: dict | None) -> None:
        if not self.enabled:
            return
        if not self._header:
            print("  ".join(f"{c:>10}" if i else f"{c:<24}" for i, c in enumerate(self.COLUMNS)),
                  file=sys.stderr, flush=True)
            self._header = True
        r = result or {}
        cell = (trial.config or {}).get("cell", "")
        key = (trial.config or {}).get("key", trial.trial_id)
        cells = [str(key), str(cell), state, str(r.get("epoch", -1) + 1 if "epoch" in r else "-"),
                 _f(r.get("test_acc")), _f(r.get("best_test_acc")), _f(r.get("images_per_s"), 0)]
        print("  ".join(f"{c:>10}" if i else f"{c:<24}" for i, c in enumerate(cells)), file=sys.stderr, flush=True)
        print(f"  {self.status_line()}", file=sys.stderr, flush=True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        key = self._key(trial)
        if result.get("status", "running") == "running" and isinstance(result.get("epoch"), int):
            self._running.add(key)
            self._trained[key] = result["epoch"] + 1
            if isinstance(result.get("seconds"), (int, float)):
                self._epoch_seconds.append(float(result["seconds"]))
        now = time.monotonic()
        if now - self._last.get(trial.trial_id, -1e9) >= self.interval:
            self._last[trial.trial_id] = now
            self._row(trial, "running", result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        self._ended(trial)
        result = trial.last_result or {}
        self._row(trial, result.get("status", "done") if result.get("status") != "running" else "stopped", result)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        self._ended(trial)
        self._row(trial, "error", trial.last_result)


def eta_seconds(*, remaining_epochs: int, mean_epoch_seconds: float, parallel: int) -> float:
    """Seconds left: the epochs still to train, ``parallel`` trials at a time, each
    epoch taking the mean measured epoch time."""
    return remaining_epochs * mean_epoch_seconds / max(parallel, 1)


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _f(v, digits: int = 4) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}"


def _cell_epochs(meta: dict[str, Any]) -> list[int]:
    """Epochs of each grid cell's trials, from the study file in ``meta``."""
    if "raw" not in meta:
        return []
    from study.spec import validate

    spec = validate(meta["raw"], file=meta.get("file", ""), default_name=meta.get("name", "study"))
    return [spec.train_config(c).epochs for c in spec.cells]
