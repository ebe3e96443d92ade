"""The grid locality of the ``heads`` table (``attention_distance``, ``attention_entropy``):
one measure for every encoding, the model's own attention over every query token of the
head-statistics images on the real grid; its reference values (uniform attention, a
3×3 convolution) on the same scale."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from study.models import ModelConfig, build_model
from study.results.tables import TableWriter, read_table
from study.theory.locality import conv_attention_distance, uniform_attention_distance
from study.trial.headstats import collect_head_stats, token_distances

TINY = dict(hidden=16, layers=2, intermediate=24, num_heads=4)
S = 16  # the token grid of a 32×32 image (2×2 space-to-depth)


def tiny64(variant: dict) -> torch.nn.Module:
    over = {**TINY, **variant}
    if over["encoding"] == "learned":
        over.setdefault("pos_dim", 8)
    return build_model(ModelConfig(**over)).double().eval()


def brute_force(maps: list[torch.Tensor], n_images: int) -> tuple[np.ndarray, np.ndarray]:
    """(layers, heads) mean over images and every query of Σ_k P·‖p_k − p_q‖ and of
    −Σ_k P ln P, one query at a time, from the model's own (1|B, N_h, T, T) maps."""
    dist, ent = [], []
    for m in maps:
        m = m.expand(n_images, -1, -1, -1).numpy()
        _, n_h, t, _ = m.shape
        side = math.isqrt(t)
        d, e = np.zeros(n_h), np.zeros(n_h)
        for q in range(t):
            qy, qx = divmod(q, side)
            ky, kx = np.divmod(np.arange(t), side)
            far = np.hypot(ky - qy, kx - qx)  # (T,)
            p = m[:, :, q, :]  # (B, N_h, T)
            d += (p * far).sum(-1).sum(0)
            e += -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1).sum(0)
        dist.append(d / (n_images * t))
        ent.append(e / (n_images * t))
    return np.array(dist), np.array(ent)


def test_attention_distance_recorded_is_the_brute_force_mean_over_every_query(encoding_variant, tmp_path):
    """For every encoding, float64: the value the table writer stores equals the
    attention-weighted query-key distance (and entropy) averaged over every query of
    every head-statistics image, computed here from the model's own returned maps —
    12 images, so the chunked forward is checked across chunks."""
    model = tiny64(encoding_variant)
    with torch.no_grad():  # away from any symmetric initialisation (e.g. GPSA's local heads)
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    images = torch.randn(12, 3, 32, 32, dtype=torch.float64)
    heads, _ = collect_head_stats(model, images, radius=2)
    writer = TableWriter(tmp_path, trial_id="t")
    writer.rows("heads", 0, heads)
    table = read_table(tmp_path, "heads").sort_values(["layer", "head"])
    with torch.no_grad():
        _, maps = model(images, return_attention=True)
    assert all(m.dtype == torch.float64 and m.shape[-1] == S * S for m in maps)
    dist, ent = brute_force(maps, len(images))
    np.testing.assert_allclose(table.attention_distance.to_numpy(), dist.ravel(), rtol=1e-10)
    np.testing.assert_allclose(table.attention_entropy.to_numpy(), ent.ravel(), rtol=1e-10)
    # heads that differ are told apart (the check above compares more than one number)
    assert np.ptp(dist) > 1e-3


def test_uniform_attention_on_16x16_reads_the_mean_distance_of_all_token_pairs():
    cells = list(itertools.product(range(S), range(S)))
    pairs = [math.dist(a, b) for a in cells for b in cells]
    expected = sum(pairs) / len(pairs)
    assert round(expected, 2) == 8.33
    assert uniform_attention_distance(S, S) == pytest.approx(expected, rel=1e-12)


def test_a_3x3_convolution_reads_its_in_grid_taps_averaged_over_every_query():
    total = 0.0
    for qy, qx in itertools.product(range(S), range(S)):
        taps = [
            (qy + dy, qx + dx)
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
            if 0 <= qy + dy < S and 0 <= qx + dx < S
        ]
        total += sum(math.dist((qy, qx), k) for k in taps) / len(taps)
    assert conv_attention_distance(S, S) == pytest.approx(total / S**2, rel=1e-12)
    assert round(total / S**2, 2) == 1.05  # below the unclipped (4 + 4√2)/9 = 1.07: corner queries lose taps


def test_token_distances_are_euclidean_between_row_major_positions():
    d = token_distances(3, 4)
    assert d.shape == (12, 12)
    assert d[0, 11].item() == pytest.approx(math.hypot(2, 3))  # (0, 0) to (2, 3)
    assert d[5, 6].item() == 1.0  # (1, 1) to (1, 2)


def test_uniform_attention_reads_the_same_for_positional_and_content_heads(encoding_variant):
    """Zeroing the attention parameters makes every encoding's heads uniform over the
    grid; every one must then read 8.33 cells and ln 256 nats.  Fails if positional
    heads (image-independent) and content heads (queries of real images) were measured
    on different windows or query sets: e.g. the unclipped canvas (11.86) or only the
    centre query (6.14)."""
    model = tiny64(encoding_variant)
    with torch.no_grad():
        for layer in model.attention_layers:
            for p in layer.parameters():
                p.zero_()
    images = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        _, maps = model(images, return_attention=True)
    for m in maps:  # the premise: uniform attention
        torch.testing.assert_close(m, torch.full_like(m, 1 / S**2), rtol=0, atol=1e-12)
    heads, _ = collect_head_stats(model, images, radius=2)
    assert len(heads) == TINY["layers"] * TINY["num_heads"]
    for row in heads:
        assert row["attention_distance"] == pytest.approx(uniform_attention_distance(S, S), rel=1e-10)
        assert row["attention_entropy"] == pytest.approx(math.log(S**2), rel=1e-10)
