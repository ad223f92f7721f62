"""Collect the text attnlib shows into message templates (``.pot``), for translation.

    python tools/i18n_extract.py --out _build/gettext/attnlib   # (make gettext runs it)

then ``sphinx-intl update -p _build/gettext/attnlib -l zh_CN -d attnlib/locales`` merges
them into ``attnlib/locales/zh_CN/LC_MESSAGES/`` (see the README, "Translating").

What is collected (by reading the code, nothing is executed):

- in ``attnlib/``: the argument of every ``_("...")`` / ``tr("...")`` call, and the
  learner-facing fields of the exercise catalogues: ``Mistake(key, title, message, fix=...)``,
  ``Case(label=...)``, ``Exercise(prompt=..., hint=..., hints=(...))``;
- in ``chapters/*.ipynb`` (code cells): what ``tools/zh_notebooks.py`` collects (printed
  text, comments, quizzes, figure text, ``# i18n`` lines), for the Chinese notebooks.

An f-string becomes a template whose fields are named after their expressions:
``f"head {i}: {names[i]}"`` -> ``"head {i}: {names_i}"`` (flag ``python-brace-format``);
:func:`attnlib.i18n.tr` matches shown text against it. One catalogue per source:
``attnlib.pot`` (the package), ``exercises/ch02_qkv.pot``, ``chapters/02_qkv.pot``, and
``grading.pot`` (the assignments, the grader and its report, a learner's progress).
"""
from __future__ import annotations

import argparse
import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import zh_notebooks  # noqa: E402

MARKERS = {"_", "tr", "N_"}
FIGURE_CALLS = {"set_title": 0, "suptitle": 0, "set_xlabel": 0, "set_ylabel": 0, "supxlabel": 0,
                "supylabel": 0, "text": 2, "annotate": 0}
TEXT_KEYWORDS = {"title", "label", "xlabel", "ylabel", "description"}
LIST_KEYWORDS = {"labels"}
# a phrase of words (not a colour, a format such as "o-", or a single data token)
# a case label: words and values separated by spaces ("n = 10, kernel 3")
_LABEL = re.compile(r"\s.*[A-Za-z]{3,}|[A-Za-z]{3,}.*\s")
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


def from_python(tree: ast.AST, *, package: bool, lines: list[str] = (),
                case_builders: bool = False) -> list[tuple[Template, int]]:
    found: list[tuple[Template, int]] = []
    for sub in _marked_assignments(tree, list(lines)):
        t = template(sub)
        if _worth(t):
            found.append((t, sub.lineno))

    def add(node):
        t = template(node)
        if _worth(t):
            found.append((t, node.lineno))

    if case_builders:
        # the case builders of an exercise module (``def _softmax_cases():``): the labels
        # they give their cases, often through a variable (``Case(..., label=label)``)
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name.endswith("cases"):
                inner = [n for n in ast.walk(fn) if isinstance(n, (ast.FunctionDef, ast.Lambda))]
                skip = {id(n.body[0].value) for n in inner if isinstance(n, ast.FunctionDef) and n.body
                        and isinstance(n.body[0], ast.Expr)}                        # docstrings
                skip |= {id(v) for n in ast.walk(fn) if isinstance(n, ast.JoinedStr) for v in n.values}
                for sub in ast.walk(fn):
                    if id(sub) in skip or not isinstance(sub, (ast.Constant, ast.JoinedStr)):
                        continue
                    t = template(sub)
                    if _worth(t) and (_PHRASE.search(t.text) or _LABEL.search(t.text)):
                        found.append((t, sub.lineno))
    # _("... {name} ...").format(name=...): the marked call is the receiver of .format
    formatted = {id(n.func.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "format"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if name in MARKERS and node.args:
                t = template(node.args[0])
                if t is not None and not t.fields:
                    t.fields = id(node) in formatted
                if _worth(t):
                    found.append((t, node.args[0].lineno))
            if not package:
                continue
            if name in FIGURE_CALLS and len(node.args) > FIGURE_CALLS[name]:
                add(node.args[FIGURE_CALLS[name]])  # figures drawn by attnlib (plots, diagrams, train)
            for key in (TEXT_KEYWORDS - {"label"}) & kw.keys():
                add(kw[key])
            if name != "Case" and "label" in kw:
                add(kw["label"])
            if name == "Mistake":
                for i, key in ((1, "title"), (2, "message")):
                    add(node.args[i]) if len(node.args) > i else (add(kw[key]) if key in kw else None)
                if "fix" in kw:  # level 2 of the hint ladder
                    add(kw["fix"])
            elif name == "Case" and "label" in kw:
                add(kw["label"])
            elif name == "Exercise":
                if "prompt" in kw:
                    add(kw["prompt"])
                for step in getattr(kw.get("hints"), "elts", []):  # the ladder after the idea
                    add(step)
                hint = template(kw["hint"]) if "hint" in kw else None
                if hint is not None:
                    # what the checker shows of it: the sentences before any code
                    from attnlib.exercises._core import shown_part_of_hint
                    shown = shown_part_of_hint(hint.text)
                    if shown:
                        found.append((Template(shown, hint.fields), kw["hint"].lineno))
    return found


def _po_string(s: str) -> str:
    body = s.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")
    if "\n" not in body:
        return f'"{body}"'
    pieces = body.split("\n")
    out = ['""'] + [f'"{p}\\n"' for p in pieces[:-1]]
    if pieces[-1]:
        out.append(f'"{pieces[-1]}"')
    return "\n".join(out)


def write_pot(path: pathlib.Path, messages: dict[str, tuple[bool, list[str]]]) -> None:
    lines = ['msgid ""', 'msgstr ""', '"Content-Type: text/plain; charset=UTF-8\\n"', ""]
    for text, (fields, where) in messages.items():
        lines += [f"#: {' '.join(sorted(set(where)))}"]
        if fields:
            lines.append("#, python-brace-format")
        lines += [f"msgid {_po_string(text)}", 'msgstr ""', ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")


def collect() -> dict[str, dict[str, tuple[bool, list[str]]]]:
    catalogues: dict[str, dict[str, tuple[bool, list[str]]]] = {}

    def put(domain, t: Template, where: str):
        msgs = catalogues.setdefault(domain, {})
        fields, places = msgs.get(t.text, (False, []))
        msgs[t.text] = (fields or t.fields, places + [where])

    sources = sorted((ROOT / "attnlib").rglob("*.py")) + sorted((ROOT / "tools" / "sphinxext").glob("*.py"))
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        m = re.fullmatch(r"attnlib/exercises/(ch\d\d_\w+)\.py", rel)
        domain = f"exercises/{m.group(1)}" if m else "attnlib"
        if re.fullmatch(r"attnlib/(?:grade|assignments|progress)\.py|attnlib/grading/\w+\.py", rel):
            domain = "grading"  # the teacher's tools and the learner's progress: grading.pot
        text = path.read_text(encoding="utf-8")
        for t, line in from_python(ast.parse(text), package=True, lines=text.splitlines(),
                                   case_builders=bool(m)):
            put(domain, t, f"{rel}:{line}")
    catalogues.update(zh_notebooks.collect())  # the chapters' code cells: tools/zh_notebooks.py
    return catalogues


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "_build" / "gettext" / "attnlib")
    out = ap.parse_args().out
    total = 0
    for domain, messages in sorted(collect().items()):
        write_pot(out / f"{domain}.pot", messages)
        total += len(messages)
        print(f"{domain + '.pot':34s} {len(messages):4d} messages")
    print(f"{total} messages in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
