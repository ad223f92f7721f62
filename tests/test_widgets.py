"""Explorers show a still picture wherever the live control cannot render, and the text
of the course's figures is legible (attnlib.ui.widgets, attnlib.ui.plots)."""
from __future__ import annotations

import base64
import re

import pytest

pytest.importorskip("ipywidgets")
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import attnlib as al  # noqa: E402
from attnlib.ui.widgets import RUN_HINT, WIDGET_VIEW  # noqa: E402


def _render(k):
    fig, ax = plt.subplots(figsize=(3, 2))
    al.plots.bars(ax, [k, 1.0], ["a", "b"])
    return fig


def _published(ex):
    """The display_data bundles an explorer publishes (IPython's publish_display_data)."""
    import IPython.display

    seen = []
    orig = IPython.display.publish_display_data
    IPython.display.publish_display_data = lambda data, *a, **k: seen.append(data)
    try:
        ex._ipython_display_()
    finally:
        IPython.display.publish_display_data = orig
    return seen


def test_explorer_publishes_a_still_then_the_live_view():
    ex = al.widgets.explorer(_render, [1, 2, 3], description="k", initial=1)
    still, view = _published(ex)
    assert set(view) == {WIDGET_VIEW}, "the live view must carry only the widget MIME type (no text to show raw)"
    assert view[WIDGET_VIEW]["model_id"] == ex.widget.model_id
    assert "attnlib-explorer" in ex.widget._dom_classes
    page = still["text/html"]
    png = re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1)
    assert base64.b64decode(png) == ex.frames[1], "the still must be the initial view"
    assert RUN_HINT in page and RUN_HINT in still["text/plain"]
    # the still hides itself next to a live explorer and hides a widget output that failed
    assert ".jp-OutputArea:has(.attnlib-explorer) .attnlib-explorer-still" in page
    assert ".cell_output:has(.attnlib-explorer) .attnlib-explorer-still" in page
    assert f'[data-mime-type="{WIDGET_VIEW}"]:not(:has(*))' in page


def test_still_text_is_stable_for_nbval():
    a = al.widgets.explorer(_render, [1, 2], description="k").still_bundle()["text/plain"]
    b = al.widgets.explorer(_render, [1, 2], description="k").still_bundle()["text/plain"]
    assert a == b and "Explorer('k': 2 views, 1, 2)" in a


def test_explorer_frames_render_at_100_dpi():
    ex = al.widgets.explorer(_render, [1], description="k")
    w_px = int.from_bytes(ex.frames[0][16:20], "big")  # PNG IHDR width
    assert w_px >= 3 * 100 * 0.8, f"a 3-inch figure should be about 300 px wide at 100 dpi, got {w_px}"


@pytest.mark.parametrize("kind", ["heatmap", "bars"])
def test_values_written_on_figures_are_at_least_10_px_at_72_dpi(kind):
    fig, ax = plt.subplots(figsize=(6, 3), dpi=72)
    if kind == "heatmap":
        al.plots.heatmap(ax, np.random.default_rng(0).random((8, 8)))
    else:
        al.plots.bars(ax, np.arange(5) / 5, list("abcde"))
    sizes = [t.get_fontsize() * fig.dpi / 72 for t in ax.texts]
    plt.close(fig)
    assert sizes and min(sizes) >= 10, f"{kind}: values written at {min(sizes):.1f} px"
