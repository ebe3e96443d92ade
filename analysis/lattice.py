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


def lattice_distance(centers) -> float:
    """Mean distance of K² head centres (rows of (x, y)) to the K×K lattice after the
    optimal one-to-one assignment of heads to lattice points (Hungarian algorithm).
    0 exactly when the heads sit on the lattice, one head per point."""
    c = np.asarray(centers, dtype=float).reshape(-1, 2)
    k = kernel_size(len(c))
    if k is None:
        raise ValueError(f"needs N_h = K^2 heads with K odd, got {len(c)}")
    return lattice_distance_of(c, k)


def lattice_distance_of(centers, k: int) -> float:
    """Mean distance of any number n ≤ K² of head centres to K×K lattice points, one
    point per head, after the optimal assignment (the subset of heads that is
    concentrated enough to have a centre); NaN for no head."""
    from scipy.optimize import linear_sum_assignment

    c = np.asarray(centers, dtype=float).reshape(-1, 2)
    if len(c) == 0:
        return float("nan")
    pts = lattice(k)
    if len(c) > len(pts):
        raise ValueError(f"{len(c)} centres for a {k}x{k} lattice")
    cost = np.linalg.norm(c[:, None, :] - pts[None, :, :], axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())
