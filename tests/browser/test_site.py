"""The built website, in a real browser, with the network cut.

Every page of _build/html is discovered (nothing is hard-coded, so chapters are covered as
they land) and opened in Debian's Chromium from a server on 127.0.0.1, where every request
to another host fails (conftest.py). For every page:

* it loads with no console error, no page error, no failed request and no attempt to
  reach another host;
* every formula is rendered by the site's own MathJax 3 (one <mjx-container> per math
  element, no <mjx-merror>, no raw TeX left);
* every image has loaded (non-zero natural size);
* every quiz answers a click on each choice with the right verdict and an explanation,
  and every hidden answer (dropdown) opens;
* every widget view is rendered, and moving each explorer's control changes the image
  it shows.

(those checks run in test_accessibility.py's test at 1280 px, in the same page load as the
check that no printed line is cut off, the phone checks and axe-core's, a chapter's load and
typesetting being most of each check's time). Also: every page (and the search page) of both
editions fits a phone's screen (390 px wide, with its hidden answers open: nothing makes the
page scroll sideways), and at that width no printed line is cut off either (phone_problems:
every page in that same load, the window narrowed to 390 px; the heaviest pages on an
emulated phone too, test_page_fits_a_phone); the search page
finds each chapter by a word of its title, and full-page screenshots of two chapters are
saved under _build/screenshots/ for review.
"""
from __future__ import annotations

import html
import os
import pathlib
import re
import urllib.parse

import pytest
from playwright.sync_api import Error as PlaywrightError

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = pathlib.Path(os.environ.get("ATTNLIB_SITE", ROOT / "_build" / "html"))  # as in conftest.py

pytestmark = pytest.mark.browser

SKIP_DIRS = {"_static", "_sources", "_images", "reports", "_sphinx_design_static"}
SCREENSHOTS = ROOT / "_build" / "screenshots"


def discover_pages() -> list[str]:
    if not (SITE / "index.html").is_file():
        return ["index.html"]  # the `site` fixture then skips or fails with the reason
    pages = []
    for p in sorted(SITE.rglob("*.html")):
        rel = p.relative_to(SITE)
        # search.html has its own test; 404.html links absolutely to the published path
        # and is tested served under it (tests/browser/test_publishing_site.py)
        if SKIP_DIRS & set(rel.parts) or rel.name in ("search.html", "404.html"):
            continue
        pages.append(rel.as_posix())
    return pages


def chapter_pages() -> list[str]:
    """The chapters of both editions (English, and Chinese under zh/)."""
    return [p for p in discover_pages() if p.startswith(("chapters/", "zh/chapters/"))]


PAGES = discover_pages()


def _read(path: str) -> str:
    f = SITE / path
    return f.read_text(encoding="utf-8", errors="replace") if f.is_file() else ""


# ------------------------------------------------------------------------------ helpers

# MathJax typesets the page once at start-up (and the widgets' labels as they render);
# typesetting the whole page again would also render the hidden MathML it writes for screen
# readers (its MathML input finds those <math> elements), nesting a second formula in each
WAIT_FOR_MATHJAX = """async () => {
    if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) return false;
    await MathJax.startup.promise;
    return true;
}"""

MATH_STATE = """() => {
    const maths = Array.from(document.querySelectorAll('.math'));
    const raw = maths.filter(m => !m.querySelector('mjx-container'))
                     .map(m => m.textContent.trim().slice(0, 60));
    return {maths: maths.length, raw: raw,
            containers: document.querySelectorAll('mjx-container').length,
            errors: Array.from(document.querySelectorAll('mjx-merror')).map(e => e.textContent.slice(0, 80))};
}"""

BROKEN_IMAGES = """() => Array.from(document.images)
    .filter(img => !(img.complete && img.naturalWidth > 0))
    .map(img => img.currentSrc || img.src || img.outerHTML.slice(0, 80))"""

# a fingerprint of the pixels an explorer currently shows
SHOWN_IMAGE = """(box) => {
    const img = Array.from(box.querySelectorAll('img')).find(i => i.offsetParent !== null);
    if (!img || !img.complete || !img.naturalWidth) return null;
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    c.getContext('2d').drawImage(img, 0, 0);
    return c.toDataURL();
}"""


def _settle(page) -> list[str]:
    """Wait until fonts, MathJax and the widget manager have finished; say what did not."""
    problems = []
    page.wait_for_load_state("load")
    page.evaluate("() => document.fonts.ready.then(() => true)")
    if page.locator(".math").count():
        try:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                   timeout=15000)
            page.evaluate(WAIT_FOR_MATHJAX)
        except PlaywrightError as exc:
            problems.append(f"MathJax 3 did not start on a page with math ({str(exc).splitlines()[0]})")
    n_views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if n_views:
        try:
            page.wait_for_function("(n) => document.querySelectorAll('.jupyter-widgets').length >= n",
                                   arg=n_views, timeout=20000)
            page.wait_for_timeout(300)
        except PlaywrightError:
            problems.append(f"{n_views} widget views embedded but the widget manager rendered none")
    return problems


# -------------------------------------------------------------------------------- tests

# every <pre> of a cell's output whose text is wider than its box (scrolled or clipped)
CLIPPED = """() => Array.from(document.querySelectorAll('div.cell_output pre')).filter(
    e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText.split('\\n').sort((a, b) => b.length - a.length)[0]
    .slice(0, 80))"""

# the pages that show a notebook's printed output: chapters and solutions, both editions
NOTEBOOK_PAGES = [p for p in discover_pages() if p.startswith(("chapters/", "zh/chapters/", "solutions/", "zh/solutions/"))]


def clipped_output(page, width: int) -> list[str]:
    """Printed output is never cut off (issue 31: "...below 1e-12: Tr" was cut at 1280 px):
    every line a cell prints fits its box, wrapping where it would overflow
    (site_assets/attnlib-site.css). Measured before any hidden answer is opened."""
    clipped = page.evaluate(CLIPPED)
    return [f"printed lines wider than their box at {width} px: {clipped[:5]}"] if clipped else []


def offline_problems(page) -> list[str]:
    """What does not work on a page with the network cut, once it has settled: formulas,
    images, widgets, quizzes and explorers (see the module docstring). Clicks every quiz
    choice and moves every explorer."""
    problems = []

    # math: rendered by the site's MathJax, nothing raw, no MathJax error
    state = page.evaluate(MATH_STATE)
    if state["maths"]:
        if state["raw"]:
            problems.append(f"{len(state['raw'])} formulas not rendered, e.g. {state['raw'][:3]}")
        if state["containers"] < state["maths"]:
            problems.append(f"{state['maths']} math elements but {state['containers']} <mjx-container>")
    if state["errors"]:
        problems.append(f"MathJax errors: {state['errors'][:3]}")

    # images (figures, and the images inside explorers)
    page.evaluate("() => Array.from(document.images).forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=10000)
    broken = page.evaluate(BROKEN_IMAGES)
    if broken:
        problems.append(f"images that did not load: {broken[:5]}")

    # widgets: every view the page embeds is rendered, none shows an error
    n_views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if n_views:
        errors = page.locator("text=Error displaying widget").count()
        if errors:
            problems.append(f"{errors} widgets failed to display")

    problems += check_quizzes(page)
    problems += check_explorers(page)
    return problems


PHONE = {"width": 390, "height": 844}
# the elements that stick out to the right of the screen, for the failure message (those
# inside a box that scrolls or clips them do not widen the page)
WIDER_THAN_SCREEN = """() => {
    const W = document.documentElement.clientWidth, out = [];
    for (const e of document.querySelectorAll('body *')) {
        const r = e.getBoundingClientRect();
        if (r.width === 0 || r.right <= W + 1) continue;
        let p = e.parentElement, held = false;
        for (; p && !held; p = p.parentElement) {
            const style = getComputedStyle(p);
            held = style.position === 'fixed' || (['auto', 'scroll', 'hidden', 'clip'].includes(style.overflowX)
                   && p.getBoundingClientRect().right <= W + 1);
        }
        if (!held && !Array.from(e.children).some(c => c.getBoundingClientRect().right > W + 1)) {
            out.push(`<${e.tagName.toLowerCase()} class="${e.getAttribute('class') || ''}"> ends at `
                     + `${Math.round(r.right)} px: ${(e.textContent || '').trim().slice(0, 60)}`);
        }
    }
    return out.slice(0, 5);
}"""


def phone_pages() -> list[str]:
    """Every page of both editions, with their search pages."""
    search = [p for p in ("search.html", "zh/search.html") if (SITE / p).is_file()]
    return PAGES + search


# the <details> elements that are closed now, marked so that they can be closed again
MARK_CLOSED_DETAILS = """() => document.querySelectorAll('details:not([open])').forEach(d => { d.dataset.attnlibClosed = ''; })"""
CLOSE_MARKED_DETAILS = """() => document.querySelectorAll('details[data-attnlib-closed]').forEach(d => {
    d.open = false; delete d.dataset.attnlibClosed; })"""


def phone_problems(page, path: str) -> list[str]:
    """What does not fit a phone's screen on a page that has settled and is PHONE["width"]
    wide: printed lines cut off, and in the Chinese chapters a line that starts with the
    punctuation after a formula (test_chinese_punctuation_never_starts_a_line_after_a_formula),
    both with the hidden answers as the page loads; then, with every hidden answer open, a
    display formula cut at the screen's edge with no cue that it goes on, anything that makes
    the page wider than the screen (it would scroll sideways, or a phone would show it zoomed
    out), and header buttons past the edge. Every <details> it opened is closed again."""
    problems = []
    if path in NOTEBOOK_PAGES:
        problems += clipped_output(page, PHONE["width"])
    if path in CHINESE_CHAPTERS:
        problems += punctuation_split(page, PHONE["width"])
    page.evaluate(MARK_CLOSED_DETAILS)
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    page.wait_for_timeout(100)
    problems += page.evaluate(DISPLAY_MATHS_CUT, PHONE["width"])
    # a phone shows a page wider than its screen zoomed out: the layout viewport
    # (innerWidth) grows with it, so every measure counts
    width = page.evaluate("() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth, "
                          "window.innerWidth, document.documentElement.clientWidth)")
    if width > PHONE["width"]:
        problems.append(f"the page is {width} px wide on a {PHONE['width']} px screen (it scrolls sideways "
                        f"or shows zoomed out); what sticks out: {page.evaluate(WIDER_THAN_SCREEN)}")
    # the header's buttons (download, launch, the other edition's link) are all on the screen,
    # not pushed past its edge or clipped there
    outside = page.evaluate(HEADER_BUTTONS_OUTSIDE, PHONE["width"])
    if outside:
        problems.append(f"header buttons end past the {PHONE['width']} px screen: {outside}")
    page.evaluate(CLOSE_MARKED_DETAILS)
    return [f"at {PHONE['width']} px: {p}" for p in problems]


def phone_sample() -> list[str]:
    """The pages checked on an emulated phone as well: the home page and the longest chapter
    of each edition (by the size of its HTML), and the search pages."""
    chosen = []
    for edition in ("", "zh/"):
        chapters = [p for p in chapter_pages() if p.startswith(edition + "chapters/")]
        chosen += [p for p in (edition + "index.html", edition + "search.html") if (SITE / p).is_file()]
        chosen += sorted(chapters, key=lambda p: -len(_read(p)))[:1]
    return chosen or ["index.html"]


@pytest.mark.parametrize("path", phone_sample())
def test_page_fits_a_phone(open_page, site, path):
    """On an emulated phone (390 x 844, touch, a device scale factor of 3, the page's own
    viewport rule applied as a phone applies it) the page passes phone_problems. Every page
    of both editions passes the same checks in test_accessibility.py's page load, narrowed to
    390 px (a chapter's load and typesetting is most of each check's time); these pages,
    the heaviest, confirm that the narrowed desktop window and the phone agree."""
    page, log = open_page(path, viewport=PHONE, mobile=True)
    problems = _settle(page) + phone_problems(page, path)
    assert not problems, f"{path}:\n  " + "\n  ".join(problems)


def test_the_phone_checks_see_a_page_wider_than_a_narrowed_window(open_page, site):
    """In a desktop window narrowed to 390 px, as test_accessibility.py checks every page, an
    element 600 px wide makes phone_problems fail (so the narrowed window can fail)."""
    page, log = open_page("index.html")
    _settle(page)
    page.set_viewport_size(PHONE)
    page.evaluate("""() => { const d = document.createElement('div'); d.style.width = '600px';
        d.textContent = 'too wide'; document.querySelector('main').appendChild(d); }""")
    problems = phone_problems(page, "index.html")
    assert any(f"px wide on a {PHONE['width']} px screen" in p and "too wide" in p for p in problems), problems


def test_a_request_to_another_host_fails_and_is_reported(open_page, site):
    """Every page is checked offline: a request to another host, by name or by address, fails
    in Chromium itself (its proxy, a closed port, is skipped only for the loopback addresses)
    and the page's log reports it, so the test of that page fails."""
    page, log = open_page("index.html")
    failures = {}
    page.on("requestfailed", lambda r: failures.update({r.url: r.failure}))
    urls = ["https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js", "http://192.0.2.7/figure.png",
            "http://localhost.example/x.css"]
    page.evaluate("(urls) => Promise.all(urls.map(u => fetch(u, {mode: 'no-cors'}).catch(() => null)))", urls)
    for _ in range(100):  # (the events may arrive just after the page's promises settle)
        if len(log.blocked) >= len(urls):
            break
        page.wait_for_timeout(50)
    assert sorted(log.blocked) == sorted(urls), log.problems()
    assert all("PROXY" in (failures.get(u) or "") for u in urls), failures
    assert any("request to another host" in p for p in log.problems())


HEADER_BUTTONS_OUTSIDE = """(W) => {
    const out = [];
    for (const e of document.querySelectorAll('.header-article-items__end .btn, .header-article-items__end a')) {
        const r = e.getBoundingClientRect();
        if (r.width > 0 && r.right > W + 1) {
            out.push(`${(e.getAttribute('title') || e.textContent || '').trim().slice(0, 30)} ends at ${Math.round(r.right)} px`);
        }
    }
    return out.slice(0, 5);
}"""


# A display formula wider than a phone's screen must scroll sideways in a box of its own
# that ends on the screen, and say that it does: a scrollbar that takes room, or a shadow
# at the edge that hides more of it (site_assets/attnlib-site.css). A formula cut at the
# edge with nothing to show that it goes on reads as a complete, wrong formula.
DISPLAY_MATHS_CUT = """(W) => {
    const out = [];
    for (const m of document.querySelectorAll('mjx-container[display="true"]')) {
        const r = m.getBoundingClientRect();
        if (r.width === 0) continue;
        const text = (m.querySelector('mjx-assistive-mml') || m).textContent.trim().slice(0, 50);
        let box = m;
        for (; box && box !== document.body; box = box.parentElement) {
            if (['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) break;
        }
        const wide = m.scrollWidth > m.clientWidth + 1 || r.right > W + 1;
        if (!wide) continue;
        if (!box || box === document.body) {
            out.push(`a display formula ends at ${Math.round(r.right)} px with no box that scrolls it: ${text}`);
            continue;
        }
        const b = box.getBoundingClientRect(), before = box.scrollLeft;
        box.scrollLeft = before + 10;
        const scrolls = box.scrollLeft !== before;
        box.scrollLeft = before;
        if (b.right > W + 1 || !scrolls) {
            out.push(`a display formula's scroll box ends at ${Math.round(b.right)} px`
                     + (scrolls ? '' : ' and does not scroll') + `: ${text}`);
            continue;
        }
        const s = getComputedStyle(box);
        const bar = box.offsetHeight - box.clientHeight - parseFloat(s.borderTopWidth) - parseFloat(s.borderBottomWidth) > 0;
        const shadow = s.backgroundImage.includes('gradient') && s.backgroundAttachment.includes('local');
        if (!bar && !shadow) {
            out.push(`a display formula ${box.scrollWidth} px wide scrolls in a box of ${box.clientWidth} px `
                     + `with no cue that it goes on (no scrollbar, no edge shadow): ${text}`);
        }
    }
    return out.slice(0, 5);
}"""


def _verdicts(page) -> tuple[str, str]:
    """The quiz's verdicts in the page's language: ("Correct.", "Not quite.") on the
    English pages, their translations from attnlib's catalogue on the Chinese ones."""
    if page.evaluate("() => document.documentElement.lang").lower().startswith("zh"):
        from attnlib.i18n import catalogue
        zh = catalogue("zh")
        return zh.get("Correct."), zh.get("Not quite.")
    return "Correct.", "Not quite."


def check_quizzes(page) -> list[str]:
    """Click every choice of every quiz: each must reveal feedback that starts with the
    right verdict and explains it (in Chinese on a Chinese page). Then open every hidden
    answer (MyST dropdown)."""
    problems = []
    right_word, wrong_word = _verdicts(page)
    chinese = right_word != "Correct."
    quizzes = page.locator(".attnlib-quiz")
    for q in range(quizzes.count()):
        choices = quizzes.nth(q).locator("details.attnlib-quiz-choice")
        if choices.count() < 2:
            problems.append(f"quiz {q + 1} has {choices.count()} choices")
        n_right = 0
        for c in range(choices.count()):
            choice = choices.nth(c)
            feedback = choice.locator(".attnlib-quiz-feedback")
            if feedback.is_visible():
                problems.append(f"quiz {q + 1}, choice {c + 1} shows its feedback before a click")
            choice.locator("summary").click()
            try:
                feedback.wait_for(state="visible", timeout=2000)
            except PlaywrightError:
                problems.append(f"quiz {q + 1}, choice {c + 1}: a click shows no feedback")
                continue
            text = feedback.inner_text()
            right = "attnlib-quiz-right" in (choice.get_attribute("class") or "")
            n_right += right
            verdict = right_word if right else wrong_word
            if not (text.startswith(verdict) and len(text) > len(verdict) + 2):
                problems.append(f"quiz {q + 1}, choice {c + 1}: feedback {text[:60]!r} should start "
                                f"with {verdict!r} and explain")
            elif chinese and not re.search(r"[\u4e00-\u9fff]", text[len(verdict):]):
                problems.append(f"quiz {q + 1}, choice {c + 1}: feedback {text[:60]!r} is not in Chinese")
        if choices.count() and not n_right:
            problems.append(f"quiz {q + 1} has no correct choice")
    dropdowns = page.locator("details.sd-dropdown")
    for d in range(dropdowns.count()):
        dd = dropdowns.nth(d)
        summary = dd.locator("summary").first
        summary.scroll_into_view_if_needed()
        summary.click()
        if not dd.evaluate("(el) => el.open") or not dd.locator(".sd-summary-content, .sd-card-body").first.is_visible():
            problems.append(f"dropdown {d + 1} does not open on a click")
    # the chapters' portable answers and proofs: HTML <details> (CONTRIBUTING.md)
    plain = page.locator("details:not([class])")
    for d in range(plain.count()):
        dd = plain.nth(d)
        summary = dd.locator("summary").first
        summary.scroll_into_view_if_needed()
        summary.click()
        state = dd.evaluate(r"""(el) => ({open: el.open, shown: Array.from(el.children).some(
            c => c.tagName !== 'SUMMARY' && c.getBoundingClientRect().height > 0),
            raw: /\$|\\\(/.test(el.innerText), math: el.querySelectorAll('mjx-merror').length})""")
        if not (state["open"] and state["shown"]):
            problems.append(f"<details> {d + 1} does not open onto its content on a click: {state}")
        elif state["raw"] or state["math"]:
            problems.append(f"<details> {d + 1} shows raw or broken math when opened: {state}")
    return problems


def check_explorers(page) -> list[str]:
    """Move the control of every explorer (a box with a slider or buttons above an image)
    and require the shown image to change."""
    problems = []
    if not page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
        return problems
    # an explorer that needs a kernel (chapter 13's text box) is hidden on the site, where its
    # still picture stands in for it: it must not show a control that does nothing
    shown = [i for i, e in enumerate(page.locator(".attnlib-kernel-only").all()) if e.is_visible()]
    if shown:
        problems.append(f"{len(shown)} explorers that need a kernel show their dead controls on the site")
    boxes = page.locator(".widget-vbox:not(.attnlib-kernel-only)").filter(has=page.locator("img"))
    if not boxes.count():
        return problems or ["the page embeds widgets but shows no explorer (a control above an image)"]
    for b in range(boxes.count()):
        box = boxes.nth(b)
        box.scroll_into_view_if_needed()
        before = box.evaluate(SHOWN_IMAGE)
        if not before:
            problems.append(f"explorer {b + 1} shows no image")
            continue
        if box.locator(".noUi-handle").count():
            handle = box.locator(".noUi-handle").first
            handle.focus()
            handle.press("ArrowRight")
            how = "pressing the right arrow on its slider"
        elif box.locator(".widget-toggle-button").count() > 1:
            buttons = box.locator(".widget-toggle-button")
            target = next(i for i in range(buttons.count())
                          if "mod-active" not in (buttons.nth(i).get_attribute("class") or ""))
            buttons.nth(target).click()
            how = f"clicking its button {target + 1}"
        else:
            problems.append(f"explorer {b + 1} has an image but no slider or buttons")
            continue
        try:
            page.wait_for_function(f"([box, before]) => ({SHOWN_IMAGE})(box) !== before",
                                   arg=[box.element_handle(), before], timeout=5000)
        except PlaywrightError:
            problems.append(f"explorer {b + 1}: {how} did not change the image")
    return problems


def _title_word(path: str) -> str | None:
    """A distinctive word of a page's title (the longest one), for the search test."""
    m = re.search(r"<title>(.*?)</title>", _read(path), re.S)
    if not m:
        return None
    title = html.unescape(m.group(1)).split("\u2014")[0]  # "<page title> — <book title>"
    if path.startswith("zh/"):  # a Chinese title: its longest run of Chinese characters
        words = re.findall(r"[\u4e00-\u9fff]{2,}", title)
        return max(words, key=len) if words else None
    words = re.findall(r"[A-Za-z]{4,}", title)
    return max(words, key=len).lower() if words else None


@pytest.mark.parametrize("path", chapter_pages() or ["(none)"])
def test_search_finds_each_chapter(open_page, site, path):
    if path == "(none)":
        pytest.skip("no chapter page built")
    word = _title_word(path)
    if word is None:
        pytest.skip(f"{path} has no title word to search for")
    edition = "zh/" if path.startswith("zh/") else ""  # each edition has its own search page
    page, log = open_page(f"{edition}search.html?q={urllib.parse.quote(word)}")
    results = page.locator("#search-results li a")
    # Sphinx writes its summary line ("... found 46 page(s) ...", in the page's language)
    # when it has queued every result; a page result appears once its page is fetched, so
    # wait until as many results as the summary counts are shown
    page.wait_for_function("""() => {
        const summary = (document.querySelector('#search-results .search-summary')?.textContent || '').trim();
        if (!summary) return false;
        const count = summary.match(/\\d+/);
        return !count || document.querySelectorAll('#search-results li').length >= Number(count[0]);
    }""", timeout=20000)
    hrefs = [results.nth(i).get_attribute("href") or "" for i in range(results.count())]
    stem = pathlib.PurePosixPath(path).stem
    assert any(stem in h for h in hrefs), f"searching {word!r} did not find {path}; results: {hrefs[:10]}"
    assert not log.problems(), "; ".join(log.problems())


def test_screenshots_of_two_chapters(open_page, site):
    chapters = chapter_pages()
    if len(chapters) < 2:
        pytest.skip("fewer than two chapter pages")
    # prefer chapters that show the most (math, figures, widgets); and one Chinese page
    english = [p for p in chapters if not p.startswith("zh/")]
    chosen = sorted(english, key=lambda p: -len(_read(p)))[:2]
    chosen += ["zh/" + chosen[0]] if "zh/" + chosen[0] in chapters else []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for path in sorted(chosen):
        page, log = open_page(path)
        _settle(page)
        prefix = "zh-" if path.startswith("zh/") else ""
        out = SCREENSHOTS / (prefix + pathlib.PurePosixPath(path).stem + ".png")
        page.screenshot(path=str(out), full_page=True)
        assert out.stat().st_size > 10_000, f"{out} looks empty"


@pytest.mark.parametrize("path", ["chapters/02_qkv.html", "zh/chapters/02_qkv.html"])
def test_header_link_opens_the_same_page_in_the_other_edition(open_page, site, path):
    """The 中文 / English link sits on the row of header buttons and leads to the same page
    of the other edition."""
    if not (SITE / path).is_file():
        pytest.fail(f"{path} was not built (`make book` builds both editions)")
    page, log = open_page(path)
    _settle(page)
    link = page.locator("a.attnlib-edition-switch")
    assert link.count() == 1 and link.is_visible()
    row = page.locator(".article-header-buttons").bounding_box()
    box = link.bounding_box()
    assert abs((box["y"] + box["height"] / 2) - (row["y"] + row["height"] / 2)) < row["height"] / 2, \
        f"the edition link is not on the buttons' row: {box} vs {row}"
    expected = "English" if path.startswith("zh/") else "中文"
    assert link.inner_text().strip() == expected
    link.click()
    page.wait_for_load_state("load")
    other = path[3:] if path.startswith("zh/") else "zh/" + path
    assert page.url.endswith("/" + other), page.url
    assert page.evaluate("() => document.documentElement.lang").lower().startswith("en" if path.startswith("zh/") else "zh")
    assert not log.problems(), "; ".join(log.problems())


# each group of an inline formula and the full-width punctuation touching it
# (tools/sphinxext/attnlib_i18n.py): how many there are, and those that a line break splits
SPLIT_GROUPS = """(rule) => {
    const groups = Array.from(document.querySelectorAll('.attnlib-nobr'));
    if (!rule) groups.forEach(g => { g.style.whiteSpace = 'normal'; });
    const split = groups.filter(g => g.getClientRects().length > 1)
                        .map(g => (g.textContent || '').trim().slice(-30));
    return {groups: groups.length, split: split};
}"""


CHINESE_CHAPTERS = [p for p in chapter_pages() if p.startswith("zh/")]


def punctuation_split(page, width: int) -> list[str]:
    """What breaks the rule below on a settled page (typeset maths: the lines are measured on it)."""
    state = page.evaluate(SPLIT_GROUPS, True)
    if not state["groups"]:
        return ["no formula is kept with its punctuation (.attnlib-nobr)"]
    return [f"at {width} px a line break splits {state['split'][:5]}"] if state["split"] else []


@pytest.mark.parametrize("path", ["zh/chapters/03_scaling.html"])
def test_chinese_punctuation_never_starts_a_line_after_a_formula(open_page, site, path):
    """In the Chinese edition a line never starts with "。" (or another closing mark) left
    behind by the formula before it: every formula with the punctuation touching it stays on
    one line, on a desktop screen here, and at a phone's width in every Chinese chapter
    (phone_problems, in test_accessibility.py's page load)."""
    page, log = open_page(path, viewport={"width": 1280, "height": 900})
    assert not [p for p in _settle(page) if "MathJax" in p]
    problems = punctuation_split(page, 1280)
    assert not problems, f"{path}: {problems}"


def test_the_punctuation_check_sees_a_split(open_page, site):
    """Without the rule that keeps them together, chapter 3 at 390 px does break lines
    between a formula and its "。" or "，" (so the test above can fail)."""
    path = "zh/chapters/03_scaling.html"
    if not (SITE / path).is_file():
        pytest.fail(f"{path} was not built")
    page, log = open_page(path)  # then narrowed to a phone's width, as test_accessibility.py's page load is
    assert not [p for p in _settle(page) if "MathJax" in p]
    page.set_viewport_size(PHONE)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert page.evaluate(SPLIT_GROUPS, False)["split"], "no group splits even without white-space: nowrap"


def _search(open_page, query: str, edition: str = "zh/") -> list[str]:
    page, log = open_page(f"{edition}search.html?q={urllib.parse.quote(query)}")
    page.wait_for_function("""() => {
        const summary = (document.querySelector('#search-results .search-summary')?.textContent || '').trim();
        if (!summary) return false;
        const count = summary.match(/\\d+/);
        return !count || document.querySelectorAll('#search-results li').length >= Number(count[0]);
    }""", timeout=20000)
    assert not log.problems(), "; ".join(log.problems())
    return page.evaluate("() => Array.from(document.querySelectorAll('#search-results li a'))"
                         ".map(a => a.getAttribute('href') || '')")


@pytest.mark.parametrize("query, edition", [("词元", "zh/"), ("注意力分数", "zh/"), ("softmax", "zh/"),
                                            ("softmax", ""), ("attention scores", "")])
def test_search_lists_each_page_once(open_page, site, query, edition):
    """A page is listed once: not for one of its entries (a glossary term, an API object,
    a section) and again for its text (site_assets/attnlib-search.js). The Chinese search
    finds 词元, the word a d2l-zh reader types for token, in the glossary."""
    hrefs = _search(open_page, query, edition)
    assert hrefs, f"searching {query!r} found nothing"
    pages = [h.split("#")[0] for h in hrefs]
    twice = sorted({p for p in pages if p in {h.split("#")[0] for h in hrefs if "#" in h} and
                    any(h == p for h in hrefs)})
    assert not twice, f"searching {query!r} lists {twice} both for an entry and for its text: {hrefs}"
    if query == "词元":
        glossary = [h for h in hrefs if "appendix/glossary.html" in h]
        assert len(glossary) == 1 and "#term-" in glossary[0], hrefs
