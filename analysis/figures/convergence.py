"""Fig. 2: test accuracy over training, one line per model variant, a band over seeds."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from analysis.figures import Skip
from analysis.style import COLUMN_WIDTH, save
from analysis.variants import variant_order

KIND = "accuracy"
STEM = "fig2_accuracy"


def data(ctx) -> pd.DataFrame:
    """Per (model, epoch): seeds, mean, min and max of test accuracy over seeds."""
    epochs = ctx.study.epochs
    if ctx.trials.empty or epochs.empty:
        raise Skip("no epoch finished yet")
    e = epochs.merge(ctx.trials[["trial_id", "label"]], on="trial_id")
    if e.empty:
        raise Skip("no epoch rows match a trial of the runs table")
    g = e.groupby(["label", "epoch"], sort=False)["test_acc"]
    agg = g.agg(seeds="count", test_acc_mean="mean", test_acc_min="min", test_acc_max="max").reset_index()
    order = {label: i for i, label in enumerate(variant_order(ctx.trials))}
    agg = agg.sort_values(["label", "epoch"], key=lambda s: s.map(order) if s.name == "label" else s)
    agg = agg.rename(columns={"label": "model"})
    agg.insert(2, "epochs_trained", agg["epoch"].astype(int) + 1)
    return agg.reset_index(drop=True)


def draw(ctx) -> list:
    d = data(ctx)
    models = list(dict.fromkeys(d["model"]))
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.1))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    single_point = d.groupby("model")["epoch"].nunique().max() == 1
    for i, m in enumerate(models):
        s = d[d["model"] == m]
        colour = palette[i % len(palette)]
        seeds = int(s["seeds"].max())
        label = m if seeds == 1 else f"{m} ({seeds} seeds)"
        ax.plot(s["epochs_trained"], s["test_acc_mean"], color=colour, label=label,
                marker="o" if single_point or len(s) <= 12 else None, markersize=2.5)
        if seeds > 1:
            ax.fill_between(s["epochs_trained"], s["test_acc_min"], s["test_acc_max"], color=colour,
                            alpha=0.2, linewidth=0)
    ax.set_xlabel("epochs trained")
    ax.set_ylabel("test accuracy")
    if d["epochs_trained"].max() <= 12:
        ax.set_xticks(sorted(d["epochs_trained"].unique()))
    ax.grid(True, linewidth=0.4, alpha=0.5)
    note = "line: mean over seeds; band: min–max" if (d["seeds"] > 1).any() else None
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1, title=note)
    return save(fig, d, ctx.out, STEM)
