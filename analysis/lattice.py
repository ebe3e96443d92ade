"""Convolution-likeness of a layer: how close its N_h = K² head centres sit to the
K×K lattice of a convolution's kernel taps (Lemma 1: a K×K convolution is a layer
whose heads attend exactly the shifts {−K//2..K//2}²)."""

from __future__ import annotations

import math

import numpy as np


def kernel_size(num_heads: int) -> int | None:
    """K when ``num_heads`` = K² with K odd, else None."""
    k = math.isqrt(int(num_heads))
    return k if k * k == num_heads and k % 2 == 1 else None


def lattice(k: int) -> np.ndarray:
    """The K×K shifts {−K//2..K//2}² as (x, y) rows, shape (K², 2)."""
    r = np.arange(-(k // 2), k // 2 + 1, dtype=float)
    xs, ys = np.meshgrid(r, r)
    return np.stack([xs.ravel(), ys.ravel()], axis=1)


def lattice_distance(centers, k: int | None = None) -> float:
    """Mean distance of head centres (rows of (x, y)) to the K×K lattice after the
    optimal one-to-one assignment of heads to lattice points (Hungarian algorithm): 0
    exactly when the heads sit on the lattice, one head per point.  Without ``k``, the
    centres are all K² heads of a layer; with it, any n ≤ K² of them (those concentrated
    enough to have a centre); NaN for no head."""
    from scipy.optimize import linear_sum_assignment

    c = np.asarray(centers, dtype=float).reshape(-1, 2)
    if k is None:
        k = kernel_size(len(c))
        if k is None:
            raise ValueError(f"needs N_h = K^2 heads with K odd, got {len(c)}")
    if len(c) == 0:
        return float("nan")
    pts = lattice(k)
    if len(c) > len(pts):
        raise ValueError(f"{len(c)} centres for a {k}x{k} lattice")
    cost = np.linalg.norm(c[:, None, :] - pts[None, :, :], axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())
