"""Shared layout of per-layer panels in shift coordinates (x = column shift to the
right, y = row shift pointing *down*, as in an image; the query pixel at (0, 0))."""

from __future__ import annotations

import math
import textwrap

import matplotlib.pyplot as plt
import numpy as np

from analysis.style import COLUMN_WIDTH, DOUBLE_WIDTH


def layer_grid(n: int, *, cols: int = 3, variants: bool = False):
    """Figure, one axes per panel (at most ``cols`` per row) and the 2-D array of axes:
    square panels per layer sharing both axes, or (``variants``) one panel per variant
    sharing the y scale."""
    ncols = min(n, cols)
    nrows = math.ceil(n / ncols)
    if variants:
        width = COLUMN_WIDTH if ncols == 1 else DOUBLE_WIDTH
        size, share = (width, 1.55 * nrows + 0.5), {"sharey": True}
    else:
        width = min(DOUBLE_WIDTH, max(COLUMN_WIDTH, 1.05 * ncols + 0.35))
        size, share = (width, (width - 0.35) / ncols * nrows + 0.45), {"sharex": True, "sharey": True}
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False, **share)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n], axes


def layer_line(ax, layer: int, x, y, *, few: bool, band=None, label: str = "") -> str:
    """Layer ``layer``'s line over training in its colour of the style's cycle (returned), dots when
    ``few`` epochs, ``band`` ((low, high, alpha) or None) shaded around it."""
    colour, label = f"C{layer}", label or f"layer {layer + 1}"
    ax.plot(x, y, "-", color=colour, marker="o" if few else None, markersize=2.5, label=label)
    if band is not None:
        low, high, alpha = band
        ax.fill_between(x, low, high, color=colour, alpha=alpha, linewidth=0)
    return colour


def number_head(ax, head: int, x: float, y: float, colour, **style) -> None:
    """Head ``head``'s number (1-based, as in the maps figure) beside its point (x, y)."""
    ax.annotate(
        str(int(head) + 1),
        (x, y),
        xytext=(2.5, 1.5),
        textcoords="offset points",
        fontsize=7,
        color=colour,
        **style,
    )


def shift_axes(ax, lim: float) -> None:
    """Square axes over [−lim, lim]², y pointing down, the query as a black square."""
    ax.set(xlim=(-lim, lim), ylim=(lim, -lim), aspect="equal")  # image orientation: rows grow downwards
    ax.axhline(0, color="0.85", linewidth=0.4, zorder=0)
    ax.axvline(0, color="0.85", linewidth=0.4, zorder=0)
    ax.plot([0], [0], marker="s", color="black", markersize=4, linestyle="none", zorder=5)
    step = 1 if lim <= 3 else 2 if lim <= 6 else 4
    ticks = np.arange(-math.floor(lim / step) * step, lim + 1e-9, step)
    ax.set(xticks=ticks, yticks=ticks)


def label_grid(axes_2d, *, xlabel: str = "x: column shift", ylabel: str = "y: row shift (down)") -> None:
    for c, ax in enumerate(axes_2d[-1, :]):
        if ax.get_visible():
            ax.set_xlabel(xlabel)
        elif len(axes_2d) > 1:  # a hidden panel in the last row: label the panel above it
            axes_2d[-2, c].set_xlabel(xlabel)
            axes_2d[-2, c].tick_params(labelbottom=True)
    for row in axes_2d:
        row[0].set_ylabel(ylabel)
    if len(axes_2d) > 1:  # rows' labels longer than a panel's height would run into each other
        _wrap_to_height([row[0].yaxis.label for row in axes_2d], ylabel, axes_2d[0, 0])


def _wrap_to_height(labels, text: str, ax) -> None:
    """The y-``labels`` (all ``text``) wrapped at spaces until each is no taller than ``ax``."""
    renderer = ax.figure.canvas.get_renderer()
    height = ax.get_window_extent(renderer).height
    width = len(text)
    while width > 8 and labels[0].get_window_extent(renderer).height > height:
        width = int(width * 0.8)
        for label in labels:
            label.set_text(textwrap.fill(text, width))


def limit(values, *, low: float = 3.5, high: float = 15.5) -> float:
    """Half-width of the panels: covers ``values`` (|coordinates|) with a margin."""
    v = np.asarray([abs(x) for x in values if x == x], dtype=float)
    m = float(v.max()) if v.size else 0.0
    return float(min(high, max(low, math.ceil(m + 0.5) + 0.5)))


def after(epoch: int) -> str:
    """Title text of a stored (0-based) epoch: 'after 3 epochs' for epoch 2, 'at
    initialisation' for the untrained model's rows (epoch −1)."""
    if int(epoch) < 0:
        return "at initialisation"
    n = int(epoch) + 1
    return f"after {n} epoch{'s' if n != 1 else ''}"


def wrap_note(text: str, width_in: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at 7 pt."""
    import textwrap

    return "\n".join(textwrap.wrap(text, max(20, int(width_in * 17))))


def panel_title(fig, ax, text: str, more: str = "") -> None:
    """A variant panel's title: ``text`` wrapped to the panel's width, then ``more`` as it is."""
    width_in = ax.get_position().width * fig.get_size_inches()[0] * 1.25
    ax.set_title(wrap_note(text, width_in) + more, fontsize=7, pad=3)


def notes_under_legend(fig, notes: list[str], legend=None, gap: float = 0.01) -> None:
    """The figure's notes (data, budget, what lines and bands mean), wrapped to the
    figure's width, centred under ``legend`` (default: its first, placed below the axes)."""
    width_in = fig.get_size_inches()[0]
    fig.canvas.draw()  # place the notes under the legend, wherever it ended
    box = (legend or fig.legends[0]).get_window_extent().transformed(fig.transFigure.inverted())
    fig.text(
        0.5, box.y0 - gap, "\n".join(wrap_note(n, width_in) for n in notes), ha="center", va="top", fontsize=7
    )
