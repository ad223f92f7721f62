"""The exercise contract in Chinese: the checker's verdicts, prompts, case labels and
mistake messages, shown with ``al.set_language("zh")``, pass the same checks as the
English ones (tests/test_exercises_contract.py), with every text taken from the catalogue
(``ATTNLIB_I18N_STRICT=1``: a missing translation raises instead of showing English).

Every catalogued mistake is still recognised as itself, and its message is the
translation of its title and message; broken submissions (None, an exception, a wrong
shape, NaN, recursion) get their kind of message, in Chinese, naming the same code
(``None``, ``return``, ``ValueError``, ``NaN``, ``RecursionError``); the hint shown is
never code; and no message is left in English.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import attnlib as al
import attnlib.exercises  # noqa: F401 - registers every chapter's exercises
from attnlib.exercises import EXERCISES, check, check_solution, displayed_hint
from test_exercises_contract import float_items, reference_output, stub_function

NAMES = sorted(EXERCISES)
# every catalogued mistake once more, in Chinese: the first of each exercise in `make check`,
# the others (about 190 more checks, 16 s of the quick loop) in `make unit` and `make test`
# (the quick loop still checks that every message has its translation: tests/test_i18n.py)
MISTAKES = [pytest.param(n, m.key, id=f"{n}-{m.key}", marks=() if i == 0 else pytest.mark.slow)
            for n in NAMES for i, m in enumerate([m for m in EXERCISES[n].mistakes if m.kind == "output"])]
CJK = re.compile(r"[\u4e00-\u9fff]")
# code, calls, quoted values, and Python's own exception text ("RecursionError: maximum
# recursion depth exceeded"), which stays as Python wrote it
CODE = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::[^。；]*)?|`[^`]*`|\b\w+(?:\.\w+)*\([^()]*\)|\b\w+\s*=\s*\S+|\([^()]*\)|'[^']*'|\"[^\"]*\"")
ENGLISH_RUN = re.compile(r"\b[A-Za-z]{2,}(?:[ ,]+[A-Za-z]{2,}){3,}\b")  # four English words in a row


@pytest.fixture(autouse=True)
def chinese(monkeypatch):
    monkeypatch.setenv("ATTNLIB_I18N_STRICT", "1")
    al.set_language("zh")
    yield
    al.set_language("en")


def assert_chinese(text: str, what: str = "message"):
    """Chinese, with no run of English words outside code, calls and quoted values."""
    assert CJK.search(text), f"{what} is not Chinese: {text!r}"
    prose = CODE.sub(" ", text)
    left = ENGLISH_RUN.findall(prose)
    assert not left, f"{what} still has English {left!r}: {text!r}"


@pytest.mark.parametrize("name", NAMES)
def test_prompt_stub_verdict_and_reference_in_chinese(name):
    ex = EXERCISES[name]
    assert_chinese(al.tr(ex.prompt), "prompt")
    r = check(name, stub_function(ex))
    assert r.status == "not_attempted" and not r.passed, str(r)
    assert_chinese(str(r))
    r = check(name, ex.reference)
    assert r.passed, str(r)
    assert_chinese(str(r))
    r = check_solution(name, ex.reference)
    assert r.passed and r.solution and CJK.search(r._title()), str(r)


@pytest.mark.parametrize("name, key", MISTAKES)
def test_mistake_is_recognised_and_explained_in_chinese(name, key):
    m = EXERCISES[name].mistake(key)
    r = check(name, m.fn)
    assert r.status == "failed" and r.mistake == key, f"recognised as {r.mistake!r}: {r.message}"
    assert r.message.startswith(al.tr(m.title)) and al.tr(m.message) in r.message
    assert al.tr(m.title) != m.title and al.tr(m.message) != m.message
    assert_chinese(r.message)
    assert CJK.search(r._repr_html_())


@pytest.mark.parametrize("name", NAMES)
def test_broken_answers_get_chinese_messages_naming_the_code(name):
    ex = EXERCISES[name]

    def boom(*args, **kwargs):
        raise ValueError("boom-4711")

    def recurse(*args, **kwargs):
        return recurse(*args, **kwargs)

    r = check(name, lambda *a, **k: None)
    assert r.details["problem"] == "none" and "None" in r.message and "return" in r.message, str(r)
    assert_chinese(r.message)
    r = check(name, boom)
    assert r.details["problem"] == "raised" and "ValueError" in r.message and "boom-4711" in r.message
    assert_chinese(r.message)
    assert r.hint and CJK.search(r.hint), r.hint
    r = check(name, recurse)
    assert "RecursionError" in r.message
    assert_chinese(r.message)
    out = reference_output(ex, ex.all_cases()[0])
    items = float_items(out)
    if ex.output_kind == "float" and items and not isinstance(out, tuple):
        r = check(name, lambda *a, **k: np.full_like(np.asarray(ex.reference(*a, **k), dtype=float), np.nan))
        assert r.details["problem"] == "nan" and "NaN" in r.message, str(r)
        assert_chinese(r.message)
    if isinstance(out, np.ndarray) and out.ndim:
        r = check(name, lambda *a, **k: np.asarray(ex.reference(*a, **k))[..., None])
        assert r.details["problem"] == "shape", str(r)
        assert_chinese(r.message)


@pytest.mark.parametrize("name", NAMES)
def test_the_chinese_hint_is_never_code(name):
    from attnlib.exercises._hints import _looks_like_code
    shown = al.tr(displayed_hint(EXERCISES[name].hint)) if al.get_language() == "en" else \
        displayed_hint(EXERCISES[name].hint)
    assert shown and not _looks_like_code(shown), shown
    assert_chinese(shown, "hint")


def test_the_english_run_detector_is_not_vacuous():
    with pytest.raises(AssertionError):
        assert_chinese("你的函数 returned the wrong shape on case 1")
    with pytest.raises(AssertionError):
        assert_chinese("Your function returned None.")
    assert_chinese("你的函数返回了 None：调用 x.max(axis=axis, keepdims=True) 之后再减。")
