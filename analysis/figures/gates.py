"""Gates over training (ConViT, d'Ascoli et al. 2021, Fig. 5): docs/figures.md, ``gates_over_training``."""

from __future__ import annotations

import pandas as pd

from analysis.figures.context import Skip
from analysis.figures.locality import SERIES_KEYS, layer_series, over_training
from analysis.figures.pooled import model_order, pooled_heads

KIND = "gates"
READS = ("heads",)
STEM = "gates_over_training"

COLUMNS = [*SERIES_KEYS, "gate", "head_min", "head_max", "seed_min", "seed_max"]


def draw(ctx) -> list:
    d = pooled_heads(ctx, KIND, columns=("gate",))
    d = d.assign(gate=pd.to_numeric(d["gate"], errors="coerce"))
    if ctx.epoch is not None:
        d = d[d["epoch"] <= ctx.epoch]
    gated = d.groupby("model")["gate"].apply(lambda g: g.notna().any())
    models = model_order(ctx, gated.index[gated])
    if not models:
        raise Skip("no gated heads (heads.gate is null in every row)")
    for model in model_order(ctx, gated.index[~gated]):
        ctx.skip(KIND, "no gated heads (gate is null)", model)
    d = d[d["model"].isin(models) & d["gate"].notna()]
    return ctx.render(_figure, layer_series(d, "gate", models)[COLUMNS], models)


def _figure(ctx, s: pd.DataFrame, models: list[str]) -> list:
    multi = s["seeds"] > 1
    spread = (s["seed_max"] - s["seed_min"])[multi]
    notes = [
        "gate σ(λ_h): weight of the positional softmax of a gated head (1 positional, 0 content); line: "
        "mean "
        "over the layer's heads and the variant's seeds; band: min–max over the layer's heads of all seeds",
        (
            f"seed-to-seed noise: the per-seed layer means differ by up to {spread.max():.2f}"
            if multi.any()
            else "one seed per variant: seed-to-seed noise not measured"
        ),
    ]
    return over_training(
        ctx,
        s,
        models,
        "gate",
        band=lambda m: ("head_min", "head_max", 0.15),
        ylabel="gate σ(λ_h)",
        ylim=(-0.02, 1.02),
        title="Gates over training",
        notes=notes,
        stem=STEM,
        ncol=6,
    )
