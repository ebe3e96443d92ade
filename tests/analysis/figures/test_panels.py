"""analysis/figures/panels.py: the y-labels of a grid of panels, one per row, never run into each
other (the locality figure's two rows of variants printed "mean attention distance (grid cells)"
twice, one over the other)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.panels import label_grid, layer_grid  # noqa: E402

LABELS = ["mean attention distance (grid cells)", "attention entropy (nats)", "y: row shift (down)"]


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("n, variants", [(4, True), (7, True), (6, False), (12, False)])
def test_the_rows_y_labels_do_not_overlap(n, variants, label):
    style.setup()
    fig, _, grid = layer_grid(n, variants=variants)
    label_grid(grid, xlabel="epochs trained", ylabel=label)
    fig.tight_layout(pad=0.3)  # as every figure is laid out (analysis.figures.pooled.finish)
    renderer = fig.canvas.get_renderer()
    boxes = [row[0].yaxis.label.get_window_extent(renderer) for row in grid]
    assert len(boxes) >= 2
    for upper, lower in zip(boxes, boxes[1:]):
        assert lower.y1 <= upper.y0, (upper, lower)
    assert all(label.split()[0] in row[0].get_ylabel() for row in grid)
