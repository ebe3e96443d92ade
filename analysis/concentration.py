"""Which heads are concentrated enough to have a centre, contours and a lattice
distance, and which are diffuse: the rule and why, docs/design.md §7 ("Concentrated or diffuse")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

MIN_WINDOW_MASS = 0.5
MAX_ENTROPY = math.log(49)


def rule_text(window: int | None = None) -> str:
    w = f"{window}×{window} " if window else ""
    return (
        f"concentrated: ≥ {MIN_WINDOW_MASS:.0%} of the mass in the {w}window and entropy ≤ ln 49 = "
        f"{MAX_ENTROPY:.2f} nats (uniform over 7×7); otherwise diffuse"
    )


def classify(heads: pd.DataFrame, maps: pd.DataFrame | None) -> pd.DataFrame:
    """``heads`` with ``window_mass`` (mass inside the stored window; NaN without a map) and ``concentrated``
    (bool)."""
    mass = {
        (int(r.epoch), int(r.layer), int(r.head)): float(np.sum(np.asarray(r.probs, dtype=float)))
        for r in (maps.itertuples() if maps is not None else ())
    }
    keys = zip(heads["epoch"].astype(int), heads["layer"].astype(int), heads["head"].astype(int))
    m = np.array([mass.get(k, np.nan) for k in keys], dtype=float)
    entropy = heads["entropy"].astype(float).to_numpy()
    ok = (entropy <= MAX_ENTROPY) & (np.isnan(m) | (m >= MIN_WINDOW_MASS))
    return heads.assign(window_mass=m, concentrated=ok)
