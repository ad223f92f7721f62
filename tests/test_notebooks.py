"""The chapters' shape and CONTRIBUTING.md's conventions, checked without running them
(the JupyterLab test runs them and compares their outputs by strict nbval's rules, see tests/jupyterlab;
`make nbval-alt` and `make nbval` run nbval itself).

These protect what a teacher relies on: every chapter is stored executed top to bottom
(nbval compares nothing in a cell stored without output), ends with self-test exercises
whose stubs report "not attempted" and link to their solutions, which live in a notebook of
their own (solutions/NN_x.ipynb, executed and checked like a chapter) and pass under their
own name,
hides quiz answers on the site, ignores output only where a timing or memory number makes
it vary, and stays small. And what a learner relies on wherever the notebook is opened
(JupyterLab, Colab, Binder, JupyterHub): no markup that only the website renders, no
visible nbval comment, a first cell that installs attnlib where it is missing, explorers
stored with a still picture.

ATTNLIB_CHAPTERS=DIR checks the notebooks in DIR instead of chapters/ (e.g. converted
copies), with the same rules.
"""
from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import sys

import pytest

import attnlib as al

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOC = (ROOT / "_toc.yml").read_text()
CHAPTERS = sorted(pathlib.Path(os.environ.get("ATTNLIB_CHAPTERS", ROOT / "chapters")).glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))   # each chapter's solutions, a notebook of their own
NOTEBOOKS = CHAPTERS + SOLUTIONS   # what every notebook of the course obeys


def _nb_id(path) -> str:
    return f"{path.parent.name}/{path.stem}"
sys.path.insert(0, str(ROOT / "tools"))
import chapter_time  # noqa: E402  (tools/chapter_time.py: the measure of a chapter's length)
import setup_cell  # noqa: E402  (tools/setup_cell.py: the template of the first cell)


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _src(cell) -> str:
    return "".join(cell.get("source", ""))


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def _code(path):
    return [c for c in _cells(path) if c["cell_type"] == "code" and _src(c).strip()]


def test_chapters_are_numbered_in_order_and_all_in_the_toc():
    stems = [p.stem for p in CHAPTERS]
    assert stems[:8] == ["01_motivation", "02_qkv", "03_scaling", "04_masking", "05_multihead", "06_transformer_block",
                          "07_cost", "08_long_sequences"]
    assert [int(s[:2]) for s in stems] == list(range(1, len(stems) + 1)), f"chapters are not numbered 1..n: {stems}"
    missing = [s for s in stems if f"chapters/{s}" not in TOC]
    assert not missing, f"chapters missing from _toc.yml: {missing}"
    positions = [TOC.index(f"chapters/{s}") for s in stems]
    assert positions == sorted(positions)


# ------------------------------------------------------------------ one sitting (issue 31)

# Chapters still longer than one sitting by the measure (tools/chapter_time.py), each with
# what phase 2 of issue 31 does to it. Their test is an expected failure, strictly: once a
# chapter fits, its test passes, xfail(strict) turns that into a failure, and the chapter
# must be deleted from this list.
OVER_ONE_SITTING = {
}


def _sitting(path):
    reason = OVER_ONE_SITTING.get(path.stem)
    return pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(strict=True, reason=reason)] if reason else [])


@pytest.mark.parametrize("path", [_sitting(p) for p in CHAPTERS])
def test_chapter_fits_one_sitting(path):
    m = chapter_time.measure_path(path)
    terms = ", ".join(f"{k} {v:.0f}" for k, v in m.terms.items())
    print(f"{path.stem}: {m.minutes:.0f} min ({terms})")
    assert m.minutes <= chapter_time.LIMIT, (
        f"{path.name} takes {m.minutes:.0f} minutes by the course's measure ({terms}; tools/chapter_time.py), "
        f"more than one sitting ({chapter_time.LIMIT} min): move checks into collapsed evidence blocks "
        "(CONTRIBUTING.md), cut, or split the chapter")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_states_its_time_and_prerequisites(path):
    """Under its title a chapter says how long it takes (the measure, rounded to 5 minutes)
    and which earlier chapters it needs, as links."""
    nb = json.loads(path.read_text())
    first = _src(next(c for c in nb["cells"] if c["cell_type"] == "markdown"))
    m = re.search(r"^\*\*Time:\*\* about (\d+) minutes · \*\*Prerequisites:\*\* (.+)$", first, re.M)
    assert m, (f"{path.name}: the first cell must say, under the title, '**Time:** about N minutes · "
               "**Prerequisites:** [chapter 2](02_qkv.ipynb) (what it gives), ...' (CONTRIBUTING.md)")
    measure = chapter_time.measure(nb)
    assert int(m.group(1)) == measure.stated, (
        f"{path.name} states {m.group(1)} minutes but measures {measure.minutes:.1f} "
        f"(stated: {measure.stated}); run `python tools/chapter_time.py --write {path.relative_to(ROOT)}`, "
        "then `python tools/zh_notebooks.py`")
    number = int(path.stem[:2])
    needed = re.findall(r"\]\((\d\d)_(\w+)\.ipynb\)", m.group(2))
    assert needed or number == 1, f"{path.name}: name the earlier chapters it needs, as links"
    for nn, name in needed:
        assert int(nn) < number and (path.parent / f"{nn}_{name}.ipynb").exists(), (
            f"{path.name}: prerequisite {nn}_{name}.ipynb is not an earlier chapter")


def test_the_measure_counts_what_a_learner_reads():
    """tools/chapter_time.py on a made-up chapter: a title and 200 words, a displayed formula, two
    visible code cells printing 12 lines, an exercise and a quiz, and what starts collapsed
    (a hidden answer, an evidence block) not counted."""
    def cell(kind, src, tags=(), lines=0):
        c = {"cell_type": kind, "metadata": {"tags": list(tags)}, "source": src}
        if kind == "code":
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x\n" * lines}] if lines else []
        return c

    words = " ".join(["word"] * 200)
    nb = {"cells": [cell("markdown", f"# T\n\n{words}\n\n$$a = b$$\n\n<details>\n<summary>Answer</summary>\n\n"
                                     + " ".join(["hidden"] * 500) + "\n\n</details>"),
                    cell("code", "x = 1\nprint(x)", lines=5), cell("code", "print(x)", lines=7),
                    cell("code", "print(x)", tags=["evidence"], lines=40),
                    cell("code", 'def f():\n    raise NotImplementedError\n\nal.exercises.check("f", f)'),
                    cell("code", 'al.quiz.question("?", [("a", True, "b")])')]}
    m = chapter_time.measure(nb)
    assert (m.words, m.display_math, m.code_cells, m.printed_lines, m.exercises, m.quizzes) == (201, 1, 2, 12, 1, 1)
    want = (201 / chapter_time.WORDS_PER_MINUTE + chapter_time.DISPLAY_MATH_MINUTES + 2 * chapter_time.CODE_CELL_MINUTES
            + 12 * chapter_time.PRINTED_LINE_MINUTES + chapter_time.EXERCISE_MINUTES + chapter_time.QUIZ_MINUTES)
    assert abs(m.minutes - want) < 1e-9 and m.stated == 5 * round(want / 5)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_written_not_a_placeholder(path):
    md = "\n".join(_src(c) for c in _cells(path) if c["cell_type"] == "markdown")
    assert "placeholder" not in md.lower(), f"{path.name} still says it is a placeholder"
    assert len(_code(path)) >= 10, f"{path.name} has only {len(_code(path))} code cells"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_stored_executed_top_to_bottom(path):
    code = _code(path)
    counts = [c.get("execution_count") for c in code]
    assert all(isinstance(n, int) for n in counts), f"{path.name}: some code cells were never run"
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name}: execution counts {counts[:8]}... are not 1, 2, 3, ...: run it on a fresh kernel "
        "with `make notebooks`")
    with_output = sum(bool(c.get("outputs")) for c in code)
    assert with_output >= 0.7 * len(code), (
        f"{path.name}: only {with_output}/{len(code)} code cells have stored output; nbval compares "
        "nothing in the others")
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: a cell stored an error: {errors[0].get('ename')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_chapter_is_small_and_its_metadata_clean(path):
    assert path.stat().st_size < 1_000_000, f"{path.name} is {path.stat().st_size / 1e6:.2f} MB"
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for c in nb["cells"]:
        assert "execution" not in c.get("metadata", {}), f"{path.name}: timing metadata left in a cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_first_code_cell_is_the_setup_cell(path):
    first = _src(_code(path)[0])
    block, rest = setup_cell.split_setup(first)
    assert block is not None, (
        f"{path.name}: the first code cell does not start with the setup lines that install attnlib on "
        "Colab and JupyterHub; run `python tools/setup_cell.py` (it writes them above the chapter's imports)")
    assert block == setup_cell.setup_lines(), (
        f"{path.name}: the setup lines of the first code cell differ from tools/setup_cell.py's template "
        "(edited by hand, or _config.yml's repository url / pyproject.toml's version changed); "
        "run `python tools/setup_cell.py`")
    assert re.search(r"^import attnlib as al$", rest, re.M), (
        f"{path.name}: below the setup lines, the first cell must `import attnlib as al`")


def test_setup_lines_install_the_published_repository_at_the_courses_version():
    """Once the repository is set (tools/set_repository.py), the setup lines install the
    course's version from it; before, there is nothing to install from, so they hold no
    install command and stop with a message where attnlib is missing."""
    import tomllib

    import yaml

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    after, before = setup_cell.variants()
    assert f'"attnlib[notebook,torch] @ git+{url.removesuffix(".git")}@v{version}"' in after, (
        f"the published setup lines do not install {url} at the tag v{version}:\n{after}")
    assert "pip" not in before and "set_repository.py" in before
    lines = setup_cell.setup_lines()
    assert lines == (after if setup_cell.published() else before)
    for variant in (after, before):
        compile(variant, "setup", "exec")  # plain Python: runs in any kernel and parses with ast


def test_unpublished_setup_lines_stop_with_a_message_where_attnlib_is_missing(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match="set_repository.py"):
        exec(compile(setup_cell.variants()[1], "setup", "exec"), {})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_imports_live_in_the_first_code_cell(path):
    code = _code(path)
    for c in code[1:]:
        bad = re.findall(r"^(?:import|from) \S+", _src(c), re.M)
        assert not bad, (f"{path.name}: import outside the first cell: {bad} in\n{_src(c)[:200]}\n"
                         "Move it to the first code cell, below the setup lines.")


# MyST-only markup: rendered on the website, shown raw by Colab and plain JupyterLab
MYST_ONLY = [
    (re.compile(r"^\s*(```+|~~~+)\s*\{dropdown\}.*$", re.M),
     "an HTML <details> block: '<details>', '<summary>Answer</summary>', a blank line, the answer, a blank "
     "line, '</details>'"),
    (re.compile(r"^\s*(```+|~~~+)\s*\{prf:\w+\}.*$", re.M),
     "for a proof, a <details> block with '<summary>Proof</summary>'; for a theorem, a block quote that starts "
     "'> **Theorem.**'"),
    (re.compile(r"^\s*(```+|~~~+)\s*\{(?:note|warning|tip|important|caution|attention|hint|seealso|admonition)\}.*$", re.M),
     "a block quote that starts with a bold word: '> **Note.** ...'"),
    (re.compile(r"^\s*(```+|~~~+)\s*\{[\w:-]+\}.*$", re.M),
     "CommonMark (a fenced code block without braces, a block quote, a table or an HTML <details> block)"),
    (re.compile(r"\{cite(?::\w+)?\}`[^`]*`"),
     "a link with the authors and year as text: '[Vaswani et al., 2017](../appendix/bibliography.md#vaswani2017attention)'"),
    (re.compile(r"\{[a-z][\w:-]*\}`[^`]*`"),
     "plain text or a Markdown link (a MyST role such as {prf:ref}, {numref}, {eq}, {doc} shows raw)"),
    (re.compile(r"^\s*:::+.*$", re.M),
     "an HTML <details> block or a block quote ('> **Note.** ...'); ':::' colon fences show raw"),
    (re.compile(r"^\([\w-]+\)=\s*$", re.M),
     "nothing: a MyST target '(label)=' shows raw; link to the heading instead"),
]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_markdown_renders_outside_the_book(path):
    problems = []
    for c in _cells(path):
        if c["cell_type"] != "markdown":
            continue
        src = _src(c)
        for pattern, instead in MYST_ONLY:
            m = pattern.search(src)
            if m:
                problems.append(f"  {m.group(0).strip()[:70]!r}: replace it with {instead}")
                break
    assert not problems, (f"{path.name}: {len(problems)} markdown cells use markup that only the website renders "
                          "(Colab and JupyterLab show it raw; see CONTRIBUTING.md):\n" + "\n".join(problems[:12]))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_details_blocks_parse_their_markdown(path):
    for c in _cells(path):
        src = _src(c)
        if c["cell_type"] != "markdown" or "<details" not in src:
            continue
        assert src.count("<details") == src.count("</details>"), f"{path.name}: unclosed <details> in\n{src[:300]}"
        for m in re.finditer(r"<summary>.*?</summary>[ \t]*\n(?![ \t]*\n)", src, re.S):
            raise AssertionError(f"{path.name}: leave a blank line after {m.group(0).strip()!r}, or the answer's "
                                 "Markdown and math stay raw inside <details>")
        for m in re.finditer(r"<summary>(.*?)</summary>", src, re.S):
            assert "$" not in m.group(1), (
                f"{path.name}: math in {m.group(0)!r} stays raw on the site (a <summary> is HTML, not "
                "Markdown): move the formula into the body of the <details> block")
        for m in re.finditer(r"[^\n]\n[ \t]*</details>", src):
            raise AssertionError(f"{path.name}: leave a blank line before '</details>' (after "
                                 f"{src[max(0, m.start() - 40):m.start() + 1].strip()!r})")


BIB_KEYS = set(re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "references.bib").read_text(), re.M))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_citation_links_name_a_bibtex_key(path):
    for c in _cells(path):
        if c["cell_type"] != "markdown":
            continue
        for target in re.findall(r"\]\(([^)\s]*bibliography(?:\.md|\.html)?[^)\s]*)\)", _src(c)):
            m = re.fullmatch(r"\.\./appendix/bibliography\.md#([\w-]+)", target)
            assert m, (f"{path.name}: citation link {target!r} must be '../appendix/bibliography.md#<key>' "
                       "with a BibTeX key of references.bib")
            assert m.group(1) in BIB_KEYS, (
                f"{path.name}: {target!r} names no entry of references.bib; the keys are: {sorted(BIB_KEYS)} "
                "(add the paper to references.bib if it is missing)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_explorers_are_stored_with_a_still_picture(path):
    from attnlib.ui.widgets import RUN_HINT, WIDGET_VIEW

    for c in _code(path):
        outs = c.get("outputs", [])
        for k, out in enumerate(outs):
            if WIDGET_VIEW not in out.get("data", {}) or not ("al.widgets.explorer(" in _src(c)
                                                              or "sentence_explorer(" in _src(c)):
                continue
            before = outs[k - 1].get("data", {}) if k else {}
            assert "attnlib-explorer-still" in "".join(before.get("text/html", "")) and \
                RUN_HINT in "".join(before.get("text/plain", "")), (
                f"{path.name}: the explorer in the cell starting {_src(c).strip()[:50]!r} is stored without its "
                "still picture (shown wherever the live control cannot render); re-run the chapter with "
                "tools/run_notebooks.py")


# ------------------------------------------------------------------------- code cells

TIMING_OR_MEMORY = re.compile(
    r"perf_counter|process_time|thread_time|timeit|time\(|best_times?\b|tracemalloc|peak_memory|"
    r"max_memory_allocated|memory_allocated|saved_tensors_hooks|benchmark|elapsed|seconds|timing")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_no_visible_nbval_comment(path):
    for c in _code(path):
        found = re.findall(r"#\s*NBVAL_\w+", _src(c))
        if found:
            tag = found[0].split("NBVAL_")[1].lower().replace("_", "-")
            raise AssertionError(
                f"{path.name}: the cell starting {_src(c).strip().splitlines()[0][:60]!r} shows the comment "
                f"{found[0]!r} to the learner. Delete that line and add the tag 'nbval-{tag}' to the cell's "
                "metadata \"tags\" list (JupyterLab: property inspector, Cell Tags).")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_output_is_ignored_only_for_timing_or_memory(path):
    for c in _code(path):
        tags = c.get("metadata", {}).get("tags", [])
        src = _src(c)
        for tag in ("nbval-skip", "nbval-raises-exception"):
            assert tag not in tags, (
                f"{path.name}: the cell starting {src.strip()[:60]!r} has the tag {tag!r}; chapters run every "
                "cell and store no error: remove the tag and make the cell run (or catch the exception "
                "and print what it says)")
        if "nbval-ignore-output" in tags:
            assert TIMING_OR_MEMORY.search(src), (
                f"{path.name}: the tag 'nbval-ignore-output' is on a cell that neither times anything nor "
                f"measures memory, so nbval would stop checking its output:\n{src[:300]}\n"
                "Remove the tag and print its numbers rounded so a fresh run matches, or move the timing "
                "into this cell (attnlib.instruments.complexity.best_times, tracemalloc).")


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _python(src: str) -> str:
    """A cell's source as plain Python (IPython magics and shell escapes turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(src)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_no_assert_compares_literals(path):
    for c in _code(path):
        for node in ast.walk(ast.parse(_python(_src(c)))):
            if not isinstance(node, ast.Assert):
                continue
            test = node.test
            parts = [test.left, *test.comparators] if isinstance(test, ast.Compare) else [test]
            assert not all(_literal(p) for p in parts), (
                f"{path.name}: `{ast.unparse(node)[:120]}` compares literals only, so it can never fail. "
                "Compare a value the cell measured with the claim (e.g. `assert ratio > 2`, with ratio "
                "computed above), or delete the assert.")


# -------------------------------------------------------------------------- exercises

@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_ends_with_self_test_exercises(path):
    cells = _cells(path)
    heads = [(i, _src(c)) for i, c in enumerate(cells) if c["cell_type"] == "markdown"
             and re.search(r"^## ", _src(c), re.M)]
    h2 = [(i, m) for i, s in heads for m in re.findall(r"^## (.+)$", s, re.M)]
    assert h2 and h2[-1][1].strip() == "Self-test exercises", f"{path.name}: last section is {h2[-1][1]!r}"
    start = h2[-1][0]
    tail = cells[start:]
    checks = [c for c in tail if c["cell_type"] == "code" and "al.exercises.check(" in _src(c)]
    quizzes = [c for c in tail if c["cell_type"] == "code" and "al.quiz.question(" in _src(c)]
    assert checks, f"{path.name}: no code exercise in the self-test section"
    assert len(quizzes) >= 2, f"{path.name}: fewer than two concept questions"


def _outputs_text(cell) -> str:
    """Everything a cell's outputs say (text/plain, streams, and text/html without its tags)."""
    parts = [_text(cell)]
    for out in cell.get("outputs", []):
        parts.append(re.sub(r"<[^>]+>", " ", "".join(out.get("data", {}).get("text/html", ""))))
    return "\n".join(parts)


def _defines(src: str, name: str) -> bool:
    return bool(re.search(rf"^\s*(?:def {name}\s*\(|{name}\s*=[^=])", src, re.M))


SOLUTION_LINK = re.compile(r"\]\(\.\./solutions/(\d\d_\w+)\.ipynb\)")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_exercise_has_a_stub_and_a_link_to_its_solution(path):
    """A learner's notebook holds no solution: each exercise is a stub under its own name,
    whose stored verdict says "not attempted", followed by a paragraph that links to the
    chapter's solutions notebook; no cell defines or checks a solution."""
    cells = _cells(path)
    names = set()
    for i, c in enumerate(cells):
        src = _src(c)
        if c["cell_type"] != "code":
            continue
        assert "check_solution(" not in src and not re.search(r"\b\w+_solution\b", src), (
            f"{path.name}, {_where(path, i)}: a chapter holds no solution (not even a hidden one, which Jupyter "
            f"and Colab show a learner scrolling past): move it to solutions/{path.name} (CONTRIBUTING.md)")
        for name, arg in re.findall(r'al\.exercises\.check\(\s*["\'](\w+)["\']\s*,\s*([\w.]+)', src):
            assert "NotImplementedError" in src, (
                f"{path.name}: a cell calls `al.exercises.check({name!r}, {arg})` but is not a stub (no "
                "`raise NotImplementedError`); the course's solutions are in solutions/, checked with check_solution")
            names.add(name)
            assert name in al.exercises.EXERCISES, f"{path.name}: unknown exercise {name!r}"
            assert arg == name and _defines(src, name), (
                f"{path.name}: the stub of {name!r} must define `def {name}(...)` and call "
                f"`al.exercises.check({name!r}, {name})`, under the exercise's own name; it checks {arg!r}")
            said = _outputs_text(c)
            assert "not attempted" in said and "passed" not in said, (
                f"{path.name}: the stored verdict of the stub {name!r} must say 'not attempted' (and not "
                f"'passed'); it says {said.strip()[:160]!r}. Re-run the chapter with tools/run_notebooks.py")
            after = cells[i + 1] if i + 1 < len(cells) else {"cell_type": "none", "source": ""}
            link = SOLUTION_LINK.search(_src(after)) if after["cell_type"] == "markdown" else None
            assert link and link.group(1) == path.stem, (
                f"{path.name}: the cell after the stub of {name!r} must be a paragraph linking to its solution, "
                f"[a page of its own](../solutions/{path.stem}.ipynb)")
    assert names, f"{path.name}: no exercise stubs found"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_solutions_notebook_checks_every_exercise_of_its_chapter(path):
    """solutions/NN_x.ipynb: the setup cell, then for each exercise of the chapter a
    heading and the solution under its own name (`name_solution`, never the learner's
    name), checked by check_solution, whose stored verdict says it is the course's solution;
    stored executed top to bottom like a chapter, and on the site."""
    sol = ROOT / "solutions" / path.name
    assert sol.exists(), f"{path.name} has no solutions notebook solutions/{path.name}"
    assert f"solutions/{path.stem}" in TOC, f"solutions/{path.stem} is not in _toc.yml"
    code = _code(sol)
    counts = [c.get("execution_count") for c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"solutions/{path.name}: execution counts {counts} are not 1, 2, 3, ...: run tools/run_notebooks.py on it")
    silent = [i for i, c in enumerate(code[1:], 1) if not c.get("outputs")]
    assert not silent, f"solutions/{path.name}: code cells {silent} store no output; nbval would compare nothing there"
    wanted = [n for n, ex in al.exercises.EXERCISES.items() if ex.chapter == path.stem]
    found = []
    for c in code:
        src = _src(c)
        for name in re.findall(r'al\.exercises\.check_solution\(\s*["\'](\w+)["\']\s*,\s*(?:\w+)_solution\s*\)', src):
            found.append(name)
            assert _defines(src, f"{name}_solution"), f"solutions/{path.name}: {name}: no `def {name}_solution(...)`"
            clobbered = [n for n in al.exercises.EXERCISES if _defines(src, n)]
            assert not clobbered, (f"solutions/{path.name}: the solution of {name!r} (re)defines {clobbered}, a "
                                   f"learner's function; name it {clobbered[0]}_solution")
            verdict = _outputs_text(c)
            assert re.search(rf"✓ {name}: the course's solution passed", verdict), (
                f"solutions/{path.name}: the stored verdict of {name!r} must read \"✓ {name}: the course's solution "
                f"passed ...\"; it says {verdict.strip()[:160]!r}. Run tools/run_notebooks.py on it")
        assert not re.search(r"al\.exercises\.check\(", src), (
            f"solutions/{path.name}: a solution is checked with check_solution, never check (whose verdict "
            "would pose as a learner's pass)")
    assert sorted(found) == sorted(wanted), (
        f"solutions/{path.name} checks {sorted(found)}; the chapter's exercises are {sorted(wanted)}")


def test_every_solutions_notebook_belongs_to_a_chapter():
    assert [p.name for p in SOLUTIONS] == [p.name for p in CHAPTERS]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_stub_cells_show_the_registered_stub(path):
    """What the learner reads in the notebook is the stub the checker, the grader's student
    notebooks and the misconceptions page know: ``Exercise.stub`` followed by the check line."""
    for c in _code(path):
        src = _src(c)
        m = re.search(r'al\.exercises\.check\(\s*["\'](\w+)["\']\s*,\s*(\w+)\s*\)', src)
        if not m or "check_solution" in src or m.group(1) not in al.exercises.EXERCISES:
            continue
        want = al.exercises.EXERCISES[m.group(1)].stub.strip()
        assert src[:m.start()].strip() == want, (
            f"{path.name}: the stub cell of {m.group(1)!r} differs from the registered stub in "
            f"attnlib/exercises/ (change the stub there, then copy it here, followed by the check line)")


def test_every_registered_exercise_is_used_in_its_chapter():
    used = {}
    for path in CHAPTERS:
        for c in _code(path):
            for name in re.findall(r'al\.exercises\.check(?:_solution)?\(\s*"(\w+)"', _src(c)):
                used.setdefault(name, path.stem)
    for name, ex in al.exercises.EXERCISES.items():
        assert name in used, f"exercise {name!r} is registered but no chapter asks for it"
        assert used[name] == ex.chapter, f"exercise {name!r} says chapter {ex.chapter} but is used in {used[name]}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_quiz_is_followed_by_its_hidden_answer(path):
    cells = _cells(path)
    for i, c in enumerate(cells):
        if c["cell_type"] == "code" and "al.quiz.question(" in _src(c):
            nxt = cells[i + 1] if i + 1 < len(cells) else None
            assert nxt is not None and nxt["cell_type"] == "markdown" and "<details>" in _src(nxt), (
                f"{path.name}: the quiz {_src(c)[:120]!r}... has no answer: put a markdown cell with a "
                "<details><summary>Answer</summary> block right after it")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_quiz_answers_are_not_visible_in_the_source(path):
    """A quiz cell's source holds the key (``True`` beside the right choice): it is removed
    from the site (tag remove-input) and collapsed in JupyterLab and Colab
    (``jupyter.source_hidden``; tools/run_notebooks.py sets both)."""
    for i, c in enumerate(_cells(path)):
        if c["cell_type"] != "code" or "al.quiz.question(" not in _src(c):
            continue
        meta = c.get("metadata", {})
        assert "remove-input" in meta.get("tags", []), (
            f"{path.name}, {_where(path, i)}: a quiz cell shows its source (and answers) on the site: "
            "add the tag 'remove-input' (tools/run_notebooks.py adds it)")
        assert meta.get("jupyter", {}).get("source_hidden"), (
            f"{path.name}, {_where(path, i)}: a quiz cell shows its source, with the answer key, in "
            'JupyterLab and Colab: set "jupyter": {"source_hidden": true} in its metadata (re-run the '
            "chapter with tools/run_notebooks.py, or `tools/run_notebooks.py --clean-only`)")


def _quizzes() -> list[tuple[str, int, list[tuple[str, bool]]]]:
    """Every quiz of every chapter: (chapter, cell index, [(choice text, correct), ...]),
    read from the ``al.quiz.question(prompt, choices)`` calls with ast."""
    found = []
    for path in CHAPTERS:
        for i, c in enumerate(_cells(path)):
            if c["cell_type"] != "code" or "al.quiz.question(" not in _src(c):
                continue
            for node in ast.walk(ast.parse(_python(_src(c)))):
                if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "al.quiz.question"):
                    continue
                arg = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "choices"), None)
                assert isinstance(arg, (ast.List, ast.Tuple)), (
                    f"{path.name}, {_where(path, i)}: write the quiz's choices as a literal list of "
                    "(text, correct, feedback) tuples, so that tests can read them")
                choices = []
                for e in arg.elts:
                    assert isinstance(e, ast.Tuple) and len(e.elts) >= 2 and _literal(e.elts[1]), (
                        f"{path.name}, {_where(path, i)}: a choice is not a (text, True/False, feedback) "
                        f"tuple: {ast.unparse(e)[:80]}")
                    text = e.elts[0].value if isinstance(e.elts[0], ast.Constant) else ast.unparse(e.elts[0])
                    choices.append((str(text), bool(ast.literal_eval(e.elts[1]))))
                found.append((path.stem, i, choices))
    return found


def quiz_balance(quizzes) -> dict:
    """How guessable the quizzes are as a set: how often each position (A, B, ...) holds a
    correct choice, what share of the correct answers each holds, the chance under a fair
    placement (each choice equally likely to be the right one) that a position is never
    correct, and the share of quizzes whose correct choice is the longest (ties shared)."""
    letters = "ABCDEFGH"
    right = {ch: 0 for ch in letters}
    offered = {ch: [] for ch in letters}
    longest = 0.0
    for _, _, choices in quizzes:
        n = len(choices)
        for pos, (_, ok) in enumerate(choices):
            offered[letters[pos]].append(n)
            right[letters[pos]] += ok
        lengths = [len(t) for t, _ in choices]
        top = [pos for pos, ln in enumerate(lengths) if ln == max(lengths)]
        longest += sum(choices[pos][1] for pos in top) / len(top)
    total = sum(right.values())
    never = {}
    for ch in letters:
        p = 1.0
        for n in offered[ch]:
            p *= 1 - 1 / n
        never[ch] = p
    used = [ch for ch in letters if offered[ch]]
    return {"quizzes": len(quizzes), "right": {ch: right[ch] for ch in used},
            "share": {ch: right[ch] / total for ch in used} if total else {},
            "p_never": {ch: never[ch] for ch in used}, "longest_share": longest / len(quizzes) if quizzes else 0.0}


def test_quiz_answers_cannot_be_guessed_from_position_or_length():
    """Over all chapters' quizzes, neither where the correct choice stands nor how long it
    is gives it away.

    Thresholds, and why a fair author meets them: with the right answer placed at random
    among 3 or 4 choices, each position expects 25-33% of the right answers; over ~30
    quizzes the standard deviation of a position's share is about 8 points, so a share
    above 40% is two standard deviations out (and a habit, like "A first"). A position
    that the quizzes offer often enough that a fair placement would leave it never correct
    with a chance below 5% (e.g. D offered in 11 four-choice quizzes: 0.75^11 = 4%) must be
    correct at least once. And a learner who always picks the longest choice should score
    near chance (25-33%), not better than 40%: distractors as long and as specific as the
    answer (ties count as a shared guess)."""
    quizzes = _quizzes()
    assert len(quizzes) >= 10, f"only {len(quizzes)} quizzes found"
    b = quiz_balance(quizzes)
    report = (f"{b['quizzes']} quizzes; correct answers by position: "
              + ", ".join(f"{ch} {n} ({b['share'][ch]:.0%})" for ch, n in b["right"].items())
              + f"; the longest choice is the correct one in {b['longest_share']:.0%} of them")
    problems = []
    for ch, share in b["share"].items():
        if share > 0.40:
            problems.append(f"position {ch} holds {share:.0%} of the correct answers (at most 40%)")
        if b["right"][ch] == 0 and b["p_never"][ch] < 0.05:
            problems.append(f"position {ch} is never correct (a fair placement would make it correct at "
                            f"least once with probability {1 - b['p_never'][ch]:.1%})")
    if b["longest_share"] > 0.40:
        problems.append(f"the longest choice is the correct one in {b['longest_share']:.0%} of the quizzes "
                        "(at most 40%)")
    assert not problems, (report + ":\n  " + "\n  ".join(problems) + "\nMove the correct choices to other "
                          "positions and write distractors as long and as plausible as the answer.")
    print(report)


def test_quiz_balance_sees_a_skewed_set():
    """The balance test can fail: always-A, never-D, longest-is-right quizzes are flagged."""
    skewed = [("x", 0, [("a long and careful right answer", True), ("no", False), ("nope", False),
                         ("nah", False)])] * 12
    b = quiz_balance(skewed)
    assert b["share"]["A"] == 1 and b["right"]["D"] == 0 and b["p_never"]["D"] < 0.05 and b["longest_share"] == 1
    fair = [("x", 0, [(f"choice {j}", j == k % 4) for j in range(4)]) for k in range(12)]
    b = quiz_balance(fair)
    assert max(b["share"].values()) == 0.25 and b["longest_share"] == 0.25


# ------------------------------------------------------------------- rounding noise

# A number printed in e-notation at the scale of float64 rounding error or of a finite-
# difference residual (1e-8 ... 9.9e-19): its digits change with the CPU's kernels and the
# thread count, so strict nbval fails on another machine (issue 19). Printed after a bound
# word ("< 1e-12", "below 1e-9", "at most", "tol", "eps"), it is a bound, not a measurement.
NOISE = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?[eE]-0*(?:[89]|1\d)(?!\w|\.\d)")
BOUND = re.compile(r"(?:<=?|≤|≲|\bbelow|\bunder|\bat most|\bless than|\bsmaller than|\bwithin|"
                   r"tol\w*|\batol|\brtol|\beps\w*)\W{0,3}$", re.I)
# Small numbers that are values, not rounding noise: (chapter, the text before the number
# on its line, as a regex) -> why its digits are the same on every machine. Keep this short;
# `make test` runs strict nbval in a second numerical environment, which proves each entry.
EXACT_SMALL_VALUES = {
    ("01_motivation", r"\|dh_t/dx_1\| = $"):
        "a product of t chained tanh derivatives (vanishing, not cancelling): relative error ~t ulp",
}


def _where(path, index: int) -> str:
    """A cell as the notebook and nbval number it: "cell 31 (nbval's Cell 16)"."""
    cells = _cells(path)
    code = sum(1 for c in cells[:index] if c["cell_type"] == "code")
    return f"cell {index} (nbval's Cell {code})"


def _stored_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        t = out.get("text", "") if out.get("output_type") == "stream" else out.get("data", {}).get("text/plain", "")
        parts.append("".join(t) if isinstance(t, list) else t)
    return "\n".join(parts)


def rounding_noise(stem: str, text: str) -> list[str]:
    """The lines of ``text`` that print a rounding-noise number (see NOISE)."""
    found = []
    for line in text.splitlines():
        for m in NOISE.finditer(line):
            before = line[:m.start()]
            if BOUND.search(before[-16:]):
                continue
            if any(s == stem and re.search(rx, before) for s, rx in EXACT_SMALL_VALUES):
                continue
            found.append(line.strip()[:120])
            break
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_no_output_prints_rounding_noise(path):
    problems = []
    for i, c in enumerate(_cells(path)):
        if c["cell_type"] != "code" or "nbval-ignore-output" in c.get("metadata", {}).get("tags", []):
            continue
        for line in rounding_noise(path.stem, _stored_text(c)):
            problems.append(f"  {_where(path, i)}: {line!r}")
    assert not problems, (
        f"{path.name}: {len(problems)} stored outputs print a number at rounding-error scale (1e-8 to "
        "1e-19); its digits change with the CPU's kernels and thread count, and strict nbval then fails on "
        "another machine:\n" + "\n".join(problems) + "\nPrint a bound instead and assert it "
        "(`print(\"largest difference below 1e-12\")` after `assert diff < 1e-12`).")


def test_rounding_noise_check_tells_a_bound_from_a_measurement():
    assert rounding_noise("x", "|finite difference - autograd| = 1.4e-10")
    assert rounding_noise("x", "Attn(x + y) - Attn(x) - Attn(y) = 5.6e-16; the rest")
    assert rounding_noise("x", "vs nn.MultiheadAttention: outputs 8.9e-16, per-head 1.1e-16")
    assert rounding_noise("x", "largest |formula - autograd|: 3e-17")
    assert rounding_noise("x", "the residual is 2.2E-16.")
    assert not rounding_noise("x", "largest difference < 1e-12: True")
    assert not rounding_noise("x", "max |soft - hard| = < 1e-10 (tol 1e-9), below 1e-8")
    assert not rounding_noise("x", "exact (< 1e-12); atol=1e-10, eps = 1e-12")
    assert not rounding_noise("x", "|dh/dx| = 9.598e-04, e^x = 4.9e-324, 1.5e-47, 2.3e-05")
    assert not rounding_noise("x", "version 1.2e-8x, id12e-9")
    assert not rounding_noise("01_motivation", "t =  50   |dh_t/dx_1| = 6.457e-12")


def test_setup_cell_tool_keeps_the_chapters_own_code_and_is_idempotent(tmp_path):
    import nbformat

    own = "import numpy as np\nimport attnlib as al\n\nrng = np.random.default_rng(0)"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T"), nbformat.v4.new_code_cell(own),
                nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "t.ipynb"
    nbformat.write(nb, path)
    assert setup_cell.main([str(path), "--check"]) == 1, "--check must fail on a chapter without setup lines"
    assert setup_cell.main([str(path)]) == 0
    first = nbformat.read(path, as_version=4).cells[1].source
    assert first == setup_cell.setup_lines() + "\n\n" + own
    before = path.read_text()
    assert setup_cell.main([str(path), "--check"]) == 0 and setup_cell.main([str(path)]) == 0
    assert path.read_text() == before, "running the tool twice changed the notebook"
    # stale lines (e.g. an older version) are replaced, the chapter's code is kept
    stale = setup_cell.with_setup(own, req="attnlib @ git+https://example.org/old@v0.0.1")
    assert setup_cell.split_setup(stale)[1] == own
    assert setup_cell.with_setup(stale) == first


# ------------------------------------------------------------------ evidence blocks (issue 31)

# What a check line is: a line that reports how a claim was checked rather than what was
# found: a True/False verdict, an asserted bound ("below 1e-12"), a per-seed line or a range
# over seeds ("0.96 to 1.04"), or progress ("seed 3 done", "tracing ... ..."). A chapter
# shows its findings; its check lines belong in collapsed evidence blocks (CONTRIBUTING.md).
CHECK_VERDICT = re.compile(r"(?::|\?|\bis|\bare|\bequal|\bexact\w*|\bsame)\s*(?:True|False)\b"
                           r"|\b(?:True|False)\s*[.;,)]?\s*$")
CHECK_BOUND = re.compile(r"(?:<=?|≤|\bbelow|\bunder|\bwithin|\bat most|\bless than)\s*\(?\s*\d+(?:\.\d+)?e[-−]\d+", re.I)
CHECK_PER_SEED = re.compile(r"\bseeds? \d+\b", re.I)
CHECK_RANGE = re.compile(r"(?<![\w.])[-−]?\d+(?:\.\d+)?(?:e[-−]?\d+)?%?(?:\s+to\s+|\s*–\s*)[-−]?\d")
CHECK_PROGRESS = re.compile(r"(?:\.\.\.|…)\s*$|\bdone\b\s*$|^\s*(?:step|epoch)\s+\d+\b", re.I)
CHECK_LINE_SHARE = 0.10   # at most this share of the lines a chapter prints outside evidence blocks


def check_line_kinds(line: str) -> list[str]:
    """Which kinds of check line ``line`` is (empty: a finding). A range is "a to b" or
    "a–b" between numbers, but not a change "from a to b"."""
    kinds = [kind for kind, rx in (("verdict", CHECK_VERDICT), ("bound", CHECK_BOUND), ("seed", CHECK_PER_SEED),
                                   ("progress", CHECK_PROGRESS)) if rx.search(line)]
    if any(not re.search(r"\bfrom\b[^,;:]*$", line[:m.start()]) for m in CHECK_RANGE.finditer(line)):
        kinds.append("range")
    return kinds


def shown_lines(path) -> list[tuple[int, str]]:
    """(cell index, line) of every line a chapter prints outside evidence blocks, exercise
    stubs and quizzes: what a learner reads as the chapter's results."""
    found = []
    for i, c in enumerate(_cells(path)):
        if chapter_time.kind(c) != "code":
            continue
        for out in c.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data") and not (
                    out.get("data", {}).keys() & {"image/png", "text/html", WIDGET_MIME}):
                text = "".join(out.get("data", {}).get("text/plain", ""))
            else:
                continue
            found += [(i, line) for line in text.splitlines() if line.strip()]
    return found


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# Chapters whose checks are still in plain view, until phase 2 of issue 31 moves them into
# evidence blocks (strict: a converted chapter that passes must be deleted from here).
CHECKS_IN_VIEW = {stem: "phase 2 of issue 31: per-seed tables, bounds and verdicts into evidence blocks" for stem in (
)}


def _evidence_param(path):
    reason = CHECKS_IN_VIEW.get(path.stem)
    return pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(strict=True, reason=reason)] if reason else [])


@pytest.mark.parametrize("path", [_evidence_param(p) for p in CHAPTERS])
def test_checks_sit_in_evidence_blocks(path):
    """At most ~10% of what a chapter prints in view reports how a claim was checked."""
    lines = shown_lines(path)
    checks = [(i, line) for i, line in lines if check_line_kinds(line)]
    allowed = max(1, int(CHECK_LINE_SHARE * len(lines)))
    print(f"{path.stem}: {len(checks)} of {len(lines)} printed lines outside evidence blocks are check lines "
          f"({len(checks) / max(len(lines), 1):.0%})")
    assert len(checks) <= allowed, (
        f"{path.name}: {len(checks)} of the {len(lines)} lines printed outside evidence blocks are check lines "
        f"(at most {allowed}): move per-seed tables, bounds, True/False verdicts and progress into a collapsed "
        "`with al.evidence(...)` cell under the finding (CONTRIBUTING.md, 'Evidence blocks'):\n"
        + "\n".join(f"  {_where(path, i)}: {line.strip()[:100]}" for i, line in checks[:12]))


def test_check_lines_are_told_from_findings():
    for line in ["largest |formula - autograd| below 1e-14: True", "5 seeds: 0.964 to 1.039", "seed 3 done",
                 "tracing flash_attention's peak memory at n = 256 ...", "difference < 1e-12: True",
                 "weights symmetric, one matrix? False", "seed 0: 500 rows", "repeat loss 0.3–1.3 nats",
                 "largest |attnlib - softmax(scores / √d_head)|: < 1e-10"]:
        assert check_line_kinds(line), line
    for line in ["the mean grows from 3.6 to 5.1, the median falls from 2.8 to 0.0007",
                 "Var(q·k) / d_k, mean of 5 seeds: 1.00 at d_k = 1 and 0.98 at d_k = 1024",
                 "[[ 0.188 -0.003 -0.014 -0.171]", "from d_k = 16 to 1024, the mean doubles"]:
        assert not check_line_kinds(line), line


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_nb_id)
def test_evidence_blocks_are_collapsed_everywhere(path):
    """An evidence cell (``with al.evidence(...)``, tag ``evidence``) starts collapsed on the
    site (hide-input, and its output is one closed <details>), in JupyterLab
    (jupyter.source_hidden, the same closed <details>) and on Colab (cellView form, the same)."""
    for i, c in enumerate(_cells(path)):
        src, meta = _src(c), c.get("metadata", {})
        tagged = "evidence" in meta.get("tags", [])
        if c["cell_type"] != "code" or not (tagged or "al.evidence(" in src):
            continue
        where = f"{_nb_id(path)}, {_where(path, i)}"
        assert tagged and "al.evidence(" in src, (
            f"{where}: an evidence cell has the tag 'evidence' and runs its checks in `with al.evidence(...)`; "
            "tools/run_notebooks.py (or --clean-only) sets the tags and metadata")
        assert re.match(r"(?:\s*#[^\n]*\n)*\s*with al\.evidence\(", src), (
            f"{where}: an evidence cell is one `with al.evidence(...):` block (comments above it are fine), so "
            "that everything it prints is inside the collapsed element")
        assert "hide-input" in meta.get("tags", []), f"{where}: not collapsed on the site (tag hide-input)"
        assert meta.get("jupyter", {}).get("source_hidden") is True, f"{where}: not collapsed in JupyterLab"
        assert meta.get("cellView") == "form", f"{where}: not collapsed on Colab (cellView: form)"
        outs = c.get("outputs", [])
        assert outs, f"{where}: stores no output; strict nbval would compare nothing"
        for out in outs:
            page = "".join(out.get("data", {}).get("text/html", ""))
            assert out.get("output_type") == "display_data" and page.startswith('<details class="attnlib-evidence">'), (
                f"{where}: prints outside its evidence element ({out.get('output_type')}); print inside the `with` block")
            assert "<details open" not in page and "open>" not in page.split("<summary>")[0], f"{where}: stored open"
            assert "".join(out["data"].get("text/plain", "")).strip(), f"{where}: no plain text for nbval to compare"


# ------------------------------------------------------------------ figures (issue 31)

_DATA_PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


def stored_pngs(path) -> list[tuple[str, bytes]]:
    """Every picture a notebook stores: image/png outputs, PNGs inside HTML outputs (a
    figure shown with its alt text, an explorer's still) and the explorers' views in the
    widget state."""
    import base64

    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for i, c in enumerate(nb["cells"]):
        for out in c.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data:
                found.append((f"cell {i}", base64.b64decode("".join(data["image/png"]))))
            for m in _DATA_PNG.finditer("".join(data.get("text/html", ""))):
                found.append((f"cell {i} (HTML)", base64.b64decode(m.group(1))))
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    for key, model in state.get("state", {}).items():
        for buf in model.get("buffers", []):
            if buf.get("encoding") == "base64" and buf.get("path") == ["value"] and model["model_name"] == "ImageModel":
                found.append((f"explorer view {key[:8]}", base64.b64decode(buf["data"])))
        for value in model.get("state", {}).values():
            if isinstance(value, str):
                found += [(f"explorer view {key[:8]}", base64.b64decode(m.group(1))) for m in _DATA_PNG.finditer(value)]
    return found


ZH_NOTEBOOKS = sorted((ROOT / "zh" / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS + ZH_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_stored_figures_are_drawn_at_the_courses_resolution(path):
    """Every stored figure and explorer view is drawn at attnlib.ui.style.FIGURE_DPI (at least
    110 dpi; the PNG's pHYs chunk says so) and stored as a palette PNG
    (attnlib.ui.style.figure_png), so that it reads on a wide screen and the notebook stays
    small. The chapters' setup cells call `al.style.use(...)`, the one place that sets it."""
    import io

    from PIL import Image

    from attnlib.ui.style import FIGURE_DPI

    assert FIGURE_DPI >= 110
    wrong = []
    for where, png in stored_pngs(path):
        image = Image.open(io.BytesIO(png))
        dpi = image.info.get("dpi", (0, 0))[0]
        if dpi < FIGURE_DPI - 0.5 or image.mode != "P" or image.size[0] < 200:
            wrong.append(f"{where}: {image.size[0]}x{image.size[1]} px, {dpi:.0f} dpi, mode {image.mode}")
    assert not wrong, (f"{path.relative_to(ROOT)}: figures not drawn at {FIGURE_DPI} dpi as palette PNGs (call "
                       "`al.style.use(...)` in the setup cell and re-run the notebook):\n  " + "\n  ".join(wrong[:8]))
    if path.parent.name == "chapters":
        first = _src(_code(path)[0])
        assert "al.style.use(" in first and "figure.dpi" not in first, (
            f"{path.name}: the setup cell sets the figures' look with al.style.use(...), and no dpi of its own")


def test_the_chapters_store_figures_to_check():
    assert sum(len(stored_pngs(p)) for p in CHAPTERS) >= 30


def _chapter_text(path) -> str:
    """A chapter's sources and every stored text output, joined."""
    parts = []
    for c in _cells(path):
        parts.append("".join(c["source"]))
        for o in c.get("outputs", []):
            parts.append("".join(o.get("text", "")))
            parts += ["".join(v) for k, v in o.get("data", {}).items() if k.startswith("text")]
    return "\n".join(parts)


def test_the_misconceptions_page_quotes_what_the_chapters_print():
    """A number the misconceptions page quotes in prose (0.042, 1.3) is one the chapter its
    entry cites as evidence shows: a chapter's measurement changes, the page must follow."""
    page = (ROOT / "appendix" / "misconceptions.md").read_text(encoding="utf-8")
    by_number = {p.stem[:2]: p for p in CHAPTERS}
    checked, stale = 0, []
    for entry in re.split(r"\n#{2,3} ", page)[1:]:
        cited = sorted(set(re.findall(r"<chapters/(\d\d)_", entry)))
        if not cited:
            continue
        shown = "\n".join(_chapter_text(by_number[n]) for n in cited if n in by_number)
        prose = re.sub(r"\$[^$]*\$|\{\w+\}`[^`]*`|`[^`]*`", " ", entry)   # maths, roles, code aside
        for number in re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", prose):
            checked += 1
            if number not in shown:
                stale.append(f"{entry.splitlines()[0][:60]!r}: {number} (chapters {', '.join(cited)})")
    assert checked >= 2, "the page quotes no measured number: the test reads nothing"
    assert not stale, "numbers on appendix/misconceptions.md that the cited chapter does not show:\n" + "\n".join(stale)
