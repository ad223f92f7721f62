"""Extract the English text attnlib shows into message templates (``.pot``), for translation.

    python tools/i18n_extract.py --out _build/gettext/attnlib   # (make gettext runs it)

then ``sphinx-intl update`` (``make update-po``) merges them into
``attnlib/i18n/locales/zh_CN/LC_MESSAGES/`` (docs/translating.md).

- ``attnlib/`` (and ``tools/sphinxext/``): Babel's Python extractor, keywords ``_``, ``N_``
  and ``tr``, plus :func:`extract_exercises` for the learner-facing fields of the exercise
  catalogues, ``Mistake(key, title, message, fix=...)``, ``Case(label=...)`` and
  ``Exercise(prompt=..., hint=..., hints=(...))``, which are written without markers.
- ``chapters/*.ipynb`` (code cells): what ``tools/zh_notebooks.py`` collects (printed
  text, comments, quizzes, figure text, ``# i18n`` lines), for the Chinese notebooks.

One catalogue per source: ``attnlib.pot`` (the package), ``exercises/ch02_qkv.pot``,
``grading.pot`` (the assignments, the grader and its report, a learner's progress) and
``chapters/02_qkv.pot``.
"""
from __future__ import annotations

import argparse
import ast
import io
import pathlib
import re
import sys

from babel.messages.catalog import Catalog
from babel.messages.extract import extract
from babel.messages.pofile import write_po

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import zh_notebooks  # noqa: E402

KEYWORDS = {"_": None, "N_": None, "tr": None}

class Template:
    """A message and whether it has ``{field}``s to fill in."""

    def __init__(self, text: str, fields: bool):
        self.text, self.fields = text, fields


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _worth(t: Template | None) -> bool:
    return t is not None and re.search(r"[A-Za-z]{2}", re.sub(r"\{[^{}]*\}", "", t.text)) is not None


def extract_exercises(fileobj, keywords, comment_tags, options):
    """A Babel extractor for the exercise catalogues' learner-facing fields (string
    literals; a field given any other way is marked with ``N_()`` where it is built).
    Of an ``Exercise``'s ``hint`` it takes what the checker shows: the sentences before
    any code (:func:`attnlib.exercises._hints.shown_part_of_hint`)."""
    from attnlib.exercises._hints import shown_part_of_hint

    def text(node):
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    for node in ast.walk(ast.parse(fileobj.read())):
        if not isinstance(node, ast.Call):
            continue
        name, kw = _call_name(node), {k.arg: k.value for k in node.keywords if k.arg}
        fields = []
        if name == "Mistake":
            fields = [kw.get(key, node.args[i] if len(node.args) > i else None)
                      for i, key in ((1, "title"), (2, "message"))] + [kw.get("fix")]
        elif name == "Case":
            fields = [kw.get("label")]
        elif name == "Exercise":
            fields = [kw.get("prompt"), *getattr(kw.get("hints"), "elts", [])]
            hint = text(kw.get("hint"))
            if hint and shown_part_of_hint(hint):
                yield kw["hint"].lineno, "", shown_part_of_hint(hint), []
        for field in fields:
            if text(field):
                yield field.lineno, "", text(field), []


def domain_of(rel: str) -> str:
    """The catalogue of a source file: ``attnlib``, ``grading`` or ``exercises/chNN_x``."""
    m = re.fullmatch(r"attnlib/exercises/catalogue/(ch\d\d_\w+)\.py", rel)
    if m:
        return f"exercises/{m.group(1)}"
    if re.fullmatch(r"attnlib/exercises/tracking\.py|attnlib/grading/\w+\.py", rel):
        return "grading"  # the teacher's tools and the learner's progress
    return "attnlib"


def from_package() -> dict[str, Catalog]:
    """attnlib's messages, by catalogue (Babel's extraction)."""
    catalogues: dict[str, Catalog] = {}
    for path in sorted((ROOT / "attnlib").rglob("*.py")) + sorted((ROOT / "tools" / "sphinxext").glob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        catalog = catalogues.setdefault(domain_of(rel), Catalog(fuzzy=False, charset="utf-8"))
        source = path.read_bytes()
        for method in ("python", extract_exercises):
            for lineno, message, _comments, _context in extract(method, io.BytesIO(source), KEYWORDS):
                if _worth(Template(message, False)):
                    catalog.add(message, locations=[(rel, lineno)])
    return catalogues


def collect() -> dict[str, Catalog]:
    """Every catalogue's messages: attnlib's (Babel) and the chapters' code cells'."""
    catalogues = from_package()
    for domain, messages in zh_notebooks.collect().items():  # the chapters' code cells
        catalog = catalogues.setdefault(domain, Catalog(fuzzy=False, charset="utf-8"))
        for text, (fields, places) in messages.items():
            catalog.add(text, locations=[(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in places],
                        flags=("python-brace-format",) if fields else ())
    return catalogues


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "_build" / "gettext" / "attnlib")
    out = ap.parse_args().out
    total = 0
    for domain, catalog in sorted(collect().items()):
        pot = out / f"{domain}.pot"
        pot.parent.mkdir(parents=True, exist_ok=True)
        with open(pot, "wb") as f:
            write_po(f, catalog, sort_output=False)
        total += len(catalog)
        print(f"{domain + '.pot':34s} {len(catalog):4d} messages")
    print(f"{total} messages in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
