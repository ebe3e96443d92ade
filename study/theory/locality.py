"""Reference values of the grid locality measure (the ``heads`` table's
``attention_distance``, computed in :mod:`study.trial.headstats`) in grid cells of a
height×width token grid, every query included; torch-free (``analysis`` draws them).
"""

from __future__ import annotations

import numpy as np


def token_positions(height: int, width: int) -> np.ndarray:
    """(row, col) of every token, row-major (the models' token order): (T, 2)."""
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([rows.ravel(), cols.ravel()], axis=-1).astype(np.float64)


def _distances(height: int, width: int) -> np.ndarray:
    pos = token_positions(height, width)
    return np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)


def uniform_attention_distance(height: int, width: int) -> float:
    """``attention_distance`` of uniform attention: the mean distance over all (query,
    key) pairs of the grid (8.33 grid cells on 16×16)."""
    return float(_distances(height, width).mean())


def conv_attention_distance(height: int, width: int, *, kernel: int = 3) -> float:
    """``attention_distance`` of a kernel×kernel convolution's taps: each query attends
    uniformly to the taps of its neighbourhood that lie on the grid (boundary taps
    clipped), averaged over every query (1.05 grid cells for 3×3 on 16×16; the
    unclipped (4 + 4√2)/9 = 1.07 of an interior query)."""
    pos = token_positions(height, width)
    r = kernel // 2
    taps = (np.abs(pos[:, None, :] - pos[None, :, :]) <= r).all(-1)
    p = taps / taps.sum(-1, keepdims=True)
    return float((p * _distances(height, width)).sum(-1).mean())
