"""Figs. 4/12/14: each head's centre and its 50 % / 90 % contour, one panel per layer, at one epoch
(docs/figures.md, ``heads_<model>``); Gaussian heads' ellipses are of Σ = (Σ⁻¹ as trained)⁻¹."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import patheffects

from analysis.concentration import classify, rule_text
from analysis.contours import LEVELS, gaussian_ellipse, window_contours
from analysis.figures.panels import after, label_grid, layer_grid, limit, number_head, shift_axes, wrap_note
from analysis.figures.pooled import GRID_DISTANCE
from analysis.style import head_colors

KIND = "heads"
SCOPE = "variant"
READS = ("heads", "maps")
STYLE = {0.5: "-", 0.9: ":"}
PARAMS = ("param_inv_cov_xx", "param_inv_cov_xy", "param_inv_cov_yy")
MAX_CURVES = 3  # a mass region bounded by more curves (pieces, holes) is diffuse: not drawn


def ellipse_head(r) -> bool:
    """A head whose attention is the Gaussian of its stored Σ⁻¹ (all ``param_inv_cov_*``
    set) and nothing else: not a gated head (a non-null ``gate`` mixes the positional
    softmax with content attention, so Σ describes only one of the two parts)."""
    return all(pd.notna(getattr(r, k, None)) for k in PARAMS) and not pd.notna(getattr(r, "gate", None))


def curves(heads: pd.DataFrame, maps: pd.DataFrame | None) -> tuple[pd.DataFrame, dict]:
    """Plotted coordinates of one trial at one epoch: rows (layer, head, kind, level,
    path, x, y) with kind 'center' or 'contour' (or 'diffuse': the head is not drawn,
    x and y are NaN); and the number of contours not drawn, per (level, reason): the
    window holds less mass, or the region is scattered.  ``heads`` may carry a
    ``concentrated`` column (:func:`analysis.concentration.classify`)."""
    rows: list[dict] = []
    missing: dict[tuple[float, str], int] = {}
    windows = (
        {}
        if maps is None
        else {(int(r.layer), int(r.head)): (int(r.window), r.probs) for r in maps.itertuples()}
    )
    for r in heads.sort_values(["layer", "head"]).itertuples():
        key = (int(r.layer), int(r.head))
        base = {"layer": key[0], "head": key[1]}
        if not getattr(r, "concentrated", True):
            rows.append({**base, "kind": "diffuse", "level": np.nan, "path": 0, "x": np.nan, "y": np.nan})
            continue
        rows.append({**base, "kind": "center", "level": np.nan, "path": 0, "x": r.center_x, "y": r.center_y})
        inv = tuple(getattr(r, k, np.nan) for k in PARAMS)
        gaussian = ellipse_head(r)
        for p in LEVELS:
            paths, why = [], ""
            if gaussian:
                ell = gaussian_ellipse((r.center_x, r.center_y), inv, p)
                paths, why = ([ell], "") if ell is not None else ([], "Σ not positive definite")
            elif key in windows:
                side, probs = windows[key]
                paths = window_contours(probs, side, p)
                if not paths:
                    why = "the window holds less mass"
                elif len(paths) > MAX_CURVES:
                    paths, why = [], f"scattered, > {MAX_CURVES} curves"
            else:
                why = "no attention map"
            if why:
                missing[(p, why)] = missing.get((p, why), 0) + 1
            for j, (xs, ys) in enumerate(paths):
                rows += [
                    {**base, "kind": "contour", "level": p, "path": j, "x": x, "y": y} for x, y in zip(xs, ys)
                ]
    return pd.DataFrame(rows, columns=["layer", "head", "kind", "level", "path", "x", "y"]), missing


def draw(ctx) -> list:
    written = []
    maps_by = ctx.by_trial("maps")
    for t, rows in ctx.head_trials(KIND):
        epoch = ctx.pick_epoch(rows, KIND, t["label"])
        if epoch is None:
            continue
        m = maps_by.get(t["trial_id"])
        m = m[m["epoch"] == epoch] if m is not None and (m["epoch"] == epoch).any() else None
        h = classify(rows[rows["epoch"] == epoch], m)
        d, missing = curves(h, m)
        ellipses = [ellipse_head(r) for r in h[h["concentrated"]].itertuples()]
        locality = (
            h.groupby("layer")[GRID_DISTANCE].mean().to_dict()
            if GRID_DISTANCE in h and h[GRID_DISTANCE].notna().all()
            else {}
        )
        gaussian = True if ellipses and all(ellipses) else False if not any(ellipses) else None  # None: mixed
        written += ctx.render(
            _figure,
            t,
            epoch,
            d,
            missing,
            gaussian=gaussian,
            n_heads=int(h["head"].nunique()),
            locality=locality,
            window=int(m["window"].iloc[0]) if m is not None else None,
        )
    return written


def _figure(
    ctx,
    t,
    epoch: int,
    d: pd.DataFrame,
    missing: dict,
    *,
    gaussian: bool | None,
    n_heads: int,
    window: int | None,
    locality: dict,
) -> list:
    layers = sorted(d["layer"].unique())
    fig, axes, grid = layer_grid(len(layers))
    colours = head_colors(max(n_heads, int(d["head"].max()) + 1))
    centres = d[d["kind"] == "center"]
    inner = d[(d["kind"] == "contour") & ((d["level"] == 0.5) | (gaussian is not True))]  # within the window
    lim = limit(list(centres["x"]) + list(centres["y"]) + list(inner["x"]) + list(inner["y"]))
    for ax, layer in zip(axes, layers):
        dl = d[d["layer"] == layer]
        for (head, level, _path), c in dl[dl["kind"] == "contour"].groupby(["head", "level", "path"]):
            ax.plot(c["x"], c["y"], STYLE[level], color=colours[head], linewidth=0.8 if level == 0.5 else 0.7)
        cl = dl[dl["kind"] == "center"]
        ax.scatter(
            cl["x"],
            cl["y"],
            c=[colours[h] for h in cl["head"]],
            s=9,
            zorder=6,
            edgecolors="white",
            linewidths=0.3,
        )
        for _, c in cl.iterrows():
            halo = [patheffects.withStroke(linewidth=1.5, foreground="white")]
            number_head(ax, c["head"], c["x"], c["y"], colours[int(c["head"])], zorder=7, path_effects=halo)
        diffuse = sorted(int(h) + 1 for h in dl.loc[dl["kind"] == "diffuse", "head"])
        if diffuse:
            ax.text(
                0.02,
                0.02,
                "diffuse: " + ",".join(map(str, diffuse)),
                transform=ax.transAxes,
                fontsize=7,
                color="0.35",
                va="bottom",
                ha="left",
                wrap=True,
            )
        shift_axes(ax, lim)
        dist = locality.get(layer)
        ax.set_title(f"layer {layer + 1}" + (f"\ndistance {dist:.2f}" if dist is not None else ""), pad=2)
    label_grid(grid)
    fig.suptitle(f"{t['title']}, {after(epoch)}", y=1.0)
    kind = {
        True: "ellipses of Σ (Gaussian heads)",
        False: "mass contours of the attention map",
        None: "ellipses of Σ for Gaussian heads, mass contours of the attention map for the others",
    }[gaussian]
    notes = [
        ctx.caption([t["trial_id"]]),
        f"dots: centres of concentrated heads (numbered); 50 % solid, 90 % dotted: {kind}; ■ query",
        rule_text(window) + " (listed as 'diffuse', not drawn)",
        "centres and contours: the attention of one centre query (canvas moments)"
        + (
            "; distance in the titles: the layer's mean attention distance over every query of the test "
            "images on the real grid, grid cells (heads.attention_distance)"
            if locality
            else ""
        ),
    ]
    gone = []
    for why in dict.fromkeys(w for _, w in missing):
        levels = [
            f"{int(p * 100)} % of {n} head{'s' if n != 1 else ''}"
            for (p, w), n in missing.items()
            if w == why
        ]
        gone.append(f"{', '.join(levels)} ({why})")
    if gone:
        notes.append("not drawn: " + "; ".join(gone))
    width = fig.get_size_inches()[0]
    fig.text(0.5, -0.01, "\n".join(wrap_note(n, width) for n in notes), ha="center", va="top", fontsize=7)
    return ctx.save_trial(fig, t, d, "heads", epoch=epoch)
