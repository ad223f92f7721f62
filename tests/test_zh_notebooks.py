"""The Chinese notebooks (zh/chapters/*.ipynb): generated from the chapters and the
catalogues by tools/zh_notebooks.py, executed, and Chinese in what they print and say."""
from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import zh_notebooks  # noqa: E402

CHAPTERS = [p.name for p in zh_notebooks.chapter_paths()]


def _zh(name: str) -> dict:
    path = zh_notebooks.ZH_CHAPTERS / name
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: run `make notebooks-zh`")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", CHAPTERS)
def test_chinese_notebook_is_what_the_generator_writes(name):
    """Each cell's source is the generator's translation of the English chapter (a chapter
    or catalogue changed since: `make notebooks-zh`), and every block is translated."""
    want, errors = zh_notebooks.translate_notebook(zh_notebooks.CHAPTERS / name)
    assert not errors, "untranslated (fill in the catalogues, docs/translating.md):\n" + "\n".join(errors[:30])
    have = _zh(name)
    assert [c["cell_type"] for c in have["cells"]] == [c["cell_type"] for c in want["cells"]], \
        f"zh/chapters/{name} has other cells than chapters/{name}: run `make notebooks-zh`"
    stale = [i for i, (a, b) in enumerate(zip(have["cells"], want["cells"]))
             if zh_notebooks._source(a) != zh_notebooks._source(b)]
    assert not stale, f"zh/chapters/{name}: cells {stale[:10]} differ from the generator's: run `make notebooks-zh`"


@pytest.mark.parametrize("name", CHAPTERS)
def test_chinese_notebook_is_executed(name):
    """A code cell that shows something in the English chapter shows it in the Chinese one
    (stored outputs: strict nbval compares them, the site renders them)."""
    en = json.loads((zh_notebooks.CHAPTERS / name).read_text(encoding="utf-8"))
    zh = _zh(name)
    empty = [i for i, (a, b) in enumerate(zip(en["cells"], zh["cells"]))
             if a["cell_type"] == "code" and a.get("outputs") and not b.get("outputs")]
    assert not empty, f"zh/chapters/{name}: cells {empty[:10]} have no stored output: run `make notebooks-zh`"
    assert "widgets" in zh["metadata"] or "widgets" not in en["metadata"], \
        f"zh/chapters/{name} lacks the explorers' widget state: execute it (make notebooks-zh)"


@pytest.mark.parametrize("name", CHAPTERS)
def test_chinese_notebook_prints_and_comments_in_chinese(name):
    """No printed line, output or comment of a Chinese notebook has English words, outside
    code, identifiers, numbers and the short list zh_notebooks.ALLOWED_WORDS."""
    left = zh_notebooks.english_left(_zh(name))
    assert not left, f"zh/chapters/{name}: {len(left)} lines with English:\n" + "\n".join(
        f"  cell {i} {kind}: {line[:120]}" for i, kind, line in left[:30])


def test_chinese_notebook_sets_the_language_in_its_setup_cell():
    """On Colab or Binder there is no ATTNLIB_LANG: the notebook itself switches attnlib to
    Chinese (checker verdicts, quizzes, figures), right after importing it."""
    for name in CHAPTERS:
        first = next(c for c in _zh(name)["cells"] if c["cell_type"] == "code")
        src = zh_notebooks._source(first)
        assert zh_notebooks.SET_LANGUAGE in src and src.index(zh_notebooks.SET_LANGUAGE) > src.index(zh_notebooks.IMPORT), name


def test_english_left_detector_finds_english():
    """The detector that the tests above rely on flags English prose and spares code."""
    known = {"scores_one"}
    assert zh_notebooks.english_words("phase change (repeat loss halfway down) at step 200", known)
    assert zh_notebooks.english_words("最佳匹配，one matrix  ：", known) == ["one", "matrix"]
    assert not zh_notebooks.english_words("最大的 |分数 - 分数ᵀ|：scores_one 0.0 al.softmax(x) GPU 上 12 ms", known)
    assert not zh_notebooks.english_words("`is_causal=True` 的输出 (N, h, L, d_head)", known)


def test_markdown_block_without_translation_is_an_error():
    source = "## A heading\n\nA paragraph that\nspans two lines.\n\n- item one\n"
    catalogue = {"A heading": "标题", "A paragraph that spans two lines.": "一个段落。"}
    text, missing = zh_notebooks.translate_markdown(source, catalogue)
    assert text.startswith("## 标题\n\n一个段落。\n") and "- item one" in text
    assert missing == [": 'item one'"]


def test_fstring_translation_must_keep_the_fields():
    src = 'print(f"{n} pairs, max {err:.1e}")\n# a comment\n'
    good = {"{n} pairs, max {err:.1e}": "{n} 对，最大 {err:.1e}", "a comment": "一条注释"}
    text, missing = zh_notebooks.translate_code(src, good)
    assert not missing and text == 'print(f"{n} 对，最大 {err:.1e}")\n# 一条注释\n'
    bad = dict(good, **{"{n} pairs, max {err:.1e}": "{n} 对，最大 {error:.1e}"})
    _, missing = zh_notebooks.translate_code(src, bad)
    assert missing and "fields" in missing[0]
    _, missing = zh_notebooks.translate_code(src, {"a comment": "一条注释"})
    assert missing == [":1: '{n} pairs, max {err:.1e}'"]


def test_mistakes_are_listed_in_the_current_language():
    import attnlib as al
    from attnlib import i18n

    titles = [m.title for m in al.exercises.EXERCISES["tiled_attention"].mistakes]
    before = i18n.get_language()
    try:
        al.set_language("en")
        assert al.exercises.mistakes("tiled_attention") == titles
        al.set_language("zh")
        zh = al.exercises.mistakes("tiled_attention")
        assert len(zh) == len(titles) and all(zh_notebooks.re.search(r"[\u4e00-\u9fff]", t) for t in zh)
    finally:
        al.set_language(before)
    with pytest.raises(KeyError, match="tiled_attention"):
        al.exercises.mistakes("tiled_attention_typo")
