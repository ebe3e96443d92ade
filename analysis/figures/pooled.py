"""Head statistics of every trial with its variant and seed, for the figures that pool
the seeds of a variant, and the legend and notes under their panels (:func:`finish`).

Head numbers are not matched across seeds, so per-head values are pooled, never averaged
head by head; seed-to-seed noise is measured on per-seed layer means."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.figures.context import Skip
from analysis.figures.panels import notes_under_legend
from analysis.lattice import lattice
from study.theory.locality import conv_attention_distance, uniform_attention_distance  # numpy only

#: E‖δ‖ over the 9 taps of a 3×3 convolution's lattice for an interior query:
#: (4·1 + 4·√2)/9 ≈ 1.07 px (the reference of the canvas moment ``mean_distance``)
CONV3_DISTANCE = float(np.linalg.norm(lattice(3), axis=1).mean())

#: the grid locality column of the ``heads`` table, and the canvas moment that studies
#: written before it existed are drawn with instead (the figure says so)
GRID_DISTANCE = "attention_distance"
CANVAS_DISTANCE = "mean_distance"


@dataclass(frozen=True)
class DistanceMetric:
    """Which distance a locality figure shows, its reference lines on the same scale
    ((value, legend label) pairs) and the sentence under the figure that says so."""

    column: str
    unit: str
    axis: str
    references: tuple[tuple[float, str], ...]
    note: str


def distance_metric(d: pd.DataFrame, trials: pd.DataFrame) -> DistanceMetric:
    """The grid locality (``attention_distance``) when every row of ``d`` has it; else (a
    study written before the column) the canvas moment ``mean_distance``, the figure saying so."""
    if GRID_DISTANCE in d and d[GRID_DISTANCE].notna().all():
        h, w = token_grid(trials)
        uniform, conv = uniform_attention_distance(h, w), conv_attention_distance(h, w)
        return DistanceMetric(
            column=GRID_DISTANCE,
            unit="cells",
            axis="mean attention distance (grid cells)",
            references=(
                (uniform, f"uniform attention ({uniform:.2f})"),
                (conv, f"3×3 convolution's taps ({conv:.2f})"),
            ),
            note=(
                f"attention distance: Σ_k P[q,k]·‖p_k − p_q‖ in cells of the {h}×{w} token grid, "
                f"averaged "
                "over every query of the head-statistics test images on the real grid "
                "(heads.attention_distance, the same for every encoding); dashed: uniform attention on "
                f"the grid ({uniform:.2f}); dotted: a 3×3 convolution's taps inside the grid, averaged over "
                f"every query ({conv:.2f})"
            ),
        )
    return DistanceMetric(
        column=CANVAS_DISTANCE,
        unit="px",
        axis="centre-query E‖δ‖ (px, canvas)",
        references=((CONV3_DISTANCE, f"3×3 convolution's taps ({CONV3_DISTANCE:.2f} px)"),),
        note=(
            "this study predates heads.attention_distance: shown is the canvas moment heads.mean_distance, "
            "E‖δ‖ of ONE centre query (positional heads: an unclipped canvas of shifts, uniform = 11.86 "
            "px; "
            "content heads: the grid's centre token, uniform = 6.14 px), not comparable across encodings; "
            f"dotted: a 3×3 convolution's taps, (4 + 4√2)/9 = {CONV3_DISTANCE:.2f} px"
        ),
    )


def reference_lines(ax, metric: DistanceMetric) -> list:
    """The metric's reference lines on ``ax`` (the convolution's dotted, uniform dashed),
    labelled: they are their own legend handles."""
    styles = ("--", ":")[-len(metric.references) :]
    return [
        ax.axhline(value, color="0.3", linestyle=style, linewidth=0.8, zorder=1, label=label)
        for (value, label), style in zip(metric.references, styles)
    ]


def token_grid(trials: pd.DataFrame) -> tuple[int, int]:
    """The token grid (rows, columns) of the trials: image_size / downsample (16×16 for
    studies whose runs table lacks them: the paper's 32×32 images, 2×2 blocks)."""
    grid = trials.reindex(columns=["image_size", "downsample"])  # absent columns: NaN
    sides = {int(s) // int(b) if pd.notna(s) and pd.notna(b) else 16 for s, b in grid.itertuples(index=False)}
    if len(sides) > 1:
        raise Skip(
            f"trials on different token grids ({', '.join(map(str, sorted(sides)))}): one figure cannot "
            "share their reference lines"
        )
    side = sides.pop() if sides else 16
    return side, side


def pooled_heads(ctx, kind: str, *, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """``heads`` rows of every trial with attention heads, with ``model`` (the variant's
    label), ``seed`` and ``epochs_trained``; ``columns`` must exist (else :class:`Skip`)."""
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
        epoch = ctx.pick_epoch(rows, kind, f"{rows['model'].iloc[0]} ({tid})")
        if epoch is not None:
            keep.append(rows[rows["epoch"] == epoch])
    if not keep:
        raise Skip(f"no head statistics at epoch {ctx.epoch}")
    return pd.concat(keep, ignore_index=True)


def model_order(ctx, models) -> list[str]:
    """``models`` in the display order of the variants."""
    order = {m: i for i, m in enumerate(dict.fromkeys(ctx.trials["label"]))}
    return sorted(dict.fromkeys(models), key=lambda m: order.get(m, len(order)))


def finish(
    ctx,
    fig,
    models: list[str],
    *,
    title: str,
    handles: list,
    notes: list[str],
    data: pd.DataFrame,
    stem: str,
    ncol: int = 4,
) -> list:
    """Save a figure of one panel per variant: its title, one legend under the panels and
    the notes under that (the variants' data first)."""
    fig.suptitle(title, y=1.0)
    fig.tight_layout(pad=0.3)
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(ncol, len(handles)),
        frameon=False,
    )
    notes_under_legend(fig, [ctx.caption(models, by="label"), *notes])
    return ctx.save(fig, data, stem)
