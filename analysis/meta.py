"""What every figure and Table 1 says about the data behind it: data source, subset,
training / validation / test sizes, epochs and seeds — read from ``runs`` columns,
with a graceful fallback for older tables that lack a column."""

from __future__ import annotations

import math
import re

import pandas as pd

from study.status.bookkeeping import did_not_train


def data_label(data: str | None) -> str:
    """A reader's name for a data source: ``CIFAR-10``, ``CIFAR-10 (JPEG copy)`` (the
    JPEG re-encoded archive ``cifar10-jpeg.tar.gz``, whose accuracies sit a little below the
    original's), ``synthetic data`` or ``image folder NAME``."""
    if data is None or (isinstance(data, float) and math.isnan(data)) or not str(data):
        return "data not recorded"
    text = str(data)
    if text == "synthetic" or text.startswith("synthetic:"):
        return "synthetic data"
    if text == "cifar10" or text.startswith("cifar10:"):
        return "CIFAR-10"
    base = re.split(r"[\\/]", text.rstrip("/\\"))[-1].lower()
    if "cifar" in base and ("jpeg" in base or "jpg" in base):
        return "CIFAR-10 (JPEG copy)"
    if "cifar-10" in base or "cifar10" in base:
        return "CIFAR-10 (image folder)"
    name = re.sub(r"\.(tar\.gz|tgz|tar\.bz2|tar\.xz|tar)$", "", base)
    return f"image folder {name}"


def _values(runs: pd.DataFrame, col: str) -> list:
    if col not in runs:
        return []
    return sorted(
        {v for v in runs[col].tolist() if v is not None and not (isinstance(v, float) and math.isnan(v))},
        key=str,
    )


def _ints(values: list) -> str:
    return "/".join(f"{int(v):,}" for v in values)


def describe(runs: pd.DataFrame) -> str:
    """One line: data; subset; train/val/test sizes; epochs; seeds, e.g.
    ``CIFAR-10 (JPEG copy), subset 1,000: train 900 / val 100 / test 200; 300 epochs; seeds 0–2``."""
    if runs is None or runs.empty:
        return ""
    data = " + ".join(data_label(d) for d in (_values(runs, "data") or [None]))
    parts = [data]
    subsets = _values(runs, "subset")
    sizes = [
        f"{word} {_ints(v)}"
        for col, word in (("n_train", "train"), ("n_val", "val"), ("n_test", "test"))
        if (v := _values(runs, col)) and not (col == "n_val" and v == [0])
    ]
    if "n_test" not in runs:
        sizes.append("test size not recorded")
    head = f"subset {_ints(subsets)}" if subsets else "all images"
    parts.append(head + (": " + " / ".join(sizes) if sizes else ""))
    epochs = _values(runs, "epochs")
    if epochs:
        parts.append(f"{_ints(epochs)} epoch{'' if epochs == [1] else 's'}")
    s = sorted(int(v) for v in _values(runs, "seed"))  # 'seed 0', 'seeds 0–2', 'seeds 0, 3, 7'
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        parts.append(f"seeds {s[0]}–{s[-1]}")
    else:
        parts.append(
            f"seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}" if s else "seeds not recorded"
        )
    failed = int(did_not_train(runs).sum())
    if failed:
        parts.append(
            f"DID NOT TRAIN: {failed} of {len(runs)} trial{'s' if len(runs) > 1 else ''} at chance or "
            "diverging after the warm-up (runs.failed_to_train), not results"
        )
    return "; ".join(parts)


def test_sizes(runs: pd.DataFrame) -> list[int]:
    """Distinct test-set sizes of the trials (empty when not recorded)."""
    return [int(v) for v in _values(runs, "n_test")]


def selection_note(runs: pd.DataFrame) -> str | None:
    """A sentence when the study selected trials on the test set (it asked to)."""
    metric = _values(runs, "selection_metric")
    if any(str(m).startswith("test") for m in metric):
        return "Trials were selected on the TEST set (the study file asked: scheduler.metric: test_acc)."
    if metric:
        return f"Trials were selected on a validation split held out from the training images ({metric[0]})."
    return None
