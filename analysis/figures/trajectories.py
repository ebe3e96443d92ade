"""Head-centre trajectories: for each layer (panel), a line per head through its mean
shift (center_x, center_y) epoch after epoch; a hollow circle at the first epoch, a
filled one at the last (up to --epoch when given)."""

from __future__ import annotations

import pandas as pd

from analysis.figures.panels import after, label_grid, layer_grid, limit, number_head, shift_axes, wrap_note
from analysis.style import head_colors

KIND = "trajectories"
SCOPE = "variant"
READS = ("heads",)


def data(rows: pd.DataFrame, last: int | None) -> pd.DataFrame:
    d = rows if last is None else rows[rows["epoch"] <= last]
    return (
        d[["layer", "head", "epoch", "center_x", "center_y"]]
        .sort_values(["layer", "head", "epoch"])
        .reset_index(drop=True)
    )


def draw(ctx) -> list:
    written = []
    for t, rows in ctx.head_trials(KIND):
        d = data(rows, ctx.epoch)
        if d["epoch"].nunique() < 2:
            ctx.skip(KIND, "needs head statistics of at least 2 epochs", t["label"])
            continue
        written += ctx.render(_figure, t, d)
    return written


def _figure(ctx, t, d: pd.DataFrame) -> list:
    layers = sorted(d["layer"].unique())
    fig, axes, grid = layer_grid(len(layers))
    colours = head_colors(int(d["head"].max()) + 1)
    lim = limit(list(d["center_x"]) + list(d["center_y"]))
    first, last = int(d["epoch"].min()), int(d["epoch"].max())
    for ax, layer in zip(axes, layers):
        for head, s in d[d["layer"] == layer].groupby("head"):
            c = colours[head]
            ax.plot(s["center_x"], s["center_y"], "-", color=c, linewidth=0.8)
            # a ring at the start, larger than the dot at the end: both show when a head barely moves
            ax.plot(
                s["center_x"].iloc[:1],
                s["center_y"].iloc[:1],
                "o",
                markerfacecolor="none",
                markeredgecolor=c,
                markersize=5,
                markeredgewidth=0.7,
            )
            ax.plot(s["center_x"].iloc[-1:], s["center_y"].iloc[-1:], "o", color=c, markersize=2.5)
            number_head(ax, head, s["center_x"].iloc[-1], s["center_y"].iloc[-1], c)
        shift_axes(ax, lim)
        ax.set_title(f"layer {layer + 1}", pad=2)
    label_grid(grid)
    fig.suptitle(
        f"{t['title']}\nhead centres {after(first)} (○) to {after(last)} (●), numbered by head\n"
        f"{wrap_note(ctx.caption([t['trial_id']]), fig.get_size_inches()[0])}",
        y=1.1,
        fontsize=7,
    )
    return ctx.save_trial(fig, t, d, "trajectories")
