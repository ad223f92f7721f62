"""Accessibility of the built website, in Debian's Chromium with the network cut.

* **axe-core** (npm, vendored by ``make assets`` into site_assets/vendor/axe-core/, kept out
  of the published site; injected into the page by the test, in the same page load as
  test_site.py's offline checks and the check that no printed line is cut off) checks every page of both
  editions with every hidden answer and quiz feedback opened: in the light colour mode with
  all its rules, then in the dark mode (the theme's ``data-theme`` / ``data-mode``) with the
  rules whose result depends on colours. No violation of impact "serious" or "critical" is
  allowed, nor any of the moderate ones about the page's structure (headings in order,
  landmarks). Each page also declares its edition's language (``lang="zh-CN"`` on the
  Chinese pages), and every formula carries MathJax's assistive MathML, which screen readers
  read (the rendered formula itself is hidden from them).
* **The keyboard**: a chapter is walked with the Tab key alone, from the top of the page;
  every quiz choice and every explorer control must be reached in the order of the page,
  show a focus ring when it is, and work from the keyboard: Enter on a choice reveals its
  feedback, the right arrow moves a slider and Space presses a button, and both change the
  explorer's picture.
"""
from __future__ import annotations

import json
import os
import pathlib
import re

import pytest
from playwright.sync_api import Error as PlaywrightError

from test_site import (NOTEBOOK_PAGES, PHONE, SHOWN_IMAGE, _settle, chapter_pages, clipped_output, offline_problems,
                       phone_pages, phone_problems)
from test_site import PAGES as SITE_PAGES

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = pathlib.Path(os.environ.get("ATTNLIB_SITE", ROOT / "_build" / "html"))  # as in conftest.py
AXE = ROOT / "site_assets" / "vendor" / "axe-core" / "axe.min.js"

pytestmark = pytest.mark.browser

# what fails the test: every violation of these impacts, and these rules whatever their
# impact (axe-core rates them moderate): headings in order, content inside landmarks, ...
IMPACTS = {"serious", "critical"}
STRUCTURE_RULES = {"heading-order", "page-has-heading-one", "region", "landmark-one-main", "landmark-unique",
                   "landmark-no-duplicate-banner", "landmark-no-duplicate-contentinfo", "landmark-no-duplicate-main",
                   "landmark-main-is-top-level", "landmark-banner-is-top-level", "landmark-contentinfo-is-top-level",
                   "landmark-complementary-is-top-level", "empty-heading"}
# the rules that see colours: the only ones whose result the dark mode can change
COLOUR_RULES = ["color-contrast", "link-in-text-block"]

# every page of both editions, with their search pages (404.html is served elsewhere)
PAGES = phone_pages()


@pytest.fixture(scope="session")
def axe_source() -> str:
    if not AXE.is_file():
        reason = f"axe-core is missing ({AXE.relative_to(ROOT)}): run `make assets`"
        if os.environ.get("ATTNLIB_REQUIRE_SITE") == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return AXE.read_text(encoding="utf-8")


RUN_AXE = """async (rules) => {
    const options = {resultTypes: ['violations']};
    if (rules) options.runOnly = {type: 'rule', values: rules};
    const result = await axe.run(document, options);
    return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 160),
                                  why: (n.failureSummary || '').replace(/\\s+/g, ' ').slice(0, 240)}))}));
}"""

# the mode as the theme's own switch sets it (pydata-sphinx-theme: data-theme and data-mode
# on <html>), then wait for the colours' transitions to end
SET_MODE = """async (mode) => {
    document.documentElement.dataset.mode = mode;
    document.documentElement.dataset.theme = mode;
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    await Promise.all(document.getAnimations().map(a => a.finished.catch(() => null)));
    const bg = getComputedStyle(document.body).backgroundColor.match(/[\\d.]+/g).map(Number);
    return [document.documentElement.dataset.theme, (0.2126 * bg[0] + 0.7152 * bg[1] + 0.0722 * bg[2]) / 255];
}"""

OPEN_EVERYTHING = """() => {
    document.querySelectorAll('details').forEach(d => { d.open = true; });
}"""

# every formula: MathJax's output hidden from screen readers, and beside it the formula as
# MathML for them (MathJax's assistive MathML)
MATH_FOR_SCREEN_READERS = """() => Array.from(document.querySelectorAll('mjx-container')).filter(c => {
    const shown = c.querySelector(':scope > mjx-math');
    const mml = c.querySelector(':scope > mjx-assistive-mml > math');
    return !(shown && shown.getAttribute('aria-hidden') === 'true' && mml && mml.textContent.trim());
}).map(c => c.outerHTML.slice(0, 100))"""


def _describe(violations: list[dict], mode: str) -> list[str]:
    out = []
    for v in violations:
        nodes = "; ".join(f"{n['target']} ({n['why']})" for n in v["nodes"][:3])
        more = f" and {len(v['nodes']) - 3} more" if len(v["nodes"]) > 3 else ""
        out.append(f"[{mode}] {v['id']} ({v['impact']}, {len(v['nodes'])} elements): {v['help']}: {nodes}{more}")
    return out


def _failing(violations: list[dict]) -> list[dict]:
    return [v for v in violations if v["impact"] in IMPACTS or v["id"] in STRUCTURE_RULES]


# the page's window resized, then the layout done (two animation frames)
RELAID_OUT = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(window.innerWidth))))"


# pydata-sphinx-theme gives a scrollable code block or output tabindex 0 (and -1 otherwise)
# 300 ms after the last resize (debounced): after the window is widened again, axe must wait
# for that pass, or on a loaded machine it sees the tab stops of the phone's layout
TAB_STOPS_SETTLED = """() => Array.from(document.querySelectorAll(
    'pre, .nboutput > .output_area, .cell_output > .output, .jp-RenderedHTMLCommon, .pst-scrollable-table-container'))
    .every(el => el.tabIndex === ((el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight) ? 0 : -1))"""


def _resize(page, viewport: dict) -> None:
    page.set_viewport_size(viewport)
    assert page.evaluate(RELAID_OUT) == viewport["width"]
    page.wait_for_function(TAB_STOPS_SETTLED, timeout=10_000, polling=100)


@pytest.mark.parametrize("path", PAGES)
def test_page_works_offline_fits_a_phone_and_axe_finds_no_serious_violation(open_page, site, axe_source, path):
    """Every page at 1280 px, loaded once (a chapter's load and typesetting is most of the
    time of each check): printed output not cut off; the window narrowed to a phone's 390 px
    for test_site.phone_problems and widened again; the page working offline
    (test_site.offline_problems: formulas, images, widgets, each quiz and explorer used),
    then axe-core with everything opened, in the light and the dark mode."""
    page, log = open_page(path)
    problems = _settle(page)
    if path in NOTEBOOK_PAGES:
        problems += clipped_output(page, 1280)
    _resize(page, PHONE)
    problems += phone_problems(page, path)
    _resize(page, {"width": 1280, "height": 900})
    if path in SITE_PAGES:  # (the search pages have their own tests)
        problems += offline_problems(page)
    page.evaluate(OPEN_EVERYTHING)  # quiz feedback, hidden answers and code are checked too
    page.add_script_tag(content=axe_source)

    lang = page.evaluate("() => document.documentElement.lang")
    expected = "zh-CN" if path.startswith("zh/") else "en"
    if lang != expected:
        problems.append(f'<html lang="{lang}">, expected "{expected}"')

    theme, _ = page.evaluate(SET_MODE, "light")
    assert theme == "light"
    problems += _describe(_failing(page.evaluate(RUN_AXE, None)), "light")

    theme, luminance = page.evaluate(SET_MODE, "dark")
    assert theme == "dark" and luminance < 0.2, f"the dark mode did not take effect: {theme}, {luminance:.2f}"
    problems += _describe(_failing(page.evaluate(RUN_AXE, COLOUR_RULES)), "dark")

    missing = page.evaluate(MATH_FOR_SCREEN_READERS)
    if missing:
        problems.append(f"{len(missing)} formulas without assistive MathML, e.g. {missing[:2]}")
    problems += log.problems()
    assert not problems, f"{path}:\n  " + "\n  ".join(problems)


def test_formulas_are_read_as_mathml(open_page, site):
    """A chapter's formulas reach a screen reader as MathML: the assistive MathML is on
    (``mathjax3_config`` in _config.yml) and holds the formula's symbols."""
    path = "chapters/03_scaling.html" if (SITE / "chapters/03_scaling.html").is_file() else chapter_pages()[0]
    page, log = open_page(path)
    assert not _settle(page)
    state = page.evaluate("""() => ({
        enabled: MathJax.config.options.enableAssistiveMml,
        containers: document.querySelectorAll('mjx-container').length,
        mathml: Array.from(document.querySelectorAll('mjx-container > mjx-assistive-mml > math'))
                     .map(m => m.outerHTML)})""")
    assert state["enabled"] is True
    assert state["containers"] > 10 and len(state["mathml"]) == state["containers"], state["containers"]
    # e.g. 1/sqrt(d_k): an <msqrt> with a subscripted d
    assert any("<msqrt>" in m for m in state["mathml"]), state["mathml"][:3]
    assert any(re.search(r"<msub><mi>d</mi><mi>k</mi></msub>", m) for m in state["mathml"]), state["mathml"][:3]


# ------------------------------------------------------------------------------ keyboard

def _controls(path: str) -> set[str]:
    """The kinds of explorer control a built page embeds ("slider", "buttons")."""
    f = SITE / path
    text = f.read_text(encoding="utf-8", errors="replace") if f.is_file() else ""
    return ({"slider"} if "SelectionSliderModel" in text else set()) | ({"buttons"} if "ToggleButtonsModel" in text else set())


def keyboard_pages() -> list[str]:
    """The fewest English chapters that hold both kinds of explorer control and quizzes
    (the one with the most kinds first), and the Chinese edition of the first."""
    english = [p for p in chapter_pages() if not p.startswith("zh/")]
    chosen, covered = [], set()
    for p in sorted(english, key=lambda p: -len(_controls(p))):
        if _controls(p) - covered:
            chosen.append(p)
            covered |= _controls(p)
    if chosen and (SITE / ("zh/" + chosen[0])).is_file():
        chosen.append("zh/" + chosen[0])
    return chosen or ["(none)"]


# mark what the walk must reach: every quiz choice, every explorer control
MARK_TARGETS = """() => {
    const targets = [];
    document.querySelectorAll('.attnlib-quiz summary').forEach(e => targets.push([e, 'quiz choice']));
    document.querySelectorAll('.attnlib-explorer .noUi-handle').forEach(e => targets.push([e, 'slider']));
    document.querySelectorAll('.attnlib-explorer button.widget-toggle-button').forEach(e => targets.push([e, 'button']));
    targets.sort((a, b) => a[0].compareDocumentPosition(b[0]) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1);
    return targets.map(([e, kind], i) => { e.dataset.kbdTarget = i; return kind; });
}"""

# what has the focus now, and whether it shows a focus ring (an outline, or the theme's
# box-shadow ring, at least 2 px)
FOCUSED = """() => {
    const e = document.activeElement;
    if (!e || e === document.body) return null;
    const s = getComputedStyle(e);
    const ring = (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2)
                 || /0px 0px 0px [2-9]/.test(s.boxShadow);
    const explorer = e.closest('.attnlib-explorer');
    return {target: e.dataset.kbdTarget === undefined ? null : Number(e.dataset.kbdTarget),
            ring: ring, pressed: e.classList.contains('mod-active'),
            explorer: explorer ? Array.from(document.querySelectorAll('.attnlib-explorer')).indexOf(explorer) : null,
            what: e.tagName.toLowerCase() + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ')[0] : '')};
}"""

EXPLORER = "(i) => document.querySelectorAll('.attnlib-explorer')[i]"


def _shown(page, explorer: int):
    return page.evaluate(f"(i) => ({SHOWN_IMAGE})(({EXPLORER})(i))", explorer)


def _wait_for_change(page, explorer: int, before) -> bool:
    try:
        page.wait_for_function(f"([i, before]) => ({SHOWN_IMAGE})(({EXPLORER})(i)) !== before",
                               arg=[explorer, before], timeout=5000)
        return True
    except PlaywrightError:
        return False


@pytest.mark.parametrize("path", keyboard_pages())
def test_a_chapter_works_with_the_keyboard_alone(open_page, site, path):
    if path == "(none)":
        pytest.fail("no chapter page with an explorer was built")
    page, log = open_page(path)
    problems = _settle(page)
    kinds = page.evaluate(MARK_TARGETS)
    assert "quiz choice" in kinds and {"slider", "button"} & set(kinds), f"{path} has no quiz or explorer: {kinds}"

    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    reached, order, operated = {}, [], {"quiz choice": 0, "slider": 0, "button": 0}
    for presses in range(1, 4000):
        page.keyboard.press("Tab")
        now = page.evaluate(FOCUSED)
        if now is None or now["target"] is None:
            if now is None and reached:  # past the last element: the focus left the page
                break
            continue
        i = now["target"]
        if i in reached:  # the walk came round again
            break
        reached[i] = presses
        order.append(i)
        kind = kinds[i]
        if not now["ring"]:
            problems.append(f"{kind} {i}: no visible focus ring when reached with Tab ({now['what']})")
        if kind == "quiz choice":
            page.keyboard.press("Enter")
            feedback = page.locator(f'[data-kbd-target="{i}"]').locator("xpath=..").locator(".attnlib-quiz-feedback")
            if not feedback.is_visible():
                problems.append(f"quiz choice {i}: Enter did not reveal its feedback")
            else:
                operated[kind] += 1
        elif kind == "slider":
            before = _shown(page, now["explorer"])
            page.keyboard.press("ArrowRight")
            if _wait_for_change(page, now["explorer"], before):
                operated[kind] += 1
            else:
                problems.append(f"slider {i}: the right arrow did not change explorer {now['explorer'] + 1}'s picture")
        elif not now["pressed"]:  # a button not yet pressed
            before = _shown(page, now["explorer"])
            page.keyboard.press("Space")
            if _wait_for_change(page, now["explorer"], before):
                operated[kind] += 1
            else:
                problems.append(f"button {i}: Space did not change explorer {now['explorer'] + 1}'s picture")
        if len(reached) == len(kinds):
            break
    missed = [f"{kinds[i]} {i}" for i in range(len(kinds)) if i not in reached]
    if missed:
        problems.append(f"never reached with Tab ({presses} presses): {missed}")
    if order != sorted(order):
        problems.append(f"Tab reaches the controls out of the page's order: {order}")
    # every choice and slider was operated (a failure is named above); in each group of
    # buttons, the buttons not pressed when reached (at least one) were
    groups = page.evaluate("() => document.querySelectorAll('.attnlib-explorer .widget-toggle-buttons').length")
    if not missed and (operated["quiz choice"] != kinds.count("quiz choice") or operated["slider"] != kinds.count("slider")
                       or operated["button"] < groups):
        problems.append(f"operated with the keyboard: {operated}; the page has {kinds.count('quiz choice')} quiz "
                        f"choices, {kinds.count('slider')} sliders and {groups} groups of buttons")
    problems += log.problems()
    assert not problems, f"{path} ({json.dumps(operated)}):\n  " + "\n  ".join(problems)
