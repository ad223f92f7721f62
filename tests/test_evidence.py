"""attnlib.ui.evidence: what an evidence block prints is one closed <details> element (HTML)
with the same lines as plain text; a failing check shows what was printed and still fails."""
from __future__ import annotations

import pytest

import attnlib as al
from attnlib.ui.evidence import CSS_CLASS, EvidenceView


def _captured(monkeypatch):
    """Run blocks as in a notebook: IPython present, display() collected."""
    shown = []
    import IPython
    import IPython.display

    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    return shown


def test_what_the_block_prints_is_one_closed_details_element(monkeypatch, capsys):
    shown = _captured(monkeypatch)
    with al.evidence("the range over the seeds"):
        print("seed 0: 1.02 < 2")
        print("seed 1: 0.98")
    assert capsys.readouterr().out == ""   # nothing outside the element
    (view,) = shown
    page = view._repr_html_()
    assert page.startswith(f'<details class="{CSS_CLASS}"><summary>Evidence: the range over the seeds</summary>')
    assert "<details open" not in page and "&lt; 2" in page        # closed, and escaped
    assert repr(view) == "Evidence: the range over the seeds\nseed 0: 1.02 < 2\nseed 1: 0.98"


def test_a_failing_check_shows_its_lines_and_fails(monkeypatch, capsys):
    shown = _captured(monkeypatch)
    with pytest.raises(AssertionError):
        with al.evidence("bounds"):
            print("largest gap 0.3")
            assert 0.3 < 0.1
    assert shown == [] and "largest gap 0.3" in capsys.readouterr().out


def test_outside_a_notebook_the_plain_text_is_printed(capsys):
    with al.evidence():
        print("x")
    assert capsys.readouterr().out == "Evidence\nx\n"


def test_the_summary_speaks_the_notebooks_language():
    al.set_language("zh")
    try:
        assert EvidenceView("1", "每个种子")._repr_html_().startswith(f'<details class="{CSS_CLASS}"><summary>证据：每个种子')
    finally:
        al.set_language("en")


def test_a_title_that_is_not_text_is_refused():
    with pytest.raises(TypeError, match="title"):
        al.evidence(3)
