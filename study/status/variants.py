"""A study's model variants, as every place a user reads one names them (the
end-of-study summary, ``study status``, the analysis tables, figures and report).

A *variant* is a model configuration: trials that differ only in ``seed`` are
repetitions of one variant.  From the ``runs`` table alone (no torch, no Ray).
"""

from __future__ import annotations

import pandas as pd

#: Fields that run the same model and recipe differently (precision, compilation,
#: statistics, evaluation batching) or only say where data came from: not a variant.
EXECUTION_COLUMNS = frozenset(
    {"amp", "compile", "head_stats", "head_images", "map_radius", "map_epochs", "eval_batch_size", "data"}
)

#: Configuration columns that ``runs.name`` already spells out.
NAME_COLUMNS = ("arch", "encoding", "isotropic", "num_heads", "pos_dim")
#: Preferred order of sweep axes (others follow alphabetically).
AXIS_ORDER = NAME_COLUMNS + (
    "hidden",
    "layers",
    "intermediate",
    "lr",
    "momentum",
    "weight_decay",
    "warmup",
    "warmup_epochs",
    "warmup_steps",
    "batch_size",
    "epochs",
)


def value_text(v) -> str:
    """A configuration value as text (missing → '-', 0.05 → '0.05', True → 'True')."""
    if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)


def column_texts(runs: pd.DataFrame, col: str) -> pd.Series:
    """A configuration column as :func:`value_text`."""
    return runs[col].astype(object).map(value_text)


def varying_columns(runs: pd.DataFrame, *, exclude=("seed",)) -> list[str]:
    """Configuration columns (model and training fields only: never bookkeeping, results or the
    ``sampled_*`` copies of searched values) with more than one value across ``runs``, in axis order."""
    from study.trial.config import TrainConfig  # configuration only: no torch

    fields = set(TrainConfig().flat()) - EXECUTION_COLUMNS - set(exclude)
    cols = sorted(
        (c for c in runs.columns if c in fields),
        key=lambda c: (AXIS_ORDER.index(c) if c in AXIS_ORDER else len(AXIS_ORDER), c),
    )
    return [c for c in cols if column_texts(runs, c).nunique() > 1]


def variant_labels(runs: pd.DataFrame, *, within: tuple[str, ...] = ()) -> pd.Series:
    """One label per trial: ``runs.name`` (which says the architecture, encoding, isotropy,
    N_h and D_p) plus the configuration columns other than ``seed`` that differ between
    trials of that name, e.g. ``SA quadratic isotropic (N_h=9), lr=0.05``.  ``within``:
    more columns that vary inside one variant, as ``seed`` does (the end-of-study
    summary passes the axes Optuna sampled: a search in a variant)."""
    if runs.empty:
        return pd.Series([], dtype=object, index=runs.index)
    if "name" not in runs:
        return runs["trial_id"].astype(str)
    base = runs["name"].astype(object).map(value_text)
    labels = base.copy()
    for _, group in runs.groupby(base, sort=False):
        extra = [c for c in varying_columns(group, exclude=("seed", *within)) if c not in NAME_COLUMNS]
        for i in group.index if extra else ():
            labels[i] = f"{base[i]}, " + ", ".join(f"{c}={value_text(runs.at[i, c])}" for c in extra)
    return labels
