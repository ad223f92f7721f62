"""What the grader and the assignment writer know about the course's chapters.

- :func:`chapters`: the chapter notebooks of the course (``chapters/*.ipynb`` next to the
  ``attnlib`` package, or a folder given);
- :func:`exercises_of`: a chapter's exercises, in the order of the chapter;
- :func:`questions`: a chapter's concept questions (``al.quiz.question`` cells), numbered
  ``q1, q2, ...`` in the order of the chapter, with their answer key. The key is read
  from the course's own chapter here, on the trusted side; a student's notebook never
  holds it.
"""
from __future__ import annotations

import ast
import json
import pathlib
import re
from dataclasses import dataclass

__all__ = ["course_root", "chapters", "chapter_of", "exercises_of", "Question", "questions", "LETTERS"]

LETTERS = "ABCDEFGH"


def course_root() -> pathlib.Path | None:
    """The course repository holding this attnlib (with ``chapters/``), if there is one."""
    here = pathlib.Path(__file__).resolve().parents[2]
    return here if (here / "chapters").is_dir() else None


def chapters(folder: pathlib.Path | None = None) -> dict[str, pathlib.Path]:
    """``{"02_qkv": path, ...}``: the chapter notebooks, by file stem."""
    folder = folder or ((course_root() or pathlib.Path(".")) / "chapters")
    return {p.stem: p for p in sorted(pathlib.Path(folder).glob("[0-9][0-9]_*.ipynb"))}


def chapter_of(name: str) -> str:
    """``"02_qkv"`` for ``"2"``, ``"02"``, ``"02_qkv"`` or ``"02_qkv.ipynb"``."""
    stem = pathlib.Path(str(name)).name.removesuffix(".ipynb")
    known = sorted({ex.chapter for ex in _exercises().values()})
    if stem in known:
        return stem
    if stem.isdigit():
        hits = [c for c in known if c.startswith(f"{int(stem):02d}_")]
        if hits:
            return hits[0]
    raise ValueError(f"chapter {name!r} is not one of the course's chapters with exercises: "
                     f"{', '.join(known)} (give its number, e.g. 2, or its name, e.g. 02_qkv)")


def _exercises():
    from ..exercises import EXERCISES
    return EXERCISES


def exercises_of(chapter: str) -> list[str]:
    """The names of chapter ``chapter``'s exercises, in the order they are registered."""
    return [name for name, ex in _exercises().items() if ex.chapter == chapter]


@dataclass(frozen=True)
class Question:
    """A concept question of a chapter: its id (``q1``...), its prompt and choices (in
    English, as written in the chapter) and the letters of the right choices."""

    qid: str
    prompt: str
    choices: tuple
    answer: str
    cell: int


def _literal(node) -> object:
    """The value of a literal expression; an f-string (quiz feedback may quote a number
    measured earlier in the chapter) reads as its text with ``{…}`` for each field, and
    anything else as None."""
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{…}" for v in node.values)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e) for e in node.elts]
        if any(i is None for i in items):
            return None
        return items if isinstance(node, ast.List) else tuple(items)
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def questions_in_cell(source: str) -> list[tuple[str, list]]:
    """The ``al.quiz.question(prompt, [(text, correct, feedback), ...])`` calls of a code
    cell, as ``(prompt, [(text, correct, feedback), ...])``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "question" and node.args):
            continue
        prompt = _literal(node.args[0])
        kw = {k.arg: k.value for k in node.keywords}
        choices = _literal(node.args[1] if len(node.args) > 1 else kw.get("choices"))
        if isinstance(prompt, str) and isinstance(choices, list):
            found.append((prompt, [tuple(c) for c in choices]))
    return found


def questions(path: pathlib.Path) -> list[Question]:
    """The concept questions of the chapter notebook at ``path``."""
    nb = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if ".quiz.question(" not in source:
            continue
        for prompt, choices in questions_in_cell(source):
            answer = "".join(LETTERS[j] for j, c in enumerate(choices) if len(c) > 1 and c[1] is True)
            out.append(Question(f"q{len(out) + 1}", prompt, tuple(choices), answer, i))
    return out


_ANSWER = re.compile(r"\s*[A-Ha-h](?:\s*[,;/&]?\s*[A-Ha-h])*\s*")


def normalise_answer(text: str) -> str:
    """A learner's answer as sorted capital letters (``" b, a"`` -> ``"AB"``), or ``""``
    when it is not one or more letters A-H (separated by spaces or commas, if at all)."""
    if not isinstance(text, str) or not _ANSWER.fullmatch(text):
        return ""
    return "".join(sorted(set(re.sub(r"[^A-Ha-h]", "", text).upper())))
