"""Per-head attention statistics and compact attention maps (what each measures and why the
two kinds stay apart: docs/design.md §7).

Grid locality, every encoding alike: ``attention_distance`` = mean Σ_k P_h[q, k]·‖p_k − p_q‖
in grid cells over every query of the head-statistics images (Dosovitskiy et al. 2021, Fig. 7)
and ``attention_entropy`` = mean −Σ_k P log P (nats); positional-only probabilities do not
depend on the image, so one image stands for all.  Canvas (centre-query) moments: the paper's
Fig. 4.  Gaussian heads also record Δ_h and Σ_h⁻¹; a layer with ``head_columns()`` adds its
per-head values (GPSA: ``gate`` = σ(λ_h)).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from study.models.positional import GaussianScores, LearnedScores, lattice_offsets
from study.theory.locality import token_positions

NAN = float("nan")
#: the Gaussian heads' parameters and the per-head columns a layer may report, null for the others
PARAM_COLUMNS = (
    "param_center_x",
    "param_center_y",
    "param_inv_cov_xx",
    "param_inv_cov_xy",
    "param_inv_cov_yy",
)
HEAD_COLUMNS = ("gate",)


def token_distances(height: int, width: int, *, device=None) -> Tensor:
    """‖p_k − p_q‖ between the token positions (row, col) of a height×width grid,
    (T, T) float64 in grid cells, T = height·width row-major (the models' token order)."""
    pos = torch.from_numpy(token_positions(height, width)).to(device)
    return torch.cdist(pos, pos)


def shift_grid(radius: int, *, device=None) -> Tensor:
    """δ = (row, col) for a (2r+1)² window, shape (2r+1, 2r+1, 2), float."""
    side = 2 * radius + 1
    return lattice_offsets(side).view(side, side, 2).to(device=device, dtype=torch.float32)


def positional_shift_scores(positional, radius: int) -> Tensor:
    """Scores of every shift in the (2r+1)² window, shape (N_h, 2r+1, 2r+1)."""
    if isinstance(positional, GaussianScores):
        delta = shift_grid(radius, device=positional.centers.device)
        diff = delta[None] - positional.centers[:, None, None, :]  # (N_h, R, R, 2)
        prec = positional.inv_covariance()
        return -0.5 * torch.einsum("hxyi,hij,hxyj->hxy", diff, prec, diff)
    if isinstance(positional, LearnedScores):
        s = positional.max_size
        if radius > s - 1:
            raise ValueError(f"learned tables reach shifts up to {s - 1}, asked for {radius}")
        keep = slice(s - 1 - radius, s + radius)
        row = positional.head_keys_row(positional.row_embeddings.weight[keep])  # (R, N_h)
        col = positional.head_keys_col(positional.col_embeddings.weight[keep])
        return row.T[:, :, None] + col.T[:, None, :]
    raise TypeError(f"no shift scores for {type(positional).__name__}")


def distribution_stats(probs: Tensor, delta: Tensor) -> dict[str, Tensor]:
    """Moments of distributions over shifts: probs (N_h, ...), delta (..., 2) as (row, col)."""
    p = probs.flatten(1).double()
    p = p / p.sum(-1, keepdim=True)
    d = delta.reshape(-1, 2).double()
    mean = p @ d  # (N_h, 2)
    centred = d[None] - mean[:, None]  # (N_h, K, 2)
    cov = torch.einsum("hk,hki,hkj->hij", p, centred, centred)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    return {
        "center_x": mean[:, 1],
        "center_y": mean[:, 0],
        "cov_xx": cov[:, 1, 1],
        "cov_xy": cov[:, 0, 1],
        "cov_yy": cov[:, 0, 0],
        "entropy": entropy,
        "mean_distance": p @ d.norm(dim=-1),
        "max_prob": p.max(-1).values,
    }


@torch.no_grad()
def collect_head_stats(model, images: Tensor, *, radius: int) -> tuple[list[dict], list[dict]]:
    """Rows of the ``heads`` and ``maps`` tables for every layer and head, from the
    normalised head-statistics images (N, 3, H, W) on the model's device; maps are the
    (2·radius+1)² window around the query."""
    layers = model.attention_layers
    heads_rows: list[dict] = []
    map_rows: list[dict] = []
    if not any(layer.content for layer in layers):
        images = images[:1]  # image-independent attention: one image stands for all
    distances, entropies, centres = _grid_pass(model, images)
    for li, layer in enumerate(layers):
        if layer.content:
            centre = centres[li]  # (N_h, H, W) over key positions
            h, w = centre.shape[-2:]
            delta = torch.from_numpy(token_positions(h, w) - (h // 2, w // 2)).to(centre.device)
            probs = centre
            window = _crop(centre, h // 2, w // 2, radius)
        else:
            # the largest shift a head reaches on the trained grid (S − 1 per axis)
            reach = (
                layer.positional.max_size
                if isinstance(layer.positional, LearnedScores)
                else model.config.grid
            )
            full = max(radius, reach - 1)
            scores = positional_shift_scores(layer.positional, full).float()
            probs = torch.softmax(scores.flatten(1), -1).view_as(scores)
            delta = shift_grid(full, device=probs.device)
            window = _crop(probs, full, full, radius)
        stats = distribution_stats(probs, delta)
        stats.update(attention_distance=distances[li], attention_entropy=entropies[li])
        values = {**stats, **(layer.head_columns() if hasattr(layer, "head_columns") else {})}
        if isinstance(positional := getattr(layer, "positional", None), GaussianScores):
            c, prec = positional.centers.double(), positional.inv_covariance().double()
            values.update(zip(PARAM_COLUMNS, (c[:, 1], c[:, 0], prec[:, 1, 1], prec[:, 0, 1], prec[:, 0, 0])))
        for hd in range(layer.num_heads):
            heads_rows.append(
                {
                    "layer": li,
                    "head": hd,
                    **{
                        k: float(values[k][hd]) if k in values else NAN
                        for k in (*stats, *PARAM_COLUMNS, *HEAD_COLUMNS)
                    },
                }
            )
            map_rows.append(
                {
                    "layer": li,
                    "head": hd,
                    "window": 2 * radius + 1,
                    "probs": window[hd].flatten().cpu().tolist(),
                }
            )
    return heads_rows, map_rows


def _crop(maps: Tensor, cy: int, cx: int, radius: int) -> Tensor:
    """(N_h, H, W) → (N_h, 2r+1, 2r+1) window centred at (cy, cx), zero outside."""
    return F.pad(maps, (radius,) * 4)[:, cy : cy + 2 * radius + 1, cx : cx + 2 * radius + 1]


def _grid_pass(model, images: Tensor, chunk: int = 10) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """One chunked forward of ``images`` with ``return_attention=True``; per layer the grid
    locality (distance, entropy: (N_h,) float64) and the centre query's attention averaged
    over the images ((N_h, S, S))."""
    sums = None
    n = len(images)
    for i in range(0, n, chunk):
        x = images[i : i + chunk]
        _, maps = model(x, return_attention=True)
        side = int(round(maps[0].shape[-1] ** 0.5))
        distances = token_distances(side, side, device=maps[0].device)
        q = (side // 2) * side + side // 2
        part = []
        for m in maps:
            weight = len(x) / m.shape[0]  # a map shared by the batch (1, N_h, T, T) counts once per image
            # Σ_k P[q, k]·‖p_k − p_q‖ and −Σ_k P ln P, summed over images and queries
            p64 = m.double()
            d, e = (
                torch.einsum("bhqk,qk->h", p64, distances),
                -torch.special.xlogy(p64, p64).sum(dim=(0, 2, 3)),
            )
            part.append((d * weight, e * weight, m[:, :, q].float().sum(0).view(-1, side, side) * weight))
        sums = part if sums is None else [tuple(a + b for a, b in zip(s, p)) for s, p in zip(sums, part)]
    t = side * side
    return [d / (n * t) for d, _, _ in sums], [e / (n * t) for _, e, _ in sums], [c / n for _, _, c in sums]
