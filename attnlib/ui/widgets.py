"""Explorers that work live in Jupyter *and* on the static website, and that show a
picture (never an error) wherever the live control cannot render.

Every view is rendered once, up front, into a PNG; a control (slider or buttons) picks
which one is shown through a ``jslink`` to an ``ipywidgets.Stack``. Each view is an HTML
``<img>`` with its own alt text, which says what that view shows (``alt=``; by default the
control's setting, "query = her"), so a screen reader announces the view the control
picked (:func:`attnlib.ui.plots.png_img`). The link runs in the
browser, so the explorer keeps working on the built site with no kernel (its widget
state is embedded at build time).

Displaying an explorer publishes two outputs:

1. a *still*: an HTML picture of the first view with the line "Run this cell to explore
   …" (and a stable ``text/plain`` line for nbval). Every front end can show it: an
   untrusted notebook in JupyterLab, Colab before the cell has run, GitHub's viewer.
2. the *live* widget view (only ``application/vnd.jupyter.widget-view+json``).

JupyterLab 4 with ipywidgets 8 renders a widget view with its widget renderer (rank -10,
ahead of every other MIME type) but only in a *trusted* output; an untrusted one gets the
best safe type, so there the still shows and the view has nothing safe to show (an empty
output). When the view's model is missing (a trusted notebook reopened without its
widget state) the widget renderer writes "Error displaying widget: model not found"
into an output with no child element. The still's stylesheet (kept only in trusted
outputs, where it is needed) hides that message, and hides the still itself once the
live explorer (class ``attnlib-explorer``) is in the same output area, in JupyterLab
(``.jp-OutputArea``) and on the website (``.cell_output``).
"""
from __future__ import annotations

import html
from typing import Callable, Sequence

from ..i18n import N_, _, join_list
from .plots import png_img
from .style import FIGURE_DPI

__all__ = ["Explorer", "explorer", "RUN_HINT"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
RUN_HINT = N_("Run this cell to explore")
DPI = FIGURE_DPI  # the course's one resolution (attnlib.ui.style): 10-pt text is 17 px tall

_STILL_CSS = f"""
.jp-OutputArea:has(.attnlib-explorer) .attnlib-explorer-still,
.cell_output:has(.attnlib-explorer) .attnlib-explorer-still {{ display: none; }}
.jp-OutputArea:has(.attnlib-explorer-still) .jp-OutputArea-output[data-mime-type="{WIDGET_VIEW}"]:not(:has(*)) {{ display: none; }}
"""


class Explorer:
    """A control linked to precomputed views. Display it as the last expression of a cell.

    ``widget`` is the ipywidgets ``VBox``; ``frames`` are the PNG bytes of every view;
    ``initial`` is the index of the view shown first (and in the still).
    """

    def __init__(self, widget, frames: list, labels: list, description: str, initial: int = 0,
                 alts: list | None = None):
        self.widget, self.frames, self.labels, self.description = widget, frames, labels, description
        self.initial = initial
        self.alts = alts if alts is not None else [f"{description} = {lab}" for lab in labels]

    def __repr__(self) -> str:
        return (f"Explorer({self.description!r}: {len(self.frames)} views, "
                f"{', '.join(map(str, self.labels))})")

    def still_bundle(self) -> dict:
        """The MIME bundle of the still: the first view as a picture and a line saying to
        run the cell. Its ``text/plain`` is stable (nbval compares it)."""
        views = join_list(self.labels)   # 1, 2, 4 (Chinese: 1、2、4)
        label = f"{self.description} = {self.labels[self.initial]}"
        run = _(RUN_HINT)
        line = _("{run}: a {description} control switches between {n} views ({views}). "
                 "This picture is the view for {label}.").format(
            run=run, description=self.description, n=len(self.frames), views=views, label=label)
        page = (f'<div class="attnlib-explorer-still"><style>{_STILL_CSS}</style>'
                f'{png_img(self.frames[self.initial], self.alts[self.initial])}'
                f'<p style="margin:.2em 0;font-style:italic">&#9654; {html.escape(line)}</p></div>')
        text = _("{explorer}. {run}: the picture is the view for {label}.").format(
            explorer=repr(self), run=run, label=label)
        return {"text/html": page, "text/plain": text}

    def _ipython_display_(self) -> None:
        from IPython.display import publish_display_data

        publish_display_data(self.still_bundle())
        view = (self.widget._repr_mimebundle_() or {}).get(WIDGET_VIEW)
        if view is not None:  # no comm (a plain Python shell): the still is all there is
            publish_display_data({WIDGET_VIEW: view})


def explorer(render: Callable, values: Sequence, *, description: str, labels: Sequence | None = None,
             alt: Callable | Sequence | None = None, control: str = "slider", dpi: int = DPI,
             initial: int = 0) -> Explorer:
    """Precompute ``render(value)`` for every value and link a control to the results.

    Args:
        render: ``render(value) -> matplotlib Figure`` (the figure is closed after use).
        values: the values the control can take, in order.
        description: the control's label.
        labels: text for each value on the control. Default: ``str(value)``.
        alt: what each view shows, for a reader who cannot see it (the view's alt text,
            also the still's): ``alt(value) -> str``, or one text per value, written in
            the chapter's language like its printed text ("query 'her' attends most to
            Anna"). Default: ``None`` (the setting only: "query = her").
        control: ``"slider"`` (an integer slider over the positions, its readout showing
            the label) or ``"buttons"`` (toggle buttons). Default: ``"slider"``.
        dpi: resolution of the PNGs. Default: ``DPI``, the course's ``FIGURE_DPI`` (120).
        initial: index of the view shown first. Default: ``0``.

    Returns:
        an :class:`Explorer` (display it as the last expression of a cell). Where the live
        control cannot render, a picture of the first view and the line "Run this cell
        to explore" show instead.

    Raises:
        ValueError: ``labels`` (or ``alt`` as a sequence) and ``values`` differ in length,
            ``control`` is unknown, or a view's ``alt`` is empty.

    Example::

        >>> al.widgets.explorer(lambda T: plot_weights(T), [0.5, 1, 2], description="temperature")
    """
    import ipywidgets as w

    from .plots import fig_to_png

    values = list(values)
    labels = [str(v) for v in values] if labels is None else [_(str(s)) for s in labels]
    description = _(description)
    if len(labels) != len(values):
        raise ValueError(f"labels has {len(labels)} entries but values has {len(values)}; give one label per value")
    if control not in ("slider", "buttons"):
        raise ValueError(f"control must be 'slider' or 'buttons', got {control!r}")
    if alt is None:
        alts = [f"{description} = {lab}" for lab in labels]
    elif callable(alt):
        alts = [alt(v) for v in values]
    else:
        alts = list(alt)
        if len(alts) != len(values):
            raise ValueError(f"alt has {len(alts)} entries but values has {len(values)}; give one text per "
                             "value, or a function of the value")
    frames = [fig_to_png(render(v), dpi=dpi) for v in values]
    stack = w.Stack([w.HTML(value=png_img(f, a)) for f, a in zip(frames, alts)], selected_index=initial)
    if control == "buttons":
        ctrl = w.ToggleButtons(options=[(lab, i) for i, lab in enumerate(labels)], value=initial,
                               description=description, style={"button_width": "auto"})
    else:
        ctrl = w.SelectionSlider(options=[(lab, i) for i, lab in enumerate(labels)], value=initial,
                                 description=description, continuous_update=True,
                                 layout=w.Layout(width="420px"), style={"description_width": "initial"})
    w.jslink((ctrl, "index"), (stack, "selected_index"))
    box = w.VBox([ctrl, stack])
    box.add_class("attnlib-explorer")
    return Explorer(box, frames, labels, description, initial, alts)
