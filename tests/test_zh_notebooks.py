"""The Chinese notebooks (zh/chapters/*.ipynb): generated from the chapters and the
catalogues by tools/zh_notebooks.py, executed, and Chinese in what they print and say."""
from __future__ import annotations

import collections
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import chapter_time  # noqa: E402
import zh_notebooks  # noqa: E402
from test_notebooks import _stored_text  # noqa: E402

# every notebook with a Chinese twin, as its path in the repository: the chapters and their
# solutions notebooks ("chapters/02_qkv.ipynb", "solutions/02_qkv.ipynb")
NOTEBOOKS = [f"{p.parent.name}/{p.name}" for p in zh_notebooks.notebook_paths()]
CHAPTERS = [n for n in NOTEBOOKS if n.startswith("chapters/")]


def _zh(name: str) -> dict:
    path = ROOT / "zh" / name
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: run `make notebooks-zh`")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_chinese_notebook_is_what_the_generator_writes(name):
    """Each cell's source is the generator's translation of the English chapter (a chapter
    or catalogue changed since: `make notebooks-zh`), and every block is translated."""
    want, errors = zh_notebooks.translate_notebook(ROOT / name)
    assert not errors, "untranslated (fill in the catalogues, docs/translating.md):\n" + "\n".join(errors[:30])
    have = _zh(name)
    assert [c["cell_type"] for c in have["cells"]] == [c["cell_type"] for c in want["cells"]], \
        f"zh/{name} has other cells than {name}: run `make notebooks-zh`"
    stale = [i for i, (a, b) in enumerate(zip(have["cells"], want["cells"]))
             if zh_notebooks._source(a) != zh_notebooks._source(b)]
    assert not stale, f"zh/{name}: cells {stale[:10]} differ from the generator's: run `make notebooks-zh`"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_chinese_notebook_is_executed(name):
    """A code cell that shows something in the English chapter shows it in the Chinese one
    (stored outputs: strict nbval compares them, the site renders them)."""
    en = json.loads((ROOT / name).read_text(encoding="utf-8"))
    zh = _zh(name)
    empty = [i for i, (a, b) in enumerate(zip(en["cells"], zh["cells"]))
             if a["cell_type"] == "code" and a.get("outputs") and not b.get("outputs")]
    assert not empty, f"zh/{name}: cells {empty[:10]} have no stored output: run `make notebooks-zh`"
    assert "widgets" in zh["metadata"] or "widgets" not in en["metadata"], \
        f"zh/{name} lacks the explorers' widget state: execute it (make notebooks-zh)"


# a number as printed: a sign, digits (with thousands separators), a decimal part, an exponent
NUMBER = re.compile(r"(?<![\w.])[-+\u2212]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
# a number that an English message writes in its text and its translation writes otherwise:
# (notebook, number); "6.7B parameters" is "67 亿个参数"
WRITTEN_OTHERWISE = {("chapters/11_inference.ipynb", "6.7")}


def _printed_numbers(cell: dict) -> collections.Counter:
    text = _stored_text(cell)  # what nbval compares: streams and text/plain
    return collections.Counter(n.replace(",", "").replace("\u2212", "-") for n in NUMBER.findall(text))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_chinese_notebook_prints_the_english_numbers(name):
    """Every number that a compared cell of the English notebook prints, the Chinese cell
    prints too (a translation may add numbers of its own, such as "第 1 层").

    The Chinese notebooks run the English code with other strings (the generator test
    above), so their numbers depend on the numerical environment exactly as the English
    ones do. With this test, strict nbval of the Chinese notebooks in the second numerical
    environment (`make nbval-zh`) is also the check of the English notebooks' numbers there,
    and `make test` runs the English notebooks in the first environment only (JupyterLab's
    Run All, compared by strict nbval's rules)."""
    en_cells = [c for c in json.loads((ROOT / name).read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    zh_cells = [c for c in _zh(name)["cells"] if c["cell_type"] == "code"]
    assert len(en_cells) == len(zh_cells), f"zh/{name}: other code cells than {name}: run `make notebooks-zh`"
    missing = []
    for i, (en, zh) in enumerate(zip(en_cells, zh_cells)):
        if "nbval-ignore-output" in en.get("metadata", {}).get("tags", []):
            continue  # timings and memory: not compared by nbval either (test_notebooks.py)
        lost = _printed_numbers(en) - _printed_numbers(zh)
        lost = {n: k for n, k in lost.items() if (name, n) not in WRITTEN_OTHERWISE}
        if lost:
            missing.append(f"code cell {i}: {lost}")
    assert not missing, (f"zh/{name} does not print numbers that {name} prints (re-execute it: "
                         "`make notebooks-zh`):\n" + "\n".join(missing[:10]))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_chinese_notebook_prints_and_comments_in_chinese(name):
    """No printed line, output or comment of a Chinese notebook has English words, outside
    code, identifiers, numbers and the short list zh_notebooks.ALLOWED_WORDS."""
    left = zh_notebooks.english_left(_zh(name))
    assert not left, f"zh/{name}: {len(left)} lines with English:\n" + "\n".join(
        f"  cell {i} {kind}: {line[:120]}" for i, kind, line in left[:30])


def test_chinese_notebook_sets_the_language_in_its_setup_cell():
    """On Colab or Binder there is no ATTNLIB_LANG: the notebook itself switches attnlib to
    Chinese (checker verdicts, quizzes, figures), right after importing it."""
    for name in NOTEBOOKS:
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
    # a quoted line is data (chapter 13's plays and samples, attnlib.ui.columns.quote), but only a quoted one
    assert not zh_notebooks.english_words("│ To be, or not to be,--that is the question", known)
    assert zh_notebooks.english_words("选段 To be, or not to be,--that is the question", known)


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


@pytest.mark.parametrize("name", CHAPTERS)
def test_chinese_chapter_states_the_same_time(name):
    """The time stated under the title (tools/chapter_time.py) is the English chapter's, in
    the Chinese notebook too: --write changes both the chapter and its catalogue entry."""
    en = chapter_time.stated(json.loads((ROOT / name).read_text(encoding="utf-8")))
    zh = chapter_time.stated(_zh(name), chapter_time.STATED_ZH)
    assert zh == en, (f"zh/{name} states {zh} minutes, the English chapter {en}: run "
                      "`python tools/chapter_time.py --write`, then `python tools/zh_notebooks.py`")
