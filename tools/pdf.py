"""The course as a PDF in each language, printed from the built website by Chromium.

    python tools/pdf.py                  # both editions (make pdf), after make book
    python tools/pdf.py --edition zh     # one

For each edition this script composes one HTML document from the built pages (_build/html
and _build/html/zh), in the order of _toc.yml: a title page with the contents, the
introduction, the chapters and the appendices (all but the API reference, which is the
package's docstrings: ``help()`` shows them). Each page's article is taken as the site
renders it: its prose, code, stored outputs and figures, and its formulas typeset by the
site's MathJax. What only works on a screen is turned into what a book does:

- an **explorer** shows its first view, the picture its cell stores for every front end
  that cannot run it (with the line naming the views), without the live control;
- a **quiz** lists its choices; its answer (the right choice with its explanation, and the
  hidden answer below the quiz) moves to the end of the chapter, under "Answers and
  solutions", with the **solutions** of the exercises (the hidden ``*_solution`` cells);
  other hidden code cells print their output only, and every other hidden block
  (a proof) is printed open;
- a link to another page of the book becomes a link inside the PDF, a link to a page
  that is not in it (the API reference) goes to the published site.

Chromium (Debian's, as the browser tests use it, driven by Playwright) serves the site
from 127.0.0.1 with every other host blocked, typesets, and prints A4 with page numbers,
the document outline (bookmarks) from the headings and a tagged (accessible) PDF. The
PDFs go to _build/pdf/ and into the site (_build/html/<name>.pdf, _build/html/zh/<name>.pdf),
where every page's download menu links them (tools/sphinxext/attnlib_a11y.py).
"""
from __future__ import annotations

import argparse
import copy
import functools
import http.server
import os
import pathlib
import posixpath
import re
import shutil
import sys
import threading
import time
import urllib.parse

import yaml
from bs4 import BeautifulSoup, NavigableString, Tag

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("ATTNLIB_SITE", ROOT / "_build" / "html"))
OUT = ROOT / "_build" / "pdf"
CHROMIUM = os.environ.get("ATTNLIB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
sys.path.insert(0, str(ROOT / "tools" / "sphinxext"))
from attnlib_a11y import PDF_NAMES  # noqa: E402  (the file names the site links)

# where each edition lives under the site's root
EDITIONS = {"en": "", "zh": "zh/"}
# pages of _toc.yml left out of the book (the API reference: the docstrings, as help() shows them)
LEFT_OUT = {"appendix/api"}
# the words the book adds to the pages
WORDS = {
    "en": {"contents": "Contents", "answers": "Answers and solutions", "questions": "Questions",
           "question": "Question {n}.", "answer": "Answer:", "solutions": "Solutions of the exercises",
           "see": "Answer at the end of the chapter", "site": "The website: {url}"},
    "zh": {"contents": "目录", "answers": "答案与参考解答", "questions": "概念题",
           "question": "问题 {n}.", "answer": "答案：", "solutions": "练习的参考解答",
           "see": "答案见本章末尾", "site": "网站：{url}"},
}
LETTERS = "ABCDEFGH"
SOLUTION = re.compile(r"\bdef\s+\w+_solution\s*\(")

PRINT_CSS = """
@page { size: A4; margin: 18mm 16mm 20mm 16mm; }
html, body { background: #fff !important; }
body { font-size: 10.5pt; }
/* Chinese text in the fonts `make fonts` installs (the theme names none for it) */
html:lang(zh-CN) body { font-family: var(--pst-font-family-base), "WenQuanYi Micro Hei", "Noto Sans CJK SC", sans-serif; }
.attnlib-pdf-page { break-before: page; }
.attnlib-pdf-title { text-align: center; padding-top: 30mm; }
.attnlib-pdf-title h1 { font-size: 28pt; }
.attnlib-pdf-contents { text-align: left; margin: 20mm auto 0; max-width: 130mm; }
.attnlib-pdf-contents li { margin: .2em 0; }
.attnlib-pdf-answers { break-before: page; }
.attnlib-pdf-answer { break-inside: avoid; margin: .6em 0 1em; }
.attnlib-pdf-see { font-size: 90%; font-style: italic; margin: .2em 0 0; }
.attnlib-pdf-choice { margin: .15em 0 .15em 1em; }
pre { white-space: pre-wrap !important; overflow-wrap: anywhere; }
div.highlight, .cell_output, img, figure, table, .attnlib-quiz, .attnlib-explorer-still { break-inside: avoid; }
h1, h2, h3, h4 { break-after: avoid; }
h1 { font-size: 22pt; } h2 { font-size: 16pt; } h3 { font-size: 13pt; } h4 { font-size: 11pt; }
a.headerlink { display: none !important; }
main.attnlib-pdf { max-width: none; margin: 0; padding: 0; }
"""


# ---------------------------------------------------------------------------- the pages

def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return [p for p in pages if p not in LEFT_OUT]


def slug(docname: str) -> str:
    return "page-" + re.sub(r"[^A-Za-z0-9_-]", "-", docname)


class Book:
    """The composed document of one edition."""

    def __init__(self, edition: str):
        self.edition, self.prefix, self.words = edition, EDITIONS[edition], WORDS[edition]
        self.docs = toc_pages()
        self.root = SITE / self.prefix if self.prefix else SITE
        missing = [d for d in self.docs if not (self.root / f"{d}.html").is_file()]
        if missing:
            raise SystemExit(f"the built site lacks {[self.prefix + m + '.html' for m in missing]}: run `make book`")
        first = self._read(self.docs[0])
        canonical = first.find("link", rel="canonical")
        # the published address of this edition's root (its index page's canonical link)
        self.published = canonical["href"].rsplit("/", 1)[0] + "/" if canonical else ""
        self.title = first.select_one(".logo__title").get_text(strip=True)
        self.lang = first.html.get("lang", "en")

    def _read(self, docname: str) -> BeautifulSoup:
        return BeautifulSoup((self.root / f"{docname}.html").read_text(encoding="utf-8"), "html.parser")

    # ---- links ----------------------------------------------------------------------
    def _link(self, docname: str, href: str) -> str:
        """Where a link of page ``docname`` points in the PDF."""
        parts = urllib.parse.urlsplit(href)
        if parts.scheme or href.startswith("//"):
            return href
        if not parts.path:  # a section of this page
            return f"#{slug(docname)}--{parts.fragment}" if parts.fragment else f"#{slug(docname)}"
        target = posixpath.normpath(posixpath.join(posixpath.dirname(docname), urllib.parse.unquote(parts.path)))
        stem = target[:-5] if target.endswith(".html") else None
        if stem in self.docs:
            return f"#{slug(stem)}--{parts.fragment}" if parts.fragment else f"#{slug(stem)}"
        # a page or file that is not in the book: on the published site
        return urllib.parse.urljoin(self.published, target) + (f"#{parts.fragment}" if parts.fragment else "")

    def _resource(self, docname: str, src: str) -> str:
        """A figure's or stylesheet's address, from the root of the served site."""
        if urllib.parse.urlsplit(src).scheme or src.startswith("//"):
            return src
        return "/" + self.prefix + posixpath.normpath(posixpath.join(posixpath.dirname(docname), src))

    # ---- one page ---------------------------------------------------------------------
    def page(self, docname: str, soup: BeautifulSoup) -> Tag:
        article = self._read(docname).select_one("article.bd-article")
        for tag in article.find_all(["script", "noscript"]):  # the live widgets, the theme's code
            tag.decompose()
        for tag in article.select("a.headerlink"):
            tag.decompose()
        for tag in article.find_all(id=True):
            tag["id"] = f"{slug(docname)}--{tag['id']}"
        for a in article.find_all("a", href=True):
            a["href"] = self._link(docname, a["href"])
        for img in article.find_all("img", src=True):
            img["src"] = self._resource(docname, img["src"])
        answers, solutions = self._quizzes(docname, article, soup), self._hidden_cells(article, soup)
        for details in article.find_all("details"):  # what is left hidden: a proof, a derivation
            details["open"] = ""
        section = soup.new_tag("section", attrs={"class": "attnlib-pdf-page", "id": slug(docname)})
        section.extend(list(article.contents))
        if answers or solutions:
            section.append(self._answers_section(docname, answers, solutions, soup))
        return section

    def _quizzes(self, docname: str, article: Tag, soup: BeautifulSoup) -> list[Tag]:
        """Each quiz keeps its prompt and choices; its answer (the right choice, its
        explanation, and the hidden answer that follows the quiz) is returned."""
        answers, pending = [], None
        for el in article.find_all(lambda t: t.name == "details" and not t.get("class")
                                   or t.name == "div" and "attnlib-quiz" in (t.get("class") or [])
                                   or t.name == "details" and "sd-dropdown" in (t.get("class") or [])):
            if el.name == "div":
                pending = el
                answers.append(self._quiz(docname, el, len(answers) + 1, soup))
            elif pending is not None and el.parent is not None:  # the quiz's hidden answer
                summary = el.find("summary")
                if summary:
                    summary.decompose()
                body = soup.new_tag("div", attrs={"class": "attnlib-pdf-hidden-answer"})
                body.extend(list(el.contents))
                answers[-1].append(body)
                el.decompose()
                pending = None
        return answers

    def _quiz(self, docname: str, quiz: Tag, n: int, soup: BeautifulSoup) -> Tag:
        anchor = f"{slug(docname)}--answer-{n}"
        prompt = quiz.select_one(".attnlib-quiz-prompt")
        entry = soup.new_tag("div", attrs={"class": "attnlib-pdf-answer", "id": anchor})
        head = soup.new_tag("p")
        bold = soup.new_tag("b")
        bold.string = self.words["question"].format(n=n)
        head.append(bold)
        if prompt:  # the prompt without its "Question." label, which becomes "Question n."
            head.extend([copy.copy(c) for c in prompt.contents if c is not prompt.b])
            prompt.b.string = self.words["question"].format(n=n)
        entry.append(head)
        for i, choice in enumerate(quiz.select("details.attnlib-quiz-choice")):
            summary, feedback = choice.find("summary"), choice.select_one(".attnlib-quiz-feedback")
            if "attnlib-quiz-right" in choice.get("class", []):
                p = soup.new_tag("p")
                b = soup.new_tag("b")
                b.string = f"{self.words['answer']} {summary.get_text(' ', strip=True)}"
                p.append(b)
                entry.append(p)
                if feedback:
                    entry.append(copy.copy(feedback))
            line = soup.new_tag("div", attrs={"class": "attnlib-pdf-choice"})
            line.extend(list(summary.contents))
            choice.replace_with(line)
        for p in quiz.find_all("p", recursive=False):  # "Click a choice to see feedback."
            if "attnlib-quiz-prompt" not in (p.get("class") or []):
                p.decompose()
        see = soup.new_tag("p", attrs={"class": "attnlib-pdf-see"})
        link = soup.new_tag("a", href=f"#{anchor}")
        link.string = self.words["see"]
        see.append(link)
        quiz.append(see)
        return entry

    def _hidden_cells(self, article: Tag, soup: BeautifulSoup) -> list[Tag]:
        """The hidden code of a cell is not printed where it is; a solution's code is
        returned for the end of the chapter (its output, the check, stays)."""
        solutions = []
        for hidden in article.select("details.hide"):
            code = hidden.select_one("div.highlight")
            if code is not None and SOLUTION.search(code.get_text()):
                solutions.append(copy.copy(code))
            hidden.decompose()
        return solutions

    def _answers_section(self, docname: str, answers: list[Tag], solutions: list[Tag], soup) -> Tag:
        section = soup.new_tag("section", attrs={"class": "attnlib-pdf-answers", "id": f"{slug(docname)}--answers"})
        h2 = soup.new_tag("h2")
        h2.string = self.words["answers"]
        section.append(h2)
        for key, items in (("questions", answers), ("solutions", solutions)):
            if items:
                h3 = soup.new_tag("h3")
                h3.string = self.words[key]
                section.append(h3)
                section.extend(items)
        return section

    # ---- the document -----------------------------------------------------------------
    def html(self) -> str:
        first = self._read(self.docs[1] if len(self.docs) > 1 else self.docs[0])
        soup = BeautifulSoup("<!DOCTYPE html><html><head></head><body></body></html>", "html.parser")
        soup.html["lang"] = self.lang
        soup.html["data-theme"] = soup.html["data-mode"] = "light"
        head = soup.head
        head.append(soup.new_tag("meta", charset="utf-8"))
        title = soup.new_tag("title")
        title.string = self.title
        head.append(title)
        # the site's stylesheets and MathJax (its configuration, then the library)
        for link in first.find_all("link", rel="stylesheet"):
            head.append(soup.new_tag("link", rel="stylesheet", href=self._resource(self.docs[1], link["href"])))
        for script in first.find_all("script"):
            src = script.get("src", "")
            if "mathjax" in src:
                head.append(soup.new_tag("script", src=self._resource(self.docs[1], src), defer=""))
            elif not src and "MathJax" in script.get_text():
                head.append(copy.copy(script))
        style = soup.new_tag("style")
        style.string = PRINT_CSS
        head.append(style)

        main = soup.new_tag("main", attrs={"class": "attnlib-pdf bd-content"})
        soup.body.append(main)
        main.append(self._title_page(soup))
        for docname in self.docs:
            main.append(self.page(docname, soup))
        return str(soup)

    def _title_page(self, soup) -> Tag:
        section = soup.new_tag("section", attrs={"class": "attnlib-pdf-title"})
        h1 = soup.new_tag("h1")
        h1.string = self.title
        section.append(h1)
        if self.published:
            p = soup.new_tag("p")
            p.string = self.words["site"].format(url=self.published)
            section.append(p)
        nav = soup.new_tag("nav", attrs={"class": "attnlib-pdf-contents"})
        h2 = soup.new_tag("h2")
        h2.string = self.words["contents"]
        nav.append(h2)
        ol = soup.new_tag("ul")
        for docname in self.docs:
            h = self._read(docname).select_one("article.bd-article h1")
            for mark in h.select("a.headerlink") if h else []:
                mark.decompose()
            li = soup.new_tag("li")
            a = soup.new_tag("a", href=f"#{slug(docname)}")
            a.string = h.get_text(" ", strip=True) if h else docname
            li.append(a)
            ol.append(li)
        nav.append(ol)
        section.append(nav)
        return section


# ---------------------------------------------------------------------------- printing

class _Handler(http.server.SimpleHTTPRequestHandler):
    """The built site, plus the composed books at /_pdf/<edition>.html."""

    books: dict[str, bytes] = {}

    def log_message(self, *args):
        pass

    def do_GET(self):
        name = urllib.parse.urlsplit(self.path).path
        if name.startswith("/_pdf/") and name[6:-5] in self.books:
            body = self.books[name[6:-5]]
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


FOOTER = ('<div style="font-size:8pt;width:100%;text-align:center;color:#555;">'
          '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')


def print_books(editions: list[str]) -> list[pathlib.Path]:
    from playwright.sync_api import sync_playwright

    if not (SITE / "index.html").is_file():
        raise SystemExit(f"no built site at {SITE}: run `make book` first")
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"Chromium not found at {CHROMIUM}: run `make chromium`")
    _Handler.books = {e: Book(e).html().encode("utf-8") for e in editions}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(SITE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
            for edition in editions:
                start = time.time()
                context = browser.new_context()
                errors = []
                context.route("**/*", lambda r: r.continue_() if urllib.parse.urlsplit(r.request.url).hostname
                              in ("127.0.0.1", None) else (errors.append(r.request.url), r.abort()))
                page = context.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.on("response", lambda r: errors.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None)
                page.goto(f"{base}/_pdf/{edition}.html", wait_until="load")
                page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                       timeout=60000)
                page.evaluate("() => MathJax.startup.promise.then(() => document.fonts.ready).then(() => true)")
                bad = page.evaluate("() => Array.from(document.images).filter(i => !i.complete || !i.naturalWidth)"
                                    ".map(i => i.src.slice(0, 80))")
                merrors = page.locator("mjx-merror").count()
                if errors or bad or merrors:
                    raise SystemExit(f"{edition}: the book did not render: {errors[:5]} {bad[:5]} "
                                     f"{merrors} MathJax errors")
                out = OUT / PDF_NAMES[edition]
                page.pdf(path=str(out), format="A4", print_background=True, outline=True, tagged=True,
                         display_header_footer=True, header_template="<span></span>", footer_template=FOOTER,
                         margin={"top": "16mm", "bottom": "18mm", "left": "15mm", "right": "15mm"})
                context.close()
                target = (SITE / EDITIONS[edition]) / PDF_NAMES[edition]
                shutil.copyfile(out, target)
                written.append(out)
                print(f"{out.relative_to(ROOT)}: {out.stat().st_size / 1e6:.1f} MB in {time.time() - start:.0f} s "
                      f"(also {target.relative_to(ROOT)})")
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edition", choices=sorted(EDITIONS), action="append",
                    help="an edition to print (default: both)")
    ap.add_argument("--html", action="store_true", help="write the composed HTML to _build/pdf/ too")
    a = ap.parse_args()
    editions = a.edition or list(EDITIONS)
    if a.html:
        OUT.mkdir(parents=True, exist_ok=True)
        for e in editions:
            (OUT / f"{e}.html").write_text(Book(e).html(), encoding="utf-8")
    print_books(editions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
