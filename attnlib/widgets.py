"""Explorers that work live in Jupyter *and* on the static website.

Every view is rendered once, up front, into a PNG; a control (slider or buttons) picks
which one is shown through a ``jslink`` to an ``ipywidgets.Stack``. The link runs in the
browser, so the explorer keeps working on the built site with no kernel (its widget
state is embedded at build time).
"""
from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["Explorer", "explorer"]


class Explorer:
    """A control linked to precomputed views. Display it as the last expression of a cell.

    ``widget`` is the ipywidgets ``VBox``; ``frames`` are the PNG bytes of every view.
    """

    def __init__(self, widget, frames: list, labels: list, description: str):
        self.widget, self.frames, self.labels, self.description = widget, frames, labels, description

    def __repr__(self) -> str:
        return (f"Explorer({self.description!r}: {len(self.frames)} views, "
                f"{', '.join(map(str, self.labels))})")

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle = dict(bundle) if bundle else {}
        bundle["text/plain"] = repr(self)  # stable text for nbval, not the widget's repr
        return bundle


def explorer(render: Callable, values: Sequence, *, description: str, labels: Sequence | None = None,
             control: str = "slider", dpi: int = 72, initial: int = 0) -> Explorer:
    """Precompute ``render(value)`` for every value and link a control to the results.

    Args:
        render: ``render(value) -> matplotlib Figure`` (the figure is closed after use).
        values: the values the control can take, in order.
        description: the control's label.
        labels: text for each value on the control. Default: ``str(value)``.
        control: ``"slider"`` (an integer slider over the positions, its readout showing
            the label) or ``"buttons"`` (toggle buttons). Default: ``"slider"``.
        dpi: resolution of the PNGs; keep notebooks small. Default: ``72``.
        initial: index of the view shown first. Default: ``0``.

    Returns:
        an :class:`Explorer` (display it as the last expression of a cell).

    Raises:
        ValueError: ``labels`` and ``values`` differ in length, or ``control`` is unknown.

    Example::

        >>> al.widgets.explorer(lambda T: plot_weights(T), [0.5, 1, 2], description="temperature")
    """
    import ipywidgets as w

    from .plots import fig_to_png

    values = list(values)
    labels = [str(v) for v in values] if labels is None else [str(s) for s in labels]
    if len(labels) != len(values):
        raise ValueError(f"labels has {len(labels)} entries but values has {len(values)}; give one label per value")
    frames = [fig_to_png(render(v), dpi=dpi) for v in values]
    stack = w.Stack([w.Image(value=f, format="png") for f in frames], selected_index=initial)
    if control == "buttons":
        ctrl = w.ToggleButtons(options=[(lab, i) for i, lab in enumerate(labels)], value=initial,
                               description=description, style={"button_width": "auto"})
        w.jslink((ctrl, "index"), (stack, "selected_index"))
    elif control == "slider":
        ctrl = w.SelectionSlider(options=[(lab, i) for i, lab in enumerate(labels)], value=initial,
                                 description=description, continuous_update=True,
                                 layout=w.Layout(width="420px"), style={"description_width": "initial"})
        w.jslink((ctrl, "index"), (stack, "selected_index"))
    else:
        raise ValueError(f"control must be 'slider' or 'buttons', got {control!r}")
    return Explorer(w.VBox([ctrl, stack]), frames, labels, description)
