"""The chapters' shape, checked without running them (nbval runs them; see `make nbval`).

These protect what a teacher relies on: every chapter is stored executed top to bottom
(nbval compares nothing in a cell stored without output), ends with self-test exercises
whose stubs report "not attempted" and whose hidden solutions pass, hides quiz answers
on the site, ignores output only where a timing or memory number makes it vary, and
stays small.
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest

import attnlib as al

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOC = (ROOT / "_toc.yml").read_text()
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


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
def test_imports_live_in_the_first_code_cell(path):
    code = _code(path)
    assert re.search(r"^import attnlib as al", _src(code[0]), re.M), f"{path.name}: first cell must import attnlib as al"
    for c in code[1:]:
        tags = c.get("metadata", {}).get("tags", [])
        if "hide-input" in tags:  # a hidden solution may show another style (torch, einsum)
            continue
        bad = re.findall(r"^(?:import|from) \S+", _src(c), re.M)
        assert not bad, f"{path.name}: import outside the first cell: {bad} in\n{_src(c)[:200]}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_output_is_ignored_only_for_timing_or_memory(path):
    for c in _code(path):
        src = _src(c)
        if "NBVAL_IGNORE_OUTPUT" in src:
            assert re.search(r"perf_counter|timeit|time\(|tracemalloc|benchmark|peak|elapsed|seconds|timing",
                             src), f"{path.name}: NBVAL_IGNORE_OUTPUT on a cell that does not time anything:\n{src[:300]}"


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


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_exercise_has_a_stub_and_a_hidden_solution_that_passes(path):
    code = _code(path)
    names = set()
    for i, c in enumerate(code):
        m = re.search(r'al\.exercises\.check\(\s*"(\w+)"', _src(c))
        if not m or "NotImplementedError" not in _src(c):
            continue
        name = m.group(1)
        names.add(name)
        assert name in al.exercises.EXERCISES, f"{path.name}: unknown exercise {name!r}"
        assert "not attempted" in _text(c), f"{path.name}: stub of {name!r} does not store 'not attempted'"
        sols = [s for s in code[i + 1:] if re.search(rf'al\.exercises\.check\(\s*"{name}"', _src(s))
                and "NotImplementedError" not in _src(s)]
        assert sols, f"{path.name}: no solution cell for {name!r}"
        meta = sols[0].get("metadata", {})
        assert "hide-input" in meta.get("tags", []), f"{path.name}: solution of {name!r} is not hidden on the site"
        assert meta.get("jupyter", {}).get("source_hidden"), f"{path.name}: solution of {name!r} is not collapsed in Jupyter"
        assert re.search(r"✓ \w+: passed", _text(sols[0])), f"{path.name}: stored solution of {name!r} does not pass"
    assert names, f"{path.name}: no exercise stubs found"


def test_every_registered_exercise_is_used_in_its_chapter():
    used = {}
    for path in CHAPTERS:
        for c in _code(path):
            for name in re.findall(r'al\.exercises\.check\(\s*"(\w+)"', _src(c)):
                used.setdefault(name, path.stem)
    for name, ex in al.exercises.EXERCISES.items():
        assert name in used, f"exercise {name!r} is registered but no chapter asks for it"
        assert used[name] == ex.chapter, f"exercise {name!r} says chapter {ex.chapter} but is used in {used[name]}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_quiz_answers_are_not_visible_in_the_page_source(path):
    for c in _code(path):
        if "al.quiz.question(" in _src(c):
            tags = c.get("metadata", {}).get("tags", [])
            assert "remove-input" in tags, f"{path.name}: a quiz cell shows its source (and answers) on the site"
