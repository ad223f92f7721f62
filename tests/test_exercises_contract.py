"""The exercise contract (COURSE.md), checked for EVERY registered exercise.

Parametrized over :data:`attnlib.exercises.EXERCISES`, so each chapter's exercises are
covered as soon as they are registered: the reference passes, the stub is "not
attempted", each catalogued mistake is recognised as itself (not as another mistake),
broken submissions (None, wrong shape, NaN, an exception, garbage) get the right
kind of message without check() ever raising, a library function that computes the
answer is refused, the hint shown is never code, and no worker outlives a check.
"""
from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import attnlib as al
import attnlib.exercises  # noqa: F401 - registers every chapter's exercises
from attnlib.exercises import EXERCISES, CheckResult, check, displayed_hint
from attnlib.exercises._compare import _same_input

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(EXERCISES)
MISTAKES = [pytest.param(n, m.key, id=f"{n}-{m.key}") for n in NAMES for m in EXERCISES[n].mistakes]
VARIANTS = [pytest.param(n, m.key, i, id=f"{n}-{m.key}-variant{i}")
            for n in NAMES for m in EXERCISES[n].mistakes for i in range(len(m.variants))]


def stub_function(ex):
    """Exec the stub's source, as the learner's notebook cell does, and return its function."""
    namespace = {"np": np, "math": math}
    exec(compile(ex.stub, f"<stub of {ex.name}>", "exec"), namespace)
    fname = re.match(r"def (\w+)", ex.signature()).group(1)
    return namespace[fname]


def reference_output(ex, case):
    return ex.reference(*case.args, **case.kwargs)


def float_items(out) -> list[int]:
    """Indices of the float items of a tuple output (or [-1] for a float array)."""
    if isinstance(out, tuple):
        return [i for i, o in enumerate(out) if np.asarray(o).dtype.kind == "f"]
    return [-1] if np.asarray(out).dtype.kind == "f" else []


def assert_displays(r: CheckResult):
    text, page = str(r), r._repr_html_()
    assert r.name in text and r.message.splitlines()[0][:40] in text
    assert "attnlib-check" in page and isinstance(r.passed, bool)


def test_chapter_two_exercises_are_registered():
    assert {"softmax", "attention"} <= set(EXERCISES)


@pytest.mark.parametrize("name", NAMES)
def test_exercise_is_complete(name):
    ex = EXERCISES[name]
    assert ex.name == name and ex.prompt.strip()
    assert (ROOT / "chapters" / f"{ex.chapter}.ipynb").exists(), f"no chapter file for {ex.chapter!r}"
    assert "# YOUR CODE HERE" in ex.stub and "raise NotImplementedError" in ex.stub
    assert '"""' in ex.stub, "the stub needs a docstring stating the shapes"
    assert ex.mistakes, "every exercise catalogues at least one known mistake"
    for m in ex.mistakes:
        assert m.title.strip() and len(m.message) > 40, f"{m.key}: the message must name the misconception and the fix"
        assert callable(m.fn)
    if any(m.kind == "slow" for m in ex.mistakes):
        assert ex.perf_case is not None, "a kind='slow' mistake is only recognised with a perf_case"


@pytest.mark.parametrize("name", NAMES)
def test_cases_are_deterministic_and_fit_the_stub_signature(name):
    ex = EXERCISES[name]
    first, second = ex.all_cases(), ex.all_cases()
    assert len(first) >= 2 and len(first) == len(second)
    for a, b in zip(first, second):
        assert _same_input(a.args, b.args) and _same_input(a.kwargs, b.kwargs), a.label
    stub = stub_function(ex)
    for case in first:
        inspect.signature(stub).bind(*case.args, **case.kwargs)  # raises TypeError if not


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes(name):
    r = check(name, EXERCISES[name].reference)
    assert r.passed, str(r)
    assert r.status == "passed" and "✓" in str(r)


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_attempted(name):
    r = check(name, stub_function(EXERCISES[name]))
    assert r.status == "not_attempted", str(r)
    assert not r.passed and "not attempted" in str(r).lower()


@pytest.mark.parametrize("name, key", MISTAKES)
def test_mistake_is_recognised_as_itself(name, key):
    m = EXERCISES[name].mistake(key)
    r = check(name, m.fn)
    assert r.status == "failed", str(r)
    assert r.mistake == key, f"recognised as {r.mistake!r}: {r.message}"
    assert r.message.startswith(m.title) and m.message in r.message
    assert_displays(r)


@pytest.mark.parametrize("name, key, i", VARIANTS)
def test_mistake_variant_is_recognised_as_its_mistake(name, key, i):
    m = EXERCISES[name].mistake(key)
    r = check(name, m.variants[i])
    assert r.status == "failed" and r.mistake == key, r.message


@pytest.mark.parametrize("name", NAMES)
def test_returning_none_says_so(name):
    r = check(name, lambda *a, **k: None)
    assert r.status == "failed" and r.details["problem"] == "none", str(r)
    assert "None" in r.message and "return" in r.message


@pytest.mark.parametrize("name", NAMES)
def test_raising_names_the_exception(name):
    def boom(*args, **kwargs):
        raise ValueError("boom-4711")
    r = check(name, boom)
    assert r.status == "failed" and r.details["problem"] == "raised", str(r)
    assert "ValueError" in r.message and "boom-4711" in r.message and "case 1" in r.message


@pytest.mark.parametrize("name", NAMES)
def test_wrong_shape_says_expected_and_got(name):
    ex = EXERCISES[name]
    out = reference_output(ex, ex.all_cases()[0])
    if not isinstance(out, (tuple, np.ndarray, bool, int, float, np.generic)):
        pytest.skip(f"the output is a {type(out).__name__}: it has no shape")

    def extra_axis(*args, **kwargs):
        o = ex.reference(*args, **kwargs)
        if isinstance(o, tuple):  # grow the first item only
            return (np.asarray(o[0])[..., None], *o[1:])
        return np.asarray(o)[..., None]

    r = check(name, extra_axis)
    assert r.status == "failed" and r.details["problem"] == "shape", str(r)
    assert "shape" in r.message or "single number" in r.message


@pytest.mark.parametrize("name", NAMES)
def test_nan_output_says_nan(name):
    ex = EXERCISES[name]
    out = reference_output(ex, ex.all_cases()[0])
    items = float_items(out)
    if ex.output_kind != "float" or not items:
        pytest.skip(f"output_kind={ex.output_kind!r} with no float output: a NaN cannot be returned")
    j = items[0]

    def nans(*args, **kwargs):
        o = ex.reference(*args, **kwargs)
        if isinstance(o, tuple):
            return tuple(np.full_like(np.asarray(x, dtype=float), np.nan) if i == j else x
                         for i, x in enumerate(o))
        return np.full_like(np.asarray(o, dtype=float), np.nan)

    r = check(name, nans)
    assert r.status == "failed" and r.details["problem"] == "nan", str(r)
    assert "NaN" in r.message


@pytest.mark.parametrize("name", NAMES)
def test_garbage_never_raises_and_never_passes(name):
    ex = EXERCISES[name]
    out = reference_output(ex, ex.all_cases()[0])

    def recurse(*args, **kwargs):
        return recurse(*args, **kwargs)

    def exits(*args, **kwargs):
        raise SystemExit(1)

    def interrupts(*args, **kwargs):
        raise KeyboardInterrupt

    def generator(*args, **kwargs):
        yield 1

    def no_arguments():
        return 0

    garbage = {
        "a string": (lambda *a, **k: "not an array", {"type", "value", "dtype"}),
        "an object": (lambda *a, **k: object(), {"type"}),
        "a generator": (generator, {"type"}),
        "recursion": (recurse, {"raised"}),
        "SystemExit": (exits, {"raised"}),
        "KeyboardInterrupt": (interrupts, {"raised"}),
        "no parameters": (no_arguments, {"signature"}),
    }
    if isinstance(out, np.ndarray) and out.ndim >= 1:
        garbage["a list"] = (lambda *a, **k: np.asarray(ex.reference(*a, **k)).tolist(), {"type"})
    results = {}
    for what, (fn, problems) in garbage.items():
        r = results[what] = check(name, fn)
        assert r.status == "failed", f"{what}: {r}"
        assert r.details["problem"] in problems, f"{what}: {r}"
        assert_displays(r)
    assert "RecursionError" in results["recursion"].message
    assert "SystemExit" in results["SystemExit"].message
    if "a list" in results:
        assert "list" in results["a list"].message


# --------------------------------------------------------------------------- library shortcuts (issue 10)

def _np(x):
    return x.detach().numpy() if isinstance(x, torch.Tensor) else x


def _t(*xs):
    return [None if x is None else torch.as_tensor(x) for x in xs]


# Ready-made library functions, adapted to the common exercise signatures. Whichever of
# them computes an exercise's answer (reproduces its reference on every case) must be
# refused by check() for that exercise: the exercise is to write it.
SHORTCUTS = {
    "al.softmax": lambda x, axis=-1: al.softmax(x, axis=axis),
    "torch.softmax": lambda x, axis=-1: _np(torch.softmax(torch.as_tensor(x), dim=axis)),
    "al.scaled_dot_product_attention": lambda q, k, v, mask=None: al.scaled_dot_product_attention(
        q, k, v, attn_mask=mask),
    "al.flash_attention": lambda q, k, v, mask=None: al.flash_attention(q, k, v, attn_mask=mask),
    "F.scaled_dot_product_attention": lambda q, k, v, mask=None: _np(
        torch.nn.functional.scaled_dot_product_attention(*_t(q, k, v), attn_mask=_t(mask)[0])),
}


def _reproduces_reference(ex, fn) -> bool:
    from attnlib.exercises._compare import _compare, _to_numpy
    try:
        for case in ex.all_cases():
            got = _to_numpy(fn(*case.args, **case.kwargs))
            if not _compare(got, _to_numpy(ex.reference(*case.args, **case.kwargs)), ex)[0]:
                return False
    except Exception:  # noqa: BLE001 - does not fit this exercise
        return False
    return True


def _shortcuts_for(ex) -> dict:
    found = {name: fn for name, fn in SHORTCUTS.items() if _reproduces_reference(ex, fn)}
    own = getattr(al, ex.name, None)
    if callable(own):  # the attnlib function of the exercise's own name, where it computes the answer
        def own_fn(*a, **k):
            return own(*a, **k)
        if _reproduces_reference(ex, own_fn):
            found[f"al.{ex.name}"] = own_fn
    return found


SHORTCUT_PARAMS = [pytest.param(n, s, id=f"{n}-{s}") for n in NAMES for s in _shortcuts_for(EXERCISES[n])]


def test_the_shortcut_test_is_not_vacuous():
    covered = {(p.values[0], p.values[1]) for p in SHORTCUT_PARAMS}
    assert {("softmax", "al.softmax"), ("softmax", "torch.softmax"),
            ("attention", "al.scaled_dot_product_attention"), ("attention", "F.scaled_dot_product_attention"),
            ("attention", "al.flash_attention")} <= covered


@pytest.mark.parametrize("name, shortcut", SHORTCUT_PARAMS)
def test_a_library_function_that_computes_the_answer_is_refused(name, shortcut):
    fn = _shortcuts_for(EXERCISES[name])[shortcut]
    r = check(name, fn)
    assert r.status == "failed" and r.mistake == "library_shortcut", str(r)
    assert r.details["called"] in r.message and f"write {name} yourself" in r.message
    assert_displays(r)


@pytest.mark.parametrize("name", NAMES)
def test_every_attention_exercise_forbids_the_library_attention(name):
    """An exercise whose answer the library's attention computes lists all of it."""
    from attnlib.exercises import ATTENTION_SHORTCUTS
    ex = EXERCISES[name]
    attention_like = any(_reproduces_reference(ex, SHORTCUTS[s]) for s in
                         ("al.scaled_dot_product_attention", "F.scaled_dot_product_attention"))
    if not attention_like:
        pytest.skip("the library's attention does not compute this exercise's answer")
    missing = [n for n in ATTENTION_SHORTCUTS if n not in ex.shortcuts()]
    assert not missing, f"{name} allows {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_borrowed_answer_rules_resolve(name):
    """Every rule of an exercise names something that exists: a dotted name a callable, a
    module:qualname rule an importable module, an aten rule a torch operator."""
    import fnmatch
    import importlib

    from attnlib.exercises._judge import parse_rule
    ops = {n.split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")}
    for text in EXERCISES[name].shortcuts():
        rule = parse_rule(text)
        if "aten" in rule:
            assert fnmatch.filter(ops, rule["aten"]), text
            continue
        if "module" in rule:
            if any(c in rule["module"] for c in "*?["):
                continue
            importlib.import_module(rule["module"])
            continue
        parts = rule["name"].split(".")
        if parts[0] == "scipy":
            continue  # optional; resolved by the checker once scipy is imported
        obj = importlib.import_module(parts[0])
        for p in parts[1:]:
            obj = getattr(obj, p, None) or importlib.import_module(".".join(parts[:parts.index(p) + 1]))
        assert callable(obj), text


# --------------------------------------------------------------------------- hints and workers

@pytest.mark.parametrize("name", NAMES)
def test_the_hint_shown_is_never_code(name):
    from attnlib.exercises._core import _looks_like_code
    ex = EXERCISES[name]
    shown = displayed_hint(ex.hint)
    assert shown and not _looks_like_code(shown), shown

    def nans(*args, **kwargs):
        raise ValueError("no idea")
    r = check(name, nans)
    assert not _looks_like_code(r.hint), r.hint


@pytest.mark.parametrize("name", NAMES)
def test_no_worker_survives_a_check(name):
    import os
    check(name, EXERCISES[name].reference)
    kids = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == os.getpid()] if Path("/proc").exists() else []
    assert not kids, f"worker processes still alive: {kids}"


def _ppid(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
