"""Student notebooks: the chapters as assignments, without solutions or answers.

    python -m attnlib.grading.assignments                  # every chapter, English, executed
    python -m attnlib.grading.assignments 2 4 --lang zh    # chapters 2 and 4 in Chinese
    make assignments                               # both languages into _build/assignments/

Each chapter notebook is copied with:

- **no way to the solutions**: the course keeps them out of the chapters, in a notebook per
  chapter (``solutions/``), which no assignment includes; the paragraph under each exercise
  that links to it is removed. (A chapter of your own that still holds solution cells loses
  every cell that checks a solution, ``check_solution``, and any later code cell that uses a
  removed ``*_solution`` function, with the sentence ending in ":" that introduces it.)
- **hidden answers removed**: every ``<details>`` block whose summary is "Answer" (a
  block whose summary asks a question, "Answer: why ...?", keeps its question as a
  paragraph);
- **concept questions without their key**: each ``al.quiz.question`` cell becomes the
  question and its choices (no feedback, no marked answer) and a cell in which the
  student writes a letter, ``al.assignments.answer("q1", "B")``;
- **stubs and checks kept**, so the checker still gives its feedback while the student
  works; the prose that promised a solution says what the assignment does instead,
  and a note at the top tells the student what to do and hand in;
- in Chinese (``--lang zh``), the prose from the book's catalogues
  (``locales/zh_CN/LC_MESSAGES/chapters/``), the code cells from the Chinese notebook
  (``zh/chapters/``: comments, printed text, quizzes and figure text in Chinese, the code
  itself unchanged) and everything attnlib prints from attnlib's.

Then each notebook is executed once on a fresh kernel (``ATTNLIB_LANG`` set to its
language), so it opens clean: figures drawn, every check saying "not attempted", no
output of a solution. Its metadata says which chapter it is (``attnlib.chapter``), which
the grader (``python -m attnlib.grading.grade``) reads.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import pathlib
import re
import sys
import time

from ..i18n import N_, _, get_language
from ..ui import colours

__all__ = ["answer", "build", "write", "main"]

# --------------------------------------------------------------------------- in the student's notebook

_ANSWERS: dict[str, str] = {}   # what the student's answer cells recorded (the grader reads it)


class Answer:
    """What an answer cell shows: the letter recorded, or what to write."""

    def __init__(self, qid: str, letters: str, ok: bool):
        self.qid, self.letters, self.ok = qid, letters, ok

    def _text(self) -> str:
        number = self.qid[1:] if self.qid.startswith("q") else self.qid
        if not self.letters.strip():
            return _("Question {n}: no answer yet. Write the letter of your choice between the quotes, "
                     "e.g. \"B\", and run the cell.").format(n=number)
        if not self.ok:
            return _("Question {n}: {given} is not an answer. Write the letter of your choice (A, B, C ...) "
                     "between the quotes.").format(n=number, given=repr(self.letters))
        return _("Question {n}: your answer {letters} is recorded. It is checked when your notebook is "
                 "graded.").format(n=number, letters=self.letters)

    def __repr__(self) -> str:
        return self._text()

    def _repr_html_(self) -> str:
        colour = colours.PASSED if self.ok else colours.MUTED
        return (f'<div class="attnlib-answer" style="border-left:4px solid {colour};padding:.3em .8em">'
                f"{html.escape(self._text())}</div>")


def answer(qid: str, letters: str) -> Answer:
    """Record the answer to a concept question of an assignment.

    Args:
        qid: the question's id, ``"q1"``, ``"q2"``, ... (written in the assignment).
        letters: the letter of your choice, ``"B"`` (or several, ``"A, C"``, where the
            question says more than one is right).

    Returns:
        an :class:`Answer` that shows what was recorded. Nothing says whether it is
        right: the grader checks it.

    Example::

        >>> al.assignments.answer("q1", "B")
    """
    from .course import normalise_answer

    letters = str(letters)
    ok = bool(normalise_answer(letters))
    if ok:
        _ANSWERS[str(qid)] = letters
    else:
        _ANSWERS.pop(str(qid), None)
    return Answer(str(qid), letters, ok)


# --------------------------------------------------------------------------- building an assignment

BANNER = N_("**Assignment.** This is the assignment version of the chapter: the solutions and the answers "
            "to the questions are not in it. Fill in each function marked `# YOUR CODE HERE` and run its "
            "cell: the checker says whether it is right and, if not, which mistake it sees. Answer each "
            "concept question by writing the letter of your choice in the cell under it. Then save the "
            "notebook and hand it in; your teacher grades it by running your functions on new inputs.")
QUESTION = N_("**Question {n}.** {prompt}")
ANSWER_CELL = N_("Your answer: write the letter of your choice between the quotes in the cell below and run it.")
ASKED = N_("**Question.** {question}")

# Sentences of the chapters that promise what an assignment does not have, and what it says instead
REWRITES = {
    "Fill in each function, run its cell, and read the checker's verdict: it names the common mistakes it "
    "recognises and says how to fix them. Each exercise links to its solution, on a page of its own.":
        N_("Fill in each function, run its cell, and read the checker's verdict: it names the common mistakes "
           "it recognises and says how to fix them. This assignment has no solutions; your teacher grades "
           "your functions."),
    "Click a choice to see whether it is right and why. The answer is also hidden under each question.":
        N_("Write the letter of your choice in the cell under each question. The answers are checked when "
           "your notebook is graded."),
}
_SUMMARY = re.compile(r"<summary>\s*(.*?)\s*</summary>", re.S)
_SOLUTION_LINK = re.compile(r"\]\((?:\.\./)?solutions/[\w.-]+\.ipynb(?:#[\w-]*)?\)")  # a link to a solutions page


def _md():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin
    return MarkdownIt("commonmark").enable("table").use(dollarmath_plugin)


def _prose_catalogue(chapter: pathlib.Path, lang: str) -> dict[str, str]:
    """The book's translations of a chapter's prose: ``{English block: translation}``."""
    if lang == "en":
        return {}
    from ..i18n import translations
    po = chapter.parents[1] / "locales" / "zh_CN" / "LC_MESSAGES" / "chapters" / f"{chapter.stem}.po"
    if not po.is_file():
        raise FileNotFoundError(f"{po} is missing: the Chinese assignment of {chapter.name} takes its prose "
                                "from the book's catalogue (run it from the course repository)")
    return translations(po)


def _translated_code(chapter: pathlib.Path, nb: dict, lang: str) -> list[str]:
    """The source of each cell of ``nb`` as the assignment shows its code: the chapter's own
    in English; in Chinese, the Chinese notebook's (``zh/chapters/``, written by
    ``make notebooks-zh``: comments, printed text, quizzes and figure text in Chinese, the
    code unchanged), cell for cell."""
    own = ["".join(c["source"]) for c in nb["cells"]]
    if lang == "en":
        return own
    path = chapter.parents[1] / lang / "chapters" / chapter.name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the Chinese assignment of {chapter.name} takes its code "
                                "from the Chinese notebook (run `make notebooks-zh` in the course repository)")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    if [c["cell_type"] for c in cells] != [c["cell_type"] for c in nb["cells"]]:
        raise ValueError(f"{path} does not have the cells of {chapter}: run `make notebooks-zh` again")
    return ["".join(c["source"]) for c in cells]


class _Prose:
    """Rewrites one markdown cell: hidden answers out, promises rewritten, translated."""

    def __init__(self, catalogue: dict[str, str], lang: str):
        self.catalogue, self.lang, self.md = catalogue, lang, _md()
        self.missing: list[str] = []
        self.links = 0   # paragraphs that linked to a solution, removed

    def _t(self, english: str) -> str:
        if self.lang == "en":
            return english
        found = self.catalogue.get(english) or self.catalogue.get(english.rstrip("\n"))
        if found is None:
            self.missing.append(english)
            return english
        return found

    def _answer_word(self) -> str:
        """"Answer" as the catalogue translates the summary of a hidden answer."""
        block = self._t("<details>\n<summary>Answer</summary>\n")
        m = _SUMMARY.search(block)
        return m.group(1) if m else "Answer"

    def rewrite(self, source: str) -> tuple[str, int]:
        """The cell in the assignment, and how many hidden answers it dropped."""
        lines = source.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        tokens = self.md.parse(source)
        edits: list[tuple[int, int, str]] = []   # (first line, end line, replacement text)
        dropped, skip_until = 0, -1
        for i, tok in enumerate(tokens):
            if tok.map is None or tok.map[0] < skip_until:
                continue
            if tok.type == "html_block" and tok.content.lstrip().startswith("<details>"):
                m = _SUMMARY.search(tok.content)
                if m and re.match(r"answer\b", m.group(1), re.I):
                    close = next((t for t in tokens[i + 1:] if t.type == "html_block"
                                  and t.content.strip().endswith("</details>")), None)
                    end = close.map[1] if close is not None and close.map else tok.map[1]
                    question = re.sub(r"^answer\s*[:：]?\s*", "", m.group(1), flags=re.I)
                    text = ""
                    if question:  # "Answer: why ...?": the question stays
                        shown = _SUMMARY.search(self._t(tok.content))
                        asked = shown.group(1) if shown else m.group(1)
                        asked = re.sub(r"^\s*(?:" + re.escape(self._answer_word()) + r"|answer)\s*[:：]?\s*",
                                       "", asked, flags=re.I)
                        text = _(ASKED).format(question=asked) + "\n"
                    edits.append((tok.map[0], end, text))
                    dropped += 1
                    skip_until = end
                    continue
            if tok.type == "html_block":
                if self.lang != "en":
                    text = self._t(tok.content)
                    edits.append((tok.map[0], tok.map[1], text if text.endswith("\n") else text + "\n"))
                continue
            if tok.type != "inline":
                continue
            parent = tokens[i - 1] if i else None
            english = tok.content.replace("\n", " ").strip()
            if _SOLUTION_LINK.search(tok.content) and tok.map:  # the way to a solution: removed
                edits.append((tok.map[0], tok.map[1], ""))
                self.links += 1
                continue
            if parent is not None and parent.type in ("th_open", "td_open"):
                continue  # table cells: done per row below
            span = tok.map or (parent.map if parent is not None else None)
            if span is None:
                continue
            new = _(REWRITES[english]) if english in REWRITES else self._t(english)
            if new == english and english not in REWRITES:
                continue
            first = lines[span[0]]
            content_first = tok.content.split("\n")[0].rstrip()
            cut = len(first.rstrip()) - len(content_first)
            prefix = first[:cut] if cut >= 0 else ""
            if cut < 0 or not re.fullmatch(r"[ \t>*+\-#\d.)]*", prefix):
                self.missing.append(english)
                continue
            edits.append((span[0], span[1], prefix + new.replace("\n", " ") + "\n"))
        if self.lang != "en":
            edits += self._tables(tokens, lines)
        for start, end, text in sorted(edits, key=lambda e: -e[0]):
            lines[start:end] = [text] if text else []
        return "".join(lines).rstrip("\n"), dropped

    def _tables(self, tokens, lines) -> list[tuple[int, int, str]]:
        edits = []
        row = None
        for i, tok in enumerate(tokens):
            if tok.type == "tr_open":
                row = tok.map
                text, cursor = lines[row[0]].rstrip("\n"), 0
            elif tok.type == "inline" and row is not None and tokens[i - 1].type in ("th_open", "td_open"):
                english = tok.content.strip()
                if not english:
                    continue
                at = text.find(english, cursor)
                new = self._t(english).replace("|", "\\|")
                if at < 0:
                    self.missing.append(english)
                    continue
                text = text[:at] + new + text[at + len(english):]
                cursor = at + len(new)
            elif tok.type == "tr_close" and row is not None:
                edits.append((row[0], row[1], text + "\n"))
                row = None
        return edits


def _quiz_cells(source: str, first_number: int, lang: str) -> list[dict]:
    """A quiz cell as a question (markdown, no key) and an answer cell (code)."""
    from .course import LETTERS, questions_in_cell
    cells = []
    for k, (prompt, choices) in enumerate(questions_in_cell(source)):
        n = first_number + k
        shown = [f"**{LETTERS[j]}.** {_(c[0])}" for j, c in enumerate(choices)]
        md = _(QUESTION).format(n=n, prompt=_(prompt)) + "\n\n" + "\n".join(f"- {s}" for s in shown) \
            + "\n\n" + _(ANSWER_CELL)
        cells.append({"cell_type": "markdown", "metadata": {}, "source": md})
        cells.append({"cell_type": "code", "metadata": {"tags": ["assignment-answer"]}, "execution_count": None,
                      "outputs": [], "source": f'al.assignments.answer("q{n}", "")'})
    return cells


def build(chapter: pathlib.Path, lang: str = "en") -> tuple[dict, dict]:
    """The assignment of the chapter notebook at ``chapter`` (not executed).

    Args:
        chapter: a chapter notebook of the course (``chapters/02_qkv.ipynb``).
        lang: ``"en"`` or ``"zh"``. Default: ``"en"``.

    Returns:
        ``(notebook, report)``: the notebook as a dict (nbformat 4), and what was
        removed (``links`` to the solutions, and in a chapter that holds them ``solutions`` and
        the ``dependent`` cells that use them; ``answers``; ``questions``) and which prose had
        no translation (``untranslated``, empty when complete).
    """
    from ..i18n import set_language
    chapter = pathlib.Path(chapter)
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    code = _translated_code(chapter, nb, lang)
    before = get_language()
    set_language(lang)
    try:
        prose = _Prose(_prose_catalogue(chapter, lang), lang)
        cells, report = [], {"links": 0, "solutions": 0, "dependent": 0, "answers": 0, "questions": 0}
        solutions: set[str] = set()
        for cell in nb["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and "check_solution(" in src:
                solutions |= set(re.findall(r"^def (\w+_solution)\(", src, flags=re.M))
        for cell, src_shown in zip(nb["cells"], code):
            src = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                text, dropped = prose.rewrite(src)
                report["answers"] += dropped
                if text.strip():
                    cells.append({"cell_type": "markdown", "metadata": {}, "source": text})
                continue
            if cell["cell_type"] != "code":
                continue
            if "check_solution(" in src:
                report["solutions"] += 1
                continue
            if any(re.search(rf"\b{s}\b", src) for s in solutions):
                report["dependent"] += 1  # shows what the solution computes: goes with it
                if cells and cells[-1]["cell_type"] == "markdown" and cells[-1]["source"].rstrip().endswith((":", "：")):
                    cells.pop()
                continue
            if ".quiz.question(" in src:
                new = _quiz_cells(src_shown, report["questions"] + 1, lang)
                report["questions"] += len(new) // 2
                cells += new
                continue
            keep = {k: v for k, v in cell["metadata"].items() if k in ("tags",)}
            cells.append({"cell_type": "code", "metadata": keep, "execution_count": None, "outputs": [],
                          "source": src_shown})
        banner = {"cell_type": "markdown", "metadata": {"tags": ["assignment-note"]}, "source": "> " + _(BANNER)}
        heading = 1 if cells and cells[0]["cell_type"] == "markdown" else 0
        cells.insert(heading, banner)
        report["untranslated"] = prose.missing
        report["links"] = prose.links
    finally:
        set_language(before)
    for c in cells:
        c["source"] = c["source"].splitlines(keepends=True)
    meta = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "attnlib": {"chapter": chapter.stem, "lang": lang, "assignment": 1}}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 4}, report


def execute(nb: dict, lang: str, cwd: pathlib.Path, timeout: int = 600) -> dict:
    """Run an assignment once on a fresh kernel (its outputs are what the student opens)."""
    import nbformat
    from nbclient import NotebookClient

    node = nbformat.reads(json.dumps(nb), as_version=4)
    old = {k: os.environ.get(k) for k in ("ATTNLIB_LANG", "ATTNLIB_PROGRESS")}
    os.environ["ATTNLIB_LANG"], os.environ["ATTNLIB_PROGRESS"] = lang, "off"
    try:
        NotebookClient(node, timeout=timeout, kernel_name="python3", store_widget_state=True,
                       resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for cell in node.cells:
        cell.metadata.pop("execution", None)
        cell.pop("id", None)
    node.nbformat, node.nbformat_minor = 4, 4
    return json.loads(nbformat.writes(node))


def write(chapters: list[pathlib.Path], out: pathlib.Path, lang: str = "en", *, run: bool = True,
          strict: bool = True, quiet: bool = False) -> list[pathlib.Path]:
    """Write the assignments of ``chapters`` into ``out`` (``out/02_qkv.ipynb``, ...).

    Args:
        chapters: chapter notebooks.
        out: the folder to write into (created).
        lang: ``"en"`` or ``"zh"``. Default: ``"en"``.
        run: execute each assignment once. Default: ``True``.
        strict: fail when a paragraph has no translation (``--lang zh``). Default: ``True``.
        quiet: print nothing.

    Returns:
        the paths written.
    """
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in chapters:
        t0 = time.perf_counter()
        nb, report = build(path, lang)
        if report["untranslated"] and strict:
            raise ValueError(f"{path.name}: {len(report['untranslated'])} paragraphs have no {lang} translation, "
                             f"e.g. {report['untranslated'][0][:100]!r}: run `make update-po` and translate them")
        if run:
            nb = execute(nb, lang, out)
        target = out / path.name
        target.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(target)
        if not quiet:
            print(f"{target}  ({report['links']} links to solutions, {report['solutions']} solutions, "
                  f"{report['dependent']} cells using them, {report['answers']} hidden answers removed; "
                  f"{report['questions']} questions; "
                  f"{time.perf_counter() - t0:.1f} s)", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    from . import course
    ap = argparse.ArgumentParser(prog="python -m attnlib.grading.assignments", description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", help="chapter numbers or names (default: every chapter)")
    ap.add_argument("--lang", default="en", choices=["en", "zh"], help="language (default: en)")
    ap.add_argument("--out", type=pathlib.Path, help="folder (default: _build/assignments/<lang>)")
    ap.add_argument("--source", type=pathlib.Path, help="the course's chapters folder (default: the repository's)")
    ap.add_argument("--no-execute", action="store_true", help="write without running them")
    a = ap.parse_args(argv)
    found = course.chapters(a.source)
    if not found:
        print("error: no chapter notebooks found: run this in the course's repository or give --source",
              file=sys.stderr)
        return 2
    try:
        picked = [found[course.chapter_of(c)] for c in a.chapters] if a.chapters else list(found.values())
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = course.course_root() or pathlib.Path(".")
    out = a.out or root / "_build" / "assignments" / a.lang
    write(picked, out, a.lang, run=not a.no_execute)
    return 0


if __name__ == "__main__":
    sys.exit(main())
