"""Contours of a head's attention: analytic ellipses for Gaussian heads, numeric
mass thresholds on a stored attention window otherwise (docs/design.md §7), in shifts
(key − query) of the token grid; nothing here draws.
"""

from __future__ import annotations

import math

import numpy as np

LEVELS = (0.5, 0.9)


def mahalanobis_radius(p: float) -> float:
    """Radius r of the ellipse (δ−Δ)ᵀ Σ⁻¹ (δ−Δ) = r² holding mass ``p`` of a 2-D
    Gaussian: r = √(−2 ln(1−p))."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"mass must be in (0, 1), got {p}")
    return math.sqrt(-2.0 * math.log1p(-p))


def gaussian_ellipse(
    center: tuple[float, float], inv_cov: tuple[float, float, float], p: float, *, points: int = 97
) -> tuple[np.ndarray, np.ndarray] | None:
    """Closed ellipse (x, y) holding mass ``p`` of N(center, Σ), Σ = inverse of
    ``inv_cov`` = (xx, xy, yy) of Σ⁻¹.  None if Σ⁻¹ is not positive definite."""
    xx, xy, yy = (float(v) for v in inv_cov)
    prec = np.array([[xx, xy], [xy, yy]])
    if not np.all(np.isfinite(prec)):
        return None
    lam, vec = np.linalg.eigh(prec)
    if lam.min() <= 0:
        return None
    # Σ = V diag(1/λ) Vᵀ: the ellipse's semi-axes are r·√(eigenvalues of Σ) = r/√λ
    t = np.linspace(0.0, 2.0 * np.pi, points)
    unit = np.stack([np.cos(t), np.sin(t)])  # (2, points)
    pts = vec @ (unit / np.sqrt(lam)[:, None]) * mahalanobis_radius(p)
    return center[0] + pts[0], center[1] + pts[1]


def mass_level(probs: np.ndarray, p: float) -> float | None:
    """Threshold t such that the window's pixels above t hold at least mass ``p``
    (the smallest such set: pixels taken from the most probable down).  None when
    the whole window holds less than ``p``."""
    v = np.sort(np.asarray(probs, dtype=float).ravel())[::-1]
    c = np.cumsum(v)
    if len(v) == 0 or c[-1] < p - 1e-9:
        return None
    k = min(int(np.searchsorted(c, p - 1e-12)), len(v) - 1)
    nxt = v[k + 1] if k + 1 < len(v) else 0.0
    return 0.5 * (v[k] + nxt) if v[k] > nxt else v[k] * (1 - 1e-9)


def window_contours(probs, side: int, p: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Closed curves (x, y) around the smallest set of pixels of a (side×side)
    row-major attention window (query at its centre) holding mass ``p`` of the
    head's attention; [] when the window holds less than ``p``."""
    import contourpy

    grid = np.asarray(probs, dtype=float).reshape(side, side)
    level = mass_level(grid, p)
    if level is None:
        return []
    r = side // 2
    padded = np.pad(grid, 1)  # zeros around: curves close at the window's edge
    axis = np.arange(-r - 1, r + 2, dtype=float)
    gen = contourpy.contour_generator(axis, axis, padded)  # z[row, col] at (x=col, y=row)
    return [(line[:, 0].copy(), line[:, 1].copy()) for line in gen.lines(level) if len(line) > 1]
