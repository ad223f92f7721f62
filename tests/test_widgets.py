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


def test_explorer_frames_render_at_the_courses_dpi():
    import io

    from PIL import Image

    from attnlib.ui.style import FIGURE_DPI
    ex = al.widgets.explorer(_render, [1], description="k")
    image = Image.open(io.BytesIO(ex.frames[0]))
    assert FIGURE_DPI >= 110 and image.info["dpi"][0] >= FIGURE_DPI - 0.5
    assert image.size[0] >= 3 * FIGURE_DPI * 0.8, (
        f"a 3-inch figure should be about {3 * FIGURE_DPI} px wide at {FIGURE_DPI} dpi, got {image.size[0]}")
    assert image.mode == "P", "a stored figure is a palette PNG (attnlib.ui.style.figure_png)"


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


# ------------------------------------------------------------------ alt text (attnlib.ui.plots.show, explorer alt=)

def _alts(page: str) -> list[str]:
    import html

    return [html.unescape(a) for a in re.findall(r'<img [^>]*alt="([^"]*)"', page)]


def test_show_displays_the_figure_with_its_alt_text_and_closes_it():
    import IPython.display

    seen = []
    orig = IPython.display.display
    IPython.display.display = lambda obj, *a, **k: seen.append(obj)
    try:
        fig = _render(2.0)
        al.plots.show(fig, alt="bars: a is 2, twice b")
    finally:
        IPython.display.display = orig
    assert not plt.fignum_exists(fig.number), "the figure must be closed (no second copy under plt.show())"
    (shown,) = seen
    page = shown._repr_html_()
    assert _alts(page) == ["bars: a is 2, twice b"]
    png = base64.b64decode(re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png == shown.png
    assert repr(shown) == "Figure: bars: a is 2, twice b"  # the plain-text form (nbval compares it)


@pytest.mark.parametrize("alt", ["", "   ", None])
def test_show_refuses_a_figure_without_alt_text(alt):
    fig = _render(1.0)
    with pytest.raises(ValueError, match="alt must be a text"):
        al.plots.show(fig, alt=alt)
    plt.close(fig)


def test_every_explorer_view_carries_its_own_alt_text():
    ex = al.widgets.explorer(_render, [1, 2, 3], description="k", initial=2,
                             alt=lambda k: f"a is {k}, b is 1")
    views = [child.value for child in ex.widget.children[1].children]
    assert [_alts(v) for v in views] == [["a is 1, b is 1"], ["a is 2, b is 1"], ["a is 3, b is 1"]]
    for v, frame in zip(views, ex.frames):  # each view is its own picture
        assert base64.b64decode(re.search(r'base64,([^"]+)"', v).group(1)) == frame
    still = ex.still_bundle()["text/html"]
    assert _alts(still) == ["a is 3, b is 1"], "the still is the initial view, with that view's alt text"


def test_explorer_alt_defaults_to_the_setting_and_checks_its_length():
    ex = al.widgets.explorer(_render, [1, 2], description="k", labels=["one", "two"])
    assert [_alts(c.value) for c in ex.widget.children[1].children] == [["k = one"], ["k = two"]]
    ex = al.widgets.explorer(_render, [1, 2], description="k", alt=["a is one", "a is two"])
    assert _alts(ex.still_bundle()["text/html"]) == ["a is one"]
    with pytest.raises(ValueError, match="alt has 1 entries but values has 2"):
        al.widgets.explorer(_render, [1, 2], description="k", alt=["only one"])
    with pytest.raises(ValueError, match="alt must be a text"):
        al.widgets.explorer(_render, [1, 2], description="k", alt=lambda k: "")
