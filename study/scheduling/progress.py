"""Quiet progress for ``study run``: one table of trial events on stderr, each row followed by
``k of N trials done``, the elapsed time and an ETA (how the ETA is simulated:
docs/study-files.md "The console").  Times are the caller's monotonic clock."""

from __future__ import annotations

import heapq
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from study.cost.plan import PAIR_MAC_EQUIVALENT, hms
from study.scheduling.ledger import ledger_probe

#: a running trial's ``epoch_fraction`` is trusted from this share on (before, start-up dominates)
MIN_FRACTION = 0.02


@dataclass
class _Trial:
    weight: float  # predicted cost (TrialPlan.weight)
    paired: bool  # per-image attention probabilities in its cost (a kind of model timed apart)
    epochs: int
    group: str = ""  # trials of one model configuration run at one rate
    started: float | None = None
    walls: list[float] = field(default_factory=list)  # wall seconds of each reported epoch
    reported: float = 0.0  # time of the last epoch report
    setup: float | None = None  # start to first report, less that epoch
    ended: bool = False


class _Rates:
    """Seconds per weight unit of the epochs measured: of a trial's own configuration
    (group) if measured, else of its kind (with or without per-image probabilities, so
    a mispredicted kind of model skews no other), else of the other kind."""

    def __init__(self, samples: list[tuple[_Trial, float]]):
        self.secs, self.weight = Counter(), Counter()
        for t, wall in samples:  # (trial, one epoch's wall seconds)
            for k in (t.group, t.paired):
                self.secs[k] += wall
                self.weight[k] += t.weight / t.epochs

    def epoch(self, t: _Trial) -> float | None:
        """Predicted wall seconds of one epoch of ``t``."""
        k = next((k for k in (t.group, t.paired, not t.paired) if self.weight[k] > 0), None)
        return None if k is None else self.secs[k] / self.weight[k] * t.weight / t.epochs


class RemainingWork:
    """Seconds until the last trial ends, simulated as docs/study-files.md "The console" says.
    ``costs``: key -> (weight or ``TrialPlan.cost_terms``, epochs[, group]); ``order``: those
    left to run, as Tune starts them; ``probe(key)``: ``(epoch, fraction done, seconds into it)``."""

    def __init__(
        self,
        *,
        costs: dict[str, tuple],
        order: list[str],
        workers: int | None = None,
        probe: Callable[[str], tuple[int, float, float] | None] | None = None,
    ):
        self.trials = {}
        for k, c in costs.items():
            macs, pairs = (
                (float(c[0][0]), float(c[0][1])) if isinstance(c[0], (tuple, list)) else (float(c[0]), 0.0)
            )
            self.trials[k] = _Trial(
                weight=macs + PAIR_MAC_EQUIVALENT * pairs,
                paired=pairs > 0,
                epochs=int(c[1]),
                group=str(c[2]) if len(c) > 2 else "",
            )
        self.order, self.workers, self.probe = order, workers or 1, probe
        self._running: set[str] = set()

    def start(self, key: str, now: float) -> None:
        t = self.trials.get(key)
        if t is not None and not t.ended and key not in self._running:
            t.started, t.walls, t.setup = now, [], None
            self._running.add(key)
            self.workers = max(self.workers, len(self._running))

    def epoch(self, key: str, now: float, *, seconds: float | None = None) -> None:
        """A trial reported an epoch; ``seconds``: that epoch's time as the trial measured it."""
        t = self.trials.get(key)
        if t is None:
            return
        if key not in self._running:
            self.start(key, now if seconds is None else now - seconds)
        if t.walls:
            t.walls.append(now - t.reported)
        else:
            wall = seconds if seconds is not None and 0 <= seconds <= now - t.started else now - t.started
            t.walls.append(wall)
            t.setup = now - t.started - wall
        t.reported = now

    def end(self, key: str) -> None:
        if key in self.trials:
            self.trials[key].ended = True
        self._running.discard(key)

    def _inside(self) -> dict[str, tuple[float, float, float]]:
        """Running trials without a reported epoch, from their probe: key -> (epochs left
        after the running one, its seconds so far, its predicted wall seconds)."""
        out = {}
        for k in self._running if self.probe is not None else ():
            t = self.trials[k]
            if t.walls:
                continue
            try:
                p = self.probe(k)
            except Exception:  # noqa: BLE001 - the ETA must never stop a study
                p = None
            if p and p[1] >= MIN_FRACTION and p[2] > 0 and 0 <= p[0] < t.epochs:
                out[k] = (float(t.epochs - p[0] - 1), float(p[2]), float(p[2]) / float(p[1]))
        return out

    def remaining(
        self,
        key: str,
        now: float,
        rates: _Rates,
        setup: float,
        inside: tuple[float, float, float] | None = None,
    ) -> float:
        t = self.trials[key]  # running, or not started yet
        if t.walls:  # its own epoch times
            left = t.epochs - len(t.walls)
            return max(left * sum(t.walls) / len(t.walls) - (now - t.reported), 0.0)
        if inside is not None:  # its own first epoch, as far as it has gone
            after, so_far, wall = inside
            return max(wall - so_far, 0.0) + after * wall
        epoch = rates.epoch(t) or 0.0
        if t.started is None:
            return setup + t.epochs * epoch
        elapsed = now - t.started
        if elapsed <= setup + epoch:
            return setup + t.epochs * epoch - elapsed
        # slower than predicted and still in its first epoch: assume it ends now
        return (t.epochs - 1) * (elapsed - setup)

    def eta(self, now: float) -> float | None:
        """None until an epoch has been measured (or, with a ``probe``, timed inside)."""
        inside = self._inside()
        rates = _Rates(
            [(t, w) for t in self.trials.values() for w in t.walls]
            + [(self.trials[k], wall) for k, (_, _, wall) in inside.items()]
        )
        if not rates.weight:
            return None
        # start-up of a trial not started yet: the shortest measured (Tune reuses a
        # finished trial's worker, so only the first wave pays the process start)
        setup = max(min((t.setup for t in self.trials.values() if t.setup is not None), default=0.0), 0.0)
        free = [self.remaining(k, now, rates, setup, inside.get(k)) for k in self._running]
        free += [0.0] * max(self.workers - len(free), 0)
        heapq.heapify(free)
        for k in self.order:
            if self.trials[k].started is None and not self.trials[k].ended:
                heapq.heapreplace(free, free[0] + self.remaining(k, now, rates, setup))
        return max(free) if free else 0.0


class Progress:
    """A header once, then a row when a trial finishes an epoch (at most one per trial every
    ``interval`` seconds) or ends, each followed by :meth:`status_line`.  ``plan``:
    :func:`study.scheduling.trials.launch_plan` (``[]``: no ETA); ``pending``: the keys left to run
    (a resumed study: the others ended already, cost nothing and count as done); ``meta``: the
    study's ``study.json`` (``num_trials``; ``root``: its ledgers time a running epoch)."""

    COLUMNS = ("trial", "cell", "state", "epoch", "test_acc", "best_acc", "img/s")

    def __init__(
        self,
        *,
        plan: list,
        meta: dict[str, Any],
        now: float,
        pending: list[str] | None = None,
        enabled: bool = True,
        interval: float = 30.0,
    ):
        self.enabled, self.interval, self.total, self.done = enabled, interval, meta.get("num_trials"), 0
        self._last: dict[str, float] = {}  # trial key -> when its last row was printed
        self._header = False
        if pending is not None and plan:
            self.done = len(plan) - len(pending)
        costs = {
            t.key: (t.cost_terms, t.epochs, json.dumps(t.config, sort_keys=True, default=str)) for t in plan
        }
        self.work = RemainingWork(
            costs=costs,
            order=[k for k in costs if pending is None or k in pending],
            probe=ledger_probe(meta.get("root")),
        )
        self.began = now

    def status_line(self, now: float) -> str:
        eta = self.work.eta(now)
        return (
            f"{self.done} of {self.total} trials done, elapsed {hms(now - self.began)}, "
            f"ETA {hms(eta) if eta is not None else 'after the first epoch'}"
        )

    def _row(self, key: str, cell, state: str, result: dict | None, now: float) -> None:
        if not self.enabled:
            return
        r = result or {}
        cells = [
            key,
            "" if cell is None else str(cell),
            state,
            str(r["epoch"] + 1) if "epoch" in r else "-",
            _f(r.get("test_acc")),
            _f(r.get("best_test_acc")),
            _f(r.get("images_per_s"), 0),
        ]
        for row in (self.COLUMNS, cells) if not self._header else (cells,):
            print(
                "  ".join(f"{c:>10}" if i else f"{c:<24}" for i, c in enumerate(row)),
                file=sys.stderr,
                flush=True,
            )
        self._header = True
        print(f"  {self.status_line(now)}", file=sys.stderr, flush=True)

    def started(self, key: str, now: float) -> None:
        self.work.start(key, now)

    def reported(self, key: str, cell, result: dict[str, Any], now: float) -> None:
        """A trial's report: an epoch's (``seconds``: its time as the trial measured it) calibrates
        the ETA; a row at most every ``interval`` seconds."""
        if result.get("status", "running") == "running" and isinstance(result.get("epoch"), int):
            secs = result["seconds"] + result.get("head_stats_seconds", 0.0) if "seconds" in result else None
            self.work.epoch(key, now, seconds=secs)
        if now - self._last.get(key, -1e9) >= self.interval:
            self._last[key] = now
            self._row(key, cell, "running", result, now)

    def ended(self, key: str, cell, state: str, result: dict | None, now: float) -> None:
        """A trial ended as ``state`` (finished, diverged, stopped, error), ``result`` its last report."""
        self.done += 1
        self.work.end(key)
        self._row(key, cell, state, result, now)


def _f(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"
