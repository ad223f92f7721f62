"""Check what no library checks in the translated catalogues: markup kept, the glossary's terms.

    python tools/i18n_check.py [FILE.po ...]   # default: every Chinese catalogue

Untranslated and fuzzy entries and ``{field}``s that differ are msgfmt's job
(``msgfmt --check --statistics FILE.po``). For every translated entry this reports
(``file:line: problem``):

- maths (``$...$``, ``$$...$$``), inline code, link targets, MyST roles and HTML tags
  that differ between the English and the Chinese (formulas and code stay unchanged);
- a translation that Sphinx would read as a list item, heading or quote;
- an English sentence copied unchanged instead of translated;
- the terminology and typography of ``locales/zh_CN/terms.yml``: a required Chinese term
  missing, a forbidden variant (or a ``forbid_pattern`` regular expression) used, a
  ``forbid_field`` format (``{n:,}``). The rules read through a template's ``{fields}``:
  in a ``python-brace-format`` message (what code prints) each field reads as the number 0,
  so ``"多 {ratio:.1f} 倍"`` is seen as ``"多 0 倍"``; maths and code read as a Latin word.

A sentence of more than 120 characters, as the reader sees it, is reported too (split it).

Then the same rules run on what the Chinese notebooks print (every line of their stored
outputs that has Chinese in it, ``zh/chapters/*.ipynb``), where a field has its value.

    python tools/i18n_check.py --outputs-only   # only the printed lines, with a count

``tests/test_i18n.py`` runs the same checks; this script is for translators.
"""
from __future__ import annotations

import collections
import json
import pathlib
import re
import string
import sys

import yaml
from babel.messages.pofile import read_po

ROOT = pathlib.Path(__file__).resolve().parents[1]

CATALOGUES = [ROOT / "locales" / "zh_CN" / "LC_MESSAGES", ROOT / "attnlib" / "i18n" / "locales" / "zh_CN" / "LC_MESSAGES"]
TERMS = ROOT / "locales" / "zh_CN" / "terms.yml"
ZH_NOTEBOOKS = ROOT / "zh" / "chapters"

_DISPLAY_MATH = re.compile(r"\$\$.+?\$\$", re.DOTALL)
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)[^$\n]+?(?<!\\)\$")
_ROLE = re.compile(r"(?<!`)\{([\w:.-]+)\}`([^`]*)`")
# Sphinx re-parses each translation as Markdown and uses it only if it is one paragraph
_BLOCK_START = re.compile(r"^\s*(?:\d+[.)]|[-*+>]|#{1,6})\s")
_CODE = re.compile(r"``[^`]+``|`[^`]+`")
_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*\b[^<>]*>")
_CJK = re.compile(r"[\u3400-\u9fff]")
_WORD = re.compile(r"[A-Za-z]{3,}")
# a template's {field}, with one level of nested braces ({x:{width}}); not {{ or }}
_FIELD = re.compile(r"(?<!\{)\{(?!\{)[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")


def _role_key(name: str, content: str) -> str:
    if name in ("term", "section", "ref", "doc", "numref"):
        m = re.search(r"<([^<>]+)>\s*$", content)
        return f"{{{name}}}{(m.group(1) if m else content).strip()}"
    return f"{{{name}}}{content}"


def markup(text: str) -> collections.Counter:
    """What must survive translation unchanged: maths, code, roles, link targets, tags."""
    found = collections.Counter()
    for m in _ROLE.finditer(text):
        found[_role_key(*m.groups())] += 1
    text = _ROLE.sub(" ", text)
    for pattern, kind in ((_DISPLAY_MATH, "math"), (_CODE, "code")):
        found.update(f"{kind}:{m}" for m in pattern.findall(text))
        text = pattern.sub(" ", text)
    found.update(f"math:{m}" for m in _INLINE_MATH.findall(text))
    found.update(f"link:{m}" for m in _LINK_TARGET.findall(text))
    found.update("tag:" + _tag_key(m) for m in _TAG.findall(text))
    return found


# attributes whose values are structure (kept as they are); the others (alt, title,
# aria-label, the data-* labels of chapter 13's sentence explorer) are text to translate,
# whose {fields} must survive
_STRUCTURAL = {"class", "id", "src", "href", "type", "rel", "role", "for", "name", "data-model", "data-sentence"}
_ATTRIBUTE = re.compile(r"""([\w:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")


def _tag_key(tag: str) -> str:
    """A tag as what must survive translation: its name, its attributes in order, the values
    of structural attributes, and the ``{fields}`` of the others."""
    name = re.match(r"</?\s*([\w-]+)", tag)
    parts = [name.group(0).lower() if name else tag]
    for m in _ATTRIBUTE.finditer(tag):
        attr, value = m.group(1).lower(), m.group(2) if m.group(2) is not None else m.group(3)
        parts.append(f"{attr}={value}" if attr in _STRUCTURAL
                     else f"{attr}~{' '.join(sorted(re.findall(r'{[^{}]*}', value)))}")
    return " ".join(parts)


def prose(text: str, stand_in: str = " ") -> str:
    """``text`` without maths, code, roles, link targets and tags: what gets translated.
    Each of them is replaced by ``stand_in`` (typography rules use a Latin letter: to
    Chinese typography a formula or a code span is a Latin word)."""
    for pattern in (_ROLE, _DISPLAY_MATH, _CODE, _INLINE_MATH):
        text = pattern.sub(stand_in, text)
    text = _TAG.sub(" ", text)
    return _LINK_TARGET.sub("]", text)


def is_template(entry: dict) -> bool:
    return "python-brace-format" in entry.get("flags", ())


def rule_text(text: str, template: bool = False) -> str:
    """What the term and typography rules read: the prose of ``text`` with maths and code
    as a Latin word ("M": to Chinese typography a formula is a Latin word) and, in a
    template, each ``{field}`` as the number 0 (most fields are numbers; a field that
    prints Chinese text is seen in the printed output)."""
    text = prose(text, stand_in="M")
    return _FIELD.sub("0", text) if template else text


def template_fields(text: str) -> list[str]:
    """The ``{...}`` fields of a template, verbatim."""
    return _FIELD.findall(text)


def format_spec(field: str) -> str:
    """The format spec of a field: what follows its first ``:`` outside brackets and
    quotes (``"{x[:, 0].max():,.0f}"`` -> ``",.0f"``); ``""`` when it has none.

    >>> format_spec("{x[:, 0].max():,.0f}"), format_spec("{d['a:b']!r:>8}"), format_spec("{n}")
    (',.0f', '>8', '')
    """
    body, depth, quote = field[1:-1], 0, ""
    for i, ch in enumerate(body):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ":" and depth == 0:
            return body[i + 1:]
    return ""


def check_text(text: str, terms: dict, template: bool = False) -> list[str]:
    """The ``forbid``, ``forbid_pattern`` and ``forbid_field`` rules on one Chinese text (a
    translation, or a line a Chinese notebook printed)."""
    problems = []
    for variant, why in (terms.get("forbid") or {}).items():
        if variant in text:
            problems.append(f"term: {variant!r} is not used ({why})")
    seen = rule_text(text, template)
    for pattern, why in (terms.get("forbid_pattern") or {}).items():
        m = re.search(pattern, seen)
        if m:
            problems.append(f"term: ...{m.group(0).strip()[-20:]!r} is not used ({why})")
    if template:
        for field in template_fields(text):
            for pattern, why in (terms.get("forbid_field") or {}).items():
                if re.search(pattern, format_spec(field)):
                    problems.append(f"field {field} is not used ({why})")
    return problems


def load_terms() -> dict:
    return yaml.safe_load(TERMS.read_text(encoding="utf-8"))


def check_entry(entry: dict, terms: dict, glossary: bool = False) -> list[str]:
    """The problems of one translation, ``{"msgid": ..., "msgstr": ...}`` (none for an
    empty one: msgfmt reports those)."""
    msgid, msgstr = entry["msgid"], entry.get("msgstr", "")
    if not msgstr:
        return []
    problems = []
    before, after = markup(msgid), markup(msgstr)
    if before != after:
        lost = sorted((before - after).elements())
        new = sorted((after - before).elements())
        problems.append(f"maths/code/links/roles/tags changed: missing {lost}, added {new}")
    if _BLOCK_START.match(msgstr) and not msgid.lstrip().startswith("<"):
        problems.append("starts like a list item, heading or quote, so Sphinx would not use it: "
                        "escape the marker (1\\. ..., \\- ...)")
    english = prose(msgid)
    if is_template(entry):  # a field's expression is code, not English
        english = _FIELD.sub(" ", english)
    words = _WORD.findall(english)
    display_math = "$" not in msgid and re.search(r"\\[a-zA-Z]+", msgid) and msgstr == msgid
    if not display_math and not _CJK.search(prose(msgstr)) and len(words) > (6 if glossary else 3):
        problems.append("still English: translate the sentence")
    chinese = prose(msgstr)
    for pattern, options in terms.get("require", {}).items():
        if re.search(rf"(?<![\w-])(?:{pattern})(?![\w-])", english, re.IGNORECASE) and \
                _CJK.search(chinese) and not any(o in chinese for o in options):
            problems.append(f"term: the English says /{pattern}/, the translation has none of {options}")
    problems += check_text(msgstr, terms, template=is_template(entry))
    for variant, needs in (terms.get("only_where") or {}).items():
        if variant in msgstr and not re.search(needs, msgid, re.IGNORECASE):
            problems.append(f"term: {variant!r} only where the English says {needs!r}")
    return problems


LONG_SENTENCE = 120   # characters, as a reader sees them


def visible(text: str) -> str:
    """``text`` roughly as a reader sees it: link targets, role targets, code backticks and
    emphasis marks left out, a formula by its symbols (``$\\sqrt{d_k}$`` -> ``xd_k``)."""
    def formula(m: re.Match) -> str:
        s = re.sub(r"\\(?:operatorname|mathrm|text|mathbf|mathcal|mathbb|left|right|bigl|bigr|big|Big"
                   r"|quad|qquad)\b|\\[,;!]", "", m.group(1))
        return re.sub(r"[{}^_\\ ]", "", re.sub(r"\\[a-zA-Z]+", "x", s))
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"\{[\w:.-]+\}`([^`<]*)(?:<[^>]*>)?`", r"\1", text)
    text = re.sub(r"`+([^`]*)`+", r"\1", text)
    text = re.sub(r"\$\$(.+?)\$\$", formula, text, flags=re.S)
    return re.sub(r"\$([^$]+)\$", formula, text).replace("*", "")


def long_sentences(entry: dict) -> list[str]:
    """The sentences (up to 。！？) of a Chinese translation longer than
    :data:`LONG_SENTENCE` characters as the reader sees them. A template of printed output
    (a message of code, python-brace-format) and a code recipe (under 30 % Chinese) are
    not prose."""
    msgstr = entry.get("msgstr", "")
    if not msgstr or not _CJK.search(msgstr) or (is_template(entry) and entry.get("code")):
        return []
    return [s.strip() for s in re.split(r"(?<=[。！？])", visible(msgstr))
            if len(s.strip()) > LONG_SENTENCE and len(_CJK.findall(s)) >= 0.3 * len(s.strip())]


def check_file(path: pathlib.Path, terms: dict | None = None) -> list[str]:
    terms = terms if terms is not None else load_terms()
    out = []
    with open(path, "rb") as f:
        catalog = read_po(f)
    code = CATALOGUES[1] / "chapters" in path.parents   # the chapters' printed text
    for m in catalog:
        entry = {"msgid": m.id, "msgstr": m.string, "flags": set(m.flags), "code": code}
        found = check_entry(entry, terms, path.name == "glossary.po") if m.id else []
        found += [f"a sentence of {len(s)} characters (over {LONG_SENTENCE}): split it  …{s[:30]}…"
                  for s in (long_sentences(entry) if m.id else [])]
        for problem in found:
            short = m.id.replace("\n", " ")
            short = short if len(short) <= 70 else short[:67] + "..."
            out.append(f"{path.relative_to(ROOT)}:{m.lineno}: {problem}  [{short}]")
    return out


def all_catalogues() -> list[pathlib.Path]:
    return sorted(p for d in CATALOGUES for p in d.rglob("*.po"))


def printed_lines(path: pathlib.Path) -> list[tuple[int, str]]:
    """``(cell index, line)`` of every line a Chinese notebook's stored outputs print that
    has Chinese in it (a line of numbers or a repr is not text)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import zh_notebooks

    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(i, line) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
            for line in zh_notebooks._output_lines(cell) if _CJK.search(line)]


def check_outputs(path: pathlib.Path, terms: dict | None = None) -> tuple[list[str], int]:
    """The problems of the lines a Chinese notebook prints, and how many lines were read."""
    terms = terms if terms is not None else load_terms()
    lines = printed_lines(path)
    out = []
    for i, line in lines:
        for problem in check_text(line, terms):
            short = line if len(line) <= 70 else line[:67] + "..."
            out.append(f"{path.relative_to(ROOT)}: cell {i}: {problem}  [{short}]")
    return out, len(lines)


def notebooks() -> list[pathlib.Path]:
    return sorted(ZH_NOTEBOOKS.glob("*.ipynb"))


def main(argv: list[str]) -> int:
    outputs_only = "--outputs-only" in argv
    argv = [a for a in argv if a != "--outputs-only"]
    terms = load_terms()
    paths = [] if outputs_only else ([pathlib.Path(a).resolve() for a in argv] or all_catalogues())
    problems = [p for path in paths for p in check_file(path, terms)]
    printed, read = [], 0
    if outputs_only or not argv:
        for nb in notebooks():
            found, n = check_outputs(nb, terms)
            printed += found
            read += n
    for p in problems + printed:
        print(p)
    print(f"{len(paths)} catalogue(s): {len(problems)} problem(s); "
          f"{read} printed Chinese line(s) of {len(notebooks()) if (outputs_only or not argv) else 0} "
          f"notebook(s): {len(printed)} problem(s)")
    return 1 if problems or printed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
