"""Student notebooks (``python -m attnlib.grading.assignments``): no solution and no hidden answer
survives, in either language; stubs, checks and questions are all there; the Chinese
prose is complete; and an executed assignment opens clean.

The search for leaks takes its needles from the course's own notebooks: every line of
every cell of the chapter's solutions notebook (solutions/), the link to it, every
paragraph of every hidden answer (and its Chinese translation), every quiz's feedback,
and looks for each one in every cell, output and metadata of the assignments.
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest

from attnlib.grading import assignments
from attnlib.grading import course
from attnlib.i18n import set_language, tr, translations

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = course.chapters(ROOT / "chapters")
LANGS = ("en", "zh")


def _text(nb: dict) -> str:
    """Everything a student's file holds: sources, outputs and metadata, whitespace collapsed."""
    parts = [json.dumps(nb.get("metadata", {}), ensure_ascii=False)]
    for cell in nb["cells"]:
        parts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            parts.append("".join(out.get("text", "")))
            for value in out.get("data", {}).values():
                parts.append(value if isinstance(value, str) else "".join(value) if isinstance(value, list)
                             else json.dumps(value, ensure_ascii=False))
    return re.sub(r"\s+", " ", "\n".join(parts))


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _answer_blocks(path: pathlib.Path) -> list[str]:
    """The English paragraphs inside every hidden answer (<details><summary>Answer...) of a chapter."""
    md = assignments._md()
    found = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        inside = False
        for tok in md.parse("".join(cell["source"])):
            if tok.type == "html_block" and re.search(r"<summary>\s*Answer", tok.content):
                inside = True
            elif tok.type == "html_block" and tok.content.strip().endswith("</details>"):
                inside = False
            elif inside and tok.type == "inline" and len(tok.content) > 20:
                found.append(tok.content.replace("\n", " ").strip())
    return found


def _needles(path: pathlib.Path, lang: str) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    visible = _squash("\n".join("".join(c["source"]) for c in nb["cells"]))
    solutions = json.loads((ROOT / "solutions" / path.name).read_text(encoding="utf-8"))
    needles = ["solutions/"]   # the link to the solutions page
    for cell in solutions["cells"][2:]:  # every line of the solutions (after the title and the setup
        src = "".join(cell["source"])  # cell) that is not also in the chapter
        if cell["cell_type"] == "code":
            needles += [line.strip() for line in src.splitlines()
                        if len(line.strip()) >= 12 and _squash(line) not in visible]  # compared as the search is
    answers = _answer_blocks(path)
    if lang == "zh":
        po = translations(ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / "chapters" / f"{path.stem}.po")
        answers = [po[a] for a in answers]
    needles += answers
    # a quiz's feedback tells which choice is right: the Chinese assignment's quizzes come
    # from the Chinese notebook, so its feedback is the needle there
    shown = path if lang == "en" else ROOT / lang / "chapters" / path.name
    for q in course.questions(shown):
        needles += [c[2] for c in q.choices if len(c) > 2 and len(c[2]) > 12 and "{…}" not in c[2]]
        needles += [part for c in q.choices if len(c) > 2 and "{…}" in c[2]
                    for part in c[2].split("{…}") if len(part.strip()) > 12]
    needles.append("al.quiz.question(")
    return [_squash(n) for n in needles]


@pytest.fixture(scope="module")
def built():
    return {(stem, lang): assignments.build(path, lang) for stem, path in CHAPTERS.items() for lang in LANGS}


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("stem", sorted(CHAPTERS))
def test_no_solution_or_hidden_answer_survives(built, stem, lang):
    nb, report = built[stem, lang]
    haystack = _text(nb)
    needles = _needles(CHAPTERS[stem], lang)
    assert len(needles) > 10, "too few needles: the search would prove nothing"
    leaks = [n for n in needles if n in haystack]
    assert not leaks, f"{stem} ({lang}) still holds solution or answer text: {leaks[:5]}"
    assert report["links"] == len(course.exercises_of(stem)) and report["answers"] >= 2  # two questions at least


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("stem", sorted(CHAPTERS))
def test_stubs_checks_and_questions_are_kept(built, stem, lang):
    nb, report = built[stem, lang]
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for name in course.exercises_of(stem):
        stub = [s for s in sources if f'al.exercises.check("{name}"' in s]
        assert len(stub) == 1 and "raise NotImplementedError" in stub[0], f"{stem}: the stub of {name}"
    qids = [re.search(r'answer\("(q\d+)", ""\)', s).group(1) for s in sources if "al.assignments.answer(" in s]
    assert qids == [q.qid for q in course.questions(CHAPTERS[stem])]
    # every question of the chapter, however its feedback is written (an f-string was once skipped)
    chapter = json.loads(CHAPTERS[stem].read_text(encoding="utf-8"))
    asked = sum("".join(c["source"]).count("al.quiz.question(") for c in chapter["cells"] if c["cell_type"] == "code")
    assert len(qids) == asked, f"{stem}: {asked} questions in the chapter, {len(qids)} answer cells"
    assert nb["metadata"]["attnlib"] == {"chapter": stem, "lang": lang, "assignment": 1}
    text = _text(nb)
    assert "hidden below" not in text and "hidden under" not in text and "藏有" not in text


@pytest.mark.parametrize("stem", sorted(CHAPTERS))
def test_chinese_assignment_prose_is_all_translated(built, stem):
    nb, report = built[stem, "zh"]
    assert report["untranslated"] == []
    english, _ = built[stem, "en"]
    md_en = [c for c in english["cells"] if c["cell_type"] == "markdown"]
    md_zh = [c for c in nb["cells"] if c["cell_type"] == "markdown"]
    assert len(md_en) == len(md_zh)
    untranslated = [c for c in md_zh if re.search(r"[A-Za-z]{4,} [a-z]{3,} [a-z]{3,} [a-z]{3,}",
                                                  re.sub(r"\$[^$]*\$|`[^`]*`|\]\([^)]*\)", "", "".join(c["source"])))]
    assert not untranslated, f"English prose left in the Chinese assignment: {untranslated[0]['source'][:3]}"


@pytest.mark.parametrize("stem", sorted(CHAPTERS))
def test_chinese_assignment_code_says_everything_in_chinese(built, stem):
    # its code cells come from the Chinese notebook: comments, printed text and quizzes in
    # Chinese (the English chapter's f-string texts are not translated at run time)
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import zh_notebooks

    nb, _report = built[stem, "zh"]
    left = zh_notebooks.english_left(nb)
    assert not left, f"{stem}: English left in the Chinese assignment's code: {left[:5]}"
    quiz = "".join("".join(c["source"]) for c in nb["cells"] if "al.assignments.answer(" not in "".join(c["source"])
                   and re.search(r"^\*\*[A-H]\.\*\*", "".join(c["source"]), re.M))
    assert not re.search(r"[A-Za-z]{4,} [a-z]{3,} [a-z]{3,}", re.sub(r"\$[^$]*\$|`[^`]*`", "", quiz)), \
        f"{stem}: a question of the Chinese assignment is in English"


def test_a_question_whose_summary_asks_keeps_the_question(built):
    nb, _ = built["11_inference", "en"]
    text = _text(nb)
    assert "**Question.** why may a decoder keep the keys of earlier tokens, but an encoder may not?" in text
    assert "In a decoder every layer is causal" not in text


def test_a_chapter_that_still_holds_its_solutions_loses_them_and_the_cells_using_them(tmp_path):
    """A teacher's own chapter may keep its solutions inline: the solution cell, the cell that
    uses it and the sentence introducing that cell are removed (the course's chapters keep
    theirs in solutions/, so here they are put back into a copy of chapter 8)."""
    chapter = json.loads(CHAPTERS["08_long_sequences"].read_text(encoding="utf-8"))
    solutions = json.loads((ROOT / "solutions" / "08_long_sequences.ipynb").read_text(encoding="utf-8"))
    chapter["cells"] += solutions["cells"][3:]   # the solution, the sentence and the cell that uses it
    path = tmp_path / "08_long_sequences.ipynb"
    path.write_text(json.dumps(chapter), encoding="utf-8")
    nb, report = assignments.build(path, "en")
    assert report["solutions"] == 1 and report["dependent"] == 1
    assert "linear_attention_step_solution" not in _text(nb) and "Run over a whole sequence" not in _text(nb)


def test_answer_records_letters_and_refuses_anything_else():
    rec = assignments.answer("q9", " b ")
    assert rec.ok and assignments._ANSWERS["q9"] == " b " and course.normalise_answer(" b ") == "B"
    bad = assignments.answer("q9", "because")
    assert not bad.ok and "q9" not in assignments._ANSWERS
    assert "not an answer" in repr(bad)
    assert "no answer yet" in repr(assignments.answer("q8", ""))


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_an_executed_assignment_opens_clean(tmp_path, lang):
    path, = assignments.write([CHAPTERS["02_qkv"]], tmp_path, lang, quiet=True)
    nb = json.loads(path.read_text(encoding="utf-8"))
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, errors[0]
    checks = ["".join(o["data"]["text/plain"]) for c in nb["cells"] if "al.exercises.check(" in "".join(c["source"])
              for o in c["outputs"] if "data" in o]
    set_language(lang)
    try:
        not_attempted = tr("not attempted")
        solution = tr("the course's solution {verdict} (this checks the solution above, not your answer)")
    finally:
        set_language("en")
    assert len(checks) == 3 and all(not_attempted in s for s in checks), checks
    assert solution.split("{")[0].strip() not in _text(nb)
    leaks = [n for n in _needles(CHAPTERS["02_qkv"], lang) if n in _text(nb)]
    assert not leaks
    if lang == "zh":
        assert "查询" in _text(nb) and "Question 1" not in _text(nb)
