"""Locality over training: per layer, the mean attention distance of its heads
(:func:`~analysis.figures.pooled.distance_metric`) from initialisation (x = 0: the
untrained model's ``epoch = -1`` rows) epoch after epoch, one panel per model variant."""

from __future__ import annotations

import pandas as pd

from analysis.figures.panels import label_grid, layer_grid, layer_line, panel_title
from analysis.figures.pooled import (
    CANVAS_DISTANCE,
    DistanceMetric,
    distance_metric,
    finish,
    model_order,
    pooled_heads,
    reference_lines,
)

KIND = "locality"
READS = ("heads",)
STEM = "locality_over_training"

#: the keys of a :func:`layer_series` row; ``epoch`` -1 (0 epochs trained) is the untrained model
SERIES_KEYS = ["model", "epoch", "epochs_trained", "layer", "seeds", "n"]
#: ``distance``: the layer mean of the heads column named in ``metric``
COLUMNS = [*SERIES_KEYS, "distance", "metric", "seed_min", "seed_max"]


def layer_series(d: pd.DataFrame, value: str, models: list[str]) -> pd.DataFrame:
    """Per (model, epoch, layer) of heads rows ``d``: the mean of ``value`` over the layer's
    heads and seeds (n values), the min / max over seeds of the per-seed layer mean and over
    the heads of all seeds (head_min, head_max)."""
    per_seed = (
        d.groupby(["model", "epoch", "layer", "trial_id"], sort=False)[value]
        .agg(["mean", "count", "sum", "min", "max"])
        .reset_index()
    )
    g = per_seed.groupby(["model", "epoch", "layer"], sort=False)
    out = g.agg(
        seeds=("trial_id", "count"),
        n=("count", "sum"),
        total=("sum", "sum"),
        seed_min=("mean", "min"),
        seed_max=("mean", "max"),
        head_min=("min", "min"),
        head_max=("max", "max"),
    ).reset_index()
    out[value] = out["total"] / out["n"]
    out = out.astype({"epoch": int, "layer": int})
    out["epochs_trained"] = out["epoch"] + 1
    rank = {m: i for i, m in enumerate(models)}
    out = out.assign(model_rank=out["model"].map(rank)).sort_values(["model_rank", "layer", "epoch"])
    out = out.drop(columns=["model_rank", "total"])
    return out.reset_index(drop=True)


def over_training(
    ctx,
    s: pd.DataFrame,
    models: list[str],
    value: str,
    *,
    band,
    ylabel: str,
    ylim: tuple,
    title: str,
    notes: list[str],
    stem: str,
    ncol: int = 4,
    metric: DistanceMetric | None = None,
) -> list:
    """One panel per variant of :func:`layer_series` rows ``s``: a line per layer of ``value``,
    ``band(panel rows)`` (``(low column, high column, alpha)`` or None) around it, and the
    ``metric``'s reference lines; saved by :func:`~analysis.figures.pooled.finish`."""
    fig, axes, grid = layer_grid(len(models), variants=True)
    for ax, model in zip(axes, models):
        m = s[s["model"] == model]
        seeds, bounds = int(m["seeds"].max()), band(m)
        for layer, g in m.groupby("layer"):
            shade = None if bounds is None else (g[bounds[0]], g[bounds[1]], bounds[2])
            layer_line(ax, int(layer), g["epochs_trained"], g[value], few=len(g) <= 12, band=shade)
        heads = int((m["n"] / m["seeds"]).max())
        panel_title(
            fig, ax, model, f"\nn = {seeds} seed{'s' if seeds != 1 else ''} × {heads} heads per point"
        )
        if m["epochs_trained"].max() <= 12:
            ax.set_xticks(sorted(m["epochs_trained"].unique()))
        ax.grid(True, linewidth=0.4, alpha=0.5)
        if metric is not None:
            reference_lines(ax, metric)
    label_grid(grid, xlabel="epochs trained", ylabel=ylabel)
    axes[0].set_ylim(*ylim)
    handles = max(axes, key=lambda ax: len(ax.get_lines())).get_legend_handles_labels()[
        0
    ]  # layers, references
    return finish(ctx, fig, models, title=title, handles=handles, notes=notes, data=s, stem=stem, ncol=ncol)


def draw(ctx) -> list:
    d = pooled_heads(ctx, KIND, columns=(CANVAS_DISTANCE,))
    if ctx.epoch is not None:
        d = d[d["epoch"] <= ctx.epoch]
    models = model_order(ctx, d["model"])
    metric = distance_metric(d, ctx.trials[ctx.trials["label"].isin(models)])
    s = layer_series(d, metric.column, models).rename(columns={metric.column: "distance"})
    return ctx.render(_figure, s.assign(metric=metric.column)[COLUMNS], models, metric)


def _figure(ctx, s: pd.DataFrame, models: list[str], metric: DistanceMetric) -> list:
    top = max([float(s[["distance", "seed_max"]].max().max())] + [v for v, _ in metric.references]) * 1.08
    multi = (s["seeds"] > 1).any()
    spread = (s["seed_max"] - s["seed_min"])[s["seeds"] > 1]
    start = (
        "x = 0: the untrained model"
        if (s["epochs_trained"] == 0).any()
        else "no initialisation rows in this study: the lines start after the first epoch"
    )
    notes = [
        "line: the layer's mean over its heads and the variant's seeds"
        + ("; band: min–max over seeds of the per-seed layer mean" if multi else "")
        + f"; {start}",
        (
            f"seed-to-seed noise: the band is up to {spread.max():.2f} {metric.unit} wide"
            if multi
            else "one seed per variant: seed-to-seed noise not measured"
        ),
        metric.note,
    ]
    return over_training(
        ctx,
        s,
        models,
        "distance",
        ylabel=metric.axis,
        ylim=(0, top),
        metric=metric,
        band=lambda m: ("seed_min", "seed_max", 0.18) if int(m["seeds"].max()) > 1 else None,
        title="Locality over training: mean attention distance per layer",
        notes=notes,
        stem=STEM,
    )
