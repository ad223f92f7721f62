"""Printed output is never cut off: at 1280 px (and at a phone's 390 px) every line a chapter
prints fits its box, wrapping where it would overflow (site_assets/attnlib-site.css), on every
chapter and solutions page of both editions (issue 31: "…below 1e-12: Tr" was cut at 1280 px)."""
from __future__ import annotations

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = pathlib.Path(os.environ.get("ATTNLIB_SITE", ROOT / "_build" / "html"))  # as in conftest.py
NOTEBOOK_PAGES = [p.relative_to(SITE).as_posix() for folder in ("chapters", "zh/chapters", "solutions", "zh/solutions")
                  for p in sorted((SITE / folder).glob("*.html"))]

# every <pre> of a cell's output whose text is wider than its box (scrolled or clipped)
CLIPPED = """() => Array.from(document.querySelectorAll('div.cell_output pre')).filter(
    e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText.split('\\n').sort((a, b) => b.length - a.length)[0]
    .slice(0, 80))"""


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("path", NOTEBOOK_PAGES)
def test_no_printed_line_is_cut_off(open_page, path, width):
    if not NOTEBOOK_PAGES:
        pytest.skip("no built site")
    page, _ = open_page(path, viewport={"width": width, "height": 900})
    clipped = page.evaluate(CLIPPED)
    assert not clipped, f"{path} at {width} px: printed lines wider than their box: {clipped[:5]}"
