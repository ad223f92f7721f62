"""How long a chapter takes a learner: the course's one measure of a chapter's length.

    python tools/chapter_time.py                  # every chapter: the measure, term by term
    python tools/chapter_time.py --write [...]    # also write the stated time at the top
    python tools/chapter_time.py --check [...]    # exit 1 if a stated time disagrees

A chapter is meant for one sitting: at most ``LIMIT`` = 75 minutes by this measure
(issue 31). The measure is the time to read what a chapter shows, do its exercises and
answer its questions; what starts collapsed (a hidden answer, a proof, an evidence block,
a solution) is optional reading and is not counted:

- **prose**: the words of the markdown cells outside ``<details>`` blocks, at
  ``WORDS_PER_MINUTE`` = 100, and ``DISPLAY_MATH_MINUTES`` = 0.5 for each displayed
  formula (``$$...$$``); an inline formula counts as one word. Ordinary reading runs at
  200-250 words a minute; study reading of technical prose, where a reader stops at each
  definition and formula, at about half that.
- **code**: ``CODE_CELL_MINUTES`` = 1.5 for each code cell a learner sees (not a quiz, an
  exercise, an evidence block or a removed cell): read about ten lines of code, run it,
  look at its figure or explorer; and ``PRINTED_LINE_MINUTES`` = 1/12 (5 s) for each line
  it prints (stream output and plain-text results, not figures).
- **exercises**: ``EXERCISE_MINUTES`` = 8 for each exercise stub (read the prompt, write
  five to fifteen lines, run the checker, act on its message once or twice).
- **quizzes**: ``QUIZ_MINUTES`` = 1.5 for each concept question (a question of about 60
  words with four choices, then the feedback).

Checked against the reviewer's estimates in issue 31, for the chapters as they were then:
chapter 5 (multi-head attention and the Transformer block), "~2 h", measures 117 minutes;
chapter 6 (the cost of attention and the methods that reduce it), "~2.5-3 h", 132 minutes;
the reviewer's "~1.5-3 h per chapter" for all eight, 82 to 141 minutes.

The time stated at the top of a chapter (``**Time:** about N minutes``, in its first
markdown cell) is this measure rounded to 5 minutes; ``--write`` keeps it so, and
``tests/test_notebooks.py`` fails when they disagree or a chapter is over the limit.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]

LIMIT = 75                      # minutes: one sitting
WORDS_PER_MINUTE = 100
DISPLAY_MATH_MINUTES = 0.5
CODE_CELL_MINUTES = 1.5
PRINTED_LINE_MINUTES = 1 / 12
EXERCISE_MINUTES = 8
QUIZ_MINUTES = 1.5
ROUND_TO = 5                    # the stated time is the measure rounded to this

EVIDENCE_TAG = "evidence"       # a collapsed evidence block (CONTRIBUTING.md, "Evidence blocks")
STATED = re.compile(r"\*\*Time:\*\* about (\d+) minutes")
# the same statement in the Chinese catalogues and notebooks: **用时**：约 N 分钟
STATED_ZH = re.compile(r"\*\*用时\*\*：约 (\d+) 分钟")
CATALOGUE = ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / "chapters"   # the prose catalogues


@dataclass
class Measure:
    """A chapter's measure, term by term (counts, and minutes in all)."""

    words: int = 0
    display_math: int = 0
    code_cells: int = 0
    printed_lines: int = 0
    exercises: int = 0
    quizzes: int = 0

    @property
    def terms(self) -> dict[str, float]:
        return {"prose": self.words / WORDS_PER_MINUTE + self.display_math * DISPLAY_MATH_MINUTES,
                "code": self.code_cells * CODE_CELL_MINUTES + self.printed_lines * PRINTED_LINE_MINUTES,
                "exercises": self.exercises * EXERCISE_MINUTES,
                "quizzes": self.quizzes * QUIZ_MINUTES}

    @property
    def minutes(self) -> float:
        return sum(self.terms.values())

    @property
    def stated(self) -> int:
        """What the chapter should state: the minutes rounded to ``ROUND_TO``."""
        return int(ROUND_TO * round(self.minutes / ROUND_TO))


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def prose_words(markdown: str) -> tuple[int, int]:
    """``(words, displayed formulas)`` of a markdown cell, outside ``<details>`` blocks."""
    text = re.sub(r"<details>.*?</details>", " ", markdown, flags=re.S)
    display = len(re.findall(r"\$\$.*?\$\$", text, flags=re.S))
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " formula ", text)           # an inline formula: one word
    text = re.sub(r"\]\([^)]*\)", "]", text)                     # a link's target is not read
    text = re.sub(r"<[^>]+>", " ", text)                          # HTML tags
    return len(re.findall(r"\w[\w'’.-]*", text)), display


def printed_lines(cell) -> int:
    """Lines a code cell prints: stream output and plain-text results that are not the
    stand-in of a figure, an HTML view or an explorer."""
    n = 0
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            n += len("".join(out.get("text", "")).splitlines())
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            if data.keys() & {"image/png", "text/html", "application/vnd.jupyter.widget-view+json"}:
                continue
            n += len("".join(data.get("text/plain", "")).splitlines())
    return n


def kind(cell) -> str:
    """What a code cell is to a learner: "quiz", "exercise", "evidence", "removed" or "code"."""
    src, tags = _source(cell), cell.get("metadata", {}).get("tags", [])
    if "al.quiz.question(" in src:
        return "quiz"
    if EVIDENCE_TAG in tags:
        return "evidence"
    if "remove-cell" in tags:
        return "removed"
    if re.search(r"al\.exercises\.check\(", src) and "NotImplementedError" in src:
        return "exercise"
    return "code"


def measure(nb: dict) -> Measure:
    """The measure of a notebook (a dict as stored)."""
    m = Measure()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            if "remove-cell" in cell.get("metadata", {}).get("tags", []):
                continue
            words, display = prose_words(_source(cell))
            m.words += words
            m.display_math += display
        elif cell["cell_type"] == "code" and _source(cell).strip():
            k = kind(cell)
            if k == "quiz":
                m.quizzes += _source(cell).count("al.quiz.question(")
            elif k == "exercise":
                m.exercises += 1
            elif k == "code":
                m.code_cells += 1
                m.printed_lines += printed_lines(cell)
    return m


def measure_path(path: pathlib.Path) -> Measure:
    return measure(json.loads(pathlib.Path(path).read_text(encoding="utf-8")))


def stated(nb: dict, pattern: re.Pattern = STATED) -> int | None:
    """The minutes stated in the first markdown cell, or None."""
    first = next((c for c in nb["cells"] if c["cell_type"] == "markdown"), None)
    m = pattern.search(_source(first)) if first else None
    return int(m.group(1)) if m else None


def write_stated(path: pathlib.Path) -> bool:
    """Make the stated time of ``path`` its measure, in the chapter and in the translation of
    that line in its prose catalogue (``locales/zh_CN/LC_MESSAGES/chapters/<stem>.po``, whose
    msgid and msgstr change together, so the translation stays current); return whether it
    changed."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    want = measure(nb).stated
    first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    src = _source(first)
    if not STATED.search(src):
        raise SystemExit(f"{path}: its first markdown cell has no '**Time:** about N minutes' line; add one "
                         "under the title, with the prerequisites (CONTRIBUTING.md, 'A chapter's length')")
    new = STATED.sub(f"**Time:** about {want} minutes", src, count=1)
    if new == src:
        return False
    first["source"] = new.splitlines(keepends=True)
    path.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    po = CATALOGUE / f"{path.stem}.po"
    if po.exists():  # the numbers only: a line wrapped in the .po may break anywhere between words
        text = po.read_text(encoding="utf-8")
        gap = r'((?:\s|")*)'
        text = re.sub(r"(\*\*Time:\*\*" + gap + "about" + gap + r")\d+(" + gap + "minutes)",
                      lambda m: m.group(1) + str(want) + m.group(4), text, count=1)
        text = re.sub(r"(\*\*用时\*\*：" + gap + "约" + gap + r")\d+(" + gap + "分钟)",
                      lambda m: m.group(1) + str(want) + m.group(4), text, count=1)
        po.write_text(text, encoding="utf-8")
    return True


def table(paths: list[pathlib.Path]) -> str:
    rows = [f"{'chapter':26s} {'words':>6s} {'$$':>3s} {'cells':>5s} {'lines':>5s} {'ex':>3s} {'quiz':>4s}"
            f" {'prose':>6s} {'code':>5s} {'ex':>4s} {'quiz':>5s} {'min':>5s} stated"]
    for p in paths:
        nb = json.loads(p.read_text(encoding="utf-8"))
        m = measure(nb)
        t = m.terms
        flag = "" if m.minutes <= LIMIT else f"  over {LIMIT}"
        rows.append(f"{p.stem:26s} {m.words:6d} {m.display_math:3d} {m.code_cells:5d} {m.printed_lines:5d}"
                    f" {m.exercises:3d} {m.quizzes:4d} {t['prose']:6.1f} {t['code']:5.1f} {t['exercises']:4.0f}"
                    f" {t['quizzes']:5.1f} {m.minutes:5.1f} {stated(nb)}{flag}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*", type=pathlib.Path)
    ap.add_argument("--write", action="store_true", help="write each chapter's stated time")
    ap.add_argument("--check", action="store_true", help="exit 1 if a stated time is not the measure")
    a = ap.parse_args(argv)
    paths = a.chapters or sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    if a.write:
        for p in paths:
            if write_stated(p):
                print(f"{p}: stated time updated, and in its catalogue (then: python tools/zh_notebooks.py)")
    print(table(paths))
    if a.check:
        bad = [p for p in paths if stated(json.loads(p.read_text(encoding="utf-8"))) != measure_path(p).stated]
        for p in bad:
            print(f"{p}: the stated time is not the measure ({measure_path(p).stated} min): "
                  "run tools/chapter_time.py --write", file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
