"""Figs. 5/6: attention probabilities, layers × heads, on the stored window (docs/figures.md,
``maps_<model>``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from analysis.concentration import classify, rule_text
from analysis.figures.panels import after, wrap_note
from analysis.style import COLUMN_WIDTH, DOUBLE_WIDTH

KIND = "maps"
SCOPE = "variant"
READS = ("heads", "maps")


def long_form(maps: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, head, x, y) with the stored probability (row-major window:
    y = row shift, x = column shift, both −r..r)."""
    parts = []
    for r in maps.sort_values(["layer", "head"]).itertuples():
        side = int(r.window)
        rad = side // 2
        ys, xs = np.divmod(np.arange(side * side), side)
        parts.append(
            pd.DataFrame(
                {
                    "layer": int(r.layer),
                    "head": int(r.head),
                    "x": xs - rad,
                    "y": ys - rad,
                    "prob": np.asarray(r.probs, dtype=float),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def draw(ctx) -> list:
    written = []
    heads_by = ctx.by_trial("heads")
    for t, rows in ctx.head_trials(KIND, table="maps"):
        epoch = ctx.pick_epoch(rows, KIND, t["label"], "attention maps")
        if epoch is None:
            continue
        m = rows[rows["epoch"] == epoch]
        h = heads_by.get(t["trial_id"])
        h = h[h["epoch"] == epoch] if h is not None else None
        d = long_form(m).merge(_per_head(m, h), on=["layer", "head"], how="left")
        written += ctx.render(_figure, t, epoch, d, window=int(m["window"].iloc[0]))
    return written


def _per_head(maps: pd.DataFrame, heads: pd.DataFrame | None) -> pd.DataFrame:
    """(layer, head) → window_mass, concentrated (without ``heads`` rows, by the window mass alone:
    their entropy taken as 0, which passes its test)."""
    c = classify(maps.assign(entropy=0.0) if heads is None or heads.empty else heads, maps)
    return c[["layer", "head", "window_mass", "concentrated"]].astype({"layer": int, "head": int})


def _figure(ctx, t, epoch: int, d: pd.DataFrame, *, window: int) -> list:
    layers = sorted(d["layer"].unique())
    heads = sorted(d["head"].unique())
    nl, nh = len(layers), len(heads)
    width = min(DOUBLE_WIDTH, max(COLUMN_WIDTH, 0.42 * nh + 0.75))
    caption = wrap_note(ctx.caption([t["trial_id"]]), width)
    left, right, gap, vgap = 0.3, 0.5, 0.04, 0.16  # inches
    top = 0.42 + 0.13 * (caption.count("\n") + 1)
    bottom = 0.62
    cell = (width - left - right - gap * (nh - 1)) / nh
    height = top + bottom + nl * cell + vgap * (nl - 1)
    fig, axes = plt.subplots(nl, nh, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=gap / cell,
        hspace=vgap / cell,
    )
    rad = int(d["x"].max())
    side = 2 * rad + 1
    # one colour scale for the whole figure: exactly the range of the plotted values; equal values
    # (uniform heads) get a scale just around them and one tick at the value, not ticks of a 1e-12 range
    vmin, vmax = float(d["prob"].min()), float(d["prob"].max())
    flat = vmax <= vmin
    pad = 1e-9 * max(abs(vmin), 1e-3) if flat else 0.0
    image = None
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            ax = axes[i, j]
            s = d[(d["layer"] == layer) & (d["head"] == head)]
            img = np.full((side, side), np.nan)
            img[s["y"].to_numpy() + rad, s["x"].to_numpy() + rad] = s["prob"].to_numpy()
            image = ax.imshow(
                img,
                cmap="Blues",
                vmin=vmin - pad,
                vmax=vmax + pad,
                interpolation="nearest",
                extent=(-rad - 0.5, rad + 0.5, rad + 0.5, -rad - 0.5),
            )  # row 0 = y −r at the top
            ax.add_patch(Rectangle((-0.5, -0.5), 1, 1, fill=False, edgecolor="black", linewidth=0.6))
            ax.set(xticks=[], yticks=[])
            concentrated = bool(s["concentrated"].iloc[0]) if len(s) else True
            mass = float(s["window_mass"].iloc[0]) if len(s) else float("nan")
            for spine in ax.spines.values():
                spine.set(
                    linewidth=0.3 if concentrated else 0.8,
                    linestyle="-" if concentrated else (0, (2, 1.5)),
                    edgecolor="black" if concentrated else "0.45",
                )
            ax.set_xlabel(
                f"{100 * mass:.0f}%" + ("" if concentrated else " d"),
                fontsize=7,
                labelpad=1,
                color="black" if concentrated else "0.4",
            )
            if i == 0:
                ax.set_title(f"head {head + 1}" if nh <= 6 else f"h{head + 1}", pad=2, fontsize=7)
            if j == 0:
                ax.set_ylabel(f"layer {layer + 1}" if nh <= 6 else f"L{layer + 1}", fontsize=7, labelpad=2)
    cax = fig.add_axes(
        [1 - (right - 0.08) / width, bottom / height, 0.09 / width, (height - top - bottom) / height]
    )
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("attention probability", fontsize=7, labelpad=2)
    bar.ax.tick_params(labelsize=7)
    if flat:
        bar.set_ticks([vmin], labels=[f"{vmin:.2g}"])
    else:
        bar.formatter.set_useOffset(False)  # probabilities: plain values, never "1e-12 + …"
    images = t.get("head_images")
    images = f"{int(images)} " if images is not None and images == images else ""
    what = (
        f"heads whose attention depends on the image: the mean over {images}test images, a query at the "
        "image centre; purely positional heads: the exact distribution"
    )
    fig.suptitle(f"{t['title']}, {after(epoch)}", y=1 - 0.04 / height, va="top")
    fig.text(0.5, 1 - 0.24 / height, caption, ha="center", va="top", fontsize=7)
    scale = f"all {vmin:.2g}" if flat else f"{vmin:.2g} to {vmax:.2g}"
    note = (
        f"{side}×{side} shifts around the query (outlined), y down; {what}. One colour scale for all "
        f"heads, from the smallest to the largest value shown ({scale}). Under each map: "
        f"the head's attention mass inside the window; 'd', dashed frame: diffuse "
        f"({rule_text(window)})."
    )
    fig.text(0.5, (bottom - 0.2) / height, wrap_note(note, width), ha="center", va="top", fontsize=7)
    return ctx.save_trial(fig, t, d, "maps", epoch=epoch)
