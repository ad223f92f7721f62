"""The chapters' shape and CONTRIBUTING.md's conventions, checked without running them
(nbval runs them; see `make nbval`; the JupyterLab test renders them, see tests/jupyterlab).

These protect what a teacher relies on: every chapter is stored executed top to bottom
(nbval compares nothing in a cell stored without output), ends with self-test exercises
whose stubs report "not attempted" and whose hidden solutions pass under their own name,
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
sys.path.insert(0, str(ROOT / "tools"))
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
    assert stems[:6] == ["01_motivation", "02_qkv", "03_scaling", "04_masking", "05_multihead", "06_complexity"]
    assert [int(s[:2]) for s in stems] == list(range(1, len(stems) + 1)), f"chapters are not numbered 1..n: {stems}"
    missing = [s for s in stems if f"chapters/{s}" not in TOC]
    assert not missing, f"chapters missing from _toc.yml: {missing}"
    positions = [TOC.index(f"chapters/{s}") for s in stems]
    assert positions == sorted(positions)


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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_small_and_its_metadata_clean(path):
    assert path.stat().st_size < 1_000_000, f"{path.name} is {path.stat().st_size / 1e6:.2f} MB"
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for c in nb["cells"]:
        assert "execution" not in c.get("metadata", {}), f"{path.name}: timing metadata left in a cell"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
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
    import tomllib

    import yaml

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    lines = setup_cell.setup_lines()
    assert f'"attnlib[notebook,torch] @ git+{url.removesuffix(".git")}@v{version}"' in lines, (
        f"the setup lines do not install {url} at the tag v{version}:\n{lines}")
    compile(lines, "setup", "exec")  # plain Python: runs in any kernel and parses with ast


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_imports_live_in_the_first_code_cell(path):
    code = _code(path)
    for c in code[1:]:
        tags = c.get("metadata", {}).get("tags", [])
        if "hide-input" in tags:  # a hidden solution may show another style (torch, einsum)
            continue
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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_explorers_are_stored_with_a_still_picture(path):
    from attnlib.widgets import RUN_HINT, WIDGET_VIEW

    for c in _code(path):
        outs = c.get("outputs", [])
        for k, out in enumerate(outs):
            if WIDGET_VIEW not in out.get("data", {}) or "al.widgets.explorer(" not in _src(c):
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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_visible_nbval_comment(path):
    for c in _code(path):
        found = re.findall(r"#\s*NBVAL_\w+", _src(c))
        if found:
            tag = found[0].split("NBVAL_")[1].lower().replace("_", "-")
            raise AssertionError(
                f"{path.name}: the cell starting {_src(c).strip().splitlines()[0][:60]!r} shows the comment "
                f"{found[0]!r} to the learner. Delete that line and add the tag 'nbval-{tag}' to the cell's "
                "metadata \"tags\" list (JupyterLab: property inspector, Cell Tags).")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
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
                "into this cell (attnlib.complexity.best_times, tracemalloc).")


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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_exercise_has_a_stub_and_a_hidden_solution_under_its_own_name(path):
    code = _code(path)
    names = set()
    for i, c in enumerate(code):
        src = _src(c)
        for name, arg in re.findall(r'al\.exercises\.check\(\s*["\'](\w+)["\']\s*,\s*([\w.]+)', src):
            assert arg != f"{name}_solution", (
                f"{path.name}: `al.exercises.check({name!r}, {arg})` checks the solution as if it were the "
                f"learner's answer; write `al.exercises.check_solution({name!r}, {name}_solution)`")
            assert "NotImplementedError" in src, (
                f"{path.name}: a cell calls `al.exercises.check({name!r}, {arg})` but is not a stub (no "
                "`raise NotImplementedError`). If it is the solution, name the function "
                f"`{name}_solution` and call `al.exercises.check_solution({name!r}, {name}_solution)`, so "
                "running it does not replace the learner's function.")
            names.add(name)
            assert name in al.exercises.EXERCISES, f"{path.name}: unknown exercise {name!r}"
            assert arg == name and _defines(src, name), (
                f"{path.name}: the stub of {name!r} must define `def {name}(...)` and call "
                f"`al.exercises.check({name!r}, {name})`, under the exercise's own name; it checks {arg!r}")
            said = _outputs_text(c)
            assert "not attempted" in said and "passed" not in said, (
                f"{path.name}: the stored verdict of the stub {name!r} must say 'not attempted' (and not "
                f"'passed'); it says {said.strip()[:160]!r}. Re-run the chapter with tools/run_notebooks.py")
            sol = code[i + 1] if i + 1 < len(code) else None
            sol_src = _src(sol) if sol else ""
            assert re.search(rf'al\.exercises\.check_solution\(\s*["\']{name}["\']\s*,\s*{name}_solution\s*\)',
                             sol_src), (
                f"{path.name}: the code cell right after the stub of {name!r} must be its solution: "
                f'`def {name}_solution(...)` ending with `al.exercises.check_solution("{name}", {name}_solution)`')
            assert _defines(sol_src, f"{name}_solution"), (
                f"{path.name}: the solution cell of {name!r} calls check_solution but does not define "
                f"`def {name}_solution(...)`")
            clobbered = [n for n in al.exercises.EXERCISES if _defines(sol_src, n)]
            assert not clobbered, (
                f"{path.name}: the solution cell of {name!r} (re)defines {clobbered}, the learner's "
                f"function; rename it with the suffix _solution ({clobbered[0]}_solution)")
            meta = sol.get("metadata", {})
            assert "hide-input" in meta.get("tags", []), (
                f"{path.name}: the solution of {name!r} is not hidden on the site: add the tag 'hide-input'")
            assert meta.get("jupyter", {}).get("source_hidden"), (
                f"{path.name}: the solution of {name!r} is not collapsed in JupyterLab: set "
                '"jupyter": {"source_hidden": true} in its cell metadata')
            verdict = _outputs_text(sol)
            assert re.search(rf"✓ {name}: the course's solution passed", verdict), (
                f"{path.name}: the stored verdict of the solution of {name!r} must read "
                f"\"✓ {name}: the course's solution passed ...\" (check_solution's verdict); it says "
                f"{verdict.strip()[:160]!r}. Re-run the chapter with tools/run_notebooks.py")
    assert names, f"{path.name}: no exercise stubs found"


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
def test_quiz_answers_are_not_visible_in_the_page_source(path):
    for c in _code(path):
        if "al.quiz.question(" in _src(c):
            tags = c.get("metadata", {}).get("tags", [])
            assert "remove-input" in tags, f"{path.name}: a quiz cell shows its source (and answers) on the site"


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
