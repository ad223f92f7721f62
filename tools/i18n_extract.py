"""Extract the English text attnlib shows into message templates (``.pot``), for translation.

    python tools/i18n_extract.py --out _build/gettext/attnlib   # (make gettext runs it)

then ``sphinx-intl update`` (``make update-po``) merges them into
``attnlib/locales/zh_CN/LC_MESSAGES/`` (README, "Translating").

- ``attnlib/`` (and ``tools/sphinxext/``): Babel's Python extractor, keywords ``_``, ``N_``
  and ``tr``, plus :func:`extract_exercises` for the learner-facing fields of the exercise
  catalogues, ``Mistake(key, title, message, fix=...)``, ``Case(label=...)`` and
  ``Exercise(prompt=..., hint=..., hints=(...))``, which are written without markers.
- ``chapters/*.ipynb`` (code cells): quiz questions, choices and feedback
  (``al.quiz.question``), figure text (``set_title``, ``suptitle``, ``set_xlabel``,
  ``set_ylabel``, ``text``, ``annotate`` and the keywords ``title=``, ``label=``,
  ``xlabel=``, ``ylabel=``, ``labels=``, ``description=``), and the strings of a cell's
  ``# i18n`` lines (``names = [...]  # i18n``), for text a cell keeps in a variable.

One catalogue per source: ``attnlib.pot`` (the package), ``exercises/ch02_qkv.pot``,
``grading.pot`` (the assignments, the grader and its report, a learner's progress) and
``chapters/02_qkv.pot``.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import pathlib
import re
import sys

from babel.messages.catalog import Catalog
from babel.messages.extract import extract
from babel.messages.pofile import write_po

ROOT = pathlib.Path(__file__).resolve().parents[1]

KEYWORDS = {"_": None, "N_": None, "tr": None}
FIGURE_CALLS = {"set_title": 0, "suptitle": 0, "set_xlabel": 0, "set_ylabel": 0, "supxlabel": 0,
                "supylabel": 0, "text": 2, "annotate": 0}
TEXT_KEYWORDS = {"title", "label", "xlabel", "ylabel", "description"}
LIST_KEYWORDS = {"labels"}
# a phrase of words (not a colour, a format such as "o-", or a single data token)
_PHRASE = re.compile(r"[A-Za-z]{2,}[^\n]*\s[^\n]*[A-Za-z]{2,}|[A-Za-z]{3,}.*[:=(]")


class Template:
    """A message and whether it has ``{field}``s to fill in."""

    def __init__(self, text: str, fields: bool):
        self.text, self.fields = text, fields


def _field_name(expr: ast.expr, used: dict[str, str]) -> str:
    src = ast.unparse(expr)
    name = re.sub(r"\W+", "_", src).strip("_") or "value"
    if name[0].isdigit():
        name = "v_" + name
    while name in used and used[name] != src:
        name += "_"
    used[name] = src
    return name


def template(node: ast.expr) -> Template | None:
    """The message of a string literal or f-string node, else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return Template(node.value, False)
    if isinstance(node, ast.JoinedStr):
        parts, used = [], {}
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(v.value)
            elif isinstance(v, ast.FormattedValue):
                parts.append("{" + _field_name(v.value, used) + "}")
        return Template("".join(parts), True)
    return None


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _worth(t: Template | None) -> bool:
    return t is not None and re.search(r"[A-Za-z]{2}", re.sub(r"\{[^{}]*\}", "", t.text)) is not None


def _marked_assignments(tree: ast.AST, lines: list[str]):
    """String literals in an assignment (or a ``for`` loop's iterable) whose first line
    ends with a ``# i18n`` comment."""
    for node in ast.walk(tree):
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else \
            node.iter if isinstance(node, ast.For) else None
        if value is not None and "# i18n" in lines[node.lineno - 1]:
            for sub in ast.walk(value):
                if isinstance(sub, (ast.Constant, ast.JoinedStr)) and not isinstance(
                        getattr(sub, "value", None), (int, float)):
                    yield sub


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
    m = re.fullmatch(r"attnlib/exercises/(ch\d\d_\w+)\.py", rel)
    if m:
        return f"exercises/{m.group(1)}"
    if re.fullmatch(r"attnlib/(?:grade|assignments|progress)\.py|attnlib/grading/\w+\.py", rel):
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


def from_notebook_cell(source: str) -> list[tuple[Template, int]]:
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    tree = ast.parse(source)
    found: list[tuple[Template, int]] = []

    def add(node):
        t = template(node)
        if _worth(t):
            found.append((t, getattr(node, "lineno", 0)))

    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if name == "question" and node.args:
                add(node.args[0])
                choices = node.args[1] if len(node.args) > 1 else kw.get("choices")
                for choice in getattr(choices, "elts", []):
                    if isinstance(choice, ast.Tuple) and len(choice.elts) >= 3:
                        add(choice.elts[0])
                        add(choice.elts[2])
            if name in FIGURE_CALLS and len(node.args) > FIGURE_CALLS[name]:
                add(node.args[FIGURE_CALLS[name]])
            if name == "LivePlot" and len(node.args) > 1:  # train.LivePlot(keys, labels)
                for elt in getattr(node.args[1], "elts", []):
                    add(elt)
            for key in TEXT_KEYWORDS & kw.keys():
                add(kw[key])
            for key in LIST_KEYWORDS & kw.keys():
                for elt in getattr(kw[key], "elts", []):
                    add(elt)
    for sub in _marked_assignments(tree, lines):
        add(sub)
    draws = FIGURE_CALLS.keys() | {"explorer", "subplots", "figure", "bars", "heatmap", "LivePlot"}
    if any(_call_name(n) in draws or TEXT_KEYWORDS & {k.arg for k in n.keywords}
           for n in ast.walk(tree) if isinstance(n, ast.Call)):
        # a cell that draws or explores: phrases it keeps in lists, tuples and dicts (panel
        # names, legend entries) end up in its figures
        for node in ast.walk(tree):
            if isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.Set)):
                items = node.keys + node.values if isinstance(node, ast.Dict) else node.elts
                for item in items:
                    t = template(item) if item is not None else None
                    if _worth(t) and _PHRASE.search(t.text):
                        found.append((t, item.lineno))
    return found


def chapters() -> dict[str, dict[str, tuple[bool, list[str]]]]:
    """The chapters' code-cell messages: ``{"chapters/02_qkv": {message: (is_fstring, [places])}}``."""
    catalogues: dict[str, dict[str, tuple[bool, list[str]]]] = {}
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code":
                for t, line in from_notebook_cell("".join(cell["source"])):
                    msgs = catalogues.setdefault(f"chapters/{path.stem}", {})
                    fields, places = msgs.get(t.text, (False, []))
                    msgs[t.text] = (fields or t.fields, places + [f"chapters/{path.name}:cell{i}:{line}"])
    return catalogues


def collect() -> dict[str, Catalog]:
    """Every catalogue's messages: attnlib's (Babel) and the chapters' code cells'."""
    catalogues = from_package()
    for domain, messages in chapters().items():
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
