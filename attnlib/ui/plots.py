"""Small plotting helpers shared by the chapters (matplotlib, imported lazily).

**Every figure says what it shows.** A chapter shows a figure with
``al.plots.show(fig, alt="...")`` instead of ``plt.show()``: ``alt`` is a short
description of the figure's finding (its title is often the right start), written where
the figure is made, in the chapter's language (the Chinese notebooks carry it translated,
like printed text). It becomes the picture's alt text, which a screen reader reads, in
JupyterLab, Colab and on the website alike (an HTML ``<img>``), and the figure's plain-text
form. The explorers' views carry theirs the same way (:func:`attnlib.ui.widgets.explorer`,
``alt=``).

Text is sized to stay legible at 1x and at 2x zoom: the values written on bars and in
heatmap cells are ``VALUE_PT`` = 10 points (9 in heatmaps of more than 64 cells), i.e.
17 px at the figures' 120 dpi (:mod:`attnlib.ui.style`).
"""
from __future__ import annotations

import base64
import html
import io
import time

from ..i18n import N_, _

# a LivePlot redraws at most once in this many seconds while it trains (each redraw is
# ~0.15 s on a 2-core machine)
LIVE_SECONDS = 2.0
VALUE_PT = 10  # font size of the numbers written on heatmaps and bars

__all__ = ["fig_to_png", "png_img", "show", "Shown", "heatmap", "bars", "LivePlot"]


def fig_to_png(fig, dpi: float | None = None) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it (a compact PNG, no other
    metadata, so the bytes are reproducible: :func:`attnlib.ui.style.figure_png`).

    Args:
        fig: a matplotlib Figure; it is closed afterwards.
        dpi: resolution. Default: ``None`` (``attnlib.ui.style.FIGURE_DPI``).

    Returns:
        the PNG file's bytes.

    Example::

        >>> png = al.plots.fig_to_png(plt.figure(figsize=(6, 3)))
    """
    import matplotlib.pyplot as plt

    from .style import FIGURE_DPI, figure_png

    png = figure_png(fig, dpi or FIGURE_DPI)
    plt.close(fig)
    return png


def png_img(png: bytes, alt: str, style: str = "max-width:100%") -> str:
    """An HTML ``<img>`` of PNG bytes (a data URI, so the notebook and the page need no
    file) with its alt text.

    Args:
        png: the PNG file's bytes (:func:`fig_to_png`).
        alt: what the picture shows, for a reader who cannot see it; not empty.
        style: the ``style`` attribute. Default: ``"max-width:100%"``.

    Returns:
        the ``<img>`` element as a string.

    Raises:
        ValueError: ``alt`` is empty.
    """
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError(f"alt must be a text that says what the picture shows, got {alt!r}; "
                         "write the figure's finding, e.g. alt=\"weights: 'her' attends most to Anna\"")
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt.strip())}" style="{style}">'


class Shown:
    """A figure rendered to PNG with what it shows (see :func:`show`): HTML, an ``<img>``
    with that alt text; plain text, the description."""

    def __init__(self, png: bytes, alt: str):
        png_img(png, alt)  # the same checks
        self.png, self.alt = png, alt.strip()

    def __repr__(self) -> str:
        return _("Figure: {alt}").format(alt=self.alt)

    def _repr_html_(self) -> str:
        return png_img(self.png, self.alt)


def show(fig, alt: str, *, dpi: float | None = None) -> None:
    """Show a matplotlib figure with its alt text, in place of ``plt.show()``, and close it.

    Args:
        fig: a matplotlib Figure (``plt.gcf()`` for the current one); it is closed afterwards.
        alt: what the figure shows, in a sentence or two, for a reader who cannot see it:
            its finding ("weights: 'her' puts 0.87 on Anna"), not its file or kind.
        dpi: resolution. Default: ``None`` (the figure's own, as ``plt.show()`` draws it).

    Returns:
        None (like ``plt.show()``). The notebook shows the picture, with ``alt`` as its alt
        text and as its plain-text form (:class:`Shown`).

    Raises:
        ValueError: ``alt`` is empty.

    Example::

        >>> fig, ax = plt.subplots()
        >>> al.plots.heatmap(ax, weights)
        >>> al.plots.show(fig, alt="Weights: each query puts most of its attention on the key before it")
    """
    if not isinstance(alt, str) or not alt.strip():
        png_img(b"", alt)  # raises, naming the argument, before the figure is drawn
    shown = Shown(fig_to_png(fig, dpi=dpi or fig.dpi), alt)
    try:
        from IPython.display import display
    except ImportError:  # no IPython: the description is all a plain terminal can show
        print(repr(shown))
        return
    display(shown)  # outside IPython this prints the description


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


class LivePlot:
    """Curves of :func:`attnlib.instruments.train.train_seeds`'s evaluations that redraw while
    it trains (in Jupyter), then stay as the cell's one figure (what the website shows), with
    its alt text once the last run is done. Every seed is one thin line.
    One LivePlot can follow several runs in turn (pass it to each ``train_seeds`` call):
    the runs already finished stay in the figure, each in its own colour. While a run trains,
    the title says which step it is at.

    Args:
        keys: the evaluated quantities to draw.
        labels: legend text per key of each run, in order: ``len(keys)`` labels per run
            (run ``r``'s key ``k`` is ``labels[r * len(keys) + k]``). Default: the keys.
        title: the axes' title once every run is done (use it to state the finding).
            Default: ``""``.
        every: redraw after this many evaluations (and at most once every ``LIVE_SECONDS``
            seconds: a redraw costs a few tenths of a second). Default: ``5``.
        ylabel: Default: ``"loss (nats)"``.
        figsize: Default: ``(6, 3)``.
        hlines: ``{label: y}``: dashed reference lines (e.g. chance). Default: ``None``.
        xmax: the last training step shown (longer runs are cut there). Default: ``None`` (all).
        legend_loc: where the legend goes (matplotlib's ``loc``), or ``"outside"``: to the
            right of the axes, where it can cover no curve. Default: ``"best"``.
        alt: what the finished figure shows (see :func:`show`): a text, or a function of the
            list of runs drawn (:class:`~attnlib.instruments.train.SeedRun`, in order) that
            returns it, so that it can name numbers from the data. It is used once the last
            run is done, the one that ``labels`` has the last labels for; the figure then
            becomes a picture with this alt text (:class:`Shown`). Default: ``None`` (the
            figure stays a bare matplotlib figure, without alt text).

    Only figures are displayed (no text), so a re-run leaves the same text output.

    Example::

        >>> live = al.plots.LivePlot(["repeat"], ["scaled", "unscaled"], title="Unscaled scores do not train",
        ...                          alt=lambda runs: f"Repeat loss of 5 seeds: {runs[0].final('repeat').mean():.1f} nats")
        >>> for scaled in (True, False):
        ...     train.train_seeds(..., live=live)
    """

    def __init__(self, keys, labels=None, *, title: str = "", every: int = 5,
                 ylabel: str = N_("loss (nats)"), figsize=(6, 3), hlines: dict | None = None,
                 xmax: int | None = None, legend_loc: str = "best", alt=None):
        self.keys, self.labels = list(keys), list(labels or keys)
        self.alt = alt
        self.title, self.every, self.ylabel, self.figsize = title, every, ylabel, figsize
        self.hlines, self.xmax, self.legend_loc = dict(hlines or {}), xmax, legend_loc
        self._runs: list = []   # the runs drawn so far (finished ones, then the one training)
        self._handle, self._fig, self._n, self._drawn_at = None, None, 0, None

    def add(self, run):
        """Draw a run that finished before (e.g. trained in an earlier cell) with the next labels."""
        self._runs.append(run)

    def _label(self, r: int, k: int) -> str:
        i = r * len(self.keys) + k
        return self.labels[i] if i < len(self.labels) else self.keys[k]

    def _draw(self, title: str):
        import matplotlib.pyplot as plt

        if self._fig is None:
            self._fig, self._ax = plt.subplots(figsize=self.figsize)
            plt.close(self._fig)  # shown through display() only, never by the inline backend
        ax = self._ax
        ax.clear()
        for r, run in enumerate(self._runs):
            for k, key in enumerate(self.keys):
                steps, vals = run.eval_series(key)                         # (E,), (E, S)
                keep = steps <= (self.xmax if self.xmax is not None else steps.max())
                colour = f"C{(r * len(self.keys) + k) % 10}"
                ax.plot(steps[keep], vals[keep], color=colour, lw=1, alpha=0.8)
                ax.plot([], [], color=colour, label=self._label(r, k))    # one legend entry per curve set
        for k, (label, y) in enumerate(self.hlines.items()):
            ax.axhline(y, color="0.5", ls=("--", ":", "-.")[k % 3], lw=1, label=label)
        ax.set_xlabel(N_("training step"))
        ax.set_ylabel(self.ylabel)
        ax.set_title(title, fontsize=10)
        if self.legend_loc == "outside":
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        else:
            ax.legend(fontsize=8, loc=self.legend_loc)
        self._fig.tight_layout()

    def update(self, run, step: int, steps: int):
        """Redraw every ``every`` evaluations, titled with the progress."""
        if not self._runs or self._runs[-1] is not run:
            self._runs.append(run)
        self._n += 1
        recent = self._drawn_at is not None and time.monotonic() - self._drawn_at < LIVE_SECONDS
        if self._n % self.every == 0 and not recent:
            self._show(_("training {n} seeds: step {step} of {steps}").format(
                n=len(run.seeds), step=step, steps=steps), live=True)

    def close(self, run):
        """Draw the curves with the final title (in place of the live ones); after the last
        run, with the alt text (``alt``)."""
        if not self._runs or self._runs[-1] is not run:
            self._runs.append(run)
        self._show(self.title, final=len(self._runs) * len(self.keys) >= len(self.labels))

    def alt_text(self) -> str | None:
        """The finished figure's alt text (``alt``, called with the runs drawn when it is a function)."""
        return self.alt(list(self._runs)) if callable(self.alt) else self.alt

    def _show(self, title: str, final: bool = False, live: bool = False):
        """Redraw and show the curves in the notebook; nothing in plain Python (tests).

        The live pictures are PNG only (``image/png``, one display updated in place); the
        finished figure with its alt text replaces the cell's output (``clear_output``), so
        a stored notebook holds that one picture. A re-run checked output by output (strict
        nbval, which ignores display updates, clearing and ``image/png``) then sees the same
        text as the stored notebook: the finished figure's. So a cell with a LivePlot that
        has ``alt`` should print nothing else: the clearing would remove it. A ``live``
        picture (one that a later one replaces, never stored) is a plain PNG, not the
        compact one of :func:`~attnlib.ui.style.figure_png`: half the time to make.
        """
        try:
            from IPython import get_ipython
            from IPython.display import clear_output, display
        except ImportError:  # pragma: no cover
            return
        if get_ipython() is None:
            return
        from .style import figure_png

        self._draw(title)
        if final and self.alt is not None:  # the finished figure: a picture with its alt text
            shown = Shown(fig_to_png(self._fig, dpi=self._fig.dpi), self.alt_text())
            self._fig, self._handle = None, None  # fig_to_png closed it: a later run draws anew
            clear_output()
            display(shown)
            return
        if live:
            buf = io.BytesIO()
            self._fig.savefig(buf, format="png", dpi=self._fig.dpi, bbox_inches="tight")
            png = buf.getvalue()
        else:
            png = figure_png(self._fig, self._fig.dpi)
        self._drawn_at = time.monotonic()
        data = {"image/png": base64.b64encode(png).decode("ascii")}
        if self._handle is None:
            self._handle = display(data, raw=True, display_id=True)
        else:
            self._handle.update(data, raw=True)
