"""Small plotting helpers shared by the chapters (matplotlib, imported lazily)."""
from __future__ import annotations

import io

__all__ = ["fig_to_png", "heatmap"]


def fig_to_png(fig, dpi: int = 80) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it (no metadata, so the bytes
    are reproducible)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def heatmap(ax, a, *, row_labels=None, col_labels=None, fmt="{:.2f}", cmap="Blues",
            vmin=None, vmax=None, annotate=True, xlabel="key j", ylabel="query i"):
    """Draw a 2-D array as an annotated heatmap on ``ax`` and return the image."""
    import numpy as np

    a = np.asarray(a, dtype=float)
    im = ax.imshow(a, cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(a.shape[1]), labels=col_labels if col_labels is not None else range(a.shape[1]))
    ax.set_yticks(range(a.shape[0]), labels=row_labels if row_labels is not None else range(a.shape[0]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if annotate and a.size <= 144:
        hi = np.nanmax(a) if vmax is None else vmax
        lo = np.nanmin(a) if vmin is None else vmin
        mid = (hi + lo) / 2
        for (i, j), val in np.ndenumerate(a):
            if np.isfinite(val):
                ax.text(j, i, fmt.format(val), ha="center", va="center", fontsize=8,
                        color="white" if val > mid else "black")
            else:
                ax.text(j, i, "−∞" if val < 0 else "∞", ha="center", va="center", fontsize=8)
    return im
