"""Attention distance vs depth (ViT, Dosovitskiy et al. 2021, Fig. 7): per layer,
each head's mean attention distance (:func:`~analysis.figures.pooled.distance_metric`)
at one epoch (default: each trial's last), one panel per model variant."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.figures.panels import after, label_grid, layer_grid, panel_title
from analysis.figures.pooled import (
    CANVAS_DISTANCE,
    DistanceMetric,
    at_picked_epoch,
    distance_metric,
    finish,
    model_order,
    pooled_heads,
    reference_lines,
)

KIND = "attention_distance"
READS = ("heads",)
STEM = "attention_distance"
DOT = "#3b6ea8"
SPREAD = 0.6  # width of the band of head dots around a layer's x position

#: ``distance``: the value of the heads column named in ``metric``
COLUMNS = [
    "model",
    "kind",
    "trial_id",
    "seed",
    "epoch",
    "layer",
    "head",
    "x",
    "distance",
    "metric",
    "n",
    "seeds",
    "seed_std",
]


def data(d: pd.DataFrame, models: list[str], column: str) -> pd.DataFrame:
    """The plotted values of heads rows ``d`` (one epoch per trial, with ``model``), in
    the order of ``models``: kind 'head' (a dot: one head of one seed, n = 1) and kind
    'layer' (the mean over the layer's heads and seeds, n values, and the std over
    seeds of the per-seed layer means); ``distance`` is the heads column ``column``."""
    d = d[d["model"].isin(models)].astype({"epoch": int, "layer": int, "head": int})
    d = d.assign(distance=d[column].astype(float), x=d["layer"] + 1.0, n=1, seeds=1, seed_std=np.nan)
    n_heads = d.groupby("model")["head"].transform("max") + 1
    heads = d.assign(kind="head", x=d["x"] + (d["head"] - (n_heads - 1) / 2) * (SPREAD / n_heads))
    per_seed = d.groupby(["model", "layer", "trial_id"])["distance"].mean().groupby(["model", "layer"])
    layers = (
        d.groupby(["model", "layer"])
        .agg(epoch=("epoch", "max"), x=("x", "first"), distance=("distance", "mean"), n=("distance", "size"))
        .join(per_seed.agg(seeds="size", seed_std="std"))
        .reset_index()
        .assign(kind="layer", trial_id="", seed=np.nan, head=-1)
    )
    out = pd.concat([heads, layers], ignore_index=True)
    out = out.assign(
        model_rank=out["model"].map({m: i for i, m in enumerate(models)}), is_layer=out["kind"] == "layer"
    )
    out = out.sort_values(["model_rank", "layer", "is_layer", "head", "seed", "trial_id"])
    return out.assign(metric=column)[COLUMNS].reset_index(drop=True)


def draw(ctx) -> list:
    d = at_picked_epoch(ctx, KIND, pooled_heads(ctx, KIND, columns=(CANVAS_DISTANCE,)))
    models = model_order(ctx, d["model"])
    metric = distance_metric(d, ctx.trials[ctx.trials["label"].isin(models)])
    return ctx.render(_figure, data(d, models, metric.column), models, metric)


def _figure(ctx, d: pd.DataFrame, models: list[str], metric: DistanceMetric) -> list:
    fig, axes, grid = layer_grid(len(models), variants=True)
    heads = d[d["kind"] == "head"]
    top = max([float(d["distance"].max())] + [v for v, _ in metric.references]) * 1.08
    for ax, model in zip(axes, models):
        h = heads[heads["model"] == model]
        means = d[(d["kind"] == "layer") & (d["model"] == model)]
        seeds = int(means["seeds"].max())
        alpha = 0.85 if seeds == 1 else max(0.25, 0.85 / np.sqrt(seeds))
        ax.scatter(h["x"], h["distance"], s=7, color=DOT, alpha=alpha, linewidths=0, zorder=3)
        ax.errorbar(
            means["x"],
            means["distance"],
            yerr=means["seed_std"].fillna(0.0).to_numpy(),
            fmt="_",
            color="black",
            markersize=12,
            markeredgewidth=1.2,
            capsize=2,
            elinewidth=0.7,
            zorder=4,
        )
        for _, r in means.iterrows():
            ax.annotate(
                f"n={int(r['n'])}",
                (r["x"], 0),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color="0.35",
                xycoords=("data", "axes fraction"),
            )
        lines = reference_lines(ax, metric)
        layers = sorted(int(v) + 1 for v in means["layer"])
        ax.set(xticks=layers, xlim=(min(layers) - 0.6, max(layers) + 0.6))
        epochs = sorted(set(h["epoch"].astype(int)))
        when = after(epochs[0]) if len(epochs) == 1 else f"{after(epochs[0])} to {after(epochs[-1])}"
        panel_title(fig, ax, f"{model} ({seeds} seed{'s' if seeds != 1 else ''}, {when})")
        ax.grid(True, axis="y", linewidth=0.4, alpha=0.5)
    label_grid(grid, xlabel="layer", ylabel=metric.axis)
    axes[0].set_ylim(0, top)
    legend = [
        Line2D([], [], color=DOT, marker="o", linestyle="none", markersize=3, label="one head of one seed"),
        Line2D(
            [],
            [],
            color="black",
            marker="_",
            linestyle="none",
            markersize=10,
            markeredgewidth=1.2,
            label="layer mean (n heads × seeds)",
        ),
        *lines,
    ]
    seeds = d.loc[d["kind"] == "layer", "seeds"]
    noise = d.loc[d["kind"] == "layer", "seed_std"].dropna()
    notes = [
        "dots: every head of every seed (pooled, as head numbers are not matched across seeds; spread "
        "sideways by head number); bar: the layer's "
        "mean over its n heads × seeds"
        + ("; whisker: ± std over seeds of the per-seed layer mean" if (seeds > 1).any() else ""),
        (
            f"seed-to-seed noise of a layer mean: std up to {noise.max():.2f} {metric.unit}"
            if len(noise)
            else "one seed per variant: seed-to-seed noise not measured"
        ),
        metric.note,
    ]
    return finish(
        ctx, fig, models, title="Attention distance per layer", handles=legend, notes=notes, data=d, stem=STEM
    )
