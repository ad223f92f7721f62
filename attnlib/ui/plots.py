"""Small plotting helpers shared by the chapters (matplotlib, imported lazily).

Text is sized to stay legible at 1x and at 2x zoom: the values written on bars and in
heatmap cells are ``VALUE_PT`` = 10 points (9 in heatmaps of more than 64 cells), i.e.
10 px at 72 dpi and 12-14 px in the explorers, which render at 100 dpi.
"""
from __future__ import annotations

import io

from ..i18n import N_

VALUE_PT = 10  # font size of the numbers written on heatmaps and bars

__all__ = ["fig_to_png", "heatmap", "bars"]


def fig_to_png(fig, dpi: int = 100) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it (no metadata, so the bytes
    are reproducible).

    Args:
        fig: a matplotlib Figure; it is closed afterwards.
        dpi: resolution. Default: ``100``.

    Returns:
        the PNG file's bytes.

    Example::

        >>> png = al.plots.fig_to_png(plt.figure(figsize=(6, 3)))
    """
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def heatmap(ax, a, *, row_labels=None, col_labels=None, fmt="{:.2f}", cmap="Blues",
            vmin=None, vmax=None, annotate=True, xlabel=N_("key j"), ylabel=N_("query i")):
    """Draw a 2-D array as an annotated heatmap on ``ax`` and return the image.

    Args:
        ax: a matplotlib Axes.
        a: the array, shape ``(rows, cols)``, e.g. attention weights ``(L, S)``; ``±inf``
            entries (masked scores) are written as ``−∞`` / ``∞``.
        row_labels, col_labels: tick labels. Default: ``None`` (indices).
        fmt: format of the cell annotations. Default: ``"{:.2f}"``.
        cmap, vmin, vmax: colour map and its limits. Default: ``"Blues"``, ``None``, ``None``.
        annotate: write each value in its cell (only when there are at most 144 cells;
            in ``VALUE_PT`` points, a little smaller above 64 cells so "0.25" fits).
            Default: ``True``.
        xlabel, ylabel: axis labels. Default: ``"key j"``, ``"query i"``.

    Returns:
        the ``AxesImage`` (pass it to ``fig.colorbar``).

    Example::

        >>> al.plots.heatmap(ax, weights, row_labels=tokens, col_labels=tokens)
    """
    import numpy as np

    a = np.asarray(a, dtype=float)
    im = ax.imshow(a, cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(a.shape[1]), labels=col_labels if col_labels is not None else range(a.shape[1]))
    ax.set_yticks(range(a.shape[0]), labels=row_labels if row_labels is not None else range(a.shape[0]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if annotate and a.size <= 144:
        size = VALUE_PT if a.size <= 64 else VALUE_PT - 1
        hi = np.nanmax(a) if vmax is None else vmax
        lo = np.nanmin(a) if vmin is None else vmin
        mid = (hi + lo) / 2
        for (i, j), val in np.ndenumerate(a):
            if np.isfinite(val):
                ax.text(j, i, fmt.format(val), ha="center", va="center", fontsize=size,
                        color="white" if val > mid else "black")
            else:
                ax.text(j, i, "−∞" if val < 0 else "∞", ha="center", va="center", fontsize=size)
    return im


def bars(ax, values, labels, *, title=None, ylabel=None, ylim=None, color="C0", fmt="{:.2f}"):
    """Draw a 1-D array as labelled bars on ``ax``, each value written above its bar.

    Args:
        ax: a matplotlib Axes.
        values: 1-D array of the heights.
        labels: one tick label per bar.
        title, ylabel: text for the axes. Default: ``None``.
        ylim: ``(low, high)`` limits of the y axis. Default: ``None`` (automatic).
        color: bar colour. Default: ``"C0"``.
        fmt: format of the value annotations. Default: ``"{:.2f}"``.

    Returns:
        the ``BarContainer``.
    """
    import numpy as np

    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or len(values) != len(labels):
        raise ValueError(f"bars needs a 1-D array with one label per value, got values of shape "
                         f"{values.shape} and {len(labels)} labels")
    container = ax.bar(range(len(values)), values, color=color)
    ax.set_xticks(range(len(values)), labels=labels)
    ax.axhline(0, color="black", linewidth=0.6)
    if ylim is not None:
        ax.set_ylim(*ylim)
    for x, val in enumerate(values):
        ax.annotate(fmt.format(val), (x, val), xytext=(0, 2 if val >= 0 else -2), textcoords="offset points",
                    ha="center", va="bottom" if val >= 0 else "top", fontsize=VALUE_PT)
    if title:
        ax.set_title(title, fontsize=VALUE_PT + 1)
    if ylabel:
        ax.set_ylabel(ylabel)
    return container
