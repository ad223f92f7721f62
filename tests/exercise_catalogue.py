"""Helpers for the chapter exercise tests: the catalogue of an exercise holds on every
draw of its cases (cases vary per check, so the contract must hold for any seed)."""
from __future__ import annotations

import re

import numpy as np

from attnlib.exercises._compare import _compare, _to_numpy
from attnlib.exercises._judge import _outcome, _reproduces

SEEDS = range(20)


def catalogue_problems(ex, seeds=SEEDS) -> list[str]:
    """For every seed: the reference gives a value on every case, every output mistake
    (and each variant) gives a value on some case, differs from the reference on some
    case, and is recognised as itself (no earlier mistake in the catalogue explains it)."""
    problems = []
    for seed in seeds:
        cases = ex.all_cases(seed)
        memo: dict = {}

        def outcome(impl, case):
            """_outcome, once per function and case of this seed: the judge's matching below
            would run each mistake again (a training loop's mistakes train a model each
            time). That a mistake gives the same output when run again is checked where the
            learner's side and the judge's run it apart: the contract's
            test_mistake_is_recognised_as_itself and test_mistake_variant_is_recognised_as_its_mistake."""
            key = (impl, id(case))
            if key not in memo:
                memo[key] = _outcome(impl, case)
            return memo[key]

        with np.errstate(all="ignore"):
            ref = [outcome(ex.reference, c) for c in cases]
        if any(state != "value" for state, _ in ref):
            problems.append(f"seed {seed}: the reference raised")
            continue
        for m in ex.mistakes:
            if m.kind != "output":
                continue
            for v, impl in enumerate((m.fn, *m.variants)):
                who = f"seed {seed}: {m.key}" + (f" variant {v - 1}" if v else "")
                with np.errstate(all="ignore"):
                    outs = [outcome(impl, c) for c in cases]
                if not any(state == "value" for state, _ in outs):
                    problems.append(f"{who} raises on every case")
                    continue
                if all(state == "value" and _compare(got, want, ex)[0]
                       for (state, got), (_, want) in zip(outs, ref)):
                    problems.append(f"{who} passes as correct")
                    continue
                with np.errstate(all="ignore"):
                    first = next((m2 for m2 in ex.mistakes
                                  if m2.kind == "output" and _reproduces(m2, outs, cases, ex, outcome)), None)
                if first is not m:
                    problems.append(f"{who} is recognised as {first.key if first else None}")
    return problems


def passes_every_seed(ex, fn, seeds=range(5)) -> list[str]:
    """The seeds on which ``fn`` differs from the reference (in-process, no worker)."""
    bad = []
    for seed in seeds:
        for i, c in enumerate(ex.all_cases(seed)):
            want = _to_numpy(ex.reference(*c.args, **c.kwargs))
            got = _to_numpy(fn(*c.args, **c.kwargs))
            ok, why, _ = _compare(got, want, ex)
            if not ok:
                bad.append(f"seed {seed} case {i} ({c.label}): {why}")
    return bad


def asked_twice(name: str, fn):
    """Check ``fn`` twice, as a learner who asks for more does, and return the second
    result and the text it shows: the mistake's message (level 1) and its fix (level 2)."""
    from attnlib.exercises import EXERCISES, check

    first = check(name, fn)
    r = check(name, fn)
    assert not first.fix, "the fix is level 2: only the second check with the same mistake shows it"
    assert r.mistake is None or r.fix == EXERCISES[name].mistake(r.mistake).fix, r.fix
    return r, f"{r.message} {r.fix}"


def untranslated(names) -> list[str]:
    """The fixes and hint-ladder steps of these exercises that have no Chinese translation."""
    import attnlib as al
    from attnlib.exercises import EXERCISES

    missing = []
    al.set_language("zh")
    try:
        for name in names:
            ex = EXERCISES[name]
            texts = [m.fix for m in ex.mistakes if m.fix] + list(ex.hints) + [ex.prompt]
            missing += [f"{name}: {t[:60]}" for t in texts if al.tr(t) == t]
    finally:
        al.set_language("en")
    return missing


_SPAN = re.compile(r"`([^`]+)`")
_CALL_START = re.compile(r"(?<![\w.])(?:np|torch|math)(?:\.\w+)+\(")
_EXPR = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.\w+)*(?:\[[^\]]*\])?\s*(?:@|<=|<|\*|/)\s*[^,;:]+")


def _calls(text: str) -> list[str]:
    """NumPy / torch / math calls in ``text``, with their balanced parentheses."""
    found = []
    for m in _CALL_START.finditer(text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                found.append(text[m.start():i + 1])
                break
            i += 1
    return found


def code_in_level_one(ex) -> list[str]:
    """The code-like fragments of the exercise's level-1 texts (mistake titles and messages,
    the idea hint): backtick spans and NumPy/torch calls or expressions such as ``a @ b``."""
    texts = [m.title for m in ex.mistakes] + [m.message for m in ex.mistakes] + [ex.hint]
    found = []
    for t in texts:
        found += _SPAN.findall(t) + _calls(t) + [m.group(0).rstrip(" .") for m in _EXPR.finditer(t)]
    return list(dict.fromkeys(found))


def passing_code_in_level_one(ex, seeds=range(3)) -> list[str]:
    """Each code fragment of a level-1 text, run as the answer (``return <fragment>`` in the
    stub's signature): the fragments that pass. Level 1 never hands over a passing answer."""
    import math

    import torch

    head = ex.signature()
    passing = []
    for frag in code_in_level_one(ex):
        ns = {"np": np, "math": math, "torch": torch}
        try:
            exec(compile(f"{head}\n    return {frag}\n", "<fragment>", "exec"), ns)
        except SyntaxError:
            continue
        fn = ns[re.match(r"def (\w+)", head).group(1)]
        try:
            with np.errstate(all="ignore"):
                bad = passes_every_seed(ex, fn, seeds=seeds)
        except Exception:  # noqa: BLE001 - a fragment that does not run does not pass
            continue
        if not bad:
            passing.append(frag)
    return passing
