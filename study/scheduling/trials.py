"""Which trials a study runs and which are left to run: a trial's table key, the ``runs`` rows
that ended, the launch order (longest predicted first) and the trials still pending in it."""

from __future__ import annotations

import contextlib

import pandas as pd

from study.results.tables import read_table

#: ``runs.status`` values of a trial that ended: a resume does not run it again
ENDED = ("finished", "diverged", "stopped")


def trial_key(cell: int, sample: int) -> str:
    """The table identity of a trial: its grid cell and sample index (stable across
    retries, restores and lost drivers, unlike Ray's trial ids)."""
    return f"c{cell:03d}-s{sample:03d}"


def ended_rows(tables: str) -> pd.DataFrame:
    """The ``runs`` rows of the trials that ended (a resume does not run them again)."""
    runs = read_table(tables, "runs")
    return runs[runs.status.isin(ENDED)]


def launch_plan(spec, *, sizes: dict[str, tuple[int, int]] | None = None) -> list:
    """Every trial's ``TrialPlan`` of the validated ``spec``, longest-predicted first
    (:func:`study.cost.plan.launch_order`; ``sizes``: as :func:`study.cost.plan.plan_trials`); [] where
    the cost model fails: the study must not stop for that, it runs in grid order without an ETA."""
    from study.cost.plan import launch_order, plan_trials

    with contextlib.suppress(Exception):
        return launch_order(plan_trials(spec, sizes=sizes))
    return []


def pending(spec, tables: str, plan: list) -> list[tuple[int, int]]:
    """The (cell, sample) of every trial whose ``runs`` row has not ended, in the order of ``plan``
    (:func:`launch_plan`; grid order where it is empty)."""
    n = len(spec.cells)
    order = [(t.cell, t.sample) for t in plan] or [(k % n, k // n) for k in range(spec.num_trials)]
    ended = set(ended_rows(tables).trial_id)
    return [(c, s) for c, s in order if trial_key(c, s) not in ended]
