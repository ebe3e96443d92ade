"""The paper's published Table 1 (Cordonnier et al., ICLR 2020, "On the Relationship
between Self-Attention and Convolutional Layers"), as data, and which ``runs`` rows
it may be set beside (docs/figures.md, "Beside the paper").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.meta import data_label
from study.models.config import PAPER_MODELS
from study.models.cost import config_from_row

#: The paper's data and budget: full CIFAR-10, 300 epochs.
PAPER_EPOCHS = 300
PAPER_TRAIN_IMAGES = 50_000
PAPER_TEST_IMAGES = 10_000

#: Sizes every attention model of Table 1 shares (docs/design.md §3): D = 400, 6 layers,
#: feed-forward 512, N_h = 9, 2×2 space-to-depth of 32×32×3 images.
SA_SIZES = {
    "hidden": 400,
    "layers": 6,
    "intermediate": 512,
    "num_heads": 9,
    "downsample": 2,
    "image_size": 32,
    "in_channels": 3,
    "num_classes": 10,
}


@dataclass(frozen=True)
class Published:
    """One model of the paper's Table 1, as printed."""

    model: str  # the paper's name
    accuracy: float  # test accuracy, fraction
    params: float  # parameters
    flops: float  # FLOPs per image as printed (multiply-adds)
    config: dict  # the configuration fields (``runs`` columns) that identify it


#: the configuration fields (``runs`` columns) that identify a Table 1 model
_IDENTITY = ("arch", "encoding", "isotropic", "pos_dim", "positional_score", *SA_SIZES)


def _identity(key: str) -> dict:
    """The identifying fields of ``study.models.PAPER_MODELS[key]`` that apply to it."""
    cfg = PAPER_MODELS[key].to_dict()
    keys = _IDENTITY if cfg["arch"] == "sa" else ("arch", "image_size", "in_channels", "num_classes")
    return {k: cfg[k] for k in keys if cfg.get(k) is not None}


#: Table 1, as published.
TABLE1: tuple[Published, ...] = (
    Published("ResNet18", 0.938, 11.2e6, 0.56e9, _identity("resnet18")),
    Published("SA quadratic emb.", 0.938, 12.1e6, 6.2e9, _identity("sa_quadratic")),
    Published("SA learned emb.", 0.918, 12.3e6, 6.2e9, _identity("sa_learned")),
    Published("SA learned emb. + content", 0.871, 29.5e6, 15.1e9, _identity("sa_learned_content")),
)


def _missing(v: Any) -> bool:
    return v is None or (not isinstance(v, (list, tuple, dict)) and bool(pd.isna(v)))


def _value(row: dict, key: str) -> Any:
    """A ``runs`` value, or for a row that predates a column the value its encoding fills
    in (``study.models.cost.config_from_row``: the model's defaults are the paper's)."""
    v = row.get(key)
    if not _missing(v):
        return v
    try:
        return config_from_row(row).to_dict().get(key)
    except ValueError:  # a row too damaged to be a configuration: compare with the paper's sizes
        return {"arch": "sa", **SA_SIZES}.get(key)


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, bool):
        return bool(a) == b
    if isinstance(b, (int, float)):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return str(a) == str(b)


def _n(v: Any) -> str:
    return f"{int(v):,}"


def match_model(row: dict) -> tuple[Published | None, str]:
    """The Table 1 model whose configuration ``row`` has (``None`` and the first
    difference from the closest one when none)."""
    arch = _value(row, "arch")
    enc = row.get("encoding")
    for pub in TABLE1:
        if pub.config["arch"] != arch or (arch == "sa" and pub.config.get("encoding") != enc):
            continue
        for key, want in pub.config.items():
            got = _value(row, key)
            if not _same(got, want):
                what = {"hidden": "D", "num_heads": "N_h", "pos_dim": "D_p"}.get(key, key)
                return None, f"not a model of the paper: {what} {got} (paper {want})"
        return pub, ""
    kind = enc if arch == "sa" else arch
    return None, f"no {kind} model in the paper's Table 1"


def budget_reason(row: dict) -> str:
    """Why ``row`` is not the paper's data and budget ('' when it is)."""
    data = row.get("data")
    if _missing(data) or not data_label(data).startswith("CIFAR-10"):
        return f"not CIFAR-10: {'data not recorded' if _missing(data) else data}"
    epochs = row.get("epochs")
    n_train, subset, n_test = row.get("n_train"), row.get("subset"), row.get("n_test")
    images = n_train if not _missing(n_train) else (subset if not _missing(subset) else None)
    short_epochs = not _missing(epochs) and int(epochs) != PAPER_EPOCHS
    short_images = (not _missing(subset)) or (images is not None and int(images) != PAPER_TRAIN_IMAGES)
    if short_epochs or short_images:
        e = (
            "epochs not recorded"
            if _missing(epochs)
            else f"{_n(epochs)} epoch{'' if int(epochs) == 1 else 's'}"
        )
        on = "an unrecorded number of images" if images is None else f"{_n(images)} images"
        return f"not the paper's budget: {e} on {on} (paper {PAPER_EPOCHS} on {PAPER_TRAIN_IMAGES:,})"
    if _missing(epochs):
        return "not the paper's budget: epochs not recorded"
    if not _missing(n_test) and int(n_test) != PAPER_TEST_IMAGES:
        return f"not the paper's test set: {_n(n_test)} test images (paper {PAPER_TEST_IMAGES:,})"
    return ""


def paper_row(row: dict) -> tuple[Published | None, str]:
    """(the Table 1 model to set beside ``row``, '') or (None, why none is shown)."""
    pub, why = match_model(row)
    why = why or budget_reason(row)  # a model of the paper first, then its data and budget
    return (None, why) if why else (pub, "")


__all__ = [
    "PAPER_EPOCHS",
    "PAPER_TEST_IMAGES",
    "PAPER_TRAIN_IMAGES",
    "TABLE1",
    "Published",
    "budget_reason",
    "match_model",
    "paper_row",
]
