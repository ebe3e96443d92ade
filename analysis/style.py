"""Figure style for a paper column (~3.3 in wide, fonts ≥ 7 pt) and saving figures
as PNG + PDF with a CSV of exactly the plotted data."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

COLUMN_WIDTH = 3.3  # inches
DOUBLE_WIDTH = 6.9
FONT = 7  # points: the smallest text in any figure
DPI = 300

_RC = {
    "font.size": FONT,
    "axes.titlesize": FONT + 1,
    "axes.labelsize": FONT,
    "xtick.labelsize": FONT,
    "ytick.labelsize": FONT,
    "legend.fontsize": FONT,
    "legend.title_fontsize": FONT,
    "figure.titlesize": FONT + 1,
    "lines.linewidth": 1.0,
    "lines.markersize": 3,
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "savefig.dpi": DPI,
    "figure.dpi": 100,
    "legend.frameon": False,
}


def setup() -> None:
    """Apply the style (seaborn 'ticks', paper sizes)."""
    sns.set_theme(context="paper", style="ticks", rc=_RC)  # rc: applied last, over the theme's


def head_colors(n: int) -> list:
    """One distinguishable colour per head."""
    return sns.color_palette("tab10" if n <= 10 else "husl", n)


def save(fig, data: pd.DataFrame, out: Path, stem: str, *, pdf: bool = True) -> list[Path]:
    """Write ``stem``.png, .pdf (unless not ``pdf``) and .csv (``data``: what the figure plots) under
    ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{ext}" for ext in (("png", "pdf", "csv") if pdf else ("png", "csv"))]
    fig.savefig(paths[0], dpi=DPI, bbox_inches="tight", pad_inches=0.02)
    if pdf:
        fig.savefig(paths[1], bbox_inches="tight", pad_inches=0.02, metadata={"CreationDate": None})
    plt.close(fig)
    data.to_csv(paths[-1], index=False)
    return paths
