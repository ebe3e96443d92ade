"""Fig. 2: test accuracy over training, one line per model variant (mean over its
seeds) with a min–max band over the seeds, on axes that do not exaggerate (from
chance level; a bar shows what one test image is worth)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from analysis.figures.context import Skip
from analysis.figures.panels import wrap_note
from analysis.meta import describe, did_not_train, test_sizes
from analysis.style import COLUMN_WIDTH
from analysis.variants import variant_order

KIND = "accuracy"
READS = ("epochs",)
STEM = "fig2_accuracy"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
LINESTYLES = ("-", "--", "-.", ":")


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
    return ctx.render(_figure, data(ctx))


def _figure(ctx, d: pd.DataFrame) -> list:
    runs = ctx.trials
    models = list(dict.fromkeys(d["model"]))
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.3))
    n_epochs = d["epochs_trained"].max()
    every = max(1, int(n_epochs) // 12)
    for i, m in enumerate(models):
        s = d[d["model"] == m]
        colour = f"C{i}"  # the style's colour cycle
        seeds = int(s["seeds"].max())
        failed = int(did_not_train(runs[runs["label"] == m]).sum())
        label = f"{m} (n={seeds}" + (f"; DID NOT TRAIN: {failed})" if failed else ")")
        ax.plot(
            s["epochs_trained"],
            s["test_acc_mean"],
            color=colour,
            label=label,
            linestyle=LINESTYLES[i % len(LINESTYLES)],
            marker=MARKERS[i % len(MARKERS)],
            markevery=every,
            markersize=3,
            markerfacecolor="none" if i % 2 else colour,
        )
        if seeds > 1:
            ax.fill_between(
                s["epochs_trained"],
                s["test_acc_min"],
                s["test_acc_max"],
                color=colour,
                alpha=0.18,
                linewidth=0,
            )
    classes = runs["num_classes"].dropna() if "num_classes" in runs else pd.Series(dtype=float)
    chance = 1.0 / float(classes.max()) if len(classes) else 0.1
    # at least [chance, next 0.1 above the data]: differences of a few test images are not blown up to the
    # height
    lo = max(0.0, min(chance, math.floor(float(d["test_acc_min"].min()) * 10) / 10))
    hi = min(1.0, max(lo + 0.2, math.ceil(float(d["test_acc_max"].max()) * 10 + 1e-9) / 10))
    ax.set_ylim(lo, hi)
    ax.axhline(chance, color="0.6", linewidth=0.5, linestyle=":", zorder=0)
    ax.text(1.0, chance, " chance", transform=ax.get_yaxis_transform(), fontsize=7, color="0.4", va="center")
    sizes = test_sizes(runs)
    if sizes:
        n = min(sizes)
        # a bar as tall as one test image's worth of accuracy, at the right edge
        x = n_epochs + 0.6 if n_epochs > 1 else 1.4
        y = lo + 0.04 * (hi - lo)
        ax.errorbar([x], [y], yerr=[[0], [1.0 / n]], color="black", capsize=1.5, linewidth=0.6, capthick=0.6)
        ax.text(x - 0.08, y, f"1 test image = {100 / n:.2g} pp", ha="right", va="bottom", fontsize=7)
    ax.set_xlabel("epochs trained")
    ax.set_ylabel("test accuracy" + (f" (n_test = {'/'.join(map(str, sizes))})" if sizes else ""))
    if n_epochs <= 12:
        ax.set_xticks(sorted(d["epochs_trained"].unique()))
    ax.set_xlim(0.5, n_epochs + (1.0 if n_epochs > 1 else 1.5))
    ax.grid(True, linewidth=0.4, alpha=0.5)
    seeded = "line: mean over n seeds; band: min–max"
    note = seeded if (d["seeds"] > 1).any() else "line: one seed per model"
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1, title=note)
    ax.set_title(wrap_note(describe(runs), COLUMN_WIDTH), fontsize=7, pad=3)
    return ctx.save(fig, d.assign(n_test=min(sizes) if sizes else pd.NA), STEM)
