"""The Chinese notebooks: ``zh/chapters/NN_x.ipynb``, generated from ``chapters/NN_x.ipynb``
(and ``zh/solutions/NN_x.ipynb`` from the solutions companion ``solutions/NN_x.ipynb``).

    python tools/zh_notebooks.py                 # write zh/chapters/*.ipynb (sources only; the
                                                 #   outputs of unchanged cells are kept)
    python tools/zh_notebooks.py --check         # fail if a committed Chinese notebook's
                                                 #   sources differ from what this writes
    python tools/zh_notebooks.py --pot DIR       # the chapters' code-cell messages (DIR/chapters/*.pot)

``make notebooks`` runs it and then executes the Chinese notebooks with ``ATTNLIB_LANG=zh``
(their outputs are stored, like the English ones', and strict nbval checks them).

A Chinese notebook is its English chapter with

- every **markdown** block (paragraph, heading, list item, table cell, HTML block such as a
  ``<summary>``) replaced by its translation from the book's prose catalogue
  ``locales/zh_CN/LC_MESSAGES/chapters/NN_x.po``, whose msgids are the blocks' MyST source
  as Sphinx's gettext builder extracts them; a block is found with markdown-it-py's token
  line maps (the parser myst-parser uses);
- in every **code** cell, the text a reader sees replaced by its translation from the
  code-cell catalogue ``attnlib/i18n/locales/zh_CN/LC_MESSAGES/chapters/NN_x.po`` (and
  ``chapters/common.po`` for the setup lines every chapter shares): comments, and the string
  literals of ``print(...)`` calls, quizzes (``al.quiz.question``), figure text, explorer
  labels, alt text (``alt=``, also ``alt=lambda v: f"..."``) and ``# i18n`` lines. Identifiers, code and numbers are unchanged.

A chapter's solutions notebook takes its prose from ``locales/zh_CN/LC_MESSAGES/solutions/NN_x.po``
and its code cells' text from the chapter's code-cell catalogue (the solutions were written
with the chapter).

An f-string's message is the literal's own text with its fields verbatim
(``f"{n} pairs, max {err:.1e}"`` -> msgid ``"{n} pairs, max {err:.1e}"``, flag
``python-brace-format``), and its translation must carry exactly the same fields.
A message without a translation, or with different fields, is an error: nothing is left in
English silently.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import io
import json
import pathlib
import re
import string
import sys
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
SOLUTIONS = ROOT / "solutions"       # each chapter's solutions notebook (same file name)
ZH_CHAPTERS = ROOT / "zh" / "chapters"
PROSE = ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / "chapters"
CODE = ROOT / "attnlib" / "i18n" / "locales" / "zh_CN" / "LC_MESSAGES" / "chapters"
COMMON = "common"  # the setup lines every chapter shares: chapters/common.po

FIGURE_CALLS = {"set_title": 0, "suptitle": 0, "set_xlabel": 0, "set_ylabel": 0, "supxlabel": 0,
                "supylabel": 0, "text": 2, "annotate": 0}
TEXT_KEYWORDS = {"title", "label", "xlabel", "ylabel", "description", "alt"}  # alt: a figure's alt text
LIST_KEYWORDS = {"labels"}
# a phrase of words (not a colour, a format such as "o-", or a single data token)
_PHRASE = re.compile(r"[A-Za-z]{2,}[^\n]*\s[^\n]*[A-Za-z]{2,}|[A-Za-z]{3,}.*[:=(]")
# comments that are markers for tools, not prose
_MARKER_COMMENT = re.compile(r"#\s*(--- end of setup ---|i18n|noqa\b.*|type:.*|NBVAL_\w+|pragma.*)$")
IMPORT = "import attnlib as al"
SET_LANGUAGE = 'al.set_language("zh")  # attnlib 显示的文字（检查器、测验、图）也用中文'
SETUP_START, SETUP_END = "# --- setup:", "# --- end of setup ---"


# ---------------------------------------------------------------- the catalogues
def read_catalogue(path: pathlib.Path) -> dict[str, str]:
    """msgid -> msgstr of a ``.po`` file (fuzzy and empty translations left out)."""
    from babel.messages.pofile import read_po
    if not path.exists():
        return {}
    with path.open("rb") as f:
        cat = read_po(f)
    return {m.id: m.string for m in cat if m.id and m.string and not m.fuzzy}


def code_catalogue(stem: str) -> dict[str, str]:
    return {**read_catalogue(CODE / f"{COMMON}.po"), **read_catalogue(CODE / f"{stem}.po")}


# ---------------------------------------------------------------- markdown cells
def _md_parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser
    return create_md_parser(MdParserConfig(enable_extensions={
        "dollarmath", "amsmath", "colon_fence", "deflist", "substitution"}), RendererHTML)


def _key(text: str) -> str:
    return text.replace("\n", " ").strip()  # Sphinx's msgid of a paragraph


def translate_markdown(source: str, catalogue: dict[str, str], where: str = "") -> tuple[str, list[str]]:
    """``source`` with every block replaced by its translation; and the blocks that have none."""
    lines = source.split("\n")
    missing: list[str] = []
    edits: dict[int, tuple[int, str]] = {}   # first line -> (end line, new text)
    tokens = _md_parser().parse(source)
    row_edits: dict[int, list[tuple[str, str]]] = {}
    in_row = None
    for i, tok in enumerate(tokens):
        if tok.type == "tr_open":
            in_row = tok.map[0]
        elif tok.type == "tr_close":
            in_row = None
        elif tok.type == "html_block":
            key = tok.content if tok.content in catalogue else tok.content.strip()
            if key not in catalogue:
                missing.append(f"{where}: {tok.content.strip()[:80]!r}")
                continue
            a, b = tok.map
            new = catalogue[key]
            edits[a] = (b, new[:-1] if new.endswith("\n") else new)
        elif tok.type == "inline":
            key = _key(tok.content)
            if not key:
                continue
            if key not in catalogue:
                missing.append(f"{where}: {key[:80]!r}")
                continue
            new = catalogue[key]
            if in_row is not None:                   # a table cell: replaced inside its row
                row_edits.setdefault(in_row, []).append((tok.content, new))
                continue
            a, b = tok.map
            first = lines[a]
            start = first.find(tok.content.split("\n")[0])
            if start < 0:
                missing.append(f"{where}: cannot place {key[:60]!r}")
                continue
            prefix = first[:start]
            # a heading's closing #s or a paragraph's continuation lines go with the text
            edits[a] = (b, prefix + new.replace("\n", "\n" + " " * len(prefix)))
    for a, cells in row_edits.items():
        row, pos, out = lines[a], 0, []
        for old, new in cells:
            j = row.find(old, pos)
            if j < 0:
                missing.append(f"{where}: cannot place table cell {old[:60]!r}")
                continue
            out.append(row[pos:j] + new.replace("|", "\\|") if "|" in new and "\\|" not in new
                       else row[pos:j] + new)
            pos = j + len(old)
        edits[a] = (a + 1, "".join(out) + row[pos:])
    result, i = [], 0
    while i < len(lines):
        if i in edits:
            end, text = edits[i]
            result.append(text)
            i = end
        else:
            result.append(lines[i])
            i += 1
    return "\n".join(result), missing


# ---------------------------------------------------------------- code cells
def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _words(text: str) -> bool:
    if text.lstrip().startswith("#"):
        return False   # a line of code shown as code ("    # (docstring: ...)")
    return re.search(r"[A-Za-z]{2}", re.sub(r"\{[^{}]*\}", "", text)) is not None


def _is_phrase(text: str) -> bool:
    """Words with a space: a word of three letters or more that is not part of a name."""
    return bool(re.search(r"\s", text.strip())) and re.search(r"(?<!\w)[A-Za-z]{3,}(?!\w)", text) is not None


def _strings_in(node: ast.AST):
    """String literals in an expression, not inside a nested call's arguments other than
    str joins and conditionals (what reaches the reader as text)."""
    if isinstance(node, (ast.Constant, ast.JoinedStr)):
        if isinstance(node, ast.JoinedStr) or isinstance(node.value, str):
            yield node
    elif isinstance(node, ast.IfExp):
        yield from _strings_in(node.body)
        yield from _strings_in(node.orelse)
    elif isinstance(node, ast.BinOp):
        yield from _strings_in(node.left)
        yield from _strings_in(node.right)
    elif isinstance(node, (ast.List, ast.Tuple)):
        for e in node.elts:
            yield from _strings_in(e)
    elif isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        yield from _strings_in(node.elt)
    elif isinstance(node, ast.Lambda):  # alt=lambda i: f"...": the text each view shows
        yield from _strings_in(node.body)
    elif isinstance(node, ast.Call) and _call_name(node) in ("join", "format") \
            and isinstance(node.func, ast.Attribute):
        yield from _strings_in(node.func.value)
        for a in node.args:
            yield from _strings_in(a)


def shown_literals(tree: ast.AST, lines: list[str], *, replaceable_only: bool = False) -> list[ast.expr]:
    """The string literal nodes of a cell whose text a reader sees; with
    ``replaceable_only``, those that the Chinese notebook writes in Chinese (the others are
    data that code also uses, translated where a figure shows them)."""
    found: list[ast.expr] = []

    def add(node):
        if node is not None:
            found.extend(_strings_in(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if name == "print":
                for a in node.args:
                    add(a)
                # a JoinedStr's format spec is not text
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
                add(node.args[1])
            for key in TEXT_KEYWORDS & kw.keys():
                add(kw[key])
            for key in LIST_KEYWORDS & kw.keys():
                add(kw[key])
            if name in ("Markdown", "HTML", "evidence") and node.args:  # al.evidence("what it holds")
                add(node.args[0])
    kept: list[ast.expr] = []   # shown, but data too: translated where drawn (attnlib)
    for node in ast.walk(tree):   # the lines marked "# i18n"
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Return)) else \
            node.iter if isinstance(node, ast.For) else None
        if value is not None and "# i18n" in lines[node.lineno - 1]:
            # a word chosen for display (trend = "explodes" if ... else "vanishes") and a
            # phrase (words with a space: "one matrix") are replaced, the phrase wherever the
            # same literal occurs in the notebook (so a lookup by it still finds it); a single
            # word in a list, dict or loop is data ("zigzag", "Anna") and stays: attnlib
            # translates it where a figure shows it
            shown = set()   # a value chosen for display: the branches of an if-else, not its test
            if isinstance(node, ast.Assign):
                stack = [value]
                while stack:
                    v = stack.pop()
                    if isinstance(v, ast.IfExp):
                        stack += [v.body, v.orelse]
                    elif isinstance(v, (ast.Constant, ast.JoinedStr)):
                        shown.add(id(v))
            for sub in ast.walk(value):
                if isinstance(sub, ast.JoinedStr) or (isinstance(sub, ast.Constant) and isinstance(sub.value, str)):
                    text = sub.value if isinstance(sub, ast.Constant) else _literal_text_of(sub)
                    (found if id(sub) in shown or _is_phrase(text) else kept).append(sub)
    draws = FIGURE_CALLS.keys() | {"explorer", "subplots", "figure", "bars", "heatmap", "LivePlot", "show"}
    if any(_call_name(n) in draws or TEXT_KEYWORDS & {k.arg for k in n.keywords}
           for n in ast.walk(tree) if isinstance(n, ast.Call)):
        # a cell that draws or explores: phrases it keeps in lists, tuples and dicts (panel
        # names, legend entries) are data as well, translated where drawn
        for node in ast.walk(tree):
            if isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.Set)):
                items = node.keys + node.values if isinstance(node, ast.Dict) else node.elts
                for item in items:
                    if isinstance(item, (ast.Constant, ast.JoinedStr)) and (
                            isinstance(item, ast.JoinedStr) or isinstance(item.value, str)):
                        if _PHRASE.search(_literal_text_of(item)):
                            kept.append(item)
    if not replaceable_only:
        found += kept
    # inner literals of an f-string (format specs, nested strings) are not messages
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in ast.walk(n) if v is not n}
    seen, out = set(), []
    for n in found:
        key = (n.lineno, n.col_offset)
        if id(n) in inner or key in seen:
            continue
        seen.add(key)
        out.append(n)
    return out


_LINES: list[str] = []   # the source lines of the cell being read (for _literal_text_of)


def _split_string_token(tok: str) -> tuple[str, str, str]:
    """``(prefix, quote, body)`` of one string token."""
    m = re.match(r"(?i)([rbuf]*)('''|\"\"\"|'|\")", tok)
    prefix, quote = m.group(1), m.group(2)
    return prefix, quote, tok[len(prefix) + len(quote):len(tok) - len(quote)]


# Python 3.12 tokenizes an f-string as FSTRING_START, its parts, FSTRING_END (PEP 701),
# where 3.11 gives one STRING token; the strings inside its fields are STRING tokens then
# (None before 3.12: no token has that type)
_FSTRING_START, _FSTRING_END = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)


def _literal_tokens(node: ast.expr, lines: list[str]) -> list[str]:
    """The string tokens of a literal, each f-string as one token (its whole source), on
    every Python version."""
    text = "(" + _segment(lines, node) + ")"   # parenthesised: an implicit join may span lines
    starts = [0]
    for row in io.StringIO(text).readlines():   # the lines tokenize reads
        starts.append(starts[-1] + len(row))     # the offset of each line's first character
    out, depth, begin = [], 0, None
    for t in tokenize.generate_tokens(io.StringIO(text).readline):
        if t.type == _FSTRING_START:
            depth += 1
            begin = begin if depth > 1 else starts[t.start[0] - 1] + t.start[1]
        elif t.type == _FSTRING_END:
            depth -= 1
            if depth == 0:
                out.append(text[begin:starts[t.end[0] - 1] + t.end[1]])
        elif t.type == tokenize.STRING and depth == 0:
            out.append(t.string)
    return out


def _col(line: str, byte_offset: int) -> int:
    """ast's column (UTF-8 bytes) as a character index."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8"))


def _span(lines: list[str], node: ast.expr) -> tuple[int, int, int, int]:
    """``(line0, col0, line1, col1)`` of a node, 0-based lines, character columns."""
    l0, l1 = node.lineno - 1, node.end_lineno - 1
    return l0, _col(lines[l0], node.col_offset), l1, _col(lines[l1], node.end_col_offset)


def _segment(lines: list[str], node: ast.expr) -> str:
    l0, c0, l1, c1 = _span(lines, node)
    if l0 == l1:
        return lines[l0][c0:c1]
    return "\n".join([lines[l0][c0:], *lines[l0 + 1:l1], lines[l1][:c1]])


def literal_message(node: ast.expr, lines: list[str]) -> tuple[str, bool]:
    """The message of a literal: a plain string's value; an f-string's own source text
    (fields verbatim, implicit concatenation joined). And whether it is an f-string."""
    if isinstance(node, ast.Constant):
        return node.value, False
    body = []
    for tok in _literal_tokens(node, lines):
        prefix, _, text = _split_string_token(tok)
        if "f" not in prefix.lower():
            text = text.replace("{", "{{").replace("}", "}}")
        body.append(text)
    return "".join(body), True


def _literal_text_of(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return node.value
    return literal_message(node, _LINES)[0] if _LINES else ""


# the grouping option of a format spec ("," of "{n:,}", "_" of "{n:>10_}")
_GROUPING = re.compile(r"^((?:.?[<>=^])?[+\- ]?z?#?0?\d*)[,_]")


def fields(message: str) -> list[str]:
    """The ``{...}`` fields of an f-string message, verbatim and sorted, except that a
    format spec's thousands separator is left out: a translation keeps every field's
    expression and format, but Chinese writes ``{n}`` where English writes ``{n:,}``
    (locales/zh_CN/terms.yml, forbid_field)."""
    try:
        return sorted(f"{{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}"
                      for _, name, spec, conv in
                      ((t, n, _GROUPING.sub(r"\1", s or ""), c) for t, n, s, c in string.Formatter().parse(message))
                      if name is not None)
    except ValueError:
        return sorted(re.findall(r"(?<!\{)\{[^{}]+\}(?!\})", message))


def i18n_phrases(sources: list[str]) -> set[str]:
    """The phrases of a notebook's ``# i18n`` lines: plain strings with words and a space,
    replaced wherever they occur in its code (see :func:`shown_literals`)."""
    out: set[str] = set()
    for source in sources:
        src = _code_source(source)
        lines = src.split("\n")
        for node in ast.walk(ast.parse(src)):
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Return)) else \
                node.iter if isinstance(node, ast.For) else None
            if value is not None and "# i18n" in lines[node.lineno - 1]:
                out |= {sub.value for sub in ast.walk(value) if isinstance(sub, ast.Constant)
                        and isinstance(sub.value, str) and _is_phrase(sub.value)}
    return out


def _code_source(source: str) -> str:
    """A cell's source with IPython magics and shell lines blanked (ast cannot read them)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def _setup_lines(lines: list[str]) -> range:
    try:
        a = next(i for i, l in enumerate(lines) if l.startswith(SETUP_START))
        b = next(i for i, l in enumerate(lines) if l.startswith(SETUP_END))
        return range(a, b + 1)
    except StopIteration:
        return range(0)


def docstrings(tree: ast.AST) -> list[tuple[ast.Constant, str]]:
    """``(node, message)`` of each docstring of a function or class the cell defines (an
    exercise stub's docstring is what the learner reads to write the function); the message
    is the docstring as ``inspect.cleandoc`` gives it (no indentation)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str) and _words(first.value.value):
                found.append((first.value, inspect.cleandoc(first.value.value)))
    return found


def _docstring(node: ast.Constant, lines: list[str], new: str) -> str:
    """The literal of docstring ``node`` with ``new`` as its text, in the original's layout:
    the same quotes and prefix, the body indented like the original's, the closing quotes
    on their own line when they were."""
    prefix, quote, body = _split_string_token(_literal_tokens(node, lines)[0])
    indent = " " * node.col_offset
    if "r" not in prefix.lower():
        new = new.replace("\\", "\\\\")
    if len(quote) == 1:
        return _quote(new, quote, prefix)
    text = "\n".join((indent + line if line.strip() else "") if i else line
                     for i, line in enumerate(new.split("\n")))
    if body.rstrip(" ").endswith("\n"):   # the closing quotes on a line of their own
        text += "\n" + indent
    return prefix + quote + text + quote


def code_messages(source: str) -> list[tuple[str, bool, int, bool]]:
    """``(message, is_fstring, line, in_setup)`` of every text a reader sees in a code
    cell: shown string literals, docstrings and comments."""
    global _LINES
    src = _code_source(source)
    lines = src.split("\n")
    _LINES = lines
    setup = _setup_lines(lines)
    out = []
    tree = ast.parse(src)
    replaced = {id(n) for n in shown_literals(tree, lines, replaceable_only=True)}
    for node in shown_literals(tree, lines):
        msg, is_f = literal_message(node, lines)
        if id(node) not in replaced and not re.search(r"(?<![\w{])[A-Za-z]{3,}(?![\w}])", msg):
            continue   # data kept in the code ("N, L, d_model"): no words to translate
        if _words(msg) if is_f else _words(msg.replace("{", "").replace("}", "")):
            out.append((msg, is_f, node.lineno, node.lineno - 1 in setup))
    for node, msg in docstrings(tree):
        out.append((msg, False, node.lineno, node.lineno - 1 in setup))
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            text = _comment_text(tok.string)
            if text is not None:
                out.append((text, False, tok.start[0], tok.start[0] - 1 in setup))
    _LINES = []
    return out


def _comment_text(comment: str) -> str | None:
    if _MARKER_COMMENT.match(comment.strip()):
        return None
    text = comment.lstrip("#").strip()
    text = re.sub(r"\s*#\s*i18n$", "", text)
    if comment.startswith(SETUP_END) or not re.search(r"[A-Za-z]{3}", text):
        return None
    return text


def _quote(body: str, quote: str, prefix: str) -> str:
    if "r" in prefix.lower():
        prefix = prefix.replace("r", "").replace("R", "")
    if len(quote) == 1:
        body = body.replace("\n", "\\n")
        body = re.sub(r"(?<!\\)" + re.escape(quote), "\\" + quote, body)
    return prefix + quote + body + quote


def _escape_plain(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def translate_code(source: str, catalogue: dict[str, str], where: str = "",
                   phrases: set[str] = frozenset()) -> tuple[str, list[str]]:
    """``source`` with its comments and shown literals in Chinese; and what has no (valid)
    translation."""
    global _LINES
    src = _code_source(source)
    lines = src.split("\n")
    orig = source.split("\n")
    _LINES = lines
    missing: list[str] = []
    spans: list[tuple[int, int, int, int, str]] = []   # (line0, col0, line1, col1, replacement)
    tree = ast.parse(src)
    nodes = shown_literals(tree, lines, replaceable_only=True)
    seen = {(n.lineno, n.col_offset) for n in nodes}
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in ast.walk(n) if v is not n}
    nodes += [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in phrases
              and id(n) not in inner and (n.lineno, n.col_offset) not in seen]
    for node in nodes:
        msg, is_f = literal_message(node, lines)
        if not (_words(msg) if is_f else _words(msg.replace("{", "").replace("}", ""))):
            continue
        new = catalogue.get(msg)
        if new is None:
            missing.append(f"{where}:{node.lineno}: {msg!r}")
            continue
        toks = _literal_tokens(node, lines)
        prefix, quote, _ = _split_string_token(toks[0])
        if is_f:
            if fields(new) != fields(msg):
                missing.append(f"{where}:{node.lineno}: the translation of {msg!r} has the fields "
                               f"{fields(new)}, not {fields(msg)}")
                continue
            if "f" not in prefix.lower():
                prefix += "f"
            body = new
        else:
            body = _escape_plain(new)
            if "f" in prefix.lower():
                prefix = prefix.replace("f", "").replace("F", "")
        spans.append((*_span(lines, node), _quote(body, quote if len(quote) == 1 else '"', prefix)))
    for node, msg in docstrings(tree):
        new = catalogue.get(msg)
        if new is None:
            missing.append(f"{where}:{node.lineno}: docstring {msg[:60]!r}")
            continue
        spans.append((*_span(lines, node), _docstring(node, lines, new)))
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type != tokenize.COMMENT:
            continue
        text = _comment_text(tok.string)
        if text is None:
            continue
        new = catalogue.get(text)
        if new is None:
            missing.append(f"{where}:{tok.start[0]}: comment {text!r}")
            continue
        marker = "  # i18n" if re.search(r"#\s*i18n$", tok.string) else ""
        spans.append((tok.start[0] - 1, tok.start[1], tok.end[0] - 1, tok.end[1], "# " + new + marker))
    _LINES = []
    # replace from the end, so earlier positions stay valid (columns are in characters)
    for l0, c0, l1, c1, new in sorted(spans, reverse=True):
        head, tail = orig[l0][:c0], orig[l1][c1:]
        orig[l0:l1 + 1] = [head + new + tail]
    return "\n".join(orig), missing


# ---------------------------------------------------------------- notebooks
def chapter_paths() -> list[pathlib.Path]:
    return sorted(CHAPTERS.glob("*.ipynb"))


def notebook_paths() -> list[pathlib.Path]:
    """The chapters, then their solutions notebooks: every notebook with a Chinese one."""
    return chapter_paths() + sorted(SOLUTIONS.glob("*.ipynb"))


def zh_path(path: pathlib.Path) -> pathlib.Path:
    """The Chinese notebook of ``chapters/NN_x.ipynb`` or ``solutions/NN_x.ipynb``."""
    return ROOT / "zh" / path.parent.name / path.name


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _as_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def translate_notebook(path: pathlib.Path) -> tuple[dict, list[str]]:
    """The Chinese notebook of a chapter (outputs as in the English one) and the errors."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    prose = read_catalogue(PROSE.parent / path.parent.name / f"{path.stem}.po")
    code = code_catalogue(path.stem)
    phrases = i18n_phrases([_source(c) for c in nb["cells"] if c["cell_type"] == "code"])
    errors: list[str] = []
    switched = False
    for i, cell in enumerate(nb["cells"]):
        where = f"{path.relative_to(ROOT)} cell {i}"
        if cell["cell_type"] == "markdown":
            new, missing = translate_markdown(_source(cell), prose, where)
        elif cell["cell_type"] == "code":
            new, missing = translate_code(_source(cell), code, where, phrases)
            if not switched and IMPORT in new:
                # what attnlib shows (checker, quizzes, figures) in Chinese wherever the
                # notebook runs (Colab, Binder), not only under ATTNLIB_LANG=zh
                new = new.replace(IMPORT, IMPORT + "\n" + SET_LANGUAGE, 1)
                switched = True
        else:
            continue
        errors += missing
        cell["source"] = _as_lines(new)
    nb.setdefault("metadata", {})["language_info"] = {"name": "python"}
    return nb, errors


def _write(nb: dict, path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def _code_key(source: str) -> str:
    """A code cell's source without its comments: what decides its outputs."""
    try:
        toks = tokenize.generate_tokens(io.StringIO(_code_source(source)).readline)
        return "\x00".join(t.string for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source


def generate(paths: list[pathlib.Path], *, check: bool = False) -> int:
    """Write (or with ``check``, compare) the Chinese notebooks. A cell whose source is
    unchanged keeps the outputs stored in the Chinese notebook; a changed one loses them
    (``make notebooks`` executes the notebooks afterwards)."""
    bad = 0
    for path in paths:
        nb, errors = translate_notebook(path)
        target = zh_path(path)
        for e in errors:
            print(f"untranslated: {e}", file=sys.stderr)
        if errors:
            bad += 1
            continue
        old = json.loads(target.read_text(encoding="utf-8")) if target.exists() else None
        old_cells = old["cells"] if old else []
        same = old is not None and len(old_cells) == len(nb["cells"]) and all(
            _source(a) == _source(b) and a["cell_type"] == b["cell_type"]
            for a, b in zip(old_cells, nb["cells"]))
        if check:
            if not same:
                print(f"{target.relative_to(ROOT)} is stale: run `python tools/zh_notebooks.py` "
                      f"and execute it (make notebooks)", file=sys.stderr)
                bad += 1
            continue
        # a cell whose code is unchanged but for its comments keeps its outputs
        stored = {_code_key(_source(c)): c for c in old_cells if c["cell_type"] == "code"}
        kept = old is not None
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                prev = stored.get(_code_key(_source(cell)))
                cell["outputs"] = prev["outputs"] if prev else []
                cell["execution_count"] = prev.get("execution_count") if prev else None
                kept = kept and prev is not None
        if kept and "widgets" in old.get("metadata", {}):
            nb["metadata"]["widgets"] = old["metadata"]["widgets"]
        else:
            nb["metadata"].pop("widgets", None)
        _write(nb, target)
        print(f"{target.relative_to(ROOT)}{'' if same else ' (sources updated, outputs kept)' if kept else ' (changed: execute it)'}")
    return 1 if bad else 0


# ---------------------------------------------------------------- extraction (make gettext)
def _po_string(s: str) -> str:
    body = s.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")
    if "\n" not in body:
        return f'"{body}"'
    pieces = body.split("\n")
    out = ['""'] + [f'"{p}\\n"' for p in pieces[:-1]]
    if pieces[-1]:
        out.append(f'"{pieces[-1]}"')
    return "\n".join(out)


def collect() -> dict[str, dict[str, tuple[bool, list[str]]]]:
    """``{"chapters/02_qkv": {message: (is_fstring, [places])}, "chapters/common": ...}``."""
    catalogues: dict[str, dict[str, tuple[bool, list[str]]]] = {}
    for path in notebook_paths():   # a solutions notebook's code shares its chapter's catalogue
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            for msg, is_f, line, setup in code_messages(_source(cell)):
                domain = f"chapters/{COMMON if setup else path.stem}"
                msgs = catalogues.setdefault(domain, {})
                f, places = msgs.get(msg, (False, []))
                msgs[msg] = (f or is_f, places + [f"{path.parent.name}/{path.name}:cell{i}:{line}"])
    # the setup lines in both their forms, before and after publication (tools/setup_cell.py):
    # the notebooks hold one of them, the catalogue the text of both
    sys.path.insert(0, str(ROOT / "tools"))
    import setup_cell
    for variant in setup_cell.variants():
        for msg, is_f, line, _setup in code_messages(variant):
            msgs = catalogues.setdefault(f"chapters/{COMMON}", {})
            f, places = msgs.get(msg, (False, []))
            msgs[msg] = (f or is_f, places + [f"tools/setup_cell.py:{line}"])
    return catalogues


def write_pots(out: pathlib.Path) -> int:
    total = 0
    for domain, messages in sorted(collect().items()):
        lines = ['msgid ""', 'msgstr ""', '"Content-Type: text/plain; charset=UTF-8\\n"', ""]
        for text, (is_f, where) in messages.items():
            lines.append(f"#: {' '.join(sorted(set(where)))}")
            if is_f:
                lines.append("#, python-brace-format")
            lines += [f"msgid {_po_string(text)}", 'msgstr ""', ""]
        path = out / f"{domain}.pot"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines), encoding="utf-8")
        total += len(messages)
        print(f"{domain + '.pot':34s} {len(messages):4d} messages")
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*", type=pathlib.Path, help="default: every chapter")
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    ap.add_argument("--pot", type=pathlib.Path, metavar="DIR",
                    help="write the code cells' message templates to DIR/chapters/*.pot instead")
    a = ap.parse_args()
    if a.pot:
        write_pots(a.pot)
        return 0
    paths = [p.resolve() for p in a.chapters] or notebook_paths()
    return generate(paths, check=a.check)


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------- English left in Chinese text
# words that a Chinese technical text keeps in English (names of software, units, symbols)
ALLOWED_WORDS = {w.lower() for w in """
attnlib NumPy PyTorch torch softmax log-softmax token tokens GPU CPU CUDA FLOP FLOPs GFLOP MFLOP nat
RNN CNN FFN MLP LayerNorm RMSNorm RMS RoPE GQA MQA KV SDPA Transformer Adam AdamW HBM dtype NaN inf exp log ln
max min mean std argmax sqrt cos sin relu elu ms KiB MiB GiB KB MB GB OPT Llama Mistral vLLM gloo
pre-LN post-LN LN autograd logit logits Jacobian einsum BLAS OpenBLAS MKL Colab Binder JupyterLab
Jupyter JupyterHub ipywidgets Python float float16 float32 float64 bfloat16 bf16 fp16 fp32 int bool True False None
beta tanh alpha tau sigma theta lambda acc Monte Carlo XOR Var FlashAttention Performer ELU Binomial apple phone released ate Anna Tom her lent
red pen cat sat dog man the sigmoid
""".split()}
# proper names a Chinese page writes in Latin letters: people, products, models, papers'
# methods (a name with an inner capital, a digit or all capitals, such as WaveNet, GPT-2 or
# NVIDIA, is recognised as a name without being listed); and the other edition's name
NAMES = {w.lower() for w in """
English Cauchy Schwarz Frobenius Longformer BigBird Sparse Transformer Triton Moodle Canvas
Ada Linux Xiong Elhage Karpathy Hugging Face Python Jupyter
hamlet macbeth tempest twelfth_night Shakespeare Gutenberg
""".split()}
_WORD = re.compile(r"(?<![0-9A-Za-z])(?:[A-Za-z][A-Za-z0-9'’-]*[A-Za-z0-9]|[A-Za-z])")


def _identifiers(nb: dict) -> set[str]:
    """Names that a notebook's code uses and that are not plain English words: names with
    capitals, digits or underscores, the names of functions and methods it defines or calls
    (``mha``, ``reshape``), and single words it keeps in quotes (``"zigzag"``, a key)."""
    names: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = _code_source(_source(cell))
        try:
            toks = [t for t in tokenize.generate_tokens(io.StringIO(src).readline)
                    if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
        except (tokenize.TokenError, IndentationError):
            continue
        for i, tok in enumerate(toks):
            if tok.type == tokenize.NAME:
                after = toks[i + 1].string if i + 1 < len(toks) else ""
                before = toks[i - 1].string if i else ""
                if not re.fullmatch(r"[a-z]+", tok.string) or after == "(" or before == "def":
                    names.add(tok.string)
            elif tok.type == tokenize.STRING and re.fullmatch(r"[\"'][\w.\-]+[\"']", tok.string):
                names.add(tok.string[1:-1])   # a key or a name in quotes: "w_q", "upper_left"
    return names


def english_words(line: str, known: set[str]) -> list[str]:
    """The English words of a line of Chinese text: words of letters that are not code
    (an identifier of the notebook, a dotted or underscored name, a call, ``name=value``,
    a name beside an operator), not a symbol of one or two letters or a short acronym, not
    on :data:`ALLOWED_WORDS`, not a name (:data:`NAMES`, or a word with an inner capital,
    a digit or only capitals: WaveNet, GPT-2, NVIDIA), and not quoted: inside “...”, a
    full-width gloss （...） or title marks 《...》, or after ``Error:`` / ``出错：`` (a
    library's own message)."""
    if line.lstrip().startswith("│"):
        return []   # a quoted line: data printed as it is (attnlib.ui.columns.quote)
    line = re.split(r"\w*Error:|出错：", line)[0]
    line = re.sub(r"“[^”]*”|（[^）]*）|《[^》]*》|\b[A-Z]\w*\([^()]*\)", " ", line)   # quoted, glossed, a title, a repr
    line = re.sub(r"`[^`]*`|https?://\S+|\S*\w[_.(\[/\\=~]\S*|\S*[_.(\[/\\=~]\w\S*|\$[^$]*\$|^\s*--- setup",
                  " ", line)
    found = []
    for m in _WORD.finditer(line):
        w = m.group()
        if sum(ch.isalpha() for ch in w) <= 2 or (w.isupper() and len(w) <= 4) or w.lower() in ALLOWED_WORDS or w in known:
            continue
        if w.lower() in NAMES or w.isupper() or re.search(r"[a-z][A-Z]|\d", w):
            continue   # a name (WaveNet, GPT-2, NVIDIA) or an identifier (IndexError, acc1)
        around = line[max(0, m.start() - 3):m.start()] + "|" + line[m.end():m.end() + 3]
        if re.search(r"[@*+/=&|~-]\s*\||\|\s*[@*+/=&|]", around):
            continue   # beside an operator: code ("weights @ v")
        found.append(w)
    return found


def _output_lines(cell) -> list[str]:
    lines: list[str] = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            lines += "".join(out["text"]).splitlines()
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "text/html" in data:
                html = "".join(data["text/html"])
                html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
                html = re.sub(r"<code>(.*?)</code>", r"`\1`", html, flags=re.S)   # code, as in Markdown
                # preformatted text (an evidence block's printout) keeps its lines and its
                # padding: a table's columns are runs of spaces, not one space between words
                pre = re.findall(r"<pre\b[^>]*>(.*?)</pre>", html, flags=re.S)
                html = re.sub(r"<pre\b[^>]*>.*?</pre>", "</p>", html, flags=re.S)
                lines += [re.sub(r"<[^>]+>", "", l).rstrip() for block in pre for l in block.split("\n")]
                lines += [re.sub(r"\s+", " ", t).strip() for t in re.split(r"<br\s*/?>|</(?:p|div|li|tr|summary|details|h\d)>", html)]
                lines = [re.sub(r"<[^>]+>", " ", l) for l in lines]
            elif "text/plain" in data and "image/png" not in data:
                lines += "".join(data["text/plain"]).splitlines()
    import html as _html
    return [_html.unescape(l).strip() for l in lines if l.strip()]


def english_left(nb: dict) -> list[tuple[int, str, str]]:
    """``(cell index, "output" | "comment", line)`` of every printed line and code comment of
    a Chinese notebook that still has English words (see :func:`english_words`)."""
    known = _identifiers(nb)
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        # a cell that prints attnlib's source (inspect.getsource) shows code, not prose
        printed = [] if "getsource(" in _source(cell) else _output_lines(cell)
        for line in printed:
            if english_words(line, known):
                found.append((i, "output", line))
        src = _code_source(_source(cell))
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT and not _MARKER_COMMENT.match(tok.string.strip()):
                if english_words(re.sub(r"\s*#\s*i18n$", "", tok.string).lstrip("#"), known):
                    found.append((i, "comment", tok.string))
    return found


def count_output_lines(nb: dict) -> int:
    return sum(len(_output_lines(c)) for c in nb["cells"] if c["cell_type"] == "code")
