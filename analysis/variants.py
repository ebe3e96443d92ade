"""Model variants and sweep axes of a study, from the ``runs`` table alone (docs/figures.md,
"Variants and seeds")."""

from __future__ import annotations

import re

import pandas as pd

# the labels every command shows (``study status`` too), re-exported for the figures
from study.models.config import PAPER_MODELS  # torch-free
from study.status.variants import column_texts, value_text, variant_labels, varying_columns  # noqa: F401

#: the paper's order of its encodings (its Table 1), as the project records its models
ENCODING_ORDER = tuple(dict.fromkeys(m.encoding for m in PAPER_MODELS.values() if m.arch == "sa"))


def sweep_axes(runs: pd.DataFrame) -> list[str]:
    """The independent axes of a grid sweep, in :data:`study.status.variants.AXIS_ORDER`: not a
    varying column that does not apply to every trial (a '-' value: nested, not crossed)
    nor one that an axis already chosen determines or is determined by."""
    axes: list[str] = []
    for c in varying_columns(runs):
        tc = column_texts(runs, c)
        if (tc == "-").any():
            continue
        if not any(
            _determines(column_texts(runs, a), tc) or _determines(tc, column_texts(runs, a)) for a in axes
        ):
            axes.append(c)
    return axes


def _determines(a: pd.Series, b: pd.Series) -> bool:
    """Each value of ``a`` comes with a single value of ``b``."""
    pairs = pd.DataFrame({"a": a.values, "b": b.values}).drop_duplicates()
    return pairs["a"].is_unique


def order_key(row: pd.Series) -> tuple:
    """Sort key of a variant: ResNet first, then encodings in the paper's order."""
    enc = row.get("encoding")
    enc_i = ENCODING_ORDER.index(enc) if enc in ENCODING_ORDER else len(ENCODING_ORDER)
    num = lambda v: float(v) if v is not None and v == v else -1.0  # noqa: E731
    return (
        row.get("arch") != "resnet18",
        enc_i,
        row.get("isotropic") is not True,
        num(row.get("num_heads")),
        num(row.get("pos_dim")),
        str(row.get("label", "")),
    )


def slug(text: str) -> str:
    """File-name form of a label: 'SA learned+content (N_h=9, D_p=16)' → 'sa-learned-content-nh9-dp16'."""
    s = text.replace("N_h=", "nh").replace("D_p=", "dp").lower()
    s = re.sub(r"[^a-z0-9.]+", "-", s).replace(".", "p")
    return s.strip("-") or "model"


def trial_table(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` sorted by variant then seed, with ``label`` (variant), ``slug`` (unique per trial),
    ``variant_slug`` (unique per label), ``seeds`` and ``representative`` (docs/figures.md,
    "Variants and seeds"; of two middle seeds, the lower)."""
    if runs.empty:
        return runs.assign(
            label=pd.Series(dtype=object),
            slug=pd.Series(dtype=object),
            variant_slug=pd.Series(dtype=object),
            seeds=pd.Series(dtype=int),
            representative=pd.Series(dtype=bool),
        )
    t = runs.copy()
    t["label"] = variant_labels(t)
    t["_key"] = [order_key(r) for _, r in t.iterrows()]
    sort_cols = ["_key"] + (["seed"] if "seed" in t else []) + ["trial_id"]
    t = t.sort_values(sort_cols, kind="stable").drop(columns="_key").reset_index(drop=True)
    slugs = t["label"].map(slug)
    repeated = slugs.duplicated(keep=False)
    if "seed" in t:
        slugs = slugs.where(~repeated, slugs + "-seed" + t["seed"].astype(object).map(value_text))
    repeated = slugs.duplicated(keep=False)
    t["slug"] = slugs.where(~repeated, slugs + "-" + t["trial_id"].astype(str))
    variant_slugs: dict[str, str] = {}
    for label in dict.fromkeys(t["label"]):
        s = slug(str(label))
        while s in variant_slugs.values():
            s += "-v"
        variant_slugs[label] = s
    t["variant_slug"] = t["label"].map(variant_slugs)
    t["seeds"] = t.groupby("label")["trial_id"].transform("count").astype(int)
    acc = pd.to_numeric(t.get("best_test_acc", pd.Series(float("nan"), index=t.index)), errors="coerce")
    t["representative"] = False
    for _, g in t.groupby("label", sort=False):
        known = acc[g.index].dropna().sort_values(kind="stable")  # g is in seed order already
        t.loc[known.index[(len(known) - 1) // 2] if len(known) else g.index[0], "representative"] = True
    return t


def variant_order(trials: pd.DataFrame) -> list[str]:
    """Labels in display order (``trials`` from :func:`trial_table`)."""
    return list(dict.fromkeys(trials["label"]))
