"""Check what no library checks in the translated catalogues: markup kept, the glossary's terms.

    python tools/i18n_check.py [FILE.po ...]   # default: every Chinese catalogue

Untranslated and fuzzy entries and ``{field}``s that differ are msgfmt's job
(``msgfmt --check --statistics FILE.po``). For every translated entry this reports
(``file:line: problem``):

- maths (``$...$``, ``$$...$$``), inline code, link targets, MyST roles and HTML tags
  that differ between the English and the Chinese (formulas and code stay unchanged);
- a translation that Sphinx would read as a list item, heading or quote;
- an English sentence copied unchanged instead of translated;
- the terminology of ``locales/zh_CN/terms.yml``: a required Chinese term missing, a
  forbidden variant (or a ``forbid_pattern`` regular expression) used.

``tests/test_i18n.py`` runs the same checks; this script is for translators.
"""
from __future__ import annotations

import collections
import pathlib
import re
import sys

import yaml
from babel.messages.pofile import read_po

ROOT = pathlib.Path(__file__).resolve().parents[1]

CATALOGUES = [ROOT / "locales" / "zh_CN" / "LC_MESSAGES", ROOT / "attnlib" / "i18n" / "locales" / "zh_CN" / "LC_MESSAGES"]
TERMS = ROOT / "locales" / "zh_CN" / "terms.yml"

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
    found.update("tag:" + " ".join(m.lower().split()) for m in _TAG.findall(text))
    return found


def prose(text: str) -> str:
    """``text`` without maths, code, roles, link targets and tags: what gets translated."""
    for pattern in (_ROLE, _DISPLAY_MATH, _CODE, _INLINE_MATH, _TAG):
        text = pattern.sub(" ", text)
    return _LINK_TARGET.sub("]", text)


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
    if "python-brace-format" in entry.get("flags", ()):  # a field's expression is code, not English
        english = re.sub(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", " ", english)
    words = _WORD.findall(english)
    display_math = "$" not in msgid and re.search(r"\\[a-zA-Z]+", msgid) and msgstr == msgid
    if not display_math and not _CJK.search(prose(msgstr)) and len(words) > (6 if glossary else 3):
        problems.append("still English: translate the sentence")
    chinese = prose(msgstr)
    for pattern, options in terms.get("require", {}).items():
        if re.search(rf"(?<![\w-])(?:{pattern})(?![\w-])", english, re.IGNORECASE) and \
                _CJK.search(chinese) and not any(o in chinese for o in options):
            problems.append(f"term: the English says /{pattern}/, the translation has none of {options}")
    for variant, why in (terms.get("forbid") or {}).items():
        if variant in msgstr:
            problems.append(f"term: {variant!r} is not used ({why})")
    for pattern, why in (terms.get("forbid_pattern") or {}).items():
        m = re.search(pattern, chinese)
        if m:
            problems.append(f"term: ...{m.group(0).strip()[-20:]!r} is not used ({why})")
    for variant, needs in (terms.get("only_where") or {}).items():
        if variant in msgstr and not re.search(needs, msgid, re.IGNORECASE):
            problems.append(f"term: {variant!r} only where the English says {needs!r}")
    return problems


def check_file(path: pathlib.Path, terms: dict | None = None) -> list[str]:
    terms = terms if terms is not None else load_terms()
    out = []
    with open(path, "rb") as f:
        catalog = read_po(f)
    for m in catalog:
        entry = {"msgid": m.id, "msgstr": m.string, "flags": set(m.flags)}
        for problem in check_entry(entry, terms, path.name == "glossary.po") if m.id else ():
            short = m.id.replace("\n", " ")
            short = short if len(short) <= 70 else short[:67] + "..."
            out.append(f"{path.relative_to(ROOT)}:{m.lineno}: {problem}  [{short}]")
    return out


def all_catalogues() -> list[pathlib.Path]:
    return sorted(p for d in CATALOGUES for p in d.rglob("*.po"))


def main(argv: list[str]) -> int:
    paths = [pathlib.Path(a).resolve() for a in argv] or all_catalogues()
    terms = load_terms()
    problems = [p for path in paths for p in check_file(path, terms)]
    print("\n".join(problems) if problems else f"{len(paths)} catalogue(s): no problem found")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
