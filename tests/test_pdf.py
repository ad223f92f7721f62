"""The course's PDFs (``make pdf``, tools/pdf.py), read back with Debian's poppler-utils.

For each edition: the PDF in _build/pdf/ is the one the site serves and links; it is tagged
(accessible); every page of the book starts a new page of the PDF, whose text layer begins
with that page's title, in the edition's language; every figure and every explorer's first
view is in it; each chapter with quizzes ends with their answers, one per quiz, and no quiz
prints its answer where it is asked. The Chinese PDF's text is Chinese, as much of it as
the Chinese pages hold.

Run after ``make pdf`` (``make test`` runs it in the browser suite, after the pdf suite).
Without the PDFs or poppler-utils the tests are skipped, or fail under
``ATTNLIB_REQUIRE_SITE=1``.
"""
from __future__ import annotations

import functools
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import pdf  # noqa: E402  (tools/pdf.py)

pytestmark = pytest.mark.system
CJK = re.compile(r"[\u4e00-\u9fff]")


def _missing(reason: str):
    if os.environ.get("ATTNLIB_REQUIRE_SITE") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@functools.lru_cache(maxsize=None)
def _pages_text(path: pathlib.Path) -> tuple[str, ...]:
    """The text layer of every page (pdftotext, in reading order)."""
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True,
                          check=True).stdout
    return tuple(text.split("\f")[:-1])


def _squeeze(text: str) -> str:
    """``text`` without white space or hyphens: pdftotext joins a word hyphenated at a line's
    end without its hyphen ("cross-" + "attention" -> "crossattention"), so a title that
    wraps at its own hyphen must still be found."""
    return re.sub(r"[\s\-\u2010\u00ad]+", "", text)


@pytest.fixture(params=sorted(pdf.EDITIONS))
def edition(request):
    return _edition(request.param)


def _edition(name: str) -> tuple[str, pathlib.Path, pdf.Book]:
    if not (pdf.SITE / "index.html").is_file():
        _missing(f"no built site at {pdf.SITE}: run `make book`")
    if not shutil.which("pdftotext"):
        _missing("pdftotext not found: run `make poppler` (apt-get install poppler-utils)")
    path = pdf.OUT / pdf.PDF_NAMES[name]
    if not path.is_file():
        _missing(f"no {path.relative_to(ROOT)}: run `make pdf`")
    return name, path, pdf.Book(name)


def _info(path: pathlib.Path) -> dict[str, str]:
    out = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True).stdout
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def _starts(pages: tuple[str, ...], titles: dict[str, list[str]]) -> dict[str, int]:
    """Where each page of the book starts: for each title in the book's order, the first
    page after the previous start whose text begins with the title (a wrapped title's pieces
    may come in another reading order: "Title ... 8.", "块 6. Transformer")."""
    def pieces(title: str) -> list[str]:  # its Latin runs and its CJK characters
        return re.findall(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]|[^\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+", title)

    def begins(text: str, title: str) -> bool:  # the title, or its pieces in another order, first
        head = text[:len(title) + 80]
        return text.startswith(title) or (any(text.startswith(p) for p in pieces(title))
                                           and all(p in head for p in pieces(title)))

    def holds(text: str, title: str) -> bool:
        return title in text or all(p in text for p in pieces(title))

    starts, after = {}, 0  # page 0 is the title page
    for doc, words in titles.items():
        core = [re.sub(r"^\d+\.", "", words[0])] + words[1:]
        found = next((i for i in range(after + 1, len(pages))
                      if (begins(_squeeze(pages[i]), words[0]) or begins(_squeeze(pages[i]), core[0]))
                      and all(holds(_squeeze(pages[i])[:400], w) for w in core)), None)
        assert found is not None, f"no page after page {after + 1} begins with the title of {doc}: {words}"
        starts[doc] = after = found
    return starts


def _titles(book: pdf.Book) -> dict[str, list[str]]:
    """Each page's title as its words outside formulas (a formula's text differs between
    TeX and the PDF), without the heading's link mark."""
    out = {}
    for doc in book.docs:
        h1 = book._read(doc).select_one("article.bd-article h1")
        for junk in h1.select("a.headerlink, .math"):
            junk.replace_with("\0")
        out[doc] = [_squeeze(part) for part in h1.get_text().split("\0") if _squeeze(part)]
    return out


def test_the_site_serves_and_links_the_pdf(edition):
    name, path, book = edition
    served = book.root / pdf.PDF_NAMES[name]
    assert served.read_bytes() == path.read_bytes(), f"{served} is not the PDF in {path}"
    for doc in ("index", book.docs[1]):  # the home page and a chapter: the download menu's entry
        html = (book.root / f"{doc}.html").read_text(encoding="utf-8")
        assert re.search(r'href="(\.\./)*' + re.escape(pdf.PDF_NAMES[name]) + '"', html), \
            f"{doc}.html of the {name} edition does not link {pdf.PDF_NAMES[name]}"


def test_page_count_and_every_page_of_the_book_starts_a_page(edition):
    name, path, book = edition
    info = _info(path)
    pages = _pages_text(path)
    n = int(info["Pages"])
    assert n == len(pages)
    assert info["Tagged"].strip() == "yes", "the PDF is not tagged (no structure for screen readers)"
    # a title page, then each page of the book (introduction, chapters, appendices) from a
    # new page on; a chapter is several pages long
    assert n >= 1 + 3 * len(book.docs), f"{n} pages for {len(book.docs)} pages of the book"
    starts = list(_starts(pages, _titles(book)).values())  # in order, by construction
    assert len(set(starts)) == len(starts) == len(book.docs)
    # the same book in both languages: the other edition's PDF has a similar length
    other = pdf.OUT / pdf.PDF_NAMES["zh" if name == "en" else "en"]
    if other.is_file():
        m = int(_info(other)["Pages"])
        assert 0.7 < n / m < 1.4, f"{path.name}: {n} pages, {other.name}: {m}"


def test_text_layer_holds_each_chapter_title(edition):
    name, path, book = edition
    text = _squeeze("".join(_pages_text(path)))
    titles = _titles(book)
    chapters = [d for d in book.docs if d.startswith("chapters/")]
    assert len(chapters) >= 8, chapters
    for doc in chapters:
        missing = [w for w in titles[doc] if w not in text]
        assert not missing, f"{path.name}: the title of {doc} is not in the text layer: {missing}"
        if name == "zh":
            assert CJK.search("".join(titles[doc])), f"{doc}'s Chinese title has no Chinese: {titles[doc]}"


def test_the_chinese_pdf_is_written_in_chinese():
    name, path, book = _edition("zh")
    pdf_cjk = len(CJK.findall("".join(_pages_text(path))))
    site_cjk = sum(len(CJK.findall(book._read(d).select_one("article.bd-article").get_text())) for d in book.docs)
    # the hidden answers and solutions move, and code cells hidden on the page are left out
    assert pdf_cjk > 0.8 * site_cjk, f"{pdf_cjk} Chinese characters in {path.name}, {site_cjk} on its pages"
    english = [p[:80] for p in _pages_text(path)[1:] if len(CJK.findall(p)) < 20 and len(p.strip()) > 400]
    # pages with little Chinese are code or a bibliography; most pages are prose
    assert len(english) < 0.1 * len(_pages_text(path)), f"pages without Chinese prose: {english[:5]}"


def test_figures_and_explorers_first_views_are_printed(edition):
    name, path, book = edition
    listed = subprocess.run(["pdfimages", "-list", str(path)], capture_output=True, text=True, check=True).stdout
    n_pdf = len(listed.splitlines()) - 2
    n_page, n_still = 0, 0
    for doc in book.docs:
        article = book._read(doc).select_one("article.bd-article")
        for img in article.find_all("img"):
            if not img.find_parent("details", class_="hide"):
                n_page += 1
                n_still += bool(img.find_parent(class_="attnlib-explorer-still"))
    assert n_still >= 8, f"only {n_still} explorers on the pages"
    assert n_pdf >= n_page, f"{path.name} holds {n_pdf} images; its pages show {n_page} ({n_still} explorers)"
    text = _squeeze("".join(_pages_text(path)))
    # the line under each explorer's picture names its views
    from attnlib.i18n import catalogue
    run_hint = "Run this cell to explore" if name == "en" else catalogue("zh").get("Run this cell to explore")
    assert run_hint and text.count(_squeeze(run_hint)) == n_still, (run_hint, text.count(_squeeze(run_hint)), n_still)


def test_quizzes_have_their_answers_at_the_end_of_the_chapter(edition):
    name, path, book = edition
    text = _pages_text(path)
    pages = [_squeeze(p) for p in text]
    words = {k: _squeeze(v) for k, v in pdf.WORDS[name].items()}
    starts = _starts(text, _titles(book))
    order = list(starts)
    for k, doc in enumerate(order):
        end = starts[order[k + 1]] if k + 1 < len(order) else len(pages)
        chapter = pages[starts[doc]:end]
        article = book._read(doc).select_one("article.bd-article")
        quizzes = article.select(".attnlib-quiz")
        if not quizzes:
            continue
        where = [i for i, p in enumerate(chapter) if words["answers"] in p]
        assert len(where) == 1, f"{doc}: {len(where)} answer sections, expected one"
        body, answers = "".join(chapter[:where[0]]), "".join(chapter[where[0]:])
        for n, quiz in enumerate(quizzes, 1):
            # the explanation after "Correct." (plain text: the quiz escapes it), whole: the
            # prose may say the same as its first words
            feedback = quiz.select_one(".attnlib-quiz-right .attnlib-quiz-feedback")
            explanation = _squeeze(feedback.get_text())[len(_squeeze(feedback.b.get_text())):]
            assert explanation and explanation in answers, f"{doc}, quiz {n}: its explanation is not in the answers"
            assert explanation not in body, f"{doc}, quiz {n}: its answer is printed where it is asked"
            assert words["question"].format(n=n) in answers, f"{doc}: no answer to question {n}"
        assert words["question"].format(n=len(quizzes) + 1) not in answers
