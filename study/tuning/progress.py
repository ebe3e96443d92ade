"""Quiet, readable progress for ``study run``: one table of trial events on stderr."""

from __future__ import annotations

import sys
import time
from typing import Any

from ray.tune import Callback


class ProgressReporter(Callback):
    """Prints a header once, then one row when a trial finishes an epoch (at most one
    row per trial every ``interval`` seconds, always its last) or ends."""

    COLUMNS = ("trial", "cell", "state", "epoch", "test_acc", "best_acc", "img/s")

    def __init__(self, *, meta: dict[str, Any], enabled: bool = True, interval: float = 30.0):
        self.enabled = enabled
        self.interval = interval
        self.total = meta.get("num_trials")
        self.done = 0
        self._last: dict[str, float] = {}
        self._header = False

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

    def on_trial_result(self, iteration, trials, trial, result, **info):
        now = time.monotonic()
        if now - self._last.get(trial.trial_id, -1e9) >= self.interval:
            self._last[trial.trial_id] = now
            self._row(trial, "running", result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        result = trial.last_result or {}
        self._row(trial, result.get("status", "done") if result.get("status") != "running" else "stopped", result)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        self._row(trial, "error", trial.last_result)


def _f(v, digits: int = 4) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}"
