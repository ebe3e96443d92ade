"""analysis/figures/maps.py: the attention-map figure's one colour scale reads true, also
when every value shown is equal (a head attending uniformly over the stored window)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

import analysis
from analysis import style
from analysis.figures import maps as maps_fig
from analysis.figures.context import Context
from study.results.tables import TableWriter

HEADS = 2


def _study(root: Path, probs_of) -> Path:
    """One trial, one layer of ``HEADS`` heads; head h's 3×3 window holds ``probs_of(h)``."""
    w = TableWriter(root / "tables", trial_id="t0")
    w.rows(
        "heads",
        0,
        [
            {
                "layer": 0,
                "head": h,
                "center_x": 0.0,
                "center_y": 0.0,
                "entropy": 2.2,
                "max_prob": 0.2,
                "mean_distance": 1.0,
            }
            for h in range(HEADS)
        ],
    )
    w.rows("maps", 0, [{"layer": 0, "head": h, "window": 3, "probs": probs_of(h)} for h in range(HEADS)])
    w.rows("epochs", 0, [{"test_acc": 0.1, "train_loss": 1.0}])
    w.run(
        {
            "study": "m",
            "name": "SA learned (N_h=2)",
            "arch": "sa",
            "encoding": "learned",
            "num_heads": HEADS,
            "seed": 0,
            "epochs": 1,
            "epochs_done": 1,
            "status": "finished",
            "best_test_acc": 0.1,
            "final_test_acc": 0.1,
            "data": "synthetic:100",
            "n_train": 100,
            "n_val": 0,
            "n_test": 100,
            "cell": 0,
            "hidden": 16,
            "layers": 1,
            "head_images": 8,
        }
    )
    w.close()
    return root


def _drawn(root: Path, out: Path, monkeypatch) -> plt.Figure:
    figures = []
    monkeypatch.setattr(
        style, "save", lambda fig, data, out, stem, **_: figures.append(fig) or [out / f"{stem}.png"]
    )
    style.setup()
    maps_fig.draw(Context(study=analysis.load(root), out=out))
    assert len(figures) == 1
    return figures[0]


def _bar(fig):
    (bar,) = [ax for ax in fig.axes if ax.get_ylabel() == "attention probability"]
    fig.canvas.draw()  # tick labels and the offset text are set at drawing time
    labels = [t.get_text() for t in bar.get_yticklabels() if t.get_text()]
    return labels, bar.yaxis.get_offset_text().get_text()


def test_uniform_maps_show_one_tick_at_their_value_and_no_offset(tmp_path, monkeypatch):
    fig = _drawn(_study(tmp_path / "s", lambda h: [1 / 9] * 9), tmp_path / "out", monkeypatch)
    labels, offset = _bar(fig)
    assert labels == ["0.11"] and offset == ""
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len({(im.norm.vmin, im.norm.vmax) for im in images}) == 1
    assert images[0].norm.vmin < 1 / 9 < images[0].norm.vmax, "the value lies inside the scale"
    assert "all 0.11" in " ".join(t.get_text() for t in fig.texts)
    plt.close(fig)


def test_varied_maps_keep_the_exact_range_and_plain_ticks(tmp_path, monkeypatch):
    fig = _drawn(
        _study(tmp_path / "s", lambda h: [0.6 if i == 4 + h else 0.05 for i in range(9)]),
        tmp_path / "out",
        monkeypatch,
    )
    labels, offset = _bar(fig)
    assert len(labels) >= 2 and offset == ""
    (image, *_) = [im for ax in fig.axes for im in ax.get_images()]
    assert (image.norm.vmin, image.norm.vmax) == pytest.approx(
        (0.05, 0.6), abs=1e-4
    )  # stored as uint16 steps
    assert "0.05 to 0.6" in " ".join(t.get_text() for t in fig.texts)
    plt.close(fig)
