"""What every figure module draws with: :class:`Context` (the study, the options, the trials and
their table rows), :class:`Canvas` (what a pool worker needs to draw one figure) and :class:`Skip`
(the data cannot support a figure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from analysis.io import Study
from analysis.meta import describe
from analysis.variants import trial_table


class Skip(Exception):
    """The data does not support a figure; the message says why (one line)."""


@dataclass
class Canvas:
    """What drawing a figure needs besides its plotted data: the output folder and the
    trials table (for captions).  Small, so it travels to pool workers."""

    out: Path
    trials: pd.DataFrame
    pdf: bool = True  # a PDF beside each PNG (the HTML report, which embeds PNGs only, draws none)

    def caption(self, values, by: str = "trial_id") -> str:
        """:func:`analysis.meta.describe` of the trials whose ``by`` is one of ``values``."""
        return describe(self.trials[self.trials[by].isin(values)])

    def save_trial(self, fig, t: pd.Series, d: pd.DataFrame, stem: str, *, trial_id=None, **lead) -> list:
        """Save ``<stem>_<slug>`` of figure row ``t``, its data led by trial_id, model and ``lead``
        columns."""
        lead = {"trial_id": t["trial_id"] if trial_id is None else trial_id, "model": t["label"], **lead}
        return self.save(fig, d.assign(**lead)[[*lead, *d.columns]], f"{stem}_{t['slug']}")

    def save(self, fig, data: pd.DataFrame, stem: str) -> list:
        from analysis.style import save  # matplotlib and seaborn: only where a figure is saved

        return save(fig, data, self.out, stem, pdf=self.pdf)


@dataclass
class Context:
    study: Study
    out: Path
    epoch: int | None = None  # epoch (as stored) of head/map figures; None: each trial's last
    per_seed: bool = False  # variant figures per trial instead of per variant
    pdf: bool = True
    skipped: list[str] = field(default_factory=list)
    only: frozenset | None = None  # trial ids of the figure being drawn (None: every trial)
    defer: bool = False  # queue drawings in ``renders`` instead of drawing them at once
    job: str = ""  # the figure job being drawn (set by draw_all)
    renders: list = field(default_factory=list)  # (job, fn, args, kwargs, canvas) queued when ``defer``

    @cached_property
    def trials(self) -> pd.DataFrame:
        """``runs`` as :func:`analysis.variants.trial_table` gives it, in display order."""
        return trial_table(self.study.runs)

    def skip(self, kind: str, reason: str, what: str | None = None) -> None:
        self.skipped.append(f"skipped {kind}{f' for {what}' if what else ''}: {reason}")

    def render(self, fn, *args, **kwargs) -> list:
        """Draw one figure: ``fn(canvas, *args, **kwargs)`` -> paths, now or (``defer``) on the pool."""
        canvas = Canvas(out=self.out, trials=self.trials, pdf=self.pdf)
        if self.defer:
            self.renders.append((self.job, fn, args, kwargs, canvas))
            return []
        return fn(canvas, *args, **kwargs)

    def by_trial(self, table: str) -> dict:
        """trial_id -> that trial's rows of ``table`` (grouped once per context)."""
        cache = self.__dict__.setdefault("_by_trial", {})
        if table not in cache:
            data = self.study.table(table)
            cache[table] = dict(tuple(data.groupby("trial_id", sort=False))) if not data.empty else {}
        return cache[table]

    def selected(self) -> pd.DataFrame:
        """The trials of the figure being drawn (:class:`Skip` when there is no trial)."""
        if self.trials.empty:
            raise Skip("no trials in the runs table yet")
        t = self.trials
        return t if self.only is None else t[t["trial_id"].isin(self.only)]

    def _has_heads(self, kind: str, t: pd.Series, found: bool, table: str, what: str) -> bool:
        """Whether figure row ``t`` has attention heads and ``table`` rows (else one skip line)."""
        if t.get("arch") == "resnet18":
            self.skip(kind, "no attention heads (ResNet18)", t["label"])
            return False
        if not found:
            self.skip(kind, f"no {table} rows yet", what)
        return found

    def head_trials(self, kind: str, *, table: str = "heads", every_seed: bool = False):
        """(trial row, that trial's rows of ``table``) for every trial with attention heads:
        each variant's representative seed only, unless ``per_seed`` or ``every_seed``."""
        by_trial = self.by_trial(table)
        for _, t in self.selected().iterrows():
            if self.per_seed or every_seed or t["representative"]:
                t = as_figure(t, per_seed=self.per_seed or every_seed)
                rows = by_trial.get(t["trial_id"])
                if self._has_heads(kind, t, rows is not None, table, f"{t['label']} ({t['trial_id']})"):
                    yield t, rows

    def variant_heads(self, kind: str):
        """(figure row, ids of its trials with ``heads`` rows) per variant with attention heads
        (per trial with ``per_seed``)."""
        by_trial = self.by_trial("heads")
        for _, trials in self.selected().groupby("trial_id" if self.per_seed else "label", sort=False):
            t = as_figure(
                trials[trials["representative"] | self.per_seed].iloc[0],
                per_seed=self.per_seed,
                aggregate=True,
            )
            ids = [tid for tid in trials["trial_id"] if tid in by_trial]
            if self._has_heads(
                kind,
                t,
                bool(ids),
                "heads",
                f"{t['label']} ({t['trial_id']})" if self.per_seed else t["label"],
            ):
                yield t, ids

    def pick_epoch(
        self, rows: pd.DataFrame, kind: str, what: str, table: str = "head statistics"
    ) -> int | None:
        """The requested epoch if ``rows`` have it, else None (one skip line); each trial's last by
        default."""
        epochs = rows["epoch"].astype(int)
        if self.epoch is None:
            return int(epochs.max())
        if (epochs == self.epoch).any():
            return self.epoch
        self.skip(kind, f"no {table} at epoch {self.epoch}", what)
        return None


def as_figure(t: pd.Series, *, per_seed: bool, aggregate: bool = False) -> pd.Series:
    """The trial row as a figure sees it: ``slug`` (file name) and ``title``."""
    t = t.copy()
    n = int(t["seeds"])
    if per_seed or n <= 1:
        t["title"] = t["label"]
        return t
    t["slug"] = t["variant_slug"]
    seed = f"seed {int(t['seed'])}" if pd.notna(t.get("seed")) else f"trial {t['trial_id']}"
    t["title"] = (
        f"{t['label']}, {n} seeds"
        if aggregate
        else f"{t['label']}, {seed} (the median of {n} seeds by best test accuracy)"
    )
    return t
