"""Convolution-likeness over training, for layers of N_h = K² heads (K odd): docs/figures.md,
``conv_likeness``."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from analysis.concentration import classify, rule_text
from analysis.figures.panels import layer_line, notes_under_legend, wrap_note
from analysis.lattice import kernel_size, lattice_distance
from analysis.style import COLUMN_WIDTH

KIND = "conv_likeness"
SCOPE = "variant"
READS = ("heads", "maps")


COLUMNS = ["epoch", "epochs_trained", "layer", "K", "concentrated_heads", "lattice_distance", "max_prob_mean"]
#: the plotted data: per (epoch, layer) over the seeds of a variant (one seed: min = max = the value)
SEED_COLUMNS = [
    "epoch",
    "epochs_trained",
    "layer",
    "K",
    "seeds",
    "concentrated_heads",
    "lattice_distance",
    "lattice_distance_min",
    "lattice_distance_max",
    "max_prob_mean",
]


def data(rows: pd.DataFrame, last: int | None = None, maps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (epoch, layer) of one trial: K, concentrated heads, their lattice distance, mean max_prob."""
    d = rows if last is None else rows[rows["epoch"] <= last]
    d = classify(d, maps).sort_values(["epoch", "layer", "head"], kind="stable")
    xy = d[["center_x", "center_y"]].to_numpy(dtype=float)
    conc, max_prob = d["concentrated"].to_numpy(dtype=bool), d["max_prob"].to_numpy(dtype=float)
    out = []
    for (epoch, layer), i in d.groupby(["epoch", "layer"]).indices.items():  # positions: no frame per group
        k = kernel_size(len(i))
        if k is None:
            continue
        c = xy[i][conc[i]]
        out.append(
            {
                "epoch": int(epoch),
                "epochs_trained": int(epoch) + 1,
                "layer": int(layer),
                "K": k,
                "concentrated_heads": len(c),
                "lattice_distance": lattice_distance(c, k),
                "max_prob_mean": float(max_prob[i].mean()),
            }
        )
    return pd.DataFrame(out, columns=COLUMNS)


def over_seeds(per_trial: list[pd.DataFrame]) -> pd.DataFrame:
    """Per (epoch, layer): the seeds' mean lattice distance (over the seeds that have
    one), its min and max, the mean number of concentrated heads and of max_prob."""
    d = pd.concat(per_trial, ignore_index=True)
    g = d.groupby(["epoch", "layer"], sort=True)
    out = g.agg(
        epochs_trained=("epochs_trained", "first"),
        K=("K", "first"),
        seeds=("K", "size"),
        concentrated_heads=("concentrated_heads", "mean"),
        lattice_distance=("lattice_distance", "mean"),
        lattice_distance_min=("lattice_distance", "min"),
        lattice_distance_max=("lattice_distance", "max"),
        max_prob_mean=("max_prob_mean", "mean"),
    ).reset_index()
    return out[SEED_COLUMNS]


def draw(ctx) -> list:
    written = []
    maps_by = ctx.by_trial("maps")
    by_trial = ctx.by_trial("heads")
    for t, ids in ctx.variant_heads(KIND):
        n = max(int(by_trial[tid].groupby(["epoch", "layer"]).size().max()) for tid in ids)
        if kernel_size(n) is None:
            ctx.skip(KIND, f"needs N_h = K² heads with K odd, has {n}", t["label"])
            continue
        per_trial = [
            p for p in (data(by_trial[tid], ctx.epoch, maps_by.get(tid)) for tid in ids) if not p.empty
        ]
        if not per_trial:
            ctx.skip(KIND, f"no head statistics up to epoch {ctx.epoch}", t["label"])
            continue
        written += ctx.render(_figure, t, over_seeds(per_trial), ids)
    return written


def _figure(ctx, t, d: pd.DataFrame, trial_ids: list[str]) -> list:
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.2))
    ax2 = ax.twinx()
    layers = sorted(d["layer"].unique())
    k = int(d["K"].iloc[0])
    few = d["epoch"].nunique() <= 12
    seeds = int(d["seeds"].max())
    for layer in layers:
        s = d[d["layer"] == layer].sort_values("epoch")
        c = layer_line(
            ax,
            layer,
            s["epochs_trained"],
            s["lattice_distance"],
            few=few,
            band=(s["lattice_distance_min"], s["lattice_distance_max"], 0.18) if seeds > 1 else None,
            label=f"layer {layer + 1} ({s['concentrated_heads'].iloc[-1]:.3g}/{k * k})",
        )
        ax2.plot(
            s["epochs_trained"],
            s["max_prob_mean"],
            "--",
            color=c,
            marker="^" if few else None,
            markersize=2.5,
            linewidth=0.8,
        )
    ax.set(xlabel="epochs trained", ylabel=f"distance to {k}×{k} lattice (px)")
    ax2.set(ylabel="mean max. attention prob.", ylim=(0, 1.02))
    ax.set_ylim(bottom=0)
    if d["epochs_trained"].max() <= 12:
        ax.set_xticks(sorted(d["epochs_trained"].unique()))
    ax.set_title(t["title"] + "\n" + wrap_note(ctx.caption(trial_ids), COLUMN_WIDTH), pad=3)
    style = [
        Line2D([], [], color="0.3", linestyle="-", label="distance (left)"),
        Line2D([], [], color="0.3", linestyle="--", linewidth=0.8, label="max prob. (right)"),
    ]
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(
        handles=handles + style,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.22),
        ncol=2 if len(handles) <= 2 else 3,
        title=f"(concentrated heads / all at the last epoch{', mean over the seeds' if seeds > 1 else ''})",
    )
    note = (
        "distance over the concentrated heads only, each to its own lattice point; diffuse heads "
        "excluded; no point: no concentrated head. Centres and max prob.: the canvas moments of one centre "
        "query (heads.center_*, max_prob), not the grid attention distance. "
    )
    if (d["epochs_trained"] == 0).any():
        note += "x = 0: the untrained model. "
    if seeds > 1:
        width = (d["lattice_distance_max"] - d["lattice_distance_min"]).max()
        note += (
            f"Lines: mean over {seeds} seeds (of those with a distance); band: min–max over seeds "
            f"(seed-to-seed noise, up to {width:.2f} px wide). "
        )
    notes_under_legend(fig, [note + rule_text()], ax.get_legend(), gap=0.02)
    return ctx.save_trial(fig, t, d, "conv_likeness", trial_id=trial_ids[0] if len(trial_ids) == 1 else "")
