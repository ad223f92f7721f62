"""The Chinese edition's catalogues, and attnlib's language switch.

Catalogues: ``locales/zh_CN/LC_MESSAGES/`` (the book's prose, one per page) and
``attnlib/i18n/locales/zh_CN/LC_MESSAGES/`` (what attnlib and the chapters' code show). Every
message is translated and none is fuzzy, with the same ``{fields}`` (``msgfmt --check
--statistics``); the catalogues hold every message the current sources have (Babel's
extraction: a changed message fails here, naming it, until ``make update-po`` and a
translation); translations keep maths, code, links and tags, and use the glossary's terms
(``tools/i18n_check.py``, terms.yml). attnlib marks its messages the gettext way, never
on an f-string.
"""
from __future__ import annotations

import ast
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import pytest
import yaml
from babel.messages.pofile import read_po

import attnlib as al
from attnlib import i18n

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import i18n_check  # noqa: E402
import i18n_extract  # noqa: E402

BOOK_PO = ROOT / "locales" / "zh_CN" / "LC_MESSAGES"
CODE_PO = ROOT / "attnlib" / "i18n" / "locales" / "zh_CN" / "LC_MESSAGES"
CATALOGUES = i18n_check.all_catalogues()


def _id(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return pages


# ------------------------------------------------------------------ catalogues: complete

def test_every_page_and_every_source_of_printed_text_has_a_catalogue():
    missing = [p for p in _toc_pages() if not (BOOK_PO / f"{p}.po").is_file()]
    assert not missing, f"pages without a Chinese catalogue: {missing}; run `make update-po`"
    domains = i18n_extract.collect()
    missing = [d for d in domains if not (CODE_PO / f"{d}.po").is_file()]
    assert not missing, f"attnlib catalogues missing: {missing}; run `make update-po`"
    assert len(domains) >= 17  # attnlib + 8 exercise modules + 8 chapters


@pytest.mark.system  # msgfmt: Debian's gettext
@pytest.mark.parametrize("po", CATALOGUES, ids=_id)
def test_msgfmt_every_message_translated_none_fuzzy(po):
    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        pytest.fail("msgfmt not found: run `make gettext-tools` (Debian's gettext package)")
    r = subprocess.run([msgfmt, "--check", "--statistics", "-o", os.devnull, str(po)],
                       capture_output=True, text=True)
    entries = [m for m in _read(po) if m.id]
    untranslated = [m.id[:70] for m in entries if not m.string]
    fuzzy = [m.id[:70] for m in entries if m.fuzzy]
    assert r.returncode == 0, f"msgfmt --check failed on {_id(po)}:\n{r.stderr}"
    stats = r.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ translated messages?\.", stats) and not untranslated and not fuzzy, (
        f"{_id(po)}: msgfmt says {stats!r}\n  untranslated: {untranslated}\n  fuzzy: {fuzzy}\n"
        "Translate them (docs/translating.md); a fuzzy entry's English changed: review it and "
        "delete its '#, fuzzy' line")


@pytest.mark.parametrize("po", CATALOGUES, ids=_id)
def test_translations_keep_maths_code_links_and_use_the_glossary(po):
    """Markup kept, the glossary's terms, the typography rules (through {fields}), no
    sentence over 120 characters."""
    problems = i18n_check.check_file(po)
    assert not problems, "\n".join(problems)


def _read(po: pathlib.Path):
    with open(po, "rb") as f:
        return read_po(f)


def _msgids(po: pathlib.Path) -> set[str]:
    return {m.id for m in _read(po) if m.id}


def test_attnlib_catalogues_hold_every_message_the_code_shows():
    """The messages extracted from attnlib and the chapters' code cells, now, are all in
    the catalogues; and the catalogues hold nothing the code no longer shows."""
    problems = []
    for domain, catalog in i18n_extract.collect().items():
        po = CODE_PO / f"{domain}.po"
        have = _msgids(po) if po.is_file() else set()
        messages = {m.id for m in catalog if m.id}
        new = sorted(messages - have)
        stale = sorted(have - messages)
        if new:
            problems.append(f"{domain}.po lacks {len(new)} new messages, e.g. {new[:3]}")
        if stale:
            problems.append(f"{domain}.po has {len(stale)} messages the code no longer shows, e.g. {stale[:3]}")
    assert not problems, "\n".join(problems) + "\nRun `make update-po` and translate the new entries."


@pytest.mark.slow  # a Sphinx build
def test_book_catalogues_hold_every_paragraph_of_the_book(tmp_path):
    """Sphinx's gettext builder on the current sources (notebooks not executed, ~15 s):
    every message of every page is in that page's catalogue, and nothing obsolete is."""
    import editions

    config = editions.derived_config(execute="off")
    r = subprocess.run([editions.jupyter_book(), "build", str(ROOT), "--config", str(config),
                        "--path-output", str(tmp_path), "--builder", "custom",
                        "--custom-builder", "gettext", "-qq"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    pots = sorted((tmp_path / "_build" / "gettext").rglob("*.pot"))
    assert pots
    problems = []
    for pot in pots:
        if pot.name in editions.HAND_WRITTEN:  # the theme's words, kept by hand (not a page)
            continue
        page = pot.relative_to(tmp_path / "_build" / "gettext").with_suffix("")
        po = BOOK_PO / f"{page}.po"
        want, have = _msgids(pot), (_msgids(po) if po.is_file() else set())
        if want - have:
            problems.append(f"{page}.po lacks {len(want - have)} messages, e.g. {sorted(want - have)[:2]}")
        if have - want:
            problems.append(f"{page}.po has {len(have - want)} obsolete messages, e.g. {sorted(have - want)[:2]}")
    assert not problems, "\n".join(problems) + "\nRun `make update-po` and translate the new entries."


def test_the_terms_checked_are_the_glossarys():
    glossary = (ROOT / "appendix" / "glossary.md").read_text(encoding="utf-8")
    terms = i18n_check.load_terms()
    not_in_glossary = {en: zh for en, zh in terms["require"].items()
                       if not any(z in glossary for z in zh)}
    assert not not_in_glossary, f"terms.yml uses Chinese terms the glossary does not have: {not_in_glossary}"
    assert len(terms["require"]) >= 30


def test_the_erratum_is_corrected_in_chinese():
    """The seeds call attention 置换不变; the Chinese edition says 置换等变 wherever the
    English says equivariant (chapter 6, the misconceptions page)."""
    found = 0
    for po in (BOOK_PO / "chapters" / "06_transformer_block.po", BOOK_PO / "appendix" / "misconceptions.po"):
        for m in _read(po):
            if m.id and re.search(r"equivarian", i18n_check.prose(m.id), re.I):  # not in a link target
                found += 1
                assert "等变" in m.string, m.string
    assert found >= 3


def test_the_checker_catches_what_it_should():
    """tools/i18n_check.py is not vacuous: it flags a changed formula, a lost code span, an
    untranslated sentence, a wrong term and a forbidden variant."""
    terms = i18n_check.load_terms()
    good = {"msgid": "The causal mask hides keys $j > i$; see `al.causal_mask`.",
            "msgstr": "因果掩码屏蔽 $j > i$ 的键；见 `al.causal_mask`。", "flags": set()}
    assert i18n_check.check_entry(good, terms) == []
    for bad in ("因果掩码屏蔽 $j>i$ 的键；见 `al.causal_mask`。",
                "因果掩码屏蔽 $j > i$ 的键。",
                "The causal mask hides keys $j > i$; see `al.causal_mask`.",
                "因果遮罩屏蔽 $j > i$ 的键；见 `al.causal_mask`。",
                "屏蔽 $j > i$ 的键；见 `al.causal_mask`。"):
        assert i18n_check.check_entry(dict(good, msgstr=bad), terms), bad


# The editing pass of issue 22: each unified term, its old variant (which must fail) and
# the edited wording (which must pass), as terms.yml enforces them.
UNIFIED_TERMS = [
    ("The attention scores grow with $d_k$; so does their spread.",
     "打分随 $d_k$ 增长，离散程度也随之增长。",
     "注意力分数随 $d_k$ 增长，分数的离散程度也随之增长。"),
    ("Scale the scores. Then the scores have unit variance.",
     "缩放注意力分数。这样分数的方差为 1。",
     "缩放注意力分数。这样注意力分数的方差为 1。"),
    ("The induction score of the head is 0.9.", "这个头的归纳分数为 0.9。", "这个头的归纳得分为 0.9。"),
    ("A fused kernel keeps the tiles in SRAM.", "融合 kernel 把各块保存在 SRAM 中。", "融合内核把各块保存在 SRAM 中。"),
    ("The loss on the first copy stays above chance.", "第一份拷贝上的损失高于随机猜测。",
     "第一遍上的损失高于随机猜测。"),
    ("The padding mask hides the padding keys.", "padding 掩码屏蔽填充键。", "填充掩码屏蔽填充键。"),
    ("The weights are nearly one-hot.", "权重几乎是 one-hot。", "权重几乎是独热。"),
    ("The entropy is in nats.", "熵的单位是 nats。", "熵的单位是 nat。"),
    ("Each device starts with its own key/value block.", "每台设备从自己的键值块开始。",
     "每台设备从自己的键/值块开始。"),
    ("The formula gives 819,200 bytes.", "公式给出 819,200 字节。", "公式给出 819200 字节。"),
    ("It cuts the cache memory by 8x.", "它把缓存显存减少 8 倍。", "它把缓存显存减少到原来的 1/8。"),
    ("FlashAttention-2 is about 2x faster.", "FlashAttention-2 快约 2 倍。", "FlashAttention-2 的速度约为原来的 2 倍。"),
    ("`repeat_kv` repeats each head in place: $[a, a, b, b]$.", "`repeat_kv` 在原位重复各个头：$[a, a, b, b]$。",
     "`repeat_kv` 让每个头紧挨着自己重复：$[a, a, b, b]$。"),
    ("The heads are tiled ([a, b, a, b]).", "各个头被整体分块平铺（[a, b, a, b]）。", "各个头被整体平铺（[a, b, a, b]）。"),
    ("FlashAttention processes the scores tile by tile (tiling).", "FlashAttention 平铺处理注意力分数。",
     "FlashAttention 分块处理注意力分数。"),
]


@pytest.mark.parametrize("english, old, new", UNIFIED_TERMS, ids=[u[1][:12] for u in UNIFIED_TERMS])
def test_the_unified_terms_are_enforced(english, old, new):
    terms = i18n_check.load_terms()
    entry = {"msgid": english, "flags": set()}
    assert i18n_check.check_entry(dict(entry, msgstr=old), terms), f"terms.yml lets the old variant through: {old}"
    assert i18n_check.check_entry(dict(entry, msgstr=new), terms) == [], new


# ------------------------------------------------------------------ attnlib's language switch

@pytest.fixture()
def tiny_catalogue(tmp_path, monkeypatch):
    """A Chinese catalogue of a few entries in place of the real one."""
    folder = tmp_path / "zh_CN" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "t.po").write_text('''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

msgid "Not quite."
msgstr "不对。"

msgid "previous token"
msgstr "前一个 token"

#, python-brace-format
msgid "head {i}: {name}"
msgstr "头 {i}：{name}"

msgid "Question."
msgstr "问题。"

#, fuzzy
msgid "Correct."
msgstr "对。"

msgid "multi\\n"
"line"
msgstr "多\\n"
"行"
''', encoding="utf-8")
    monkeypatch.setattr(i18n, "LOCALES", tmp_path)
    i18n.reload()
    yield
    al.set_language("en")
    i18n.reload()


def test_english_is_the_text_itself():
    al.set_language("en")
    assert al.tr("Not quite.") == "Not quite." and al.get_language() == "en"


def test_chinese_is_an_exact_lookup_and_a_template_is_filled_after_it(tiny_catalogue, monkeypatch):
    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    al.set_language("zh")
    assert al.tr("Not quite.") == "不对。"
    assert al.tr("multi\nline") == "多\n行"
    # the gettext idiom: the template is looked up, then filled in; a word filled in is
    # translated where it is defined (N_) and shown (_)
    word = i18n.N_("previous token")
    assert i18n._("head {i}: {name}").format(i=3, name=i18n._(word)) == "头 3：前一个 token"
    assert al.tr("1.25 (3, 4)") == "1.25 (3, 4)"                    # nothing to translate
    # text already formatted in English is not matched back against a template
    with pytest.raises(i18n.MissingTranslation, match="head 3: x"):
        al.tr("head 3: x")


def test_text_already_in_chinese_passes_unchanged_and_is_not_reported(tiny_catalogue, monkeypatch):
    """A Chinese notebook's own quiz or figure title is Chinese already: no lookup, no warning."""
    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    al.set_language("zh")
    for text in ("头 3：x 的注意力分数", "QKᵀ 是对称的。", "问题。"):
        assert al.tr(text) == text
    assert al.tr("Question.") == "问题。"


def test_a_missing_or_fuzzy_translation_is_never_silent(tiny_catalogue, monkeypatch):
    al.set_language("zh")
    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    with pytest.raises(i18n.MissingTranslation, match="Correct.*make gettext"):
        al.tr("Correct.")                                            # fuzzy = not translated
    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "0")
    with pytest.warns(UserWarning, match="no 中文 translation of 'Something new'"):
        assert al.tr("Something new") == "Something new"


def test_unknown_language_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="'fr'.*'en', 'zh'"):
        al.set_language("fr")
    assert al.get_language() == "en"


def test_language_from_the_environment():
    code = "import attnlib as al; print(al.get_language(), al.tr('Not quite.'))"
    env = dict(os.environ, ATTNLIB_LANG="zh_CN", ATTNLIB_I18N_STRICT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lang, text = out.stdout.split(maxsplit=1)
    assert lang == "zh" and re.search(r"[\u4e00-\u9fff]", text), out.stdout


@pytest.mark.system  # a CJK font (Debian's fonts-wqy-microhei)
@pytest.mark.filterwarnings("error:Glyph:UserWarning")  # a CJK font draws the Chinese
def test_quiz_and_explorer_speak_chinese(monkeypatch):
    """A quiz and an explorer of chapter 2, built in Chinese (strict): every word shown
    comes from the catalogue, nothing is left in English."""
    pytest.importorskip("ipywidgets")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    al.set_language("zh")
    try:
        q = al.quiz.question("Suppose W_Q = W_K. Which statement is always true?", [
            ("The score matrix QKᵀ is symmetric.", True, "QKᵀ = XWWᵀXᵀ, which is its own transpose."),
            ("The weight matrix softmax(QKᵀ/√d_k) is symmetric.", False,
             "The softmax divides each row by its own total, so A_ij ≠ A_ji in general. The chapter checks this."),
        ])
        page = q._repr_html_()
        assert "Correct." not in page and "Not quite." not in page and "Question." not in page
        assert re.search(r"[\u4e00-\u9fff]", q.prompt) and "QKᵀ" in page

        def render(t):
            fig, ax = plt.subplots(figsize=(2, 2))
            ax.set_xlabel("key (token attended to)")
            ax.set_ylabel("query (token attending)")
            return fig
        ex = al.widgets.explorer(render, [1, 2], description="query")
        bundle = ex.still_bundle()
        assert "Run this cell" not in bundle["text/plain"] and re.search(r"[\u4e00-\u9fff]", bundle["text/plain"])
        fig = render(0)
        fig.canvas.print_figure(__import__("io").BytesIO(), format="png")
        assert re.search(r"[\u4e00-\u9fff]", fig.axes[0].get_xlabel())
        plt.close("all")
    finally:
        al.set_language("en")


@pytest.mark.system  # a CJK font (Debian's fonts-wqy-microhei)
def test_chinese_figures_have_a_cjk_font():
    pytest.importorskip("matplotlib")
    name = i18n.use_cjk_font()
    assert name is not None, ("no CJK font for the Chinese figures: run `make fonts` "
                              "(Debian's fonts-wqy-microhei)")
    import matplotlib.pyplot as plt
    from matplotlib import rcParams
    rcParams.update(plt.rcParamsDefault)


# ------------------------------------------------------------------ the extractor

def test_extractor_finds_figure_quiz_printed_and_marked_text_in_a_cell():
    import zh_notebooks  # the chapters' code cells are read by tools/zh_notebooks.py

    cell = '''
names = ["previous token", "uniform"]  # i18n
fig, ax = plt.subplots()
ax.set_title(f"head {i}: {names[i]}", fontsize=9)
ax.plot(x, y, "o-", color="C1", label="fitted slope")
al.quiz.question("Why?", [("Because.", True, "It is so."), ("No", False, "Not so.")])
print("printed text too")  # and comments
'''
    found = {m: f for m, f, _, _ in zh_notebooks.code_messages(cell)}
    assert found == {"previous token": False, "uniform": False, "head {i}: {names[i]}": True,
                     "fitted slope": False, "Why?": False, "Because.": False, "It is so.": False, "No": False,
                     "Not so.": False, "printed text too": False, "and comments": False}, found


@pytest.mark.system  # a CJK font (Debian's fonts-wqy-microhei)
@pytest.mark.filterwarnings("error:Glyph:UserWarning")  # a CJK font draws the Chinese
def test_a_figure_redrawn_after_ax_clear_is_translated_again(monkeypatch):
    """Live curves redraw the same axes (ax.clear() keeps the axis-label objects): every
    draw shows the translation, not only the first."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    al.set_language("zh")
    try:
        fig, ax = plt.subplots()
        for _ in range(2):
            ax.clear()
            ax.set_xlabel("training step")
            fig.canvas.print_figure(io.BytesIO(), format="png")
            assert re.search(r"[\u4e00-\u9fff]", ax.get_xlabel()), ax.get_xlabel()
        plt.close(fig)
    finally:
        al.set_language("en")


@pytest.mark.system  # a CJK font (Debian's fonts-wqy-microhei)
@pytest.mark.filterwarnings("error:Glyph:UserWarning")  # a CJK font draws the Chinese
def test_tick_labels_given_as_text_are_translated_when_catalogued(monkeypatch):
    """Bar names (ax.set_xticks(..., labels=...)) are translated at every draw; labels
    that are data (an example sentence's tokens) and have no entry stay as they are."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    al.set_language("zh")
    try:
        fig, ax = plt.subplots()
        al.plots.bars(ax, [1.0, 2.0], ["previous-\ntoken head", "Anna-xyz"])
        for _ in range(2):
            fig.canvas.print_figure(io.BytesIO(), format="png")
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            assert re.search(r"[\u4e00-\u9fff]", ticks[0]) and ticks[1] == "Anna-xyz", ticks
        plt.close(fig)
    finally:
        al.set_language("en")


# ------------------------------------------------------------------ attnlib's messages

def _marked_calls(tree):
    """Every call of ``_``, ``N_`` or ``tr`` in a module: (node, first argument)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Name) \
                and node.func.id in ("_", "N_", "tr"):
            yield node, node.args[0]


ATTNLIB_SOURCES = sorted((ROOT / "attnlib").rglob("*.py"))


@pytest.mark.parametrize("path", ATTNLIB_SOURCES, ids=_id)
def test_no_translation_call_on_an_f_string(path):
    """``tr(f"...")`` formats first and leaves nothing to look up: write
    ``_("... {name} ...").format(name=...)`` (docs/translating.md)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = [f"line {node.lineno}: {ast.unparse(node)[:90]}" for node, arg in _marked_calls(tree)
           if isinstance(arg, ast.JoinedStr) or (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod))]
    assert not bad, "\n".join(bad)


def test_every_message_attnlib_marks_is_extracted_by_babel():
    """Each literal that attnlib passes to ``_``, ``N_`` or ``tr`` (found by parsing the code,
    also inside an f-string, where Babel cannot see it) is in Babel's extraction."""
    extracted = {m.id for catalog in i18n_extract.from_package().values() for m in catalog if m.id}
    missing = []
    for path in ATTNLIB_SOURCES:
        for node, arg in _marked_calls(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and re.search("[A-Za-z]{2}", arg.value) \
                    and arg.value not in extracted:
                missing.append(f"{_id(path)}:{node.lineno}: {arg.value[:70]!r}")
    assert not missing, ("not extracted (a _() inside an f-string? assign it to a name first):\n"
                         + "\n".join(missing))


def test_every_exercise_text_the_checker_shows_is_extracted(monkeypatch):
    """What the registered exercises show (prompts, hint ladders, mistake titles, messages and
    fixes) is in Babel's extraction, and the labels of their cases (built for two seeds, in
    Chinese) are all translated: a field written some other way than a string literal must
    be marked with N_() where it is built, or built with _().format()."""
    import numpy as np

    from attnlib.exercises import EXERCISES
    from attnlib.exercises._hints import shown_part_of_hint

    extracted = {m.id for catalog in i18n_extract.from_package().values() for m in catalog if m.id}
    missing = []
    for ex in EXERCISES.values():
        texts = [ex.prompt, *ex.hints, shown_part_of_hint(ex.hint)]
        texts += [t for m in ex.mistakes for t in (m.title, m.message, m.fix)]
        missing += [f"{ex.name}: {t[:70]!r}" for t in texts
                    if t and re.search("[A-Za-z]{2}", t) and t not in extracted]
    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    i18n._state["lang"] = "zh"  # (what set_language does, without loading fonts)
    try:
        for ex in EXERCISES.values():
            for seed in (0, 1):
                for case in ex.cases(np.random.default_rng(seed)):
                    try:
                        i18n.tr(case.label)
                    except i18n.MissingTranslation:
                        missing.append(f"{ex.name}: case label {case.label!r}")
    finally:
        i18n._state["lang"] = "en"
    assert len(EXERCISES) >= 20
    assert not missing, "\n".join(sorted(set(missing)))


def test_the_exercise_extractor_reads_the_catalogue_fields():
    source = b'''
Exercise(name="x", prompt="Compute it.", hint="Think first. Then return np.exp(x).",
         hints=("Step one.", "Step two."),
         mistakes=[Mistake("k", "A title", "A message.", fix="A fix.")])
Case((1,), label="one token")
Case((2,), label=label)
'''
    found = {m for _l, _f, m, _c in i18n_extract.extract_exercises(io.BytesIO(source), (), (), {})}
    assert found == {"Compute it.", "Think first.", "Step one.", "Step two.", "A title", "A message.",
                     "A fix.", "one token"}, found


# ------------------------------------------------------------------ terms and typography (issue 28)

def _entry(msgstr: str, msgid: str = "x", template: bool = False, code: bool = False) -> dict:
    return {"msgid": msgid, "msgstr": msgstr, "flags": {"python-brace-format"} if template else set(), "code": code}


# (English, a translation the rules must refuse, the edited one they must pass, template?)
TYPOGRAPHY = [
    # a ratio through a {field}: 多 {ratio} 倍 is ratio + 1 times
    ("plain moves {ratio:.1f}x more bytes", "普通实现搬运的字节数多 {ratio:.1f} 倍",
     "普通实现搬运的字节数是分块实现的 {ratio:.1f} 倍", True),
    ("{a} / {b} = {r:.0f}x", "依赖 / 批量 = {r:.0f}x", "依赖 / 批量 = {r:.0f} 倍", True),
    # the layer below is the one a layer reads: 前一层
    ("Each layer reads the outputs of the layer below.", "每一层读取的是下一层的输出。",
     "每一层读取的是前一层的输出。", False),
    ("This picture is the view for {label}.", "这张图是 查询 = her 时的视图。", "这张图的设置：查询 = her。", False),
    ("n = {n}: peak plain {p}", "n = {n}：峰值 普通实现 {p}", "n = {n}：普通实现的峰值 {p}", True),
    ("views ({views})", "视图（无掩码, 填充掩码）", "视图（无掩码、填充掩码）", False),
    ("time: {t} ms", "时间: {t} ms", "时间：{t} ms", True),
    ("positions 0-22", "位置 0-22", "位置 0–22", False),
    ("keys {a}-{b}", "键 {a}-{b}", "键 {a}–{b}", True),
    ("{n:,} parameters", "{n:,} 个参数", "{n} 个参数", True),
    ("Open it in a notebook.", "在 notebook 中打开它。", "在笔记本中打开它。", False),
    ("a bug that raises no error", "一个不会报错的 bug", "一个不会报错的错误", False),
    ("the running sums", "累加和", "累积和", False),
    ("learned", "学习式", "可学习", False),
    ("Attention is memory-bound.", "注意力受限于访存。", "注意力是访存受限的。", False),
    ("Rotary position embeddings", "旋转位置嵌入", "旋转位置编码", False),
    ("soft: the loss fell", "软查找：损失下降", "软查表：损失下降", False),
]


@pytest.mark.parametrize("english, old, new, template", TYPOGRAPHY, ids=[t[1][:14] for t in TYPOGRAPHY])
def test_the_term_and_typography_rules_see_through_fields(english, old, new, template):
    terms = i18n_check.load_terms()
    assert i18n_check.check_entry(_entry(old, english, template), terms), f"the rules let through: {old}"
    assert i18n_check.check_entry(_entry(new, english, template), terms) == [], new


def test_a_field_reads_as_a_number_and_maths_as_a_latin_word():
    assert i18n_check.rule_text("多 {ratio:.1f} 倍", template=True) == "多 0 倍"
    assert i18n_check.rule_text("多 {ratio:.1f} 倍") == "多 {ratio:.1f} 倍"   # not a template: braces are text
    assert i18n_check.rule_text("取 $x$。见 `f`", template=False) == "取 M。见 M"
    assert i18n_check.format_spec("{f / n:,.0f}") == ",.0f" and i18n_check.format_spec("{x[:, 0]}") == ""


def test_a_chinese_translation_may_drop_a_thousands_separator_and_nothing_else():
    import zh_notebooks

    src = 'print(f"{n:,} parameters, {t:.2f} s")\n'
    ok = {"{n:,} parameters, {t:.2f} s": "{n} 个参数，{t:.2f} 秒"}
    text, missing = zh_notebooks.translate_code(src, ok)
    assert not missing and "{n} 个参数" in text
    for bad in ("{n} 个参数，{t:.3f} 秒", "{m} 个参数，{t:.2f} 秒"):
        _, missing = zh_notebooks.translate_code(src, {"{n:,} parameters, {t:.2f} s": bad})
        assert missing and "fields" in missing[0], bad


def test_long_sentences_are_found_as_the_reader_sees_them():
    long = "这是一个很长的句子，" * 13 + "到此为止。"          # 135 characters
    assert i18n_check.long_sentences(_entry(long))
    assert not i18n_check.long_sentences(_entry(long.replace("，到此", "。到此").replace("句子，这是", "句子。这是", 6)))
    # a formula counts by its symbols, a link by its text
    short = "见 [第 3 章](../chapters/03_scaling.ipynb#the-variance-of-a-dot-product) 与 $\\mathrm{softmax}$。" * 2
    assert not i18n_check.long_sentences(_entry(short))
    # printed text of a chapter's code (a template) is not prose
    assert not i18n_check.long_sentences(_entry(long + "{x}", template=True, code=True))


def test_printed_output_is_checked_too(tmp_path, monkeypatch):
    """The rules run on the lines the Chinese notebooks print, where a field has its value."""
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        {"output_type": "stream", "name": "stdout",
         "text": ["普通实现搬运的字节数多 3.9 倍；2B/d = 4\n", "峰值 普通实现 16.5 MiB\n", "tensor([1., 2.])\n",
                  "普通实现搬运的字节数是分块实现的 3.9 倍\n"]}]}]}
    path = tmp_path / "99_test.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.setattr(i18n_check, "ROOT", tmp_path)
    problems, read = i18n_check.check_outputs(path)
    assert read == 3 and len(problems) == 2, problems   # the repr is not text; the last line is right
    assert "多 3.9 倍" in problems[0] and "值 普" in problems[1]


def test_an_evidence_blocks_table_keeps_its_padding(tmp_path, monkeypatch):
    """An evidence block prints inside <pre>: its lines are read as printed, so a table's
    padding (a run of spaces) is not taken for one stray space between Chinese words, and
    a stray space inside it is still found."""
    html = ('<details class="attnlib-evidence"><summary>证据：各种子间的范围</summary><pre style="margin: 0">'
            '未缩放       各行的中位数：0.100 到 0.143\n缩放 各行的中位数：0.302 到 0.305</pre></details>')
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        {"output_type": "display_data", "metadata": {},
         "data": {"text/html": html, "text/plain": "<attnlib evidence>"}}]}]}
    path = tmp_path / "99_test.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.setattr(i18n_check, "ROOT", tmp_path)
    problems, read = i18n_check.check_outputs(path)
    assert read == 3, problems                      # the summary and the two lines of the table
    assert len(problems) == 1 and "放 各" in problems[0], problems


@pytest.mark.parametrize("nb", i18n_check.notebooks(), ids=lambda p: p.name)
def test_what_the_chinese_notebooks_print_follows_the_rules(nb):
    problems, read = i18n_check.check_outputs(nb)
    assert read > 10
    assert not problems, "\n".join(problems[:30])


def test_lists_and_explorer_stills_follow_the_language(monkeypatch):
    """An explorer's still lists its views as the language does (1, 2, 4 / 1、2、4) and says
    which one it shows without a space between Chinese words."""
    from attnlib.i18n import join_list
    from attnlib.ui.widgets import Explorer

    ex = Explorer(widget=None, frames=[b"\x89PNG"] * 2, labels=["无掩码", "编码器：填充掩码"], description="掩码")
    try:
        assert join_list([1, 2, 4]) == "1, 2, 4"
        al.set_language("zh")
        assert join_list([1, 2, 4]) == "1、2、4"
        html = ex.still_bundle()["text/html"]
        assert "（无掩码、编码器：填充掩码）" in html and "这张图的设置：掩码 = 无掩码。" in html, html
        assert not i18n_check.check_text(html.split("&#9654; ")[1].split("</p>")[0], i18n_check.load_terms())
    finally:
        al.set_language("en")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_stub_verdict_says_not_attempted_once_and_shows_code_as_code(lang):
    """The verdict on an untouched stub: its title says "not attempted" (尚未作答), its message
    says why without repeating it, and the HTML shows `raise NotImplementedError` as code,
    not between backticks."""
    def softmax(x, axis=-1):
        raise NotImplementedError

    try:
        al.set_language(lang)
        r = al.exercises.check("softmax", softmax)
        title, message = str(r).split("\n")[:2]
        head = i18n.tr("not attempted")
        assert r.status == "not_attempted" and title.endswith(head)
        assert head.lower() not in message.lower() and "还没有作答" not in message, message
        html = r._repr_html_()
        assert "<code>raise NotImplementedError</code>" in html and "`" not in html
    finally:
        al.set_language("en")


def test_figure_text_marked_as_data_is_drawn_as_it_is_in_chinese(monkeypatch):
    """A generated sample drawn in a figure is data: the Chinese figure keeps it, and the strict
    Chinese build does not ask the catalogue for it; the figure's own words are translated."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import attnlib as al
    from attnlib import i18n

    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    before = al.get_language()
    al.set_language("zh")
    try:
        fig, ax = plt.subplots()
        sample = al.i18n.data_text(ax.text(0, 1, "HAMLET.\nTo be the world the sealed"))
        ax.set_ylabel("probability")
        i18n.translate_figure(fig)
        assert sample.get_text() == "HAMLET.\nTo be the world the sealed"
        assert ax.yaxis.label.get_text() == al.tr("probability") != "probability"
        plain = ax.text(0, 0, "To be the world the sealed")
        with pytest.raises(i18n.MissingTranslation):
            i18n.translate_figure(fig)
        plain.remove()
        plt.close(fig)
    finally:
        al.set_language(before)
