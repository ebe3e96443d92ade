"""Sweep heat-map: best test accuracy (mean over seeds) over the two configuration
axes a study varies (e.g. num_heads × isotropic, encoding × pos_dim)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis.figures.context import Skip
from analysis.figures.panels import wrap_note
from analysis.meta import describe
from analysis.style import COLUMN_WIDTH
from analysis.variants import sweep_axes, value_text

KIND = "heatmap"
READS = ()
MAX_VALUES = 12  # per axis: more is a continuous search, not a grid


def _sort_values(values: list[str]) -> list[str]:
    def key(v):
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)

    return sorted(values, key=key)


def data(runs: pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    if runs.empty:
        raise Skip("no trials in the runs table yet")
    axes = sweep_axes(runs)
    if len(axes) != 2:
        found = f"found {len(axes)}" + (f": {', '.join(axes)}" if axes else "")
        raise Skip(f"needs a sweep over two config axes ({found})")
    a, b = axes
    t = runs.assign(**{a: runs[a].astype(object).map(value_text), b: runs[b].astype(object).map(value_text)})
    va, vb = _sort_values(list(t[a].unique())), _sort_values(list(t[b].unique()))
    if max(len(va), len(vb)) > MAX_VALUES:
        raise Skip(f"{a} × {b} has {len(va)} × {len(vb)} values: not a grid")
    cells = t[[a, b]].drop_duplicates()
    if len(cells) < 0.5 * len(va) * len(vb):
        raise Skip(f"{a} × {b} is not a grid ({len(cells)} of {len(va) * len(vb)} cells have trials)")
    done = t[t["epochs_done"].fillna(0).astype(int) > 0]
    agg = (
        done.groupby([a, b])["best_test_acc"]
        .agg(seeds="count", best_test_acc_mean="mean", best_test_acc_min="min", best_test_acc_max="max")
        .reset_index()
    )
    grid = pd.MultiIndex.from_product([va, vb], names=[a, b]).to_frame(index=False)
    d = grid.merge(agg, on=[a, b], how="left")
    d["seeds"] = d["seeds"].fillna(0).astype(int)
    return d, a, b


def draw(ctx) -> list:
    d, a, b = data(ctx.study.runs)
    if (d["seeds"] == 0).all():
        raise Skip("no trial of the sweep has finished an epoch yet")
    return ctx.render(_figure, d, a, b)


def _figure(ctx, d: pd.DataFrame, a: str, b: str) -> list:
    va, vb = list(dict.fromkeys(d[a])), list(dict.fromkeys(d[b]))
    m = d.pivot(index=a, columns=b, values="best_test_acc_mean").reindex(index=va, columns=vb)
    w = min(COLUMN_WIDTH, 1.0 + 0.55 * len(vb))
    fig, ax = plt.subplots(figsize=(max(w, 2.2), 0.9 + 0.42 * len(va)))
    n = d.pivot(index=a, columns=b, values="seeds").reindex(index=va, columns=vb).fillna(0).astype(int)
    text = np.array(
        [
            [f"{v:.3f}\nn={k}" if v == v else "" for v, k in zip(rv, rk)]
            for rv, rk in zip(m.to_numpy(dtype=float), n.to_numpy())
        ],
        dtype=object,
    )
    sns.heatmap(
        m.astype(float),
        ax=ax,
        annot=text,
        fmt="",
        cmap="viridis",
        mask=m.isna(),
        annot_kws={"fontsize": 7},
        linewidths=0.5,
        linecolor="white",
        cbar_kws={"label": "best test acc. (mean over n seeds)", "shrink": 0.9},
    )
    ax.set_facecolor("0.9")
    for (i, j), v in np.ndenumerate(m.to_numpy(dtype=float)):
        if v != v:
            ax.text(j + 0.5, i + 0.5, "n/a", ha="center", va="center", fontsize=7, color="0.4")
    ax.set(xlabel=b, ylabel=a)
    ax.tick_params(axis="y", rotation=0)
    ax.set_title(wrap_note(describe(ctx.trials), max(w, 2.2)), pad=3, fontsize=7)
    return ctx.save(fig, d, f"heatmap_{a}_x_{b}")
