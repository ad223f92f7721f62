"""The course's figures, set in one place: their resolution and how they are stored.

``FIGURE_DPI`` = 120 is the resolution of every figure a chapter shows, ``plt.show()``'s
and the explorers' views alike: 10-point text is 17 px tall and a 6-inch figure 720 px
wide (at the 72 dpi the chapters used before, 10 px and 432 px: too small to read on a
wide screen). A figure is stored as a PNG with a palette of 256 colours, which a chart
needs and which keeps a notebook's figures about as many bytes at 120 dpi as they were at
72. A chapter's setup cell calls :func:`use`, with its own sizes::

    al.style.use(**{"figure.figsize": (6, 3)})
"""
from __future__ import annotations

import io

__all__ = ["FIGURE_DPI", "use", "figure_png"]

FIGURE_DPI = 120   # tests/test_notebooks.py checks every stored figure against it
PALETTE = 256      # colours of a stored figure


def figure_png(fig, dpi: float | None = None) -> bytes:
    """A matplotlib figure as compact PNG bytes (tight bounding box, a palette of
    ``PALETTE`` colours, the resolution in the file's ``pHYs`` chunk, no other metadata so
    the bytes are reproducible). The figure stays open.

    Args:
        fig: a matplotlib Figure.
        dpi: resolution. Default: ``None`` (the figure's own, ``FIGURE_DPI`` after :func:`use`).

    Returns:
        the PNG file's bytes.
    """
    from PIL import Image

    dpi = float(dpi or fig.dpi)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    out = io.BytesIO()
    image.quantize(colors=PALETTE, method=Image.Quantize.MEDIANCUT).save(out, format="png", optimize=True,
                                                                        dpi=(dpi, dpi))
    return out.getvalue()


def use(**rc) -> None:
    """Draw the notebook's figures the course's way: at ``FIGURE_DPI``, stored by
    :func:`figure_png`.

    Args:
        **rc: more matplotlib settings for this notebook, e.g.
            ``**{"figure.figsize": (6, 3), "axes.titlesize": 9}``.

    Example::

        >>> al.style.use(**{"figure.figsize": (6, 3)})
    """
    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.rcParams.update({"figure.dpi": FIGURE_DPI, "savefig.dpi": FIGURE_DPI, **rc})
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    # load the notebook's backend now: it registers its own figure format when it loads,
    # which must come before ours
    plt.switch_backend(plt.get_backend())
    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type(matplotlib.figure.Figure, figure_png)
