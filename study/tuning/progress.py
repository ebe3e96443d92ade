"""Quiet, readable progress for ``study run``: one table of trial events on stderr,
each row followed by ``k of N trials done``, the elapsed time and an ETA.

The ETA simulates the rest of the schedule (:class:`RemainingWork`): each trial's
predicted cost (:attr:`study.plan.TrialPlan.weight`) times the seconds per cost unit
measured so far, plus a trial's measured start-up; a running trial by its own epoch
times, or before its first report by how far its epoch has gone (its ledger), so a
trial far costlier than predicted is timed early; the trials not started yet assigned
longest first to the first free worker, as the searcher hands them to Tune.  A trial
that ended early (ASHA, divergence, error) counts as done, so under ASHA the ETA is an
upper bound.
"""

from __future__ import annotations

import heapq
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ray.tune import Callback

from study.plan import PAIR_MAC_EQUIVALENT


#: a running trial's ``epoch_fraction`` is trusted from this share on (before, start-up dominates)
MIN_FRACTION = 0.02


@dataclass
class _Trial:
    macs: float  # predicted work: passes x MACs
    pairs: float  # passes x per-image attention probabilities
    epochs: int
    group: str = ""  # trials of one model configuration run at one rate
    started: float | None = None
    reports: list[float] = field(default_factory=list)  # times of the epoch reports
    walls: list[float] = field(default_factory=list)  # wall seconds of each reported epoch
    setup: float | None = None  # start to first report, less that epoch
    ended: bool = False

    @property
    def weight(self) -> float:
        """The launch order's cost (:attr:`study.plan.TrialPlan.weight`)."""
        return self.macs + PAIR_MAC_EQUIVALENT * self.pairs


class _Rates:
    """Seconds per weight unit of a group's (one configuration's) epochs; else ``a`` per
    MAC-pass (from image-independent attention) and ``b`` per probability-pass (what the
    MACs leave of the others' time): so a mispredicted kind of model skews no other."""

    def __init__(self, samples: list[tuple[_Trial, float]]):
        self.per_group: dict[str, tuple[float, float]] = {}
        for t, wall in samples:  # (trial, one epoch's wall seconds)
            s, w = self.per_group.get(t.group, (0.0, 0.0))
            self.per_group[t.group] = (s + wall, w + t.weight / t.epochs)
        self.a = self.b = None
        plain = [(t, wall) for t, wall in samples if t.pairs == 0]
        paired = [(t, wall) for t, wall in samples if t.pairs > 0]
        macs = sum(t.macs / t.epochs for t, _ in plain)
        if macs > 0:  # seconds per MAC-pass, from the models without per-image probabilities
            self.a = sum(wall for _, wall in plain) / macs
        if paired and self.a is not None:  # what the MACs leave of the others' time
            extra = sum(wall - self.a * t.macs / t.epochs for t, wall in paired)
            self.b = max(extra / sum(t.pairs / t.epochs for t, _ in paired), 0.0)
        elif paired:  # only those measured: the prediction's ratio of the two, scaled
            weight = sum(t.weight / t.epochs for t, _ in paired)
            if weight > 0:
                self.a = sum(wall for _, wall in paired) / weight
                self.b = self.a * PAIR_MAC_EQUIVALENT
        elif self.a is not None:
            self.b = self.a * PAIR_MAC_EQUIVALENT

    def epoch(self, t: _Trial) -> float | None:
        """Predicted wall seconds of one epoch of ``t``."""
        if t.group in self.per_group:
            secs, weight = self.per_group[t.group]
            return secs / weight * t.weight / t.epochs
        if self.a is None:
            return None
        return (self.a * t.macs + self.b * t.pairs) / t.epochs


class RemainingWork:
    """Seconds until the last trial ends.  ``costs``: key -> (weight or ``TrialPlan.cost_terms``,
    epochs[, group]); ``order``: as Tune starts them; ``probe(key)``: ``(epoch, fraction
    done, seconds into it)`` of a running trial; times are ``time.monotonic()`` values."""

    def __init__(self, *, costs: dict[str, tuple], order: list[str], workers: int | None = None,
                 probe: Callable[[str], tuple[int, float, float] | None] | None = None):
        self.trials = {}
        for k, c in costs.items():
            macs, pairs = (float(c[0][0]), float(c[0][1])) if isinstance(c[0], (tuple, list)) else (float(c[0]), 0.0)
            self.trials[k] = _Trial(macs=macs, pairs=pairs, epochs=int(c[1]), group=str(c[2]) if len(c) > 2 else "")
        self.order = [k for k in order if k in self.trials]
        self.workers = workers or 1
        self.probe = probe
        self._running: set[str] = set()

    def start(self, key: str, now: float) -> None:
        t = self.trials.get(key)
        if t is None or t.ended:
            return
        if t.started is None or key not in self._running:
            t.started, t.reports, t.walls, t.setup = now, [], [], None  # a retry starts over
        self._running.add(key)
        self.workers = max(self.workers, len(self._running))

    def epoch(self, key: str, now: float, *, seconds: float | None = None) -> None:
        """A trial reported an epoch; ``seconds``: that epoch's time as the trial measured it."""
        t = self.trials.get(key)
        if t is None:
            return
        if key not in self._running:
            self.start(key, now if seconds is None else now - seconds)
        if t.reports:
            t.walls.append(now - t.reports[-1])
        else:
            wall = seconds if seconds is not None and 0 <= seconds <= now - t.started else now - t.started
            t.walls.append(wall)
            t.setup = now - t.started - wall
        t.reports.append(now)

    def end(self, key: str) -> None:
        t = self.trials.get(key)
        if t is not None:
            t.ended = True
        self._running.discard(key)

    def _inside(self) -> dict[str, tuple[float, float, float]]:
        """Running trials without a reported epoch, from their probe: key -> (epochs left
        after the running one, its seconds so far, its predicted wall seconds)."""
        out = {}
        if self.probe is None:
            return out
        for k in self._running:
            t = self.trials[k]
            if t.ended or t.walls:
                continue
            try:
                p = self.probe(k)
            except Exception:  # noqa: BLE001 - the ETA must never stop a study
                p = None
            if not p:
                continue
            epoch, fraction, seconds = p
            if fraction >= MIN_FRACTION and seconds > 0 and 0 <= epoch < t.epochs:
                out[k] = (float(t.epochs - epoch - 1), float(seconds), float(seconds) / float(fraction))
        return out

    def rates(self, inside: dict | None = None) -> _Rates:
        samples = [(t, w) for t in self.trials.values() for w in t.walls]
        samples += [(self.trials[k], wall) for k, (_, _, wall) in (inside or {}).items()]
        return _Rates(samples)

    def _setup(self) -> float:
        """Start-up of a trial not started yet: the shortest measured (Tune reuses a
        finished trial's worker, so only the first wave pays the process start)."""
        s = [t.setup for t in self.trials.values() if t.setup is not None]
        return max(min(s), 0.0) if s else 0.0

    def remaining(self, key: str, now: float, rates: _Rates, setup: float,
                  inside: tuple[float, float, float] | None = None) -> float:
        t = self.trials[key]
        if t.ended:
            return 0.0
        if t.walls:  # its own epoch times
            left = t.epochs - len(t.walls)
            return max(left * sum(t.walls) / len(t.walls) - (now - t.reports[-1]), 0.0)
        if t.started is not None and inside is not None:  # its own first epoch, as far as it has gone
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
        rates = self.rates(inside)
        if rates.a is None:
            return None
        setup = self._setup()
        running = [k for k in self.trials if k in self._running and not self.trials[k].ended]
        free = [self.remaining(k, now, rates, setup, inside.get(k)) for k in running]
        free += [0.0] * max(self.workers - len(free), 0)
        heapq.heapify(free)
        pending = [k for k in self.order if self.trials[k].started is None and not self.trials[k].ended]
        pending += [k for k in self.trials if k not in self.order and self.trials[k].started is None
                    and not self.trials[k].ended]
        for k in pending:
            heapq.heapreplace(free, free[0] + self.remaining(k, now, rates, setup))
        return max(free) if free else 0.0


class ProgressReporter(Callback):
    """A header once, then a row when a trial finishes an epoch (at most one per trial
    every ``interval`` seconds) or ends, each followed by :meth:`status_line`."""

    COLUMNS = ("trial", "cell", "state", "epoch", "test_acc", "best_acc", "img/s")

    def __init__(self, *, spec=None, meta: dict[str, Any], pending: list[str] | None = None, enabled: bool = True,
                 interval: float = 30.0, clock=None):
        self.enabled = enabled
        self.interval = interval
        self.total = meta.get("num_trials")
        self.done = 0
        self._last: dict[str, float] = {}
        self._header = False
        self._clock = clock or (lambda: time.monotonic())
        costs, order = _costs(spec)
        if pending is not None:  # a resumed study: the trials that ended already are done
            self.done = len(order) - len(pending) if order else 0
            order = [k for k in order if k in set(pending)]
        self.work = RemainingWork(costs=costs, order=order, probe=_ledger_probe(meta))
        self._start = self._clock()

    def setup(self, **info):
        self._start = self._clock()

    def status_line(self) -> str:
        """``k of N trials done, elapsed H:MM:SS, ETA H:MM:SS``."""
        now = self._clock()
        eta = self.work.eta(now)
        return (f"{self.done} of {self.total} trials done, elapsed {_hms(now - self._start)}, "
                f"ETA {_hms(eta) if eta is not None else 'after the first epoch'}")

    def _key(self, trial) -> str:
        return str((trial.config or {}).get("key", trial.trial_id))

    def _row(self, trial, state: str, result: dict | None) -> None:
        if not self.enabled:
            return
        r = result or {}
        cells = [self._key(trial), str((trial.config or {}).get("cell", "")), state,
                 str(r.get("epoch", -1) + 1 if "epoch" in r else "-"),
                 _f(r.get("test_acc")), _f(r.get("best_test_acc")), _f(r.get("images_per_s"), 0)]
        lines = [] if self._header else [self.COLUMNS]
        self._header = True
        for row in (*lines, cells):
            print("  ".join(f"{c:>10}" if i else f"{c:<24}" for i, c in enumerate(row)), file=sys.stderr, flush=True)
        print(f"  {self.status_line()}", file=sys.stderr, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.work.start(self._key(trial), self._clock())

    def on_trial_result(self, iteration, trials, trial, result, **info):
        now = self._clock()
        if result.get("status", "running") == "running" and isinstance(result.get("epoch"), int):
            secs = result.get("seconds")
            heads = result.get("head_stats_seconds")
            secs = float(secs) + (float(heads) if isinstance(heads, (int, float)) else 0.0) \
                if isinstance(secs, (int, float)) else None
            self.work.epoch(self._key(trial), now, seconds=secs)
        if now - self._last.get(trial.trial_id, -1e9) >= self.interval:
            self._last[trial.trial_id] = now
            self._row(trial, "running", result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        self.work.end(self._key(trial))
        result = trial.last_result or {}
        self._row(trial, result.get("status", "done") if result.get("status") != "running" else "stopped", result)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        self.work.end(self._key(trial))
        self._row(trial, "error", trial.last_result)


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _f(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _costs(spec) -> tuple[dict[str, tuple[float, int]], list[str]]:
    """Predicted cost and epochs of every trial (by table key) and the launch order."""
    if spec is None:
        return {}, []
    from study.plan import launch_order, plan_trials

    try:
        trials = plan_trials(spec)
    except Exception:  # noqa: BLE001 - progress lines must never stop a study: no ETA then
        return {}, []
    return ({t.key: (t.cost_terms, t.epochs, json.dumps(t.config, sort_keys=True, default=str)) for t in trials},
            [t.key for t in launch_order(trials)])


def _ledger_probe(meta: dict[str, Any]) -> Callable[[str], tuple[int, float, float] | None] | None:
    """``(epoch, fraction done, seconds into it)`` of a running trial from its ledger, or
    None between epochs or without a ledger."""
    if "root" not in meta:
        return None
    from study.tuning.trainable import ledger

    def probe(key: str) -> tuple[int, float, float] | None:
        d = ledger(meta, key).read()
        epoch, fraction, seconds = d.get("epoch"), d.get("epoch_fraction"), d.get("epoch_seconds")
        if epoch is None or fraction is None or seconds is None:
            return None
        return int(epoch), float(fraction), float(seconds)

    return probe
