"""Figs. 5/6: attention probabilities of every head (columns) of every layer (rows):
the stored (2r+1)×(2r+1) window of shifts around the query pixel (black outline),
at one epoch (default: the trial's last).  Content attention: the stored average
over the test images of the trial's head statistics.  Each panel has its own colour
scale (0 to the head's largest probability)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from analysis.figures.panels import after, wrap_note
from analysis.style import COLUMN_WIDTH, DOUBLE_WIDTH, save

KIND = "maps"


def long_form(maps: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, head, x, y) with the stored probability (row-major window:
    y = row shift, x = column shift, both −r..r)."""
    parts = []
    for r in maps.sort_values(["layer", "head"]).itertuples():
        side = int(r.window)
        rad = side // 2
        ys, xs = np.divmod(np.arange(side * side), side)
        parts.append(pd.DataFrame({"layer": int(r.layer), "head": int(r.head), "x": xs - rad, "y": ys - rad,
                                   "prob": np.asarray(r.probs, dtype=float)}))
    return pd.concat(parts, ignore_index=True)


def draw(ctx) -> list:
    written = []
    for t, rows in ctx.head_trials(KIND, table="maps"):
        epoch = ctx.pick_epoch(rows)
        if epoch is None:
            ctx.skip(KIND, f"no attention maps at epoch {ctx.epoch}", t["label"])
            continue
        d = long_form(rows[rows["epoch"] == epoch])
        written += _figure(ctx, t, epoch, d)
    return written


def _figure(ctx, t, epoch: int, d: pd.DataFrame) -> list:
    layers = sorted(d["layer"].unique())
    heads = sorted(d["head"].unique())
    nl, nh = len(layers), len(heads)
    width = min(DOUBLE_WIDTH, max(COLUMN_WIDTH, 0.36 * nh + 0.3))
    left, right, top, bottom, gap = 0.28, 0.04, 0.42, 0.36, 0.03  # inches
    cell = (width - left - right - gap * (nh - 1)) / nh
    height = top + bottom + nl * cell + gap * (nl - 1)
    fig, axes = plt.subplots(nl, nh, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                        top=1 - top / height, wspace=gap / cell, hspace=gap / cell)
    rad = int(d["x"].max())
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            ax = axes[i, j]
            s = d[(d["layer"] == layer) & (d["head"] == head)]
            side = 2 * rad + 1
            img = np.zeros((side, side))
            img[s["y"].to_numpy() + rad, s["x"].to_numpy() + rad] = s["prob"].to_numpy()
            vmax = img.max() if img.max() > 0 else 1.0
            ax.imshow(img, cmap="Blues", vmin=0, vmax=vmax, interpolation="nearest",
                      extent=(-rad - 0.5, rad + 0.5, rad + 0.5, -rad - 0.5))  # row 0 = y −r at the top
            ax.add_patch(Rectangle((-0.5, -0.5), 1, 1, fill=False, edgecolor="black", linewidth=0.6))
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_linewidth(0.3)
            if i == 0:
                ax.set_title(f"head {head + 1}" if nh <= 6 else f"h{head + 1}", pad=2, fontsize=7)
            if j == 0:
                ax.set_ylabel(f"layer {layer + 1}" if nh <= 6 else f"L{layer + 1}", fontsize=7, labelpad=2)
    content = t.get("encoding") == "learned_content"
    what = "mean over test images" if content else "positional attention"
    fig.suptitle(f"{t['label']}, {after(epoch)}", y=1 - 0.04 / height, va="top")
    note = (f"{side}×{side} shifts around the query (outlined), y down; {what}; "
            "colour scale per head (0 to its maximum)")
    fig.text(0.5, (bottom - 0.06) / height, wrap_note(note, width), ha="center", va="top", fontsize=7)
    d = d.assign(trial_id=t["trial_id"], model=t["label"], epoch=epoch)
    d = d[["trial_id", "model", "epoch", "layer", "head", "x", "y", "prob"]]
    return save(fig, d, ctx.out, f"maps_{t['slug']}")
