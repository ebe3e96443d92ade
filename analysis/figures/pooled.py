"""Head statistics of every trial with its variant and seed, for the figures that pool
the seeds of a variant (attention distance, locality over training, gates), and the
panel grid they share (one panel per variant, one y scale).

Head indices are not matched across seeds (a head of one seed has no counterpart of
the same number in another), so per-head values are pooled over seeds, never
averaged head by head; seed-to-seed noise is measured on per-seed layer means."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.figures import Skip
from analysis.lattice import lattice
from analysis.style import COLUMN_WIDTH, DOUBLE_WIDTH

#: E‖δ‖ over the 9 taps of a 3×3 convolution's lattice: (4·1 + 4·√2)/9 ≈ 1.07 px
CONV3_DISTANCE = float(np.linalg.norm(lattice(3), axis=1).mean())


def pooled_heads(ctx, kind: str, *, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """``heads`` rows of every trial with attention heads, with ``model`` (the variant's
    label), ``seed`` and ``epochs_trained``; ``columns`` must exist (else :class:`Skip`).
    Trials without heads are reported as skipped by :meth:`Context.head_trials`."""
    parts = []
    for t, rows in ctx.head_trials(kind, every_seed=True):
        missing = [c for c in columns if c not in rows]
        if missing:
            raise Skip(f"the heads table has no {', '.join(missing)} column")
        parts.append(rows.assign(model=t["label"], seed=t.get("seed", np.nan)))
    if not parts:
        raise Skip("no trial has head statistics yet")
    d = pd.concat(parts, ignore_index=True)
    d["epochs_trained"] = d["epoch"].astype(int) + 1
    return d


def at_picked_epoch(ctx, kind: str, d: pd.DataFrame) -> pd.DataFrame:
    """Each trial's rows at the figure's epoch (``--epoch``, or the trial's last);
    trials without that epoch are reported as skipped."""
    keep = []
    for tid, rows in d.groupby("trial_id", sort=False):
        epoch = ctx.pick_epoch(rows)
        if epoch is None:
            ctx.skip(kind, f"no head statistics at epoch {ctx.epoch}", f"{rows['model'].iloc[0]} ({tid})")
            continue
        keep.append(rows[rows["epoch"] == epoch])
    if not keep:
        raise Skip(f"no head statistics at epoch {ctx.epoch}")
    return pd.concat(keep, ignore_index=True)


def model_order(ctx, models) -> list[str]:
    """``models`` in the display order of the variants."""
    order = {m: i for i, m in enumerate(dict.fromkeys(ctx.trials["label"]))}
    return sorted(dict.fromkeys(models), key=lambda m: order.get(m, len(order)))


def variant_grid(n: int, *, cols: int = 3, panel_height: float = 1.55):
    """Figure and one axes per variant (at most ``cols`` per row), one shared y scale."""
    ncols = min(n, cols)
    nrows = math.ceil(n / ncols)
    width = COLUMN_WIDTH if ncols == 1 else DOUBLE_WIDTH
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, panel_height * nrows + 0.5), squeeze=False,
                             sharey=True)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    # a hidden panel below a visible one: that one keeps its x tick labels
    for c in range(ncols):
        for r in range(nrows - 1):
            if not axes[r + 1, c].get_visible():
                axes[r, c].tick_params(labelbottom=True)
    return fig, flat[:n], axes


def seeds_of(d: pd.DataFrame) -> int:
    """Number of seeds (trials) in ``d``."""
    return int(d["trial_id"].nunique())
