"""Convolution-likeness over training, for layers of N_h = K² heads (K odd): per layer,
the mean distance of the head centres to the K×K lattice {−K//2..K//2}² after the
optimal one-to-one assignment (solid, left axis; 0 = the heads sit on a K×K
convolution's taps) and the heads' mean concentration ``max_prob`` (dashed, right
axis; 1 = each head attends one pixel).

Diffuse heads (:mod:`analysis.concentration`) have no meaningful centre: they are
left out of the distance (which is then over the concentrated heads only, each
assigned its own lattice point) and counted; a layer without a concentrated head
has no distance.  The rule is printed under the figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from analysis.concentration import classify, rule_text
from analysis.figures.panels import wrap_note
from analysis.lattice import kernel_size, lattice_distance_of
from analysis.meta import describe
from analysis.style import COLUMN_WIDTH, save

KIND = "conv_likeness"


COLUMNS = ["epoch", "epochs_trained", "layer", "K", "concentrated_heads", "lattice_distance", "max_prob_mean"]


def data(rows: pd.DataFrame, last: int | None = None, maps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (epoch, layer): K, concentrated heads, their lattice distance, mean max_prob."""
    d = rows if last is None else rows[rows["epoch"] <= last]
    if "concentrated" not in d:
        d = classify(d, maps)
    out = []
    for (epoch, layer), g in d.groupby(["epoch", "layer"]):
        k = kernel_size(len(g))
        if k is None:
            continue
        c = g[g["concentrated"].astype(bool)]
        out.append({"epoch": int(epoch), "epochs_trained": int(epoch) + 1, "layer": int(layer), "K": k,
                    "concentrated_heads": len(c),
                    "lattice_distance": lattice_distance_of(c[["center_x", "center_y"]].to_numpy(), k),
                    "max_prob_mean": float(g["max_prob"].mean())})
    return pd.DataFrame(out, columns=COLUMNS)


def draw(ctx) -> list:
    written = []
    maps = ctx.study.maps
    maps_by = dict(tuple(maps.groupby("trial_id"))) if not maps.empty else {}
    for t, rows in ctx.head_trials(KIND):
        n = int(rows.groupby(["epoch", "layer"]).size().max())
        if kernel_size(n) is None:
            ctx.skip(KIND, f"needs N_h = K² heads with K odd, has {n}", t["label"])
            continue
        d = data(rows, ctx.epoch, maps_by.get(t["trial_id"]))
        if d.empty:
            ctx.skip(KIND, f"no head statistics up to epoch {ctx.epoch}", t["label"])
            continue
        written += _figure(ctx, t, d)
    return written


def _figure(ctx, t, d: pd.DataFrame) -> list:
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.2))
    ax2 = ax.twinx()
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    layers = sorted(d["layer"].unique())
    k = int(d["K"].iloc[0])
    few = d["epoch"].nunique() <= 12
    for layer in layers:
        s = d[d["layer"] == layer].sort_values("epoch")
        c = palette[layer % len(palette)]
        ax.plot(s["epochs_trained"], s["lattice_distance"], "-", color=c, marker="o" if few else None,
                markersize=2.5, label=f"layer {layer + 1} ({int(s['concentrated_heads'].iloc[-1])}/{k * k})")
        ax2.plot(s["epochs_trained"], s["max_prob_mean"], "--", color=c, marker="^" if few else None,
                 markersize=2.5, linewidth=0.8)
    ax.set_xlabel("epochs trained")
    ax.set_ylabel(f"distance to {k}×{k} lattice (px)")
    ax2.set_ylabel("mean max. attention prob.")
    ax.set_ylim(bottom=0)
    ax2.set_ylim(0, 1.02)
    if d["epochs_trained"].max() <= 12:
        ax.set_xticks(sorted(d["epochs_trained"].unique()))
    ax.set_title(t["label"] + "\n" + wrap_note(describe(ctx.trials[ctx.trials["trial_id"] == t["trial_id"]]),
                                               COLUMN_WIDTH), pad=3)
    style = [Line2D([], [], color="0.3", linestyle="-", label="distance (left)"),
             Line2D([], [], color="0.3", linestyle="--", linewidth=0.8, label="max prob. (right)")]
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + style, loc="upper center", bbox_to_anchor=(0.5, -0.22),
              ncol=2 if len(handles) <= 2 else 3, title="(concentrated heads / all at the last epoch)")
    note = ("distance over the concentrated heads only, each to its own lattice point; diffuse heads "
            "excluded; no point: no concentrated head. " + rule_text())
    fig.canvas.draw()  # place the note under the legend, wherever it ended
    box = ax.get_legend().get_window_extent().transformed(fig.transFigure.inverted())
    fig.text(0.5, box.y0 - 0.02, wrap_note(note, COLUMN_WIDTH), ha="center", va="top", fontsize=7)
    d = d.assign(trial_id=t["trial_id"], model=t["label"])
    d = d[["trial_id", "model", *COLUMNS]]
    return save(fig, d, ctx.out, f"conv_likeness_{t['slug']}")
