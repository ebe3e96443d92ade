"""Figures of a study: the paper's (Fig. 2, Figs. 4/12/14, Figs. 5/6, Table 1) and
the ones it lacked (sweep heat-map, head-centre trajectories, convolution-likeness),
and the locality figures across encodings (attention distance vs depth, locality
over training, gates).

Every figure module has ``KIND`` and ``draw(ctx) -> (paths written, skip lines)`` and
raises :class:`Skip` when the study's data cannot support it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from analysis.io import Study
from analysis.variants import trial_table


class Skip(Exception):
    """The data does not support a figure; the message says why (one line)."""


@dataclass
class Context:
    study: Study
    out: Path
    epoch: int | None = None  # epoch (as stored) of head/map figures; None: each trial's last
    skipped: list[str] = field(default_factory=list)

    @cached_property
    def trials(self) -> pd.DataFrame:
        """``runs`` with ``label`` and ``slug`` per trial, in display order."""
        return trial_table(self.study.runs)

    def skip(self, kind: str, reason: str, what: str | None = None) -> None:
        self.skipped.append(f"skipped {kind}{f' for {what}' if what else ''}: {reason}")

    def head_trials(self, kind: str, *, table: str = "heads"):
        """(trial row, that trial's rows of ``table``) for every trial with attention
        heads; other trials are reported as skipped."""
        data = self.study.table(table)
        if self.trials.empty:
            raise Skip("no trials in the runs table yet")
        by_trial = dict(tuple(data.groupby("trial_id", sort=False))) if not data.empty else {}
        for _, t in self.trials.iterrows():
            rows = by_trial.get(t["trial_id"])
            if t.get("arch") == "resnet18":
                self.skip(kind, "no attention heads (ResNet18)", t["label"])
            elif rows is None or rows.empty:
                self.skip(kind, f"no {table} rows yet", f"{t['label']} ({t['trial_id']})")
            else:
                yield t, rows

    def pick_epoch(self, rows: pd.DataFrame) -> int | None:
        """The requested epoch if ``rows`` have it, else None; each trial's last by default."""
        epochs = rows["epoch"].astype(int)
        if self.epoch is None:
            return int(epochs.max())
        return self.epoch if (epochs == self.epoch).any() else None


def _modules():
    from analysis.figures import (conv_likeness, convergence, distance, gates, heads, locality, maps, sweeps,
                                  table1, trajectories)

    return [convergence, table1, heads, maps, trajectories, conv_likeness, distance, locality, gates, sweeps]


def draw_all(study: Study, out: Path, *, epoch: int | None = None) -> tuple[list[Path], list[str]]:
    """Draw every figure ``study`` supports into ``out``: (files written, skip lines)."""
    from analysis import style

    style.setup()
    ctx = Context(study=study, out=Path(out), epoch=epoch)
    written: list[Path] = []
    for module in _modules():
        try:
            written += module.draw(ctx)
        except Skip as why:
            ctx.skip(module.KIND, str(why))
    return written, ctx.skipped
