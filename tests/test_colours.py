"""Every colour attnlib writes text in is legible where a notebook output is read: a
contrast of at least 4.5:1 (WCAG 2 AA) on white and on the grey the website's dark mode
puts behind outputs (attnlib.ui.colours)."""
from __future__ import annotations

import pathlib
import re

import pytest

from attnlib.ui import colours

ATTNLIB = pathlib.Path(colours.__file__).resolve().parents[1]
# a text colour written in attnlib's HTML: "color:#rrggbb" (not background-color, fill or border)
TEXT_COLOUR = re.compile(r"(?<![-\w])color\s*:\s*(#[0-9a-fA-F]{6})\b")


def test_contrast_matches_wcag_examples():
    assert colours.contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert colours.contrast("#ffffff", "#ffffff") == pytest.approx(1.0)
    assert colours.contrast("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)  # the AA grey on white


@pytest.mark.parametrize("background", colours.BACKGROUNDS)
@pytest.mark.parametrize("name", ["PASSED", "FAILED", "MUTED", "WARNING"])
def test_palette_text_is_legible_on_every_output_background(name, background):
    assert colours.contrast(getattr(colours, name), background) >= 4.5


def test_the_old_primer_colours_fail_on_the_dark_modes_output_grey():
    # what axe-core found on the site's dark mode before the palette (so the check can fail)
    for old in ("#1a7f37", "#cf222e", "#6e7781", "#9a6700"):
        assert colours.contrast(old, "#ced6dd") < 4.5


def _literal_text_colours() -> list[tuple[str, str]]:
    found = []
    for path in sorted(ATTNLIB.rglob("*.py")):
        for colour in TEXT_COLOUR.findall(path.read_text(encoding="utf-8")):
            found.append((path.relative_to(ATTNLIB).as_posix(), colour))
    return found


def test_no_learner_facing_html_writes_text_in_a_colour_outside_the_palette():
    """What a learner sees (attnlib.ui, attnlib.exercises, the student notebooks) takes its
    colours from attnlib.ui.colours; the teacher's report is a page of its own (white)."""
    stray = [(f, c) for f, c in _literal_text_colours() if not f.startswith("grading/report")]
    assert not stray, f"text colours written outside attnlib.ui.colours: {stray}"


def test_the_teachers_report_text_is_legible_on_white():
    from attnlib.grading import report

    used = [c for f, c in _literal_text_colours() if f.startswith("grading/report")] + list(report.COLOURS.values())
    low = [(c, round(colours.contrast(c, "#ffffff"), 2)) for c in used if colours.contrast(c, "#ffffff") < 4.5]
    assert used and not low, f"report text below 4.5:1 on white: {low}"
