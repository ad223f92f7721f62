"""The raw HTML block of chapter 13's sentence explorer in each edition, for the tests: the
English block is site_assets/sentence-explorer-snippet.html (pasted into the chapter), the
Chinese one is its translation in the chapter's catalogue, as the Chinese site gets it."""
from __future__ import annotations

import pathlib

from babel.messages.pofile import read_po

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENGLISH = ROOT / "site_assets" / "sentence-explorer-snippet.html"
CATALOGUE = ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / "chapters" / "13_real_text.po"


def snippet(lang: str) -> str:
    """The explorer's HTML block in ``lang`` ("en" or "zh")."""
    english = ENGLISH.read_text(encoding="utf-8").strip()
    if lang == "en":
        return english
    with CATALOGUE.open("rb") as f:
        entry = read_po(f).get(english)
    if entry is None or not entry.string or entry.fuzzy:
        raise LookupError(f"{CATALOGUE.relative_to(ROOT)} has no translation of the explorer's block as "
                          f"{ENGLISH.relative_to(ROOT)} has it: paste the snippet into the chapter and run "
                          f"make update-po (docs/translating.md)")
    return entry.string
