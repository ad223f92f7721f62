"""Chapter 13's sentence explorer: the character-level GPT run in the page, in Chromium.

``site_assets/attnlib-text-model.js`` (the forward pass) and
``site_assets/attnlib-sentence-explorer.js`` (the explorer) are checked on two kinds of page:

* **the test page**: ``site_assets/sentence-explorer-snippet.html`` (and its Chinese
  translation, from the chapter's catalogue: tests/explorer_snippets.py) pasted into a bare page at ``chapters/13_real_text.html`` of a temporary folder,
  with the two scripts and the weights (``attnlib/models/weights/``) at ``_static/``, where the
  built site has them, served on 127.0.0.1. It needs no built site, so the explorer is tested
  while the chapter is being written;
* **the chapter page** of each edition of the built site, ``chapters/13_real_text.html``
  and ``zh/chapters/13_real_text.html`` (as every site test: skipped when the site is not
  built, failed then under ``make browser``, which requires it).

On each: the weights and probabilities the page computes for a typed sentence equal torch's
(``pretrained.load()``, float32 and float64) to 1e-4; a character outside the alphabet is
dropped and named, a text longer than the context cut, with a notice; the page fits a
375 px screen; the head chooser and the query slider work from the keyboard; every canvas has
a text alternative; the Chinese page shows no English label. The test page is also checked
by axe-core (test_accessibility.py checks every page of the built site).
"""
from __future__ import annotations

import functools
import math
import pathlib
import shutil
import statistics

import numpy as np
import pytest
import torch

import explorer_snippets
from conftest import CHROMIUM, serve, watch

ROOT = pathlib.Path(__file__).resolve().parents[2]
ASSETS = ROOT / "site_assets"
WEIGHTS = ROOT / "attnlib" / "models" / "weights"
PAGE = "chapters/13_real_text.html"
LANGS = ("en", "zh")   # the snippet and its translation in the chapter's catalogue (tests/explorer_snippets.py)
EXPLORER = ".attnlib-sentence-explorer"

pytestmark = pytest.mark.browser

# Where the explorers are: the test page of each edition, and the built chapter of each
PLACES = ["test-en", "test-zh", "site-en", "site-zh"]

SENTENCE = "Now is the winter of our discontent made glorious summer by this sun of York;"
LONG = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer "
        "the slings and arrows of outrageous fortune, or to take arms")  # 144 characters: cut to 128


@pytest.fixture(scope="module")
def test_site(tmp_path_factory):
    """A folder laid out like the built site: each edition's chapter 13 as a bare page
    holding the snippet, and ``_static/`` with the scripts and the weights."""
    if not (WEIGHTS / "shakespeare.json").is_file():
        pytest.fail(f"no weights in {WEIGHTS}: run `make model`", pytrace=False)
    root = tmp_path_factory.mktemp("explorer-site")
    for lang in LANGS:
        edition = root / ("zh" if lang == "zh" else "")
        (edition / "chapters").mkdir(parents=True, exist_ok=True)
        (edition / "_static" / "models").mkdir(parents=True, exist_ok=True)
        for name in ("attnlib-text-model.js", "attnlib-sentence-explorer.js"):
            shutil.copyfile(ASSETS / name, edition / "_static" / name)
        for f in WEIGHTS.glob("shakespeare.*"):
            shutil.copyfile(f, edition / "_static" / "models" / f.name)
        (edition / PAGE).write_text(
            f'<!DOCTYPE html>\n<html lang="{"zh-CN" if lang == "zh" else "en"}"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="icon" href="data:,"><title>Sentence explorer</title></head>\n<body><main><h1>Sentence explorer</h1>\n'
            f'{explorer_snippets.snippet(lang)}</main></body></html>\n', encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def test_url(test_site):
    with serve(test_site) as url:
        yield url


@pytest.fixture()
def open_explorer(request, shared_context):
    """``open_explorer(place, viewport=None) -> (page, log)``: the page of ``place`` (one of
    PLACES) loaded, its explorer ready."""
    pages = []

    def _open(place: str, viewport: dict | None = None):
        where, lang = place.split("-")
        path = ("zh/" if lang == "zh" else "") + PAGE
        if where == "site":
            base = request.getfixturevalue("base_url")
        else:
            base = request.getfixturevalue("test_url")
        page = shared_context.new_page()
        pages.append(page)
        if viewport:
            page.set_viewport_size(viewport)
        log = watch(page)
        page.goto(base + path, wait_until="load")
        page.wait_for_function(f"() => ['ready', 'error'].includes(document.querySelector('{EXPLORER}').dataset.state)",
                               timeout=30000)
        assert page.locator(EXPLORER).get_attribute("data-state") == "ready", page.locator(EXPLORER).inner_text()
        return page, log

    yield _open
    for page in pages:
        page.close()


def type_sentence(page, text: str) -> dict:
    """Type ``text`` into the explorer's box, wait for its result and return it as lists."""
    page.locator(f"{EXPLORER} input[type=text]").fill(text)
    page.wait_for_function(f"""(text) => {{ const e = document.querySelector('{EXPLORER}');
        return e.dataset.state === 'ready' && e.attnlibResult && e.attnlibResult.input === text; }}""", arg=text)
    return page.evaluate(f"""() => {{ const r = document.querySelector('{EXPLORER}').attnlibResult;
        return {{text: r.text, ids: r.ids, dropped: r.dropped, cut: r.cut,
                 weights: r.weights.map(w => Array.from(w)), probs: r.probs && Array.from(r.probs)}}; }}""")


@functools.lru_cache(maxsize=None)
def reference(dtype: torch.dtype):
    from attnlib.models import pretrained
    return pretrained.load("shakespeare", dtype=dtype)


def torch_result(text: str, dtype: torch.dtype) -> tuple[list[int], np.ndarray, np.ndarray]:
    """torch's ids, weights (layers, h, L, L) and next-character probabilities for ``text``."""
    model, tok, _ = reference(dtype)
    ids = tok.encode(text)
    with torch.no_grad():
        logits, weights = model(torch.tensor([ids]), return_weights=True)
    probs = torch.softmax(logits[0, -1].double(), -1).numpy()
    return ids, torch.stack([w[0] for w in weights]).double().numpy(), probs


def max_differences(result: dict, dtype: torch.dtype) -> tuple[float, float]:
    ids, weights, probs = torch_result(result["text"], dtype)
    assert result["ids"] == ids
    L = len(ids)
    page_weights = np.array(result["weights"]).reshape(weights.shape[0], weights.shape[1], L, L)
    return float(np.abs(page_weights - weights).max()), float(np.abs(np.array(result["probs"]) - probs).max())


# ------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("place", PLACES)
def test_page_computes_torchs_weights_and_probabilities(open_explorer, place):
    page, log = open_explorer(place)
    for text in (SENTENCE, LONG[:128]):
        result = type_sentence(page, text)
        assert result["text"] == text and not result["dropped"] and not result["cut"]
        for dtype in (torch.float32, torch.float64):
            dw, dp = max_differences(result, dtype)
            print(f"{place}, {len(text)} characters, torch {dtype}: weights {dw:.1e}, probabilities {dp:.1e}")
            assert dw < 1e-4 and dp < 1e-4, (dtype, dw, dp)
    # the most likely next characters shown are the model's
    shown = page.locator(f"{EXPLORER} ol li code").all_inner_texts()
    model, tok, _ = reference(torch.float32)
    top = np.argsort(-np.array(result["probs"]))[:len(shown)]
    assert [s.strip("“”").replace("␣", " ").replace("↵", "\n") for s in shown] == [tok.alphabet[t] for t in top]
    assert not log.problems(), log.problems()


@pytest.mark.parametrize("place", PLACES)
def test_unknown_characters_are_dropped_and_long_text_is_cut(open_explorer, place):
    page, log = open_explorer(place)
    notice = page.locator(f"{EXPLORER} .attnlib-se-notice")
    result = type_sentence(page, "Où est la café? To be ∑ free")
    assert result["dropped"] == ["ù", "é", "∑"] and result["text"] == "O est la caf? To be  free"
    assert all(c in notice.inner_text() for c in "ùé∑"), notice.inner_text()
    assert max_differences(result, torch.float64)[0] < 1e-4
    result = type_sentence(page, LONG)
    assert result["cut"] and result["text"] == LONG[:128] and len(result["ids"]) == 128
    assert "128" in notice.inner_text()
    result = type_sentence(page, "")
    assert result["ids"] == [] and notice.inner_text().strip()
    result = type_sentence(page, SENTENCE)
    assert notice.inner_text().strip() == ""
    assert not log.problems(), log.problems()


PHONE = {"width": 375, "height": 812}


@pytest.mark.parametrize("place", PLACES)
def test_explorer_fits_a_phone(open_explorer, place):
    page, log = open_explorer(place, viewport=PHONE)
    type_sentence(page, LONG)  # the widest heat map: 128 characters
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    sizes = page.evaluate(f"""() => {{ const e = document.querySelector('{EXPLORER}');
        const box = e.querySelector('.attnlib-se-map');
        return {{scroll: document.scrollingElement.scrollWidth, inner: window.innerWidth,
                 right: Math.max(...Array.from(e.querySelectorAll('*')).filter(c => !box.contains(c) || c === box)
                                 .map(c => c.getBoundingClientRect().right)),
                 boxRight: box.getBoundingClientRect().right,
                 boxScrolls: box.scrollWidth > box.clientWidth, boxFocusable: box.tabIndex === 0}}; }}""")
    assert sizes["scroll"] <= sizes["inner"] == PHONE["width"], sizes
    assert sizes["right"] <= PHONE["width"] and sizes["boxRight"] <= PHONE["width"], sizes
    assert not sizes["boxScrolls"] or sizes["boxFocusable"], sizes  # a box that scrolls can be scrolled by keyboard
    assert not log.problems(), log.problems()


MAP_LABEL = f"() => document.querySelector('{EXPLORER} .attnlib-se-map canvas').getAttribute('aria-label')"
PRESSED = f"() => Array.from(document.querySelectorAll('{EXPLORER} .attnlib-se-heads button')).map(b => b.getAttribute('aria-pressed'))"


@pytest.mark.parametrize("place", PLACES)
def test_heads_and_query_work_with_the_keyboard(open_explorer, place):
    page, log = open_explorer(place)
    type_sentence(page, SENTENCE)
    page.locator(f"{EXPLORER} input[type=text]").focus()
    for _ in range(5):  # Tab from the text box reaches the first head
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.matches('.attnlib-se-heads button')"):
            break
    assert page.evaluate("() => document.activeElement.dataset.head") == "0"
    ring = page.evaluate("() => { const s = getComputedStyle(document.activeElement); "
                         "return s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2; }")
    assert ring, "a head button shows no focus ring"
    before = page.evaluate(MAP_LABEL)
    assert page.evaluate(PRESSED)[0] == "true"
    page.keyboard.press("ArrowRight")  # the next head, chosen
    assert page.evaluate(PRESSED) == ["false", "true"] + ["false"] * 6
    assert page.evaluate(MAP_LABEL) != before
    page.keyboard.press("Tab")  # the next button, pressed with Space and with Enter
    page.keyboard.press("Space")
    assert page.evaluate(PRESSED).index("true") == 2
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    assert page.evaluate(PRESSED).index("true") == 3
    assert page.evaluate(MAP_LABEL) != before
    # the query slider: the right arrow... at the last character; the left arrow moves it back
    slider = page.locator(f"{EXPLORER} input[type=range]")
    slider.focus()
    strip = f"() => document.querySelector('{EXPLORER} .attnlib-se-strip').getAttribute('aria-label')"
    before = page.evaluate(strip)
    page.keyboard.press("ArrowLeft")
    assert slider.input_value() == str(len(SENTENCE) - 2)
    assert page.evaluate(strip) != before
    assert not log.problems(), log.problems()


@pytest.mark.parametrize("place", PLACES)
def test_every_picture_has_a_text_alternative(open_explorer, place):
    page, log = open_explorer(place)
    type_sentence(page, "To be, or not to be")
    pictures = f"{EXPLORER} canvas, {EXPLORER} svg, {EXPLORER} [role=img]"
    missing = page.evaluate("""(pictures) => Array.from(document.querySelectorAll(pictures))
        .filter(e => !(e.getAttribute('aria-label') || '').trim()).map(e => e.outerHTML.slice(0, 80))""", pictures)
    assert not missing
    label = page.evaluate(MAP_LABEL)
    assert "To be, or not to be" in label and "%" in label, label


ENGLISH_DEFAULTS = ["Sentence", "Choose a head", "Layer", "head", "Rows", "Query character", "position",
                    "Most likely", "Loading", "strongest", "previous", "alphabet", "space", "Where"]


@pytest.mark.parametrize("place", ["test-zh", "site-zh"])
def test_chinese_page_shows_no_english_label(open_explorer, place):
    """Every visible word and every text alternative of the explorer comes from the page (its
    raw HTML, translated in the Chinese edition), none from the script's English defaults."""
    page, log = open_explorer(place)
    type_sentence(page, "To be, or not to be")
    texts = page.evaluate(f"""() => {{ const e = document.querySelector('{EXPLORER}');
        const input = e.querySelector('input[type=text]').value;
        return [e.innerText.split(input).join(' ')].concat(Array.from(e.querySelectorAll('[aria-label]'))
            .map(x => x.getAttribute('aria-label').split(input).join(' '))); }}""")
    english = {w for w in ENGLISH_DEFAULTS for t in texts if w in t}
    assert not english, (english, texts[:3])


def test_test_page_has_no_axe_violation(open_explorer):
    axe = ASSETS / "vendor" / "axe-core" / "axe.min.js"
    if not axe.is_file():
        pytest.skip(f"axe-core is missing ({axe.relative_to(ROOT)}): run `make assets`")
    from test_accessibility import RUN_AXE, _describe, _failing
    page, log = open_explorer("test-en")
    type_sentence(page, LONG)
    page.add_script_tag(content=axe.read_text(encoding="utf-8"))
    problems = _describe(_failing(page.evaluate(RUN_AXE, None)), "light")
    assert not problems, problems


def test_erf_and_gelu_are_accurate(open_explorer):
    """The forward pass's erf (GELU's exact form) against Python's math.erf, and its GELU against torch's."""
    page, _ = open_explorer("test-en")
    xs = [x / 100 for x in range(-800, 801)] + [1e-9, -3.3e-5, 5.999, 6.0, 12.5, -40.0]
    erf = page.evaluate("(xs) => xs.map(attnlibTextModel.erf)", xs)
    assert max(abs(a - math.erf(x)) for a, x in zip(erf, xs)) < 1e-7
    gelu = page.evaluate("(xs) => xs.map(attnlibTextModel.gelu)", xs)
    ref = torch.nn.functional.gelu(torch.tensor(xs, dtype=torch.float64)).numpy()
    assert np.abs(np.array(gelu) - ref).max() < 1e-7


def test_time_per_forward_pass(open_explorer):
    """A forward pass of a 128-character sentence (benchmarks/RESULTS.md, "Chapter 13's
    sentence explorer"); the bound only catches a pathological slowdown."""
    page, _ = open_explorer("test-en")
    times = page.evaluate("""async (text) => {
        const m = await attnlibTextModel.load('../_static/models/shakespeare');
        const ids = attnlibTextModel.tokenize(m, text).ids, times = [];
        for (let r = 0; r < 7; r++) { const t = performance.now(); attnlibTextModel.forward(m, ids); times.push(performance.now() - t); }
        return times; }""", LONG[:128])
    print(f"ms per forward pass of 128 characters in {CHROMIUM}: median {statistics.median(times):.0f}, "
          f"all {[round(t) for t in times]}")
    assert statistics.median(times) < 3000
