"""The machinery behind every exercise: run the learner's function safely, compare it
with the reference on deterministic cases, and name the known mistake it matches.

An :class:`Exercise` bundles a stub, a reference solution, a list of :class:`Case`
inputs and a catalogue of :class:`Mistake` implementations. :func:`check` never raises
and never hangs: every failure of the learner's code becomes a :class:`CheckResult`.

How a check runs:

1. The learner's function is called on every case in a worker thread with a time
   limit (an infinite Python loop is stopped by raising an exception inside that
   thread). What it prints is captured, inputs are compared before and after the call
   (mutation), and the output is converted to NumPy (torch tensors, CPU or CUDA, are
   fine) and compared with the reference in float64.
2. If any case fails, every catalogued mistake (``kind="output"``) is run on the same
   cases; a mistake is recognised when, case by case, it gives the learner's output or
   raises where the learner's code raised, and it gave a value on at least one case.
   The result then names the misconception and the fix; otherwise it reports the first
   failing case, its input shapes and the largest difference.
3. If every case passes, the optional ``perf_case`` is timed (``kind="slow"``) and the
   optional ``extra_check`` runs (it may name a ``kind="custom"`` mistake by its key).
"""
from __future__ import annotations

import contextlib
import difflib
import html
import inspect
import re
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ._compare import _compare, _kind_of_value, _same_input, _shapes, _snapshot, _to_numpy
from ._running import _STUCK, _reap_stuck, _run_limited, _Tee, _Timeout

__all__ = ["Case", "Mistake", "Exercise", "CheckResult", "EXERCISES", "register", "check", "check_solution"]


@dataclass(frozen=True)
class Case:
    """One input to an exercise: ``fn(*args, **kwargs)``; ``label`` says what it probes."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer.

    ``fn`` is a working implementation *of the mistake*. The checker recognises the
    mistake when, on every case, the learner's output equals ``fn``'s output, or both
    raise (a mistake such as ``weights.T @ v`` only fails with an error when L != S);
    ``fn`` must give a value on at least one case. ``variants`` are other ways learners
    write the same mistake (e.g. ``softmax(scores, axis=0)`` next to ``axis=-2``), tried
    after ``fn`` with the same message.

    With ``kind="slow"`` the mistake is recognised by time instead (see
    ``Exercise.perf_case``), with ``kind="mutates"`` by the input being changed in place,
    and with ``kind="custom"`` by ``Exercise.extra_check`` returning its ``key``.
    """

    key: str
    title: str
    message: str
    fn: Callable
    kind: str = "output"  # "output" | "slow" | "mutates" | "custom"
    variants: tuple = ()


@dataclass
class Exercise:
    """An exercise: a stub to fill in, a reference, the cases and the mistake catalogue.

    Args:
        name: the key used by ``check(name, fn)``.
        chapter: the chapter file stem, e.g. ``"02_qkv"``.
        prompt: one sentence saying what ``fn`` must compute.
        stub: source code of the stub the learner starts from.
        reference: a correct implementation.
        cases: returns the list of :class:`Case` inputs (deterministic, seeded).
        mistakes: the catalogue of known wrong answers, checked in order.
        hint: shown with any failure that matches no catalogued mistake.
        rtol, atol: tolerances of the comparison (done in float64). A float32 answer is
            compared with at least ``rtol=1e-4, atol=1e-6`` (its own rounding error).
        output_kind: ``"float"`` (arrays of reals), ``"bool"`` (bool arrays), ``"int"``
            (integers) or ``"any"`` (compared with ``==`` after conversion).
        time_limit: seconds one call may take before it is stopped. Default: 5.
        perf_case: an optional larger case that is only timed.
        slow_limit: seconds ``perf_case`` may take before the answer is called too slow.
        extra_check: ``extra_check(fn) -> str | None``, run after the value checks pass
            (e.g. a peak-memory limit); a string is the failure message, or the key of a
            ``kind="custom"`` mistake, which is then reported with its title and message.
        total_time_limit: seconds all cases together may take. Default: ``None``
            (three times ``time_limit``).
    """

    name: str
    chapter: str
    prompt: str
    stub: str
    reference: Callable
    cases: Callable[[], list]
    mistakes: list = field(default_factory=list)
    hint: str = ""
    rtol: float = 1e-5
    atol: float = 1e-7
    output_kind: str = "float"
    time_limit: float = 5.0
    perf_case: Case | None = None
    slow_limit: float = 2.0
    extra_check: Callable | None = None
    total_time_limit: float | None = None

    def mistake(self, key: str) -> Mistake:
        for m in self.mistakes:
            if m.key == key:
                return m
        raise KeyError(f"exercise {self.name!r} has no mistake {key!r}; known: "
                       f"{[m.key for m in self.mistakes]}")

    def all_cases(self) -> list:
        """The cases as a list (``cases`` may be a function or a plain list)."""
        return list(self.cases() if callable(self.cases) else self.cases)

    def signature(self) -> str:
        """The ``def ...:`` line of the stub, e.g. ``def softmax(x, axis=-1):``."""
        m = re.search(r"^def \w+\(.*?\)\s*(?:->[^:\n]*)?:[ \t]*$", self.stub, flags=re.M | re.S)
        if not m:
            return f"def {self.name}(...):"
        return re.sub(r"\(\s+", "(", " ".join(m.group(0).split()))


EXERCISES: dict[str, Exercise] = {}

_KINDS = ("output", "slow", "mutates", "custom")


def register(ex: Exercise) -> Exercise:
    """Add ``ex`` to :data:`EXERCISES` (names must be unique)."""
    if ex.name in EXERCISES:
        raise ValueError(f"exercise {ex.name!r} is registered twice")
    keys = [m.key for m in ex.mistakes]
    if len(set(keys)) != len(keys):
        raise ValueError(f"exercise {ex.name!r} has duplicate mistake keys: {keys}")
    bad = [m.key for m in ex.mistakes if m.kind not in _KINDS]
    if bad:
        raise ValueError(f"exercise {ex.name!r}: mistakes {bad} have an unknown kind; use one of {_KINDS}")
    if ex.output_kind not in ("float", "bool", "int", "any"):
        raise ValueError(f"exercise {ex.name!r}: output_kind={ex.output_kind!r}; use float, bool, int or any")
    EXERCISES[ex.name] = ex
    return ex


# --------------------------------------------------------------------------- results

_ICON = {"passed": "✓", "failed": "✗", "not_attempted": "…", "error": "!"}
_COLOUR = {"passed": "#1a7f37", "failed": "#cf222e", "not_attempted": "#6e7781", "error": "#9a6700"}
_HEAD = {"passed": "passed", "failed": "not yet", "not_attempted": "not attempted",
         "error": "could not check"}


@dataclass
class CheckResult:
    """What :func:`check` found. ``status`` is passed, failed, not_attempted or error.

    ``mistake`` is the key of the recognised mistake (or None); ``details["problem"]``
    names the kind of failure (``"raised"``, ``"none"``, ``"type"``, ``"shape"``,
    ``"dtype"``, ``"nan"``, ``"inf"``, ``"value"``, ``"timeout"``, ``"signature"``,
    ``"mutates"``, ``"slow"``, ``"mistake"``, ``"extra"``); ``details["printed"]`` holds
    the start of what the learner's function printed.
    """

    name: str
    status: str
    message: str
    hint: str = ""
    mistake: str | None = None
    details: dict = field(default_factory=dict)
    solution: bool = False  # True when it checked the course's solution, not the learner's answer

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.passed

    def _printed(self) -> str:
        return self.details.get("printed", "") if isinstance(self.details, dict) else ""

    def _title(self) -> str:
        if self.solution:
            return (f"{_ICON[self.status]} {self.name}: the course's solution {_HEAD[self.status]} "
                    "(this checks the solution above, not your answer)")
        return f"{_ICON[self.status]} {self.name}: {_HEAD[self.status]}"

    def __str__(self) -> str:
        lines = [self._title(), f"  {self.message}"]
        if self.hint:
            lines.append(f"  Hint: {self.hint}")
        if self._printed():
            lines.append("  Your function printed (first lines):")
            lines += ["    " + s for s in self._printed().splitlines()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        c = _COLOUR[self.status]
        hint = (f'<div style="margin-top:.3em"><b>Hint:</b> {html.escape(self.hint)}</div>'
                if self.hint else "")
        printed = (f'<div style="margin-top:.3em"><b>Your function printed (first lines):</b>'
                   f'<pre style="margin:.2em 0">{html.escape(self._printed())}</pre></div>'
                   if self._printed() else "")
        title = self._title()
        return (f'<div class="attnlib-check attnlib-check-{self.status}" '
                f'style="border-left:4px solid {c};padding:.4em .8em;margin:.3em 0">'
                f'<b style="color:{c}">{html.escape(title)}</b>'
                f'<div style="white-space:pre-wrap">{html.escape(self.message)}</div>{hint}{printed}</div>')


# --------------------------------------------------------------------------- messages

def _fmt_exc(exc: BaseException) -> str:
    text = str(exc).strip()
    text = text.splitlines()[0] if text else ""
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _explain_exc(exc: BaseException) -> str:
    """A sentence that helps with common errors (empty when there is nothing to add)."""
    text = str(exc)
    if isinstance(exc, RecursionError):
        return (" Your function calls itself without end. In a notebook this often happens when a "
                "helper has the same name as your function (e.g. your softmax calls softmax): rename one.")
    if ("Tensor" in text and "ndarray" in text) or (
            isinstance(exc, AttributeError) and "'numpy.ndarray' object has no attribute" in text):
        return (" The checker passes NumPy arrays. To work in PyTorch, convert first, e.g. "
                "x = torch.as_tensor(x) (you may return a tensor).")
    if isinstance(exc, MemoryError):
        return " Your function asked for more memory than the machine has."
    return ""


def _signature_problem(fn: Callable, case: Case, ex: Exercise) -> str:
    """Why ``fn`` cannot be called with this case's arguments ('' when it can or when
    the signature cannot be inspected)."""
    try:
        sig = inspect.signature(fn)
    except Exception:  # noqa: BLE001 - builtins and odd callables: let the call itself tell
        return ""
    try:
        sig.bind(*case.args, **case.kwargs)
    except TypeError as exc:
        shown = ", ".join([f"<{type(a).__name__}>" for a in case.args]
                          + [f"{k}=..." for k in case.kwargs])
        fname = getattr(fn, "__name__", "fn")
        return (f"Your function cannot be called the way the checker calls it, {fname}({shown}): {exc}. "
                f"Keep the stub's signature: `{ex.signature()}`")
    return ""


# --------------------------------------------------------------------------- check

def check(name: str, fn: Callable) -> CheckResult:
    """Check the learner's ``fn`` for exercise ``name``; never raises.

    Args:
        name: an exercise name (a key of :data:`EXERCISES`).
        fn: the learner's function.

    Returns:
        a :class:`CheckResult` with ``.passed`` and ``.message``; it displays itself in
        a notebook.

    Example::

        >>> al.exercises.check("softmax", my_softmax).passed
    """
    tee = _Tee()
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings(), contextlib.redirect_stdout(tee):
            warnings.simplefilter("ignore")
            result = _check(name, fn)
    except BaseException as exc:  # noqa: BLE001 - check itself must never raise
        if isinstance(exc, KeyboardInterrupt):
            raise
        result = CheckResult(str(name), "error", f"The checker itself failed ({_fmt_exc(exc)}). "
                             "This is a bug in attnlib, not in your code: please report it.")
    printed = tee.text().strip("\n")
    if printed:
        lines = printed.splitlines()
        shown = "\n".join(line[:200] for line in lines[:8]) + ("\n..." if len(lines) > 8 else "")
        result.details["printed"] = shown
    return result


def check_solution(name: str, fn: Callable) -> CheckResult:
    """Check the course's solution ``fn`` of exercise ``name``, labelled as the solution.

    The hidden solution cell under each stub defines ``<name>_solution`` (so it never
    replaces the learner's function) and calls this. The verdict says that it checked
    the solution, so after "Run All" nobody reads it as their own pass.

    Args:
        name: an exercise name (a key of :data:`EXERCISES`).
        fn: the solution function.

    Returns:
        a :class:`CheckResult` with ``solution=True``.
    """
    result = check(name, fn)
    result.solution = True
    return result


def _fail(ex: Exercise, message: str, problem: str, *, mistake: str | None = None,
          hint: bool = True, **details) -> CheckResult:
    return CheckResult(ex.name, "failed", message, hint=ex.hint if hint else "", mistake=mistake,
                       details={"problem": problem, **details})


def _stuck_note() -> str:
    if not _STUCK:
        return ""
    return (" It is still running in the background (inside a long NumPy/C call or a sleep) and "
            "stops when that call returns; if the notebook gets slow, restart the kernel.")


def _check(name: str, fn: Callable) -> CheckResult:
    if not isinstance(name, str):
        if isinstance(fn, str) and callable(name):
            return CheckResult(str(fn), "error", "The arguments are swapped: call "
                               f"check({fn!r}, your_function), the exercise name first.")
        return CheckResult(repr(name), "error", "check(name, fn) needs the exercise name as a string, "
                           f"e.g. check('softmax', my_softmax); got {type(name).__name__}.")
    ex = EXERCISES.get(name)
    if ex is None:
        close = difflib.get_close_matches(name, list(EXERCISES), n=1)
        return CheckResult(name, "error", f"There is no exercise called {name!r}."
                           + (f" Did you mean {close[0]!r}?" if close else "")
                           + f" Known exercises: {', '.join(sorted(EXERCISES))}.")
    if not callable(fn):
        return CheckResult(name, "error", f"check({name!r}, fn) needs a function, got {type(fn).__name__}. "
                           "Pass the function itself, without calling it: check(name, my_fn).")
    _reap_stuck()
    cases = ex.all_cases()
    found = _run_cases(ex, fn, cases)
    if isinstance(found, CheckResult):
        return found
    outcomes, failures = found
    if failures:
        return _diagnose(ex, cases, outcomes, failures)
    for later in (_check_speed, _check_extra):  # (a failed CheckResult is falsy: no `or` chain)
        result = later(ex, fn)
        if result is not None:
            return result
    return CheckResult(name, "passed", f"All {len(cases)} cases match the reference"
                       + (" and it is fast enough." if ex.perf_case is not None else "."),
                       details={"problem": None})


def _run_cases(ex: Exercise, fn: Callable, cases: list):
    """Run ``fn`` on every case. Returns a final :class:`CheckResult` (not attempted,
    timeout, signature, mutation) or ``(outcomes, failures)``: one ``("value", output)``
    or ``("raised", exception)`` per case, and ``(case index, message, problem)`` for
    each case that differs from the reference."""
    budget = ex.total_time_limit if ex.total_time_limit is not None else 3 * ex.time_limit
    start = time.perf_counter()
    outcomes: list[tuple[str, Any]] = []
    failures: list[tuple[int, str, str]] = []
    for i, case in enumerate(cases):
        where = f"case {i + 1} of {len(cases)} ({case.label}; inputs {_shapes(case)})"
        problem = _signature_problem(fn, case, ex)
        if problem:
            return _fail(ex, problem + ".", "signature", hint=False)
        args, kwargs = _snapshot(case.args), _snapshot(case.kwargs)
        before = (_snapshot(args), _snapshot(kwargs))
        limit = min(ex.time_limit, max(budget - (time.perf_counter() - start), 0.05))
        ok, value, _ = _run_limited(fn, args, kwargs, limit)
        if not ok and isinstance(value, _Timeout):
            what = (f"ran longer than {ex.time_limit:g} s on {where}" if limit >= ex.time_limit else
                    f"took more than {budget:g} s for the first {i + 1} cases (stopped on {where})")
            return _fail(ex, f"Your function {what} and was stopped. Look for an infinite loop, or "
                         "replace Python loops over single numbers with array operations." + _stuck_note(),
                         "timeout", case=i)
        if not ok and isinstance(value, NotImplementedError) and i == 0:
            return CheckResult(ex.name, "not_attempted", "Not attempted yet: the function still raises "
                               "NotImplementedError. Replace `raise NotImplementedError` with your code.",
                               details={"problem": "not_attempted"})
        if not (_same_input(args, before[0]) and _same_input(kwargs, before[1])):
            m = next((m for m in ex.mistakes if m.kind == "mutates"), None)
            msg = (f"{m.title}. {m.message}" if m else "Your function changed its input in place. Work on "
                   "a copy (e.g. x = x - m instead of x -= m) so the caller's array is left unchanged.")
            return _fail(ex, msg + f" (Seen on {where}.)", "mutates",
                         mistake=m.key if m else "mutates_input", hint=False, case=i)
        if not ok:
            outcomes.append(("raised", value))
            failures.append((i, f"Your function raised {_fmt_exc(value)} on {where}.{_explain_exc(value)}",
                             "raised"))
            continue
        got = _to_numpy(value)
        outcomes.append(("value", got))
        if value is None:
            failures.append((i, f"Your function returned None on {where}. Did you forget the `return` "
                             "statement (in every branch, e.g. with and without a mask)?", "none"))
            continue
        want = _to_numpy(ex.reference(*_snapshot(case.args), **_snapshot(case.kwargs)))
        same, why, problem = _compare(got, want, ex)
        if not same:
            failures.append((i, f"Wrong result on {where}: {why}.", problem))
    return outcomes, failures


def _diagnose(ex: Exercise, cases: list, outcomes: list, failures: list) -> CheckResult:
    """Name the catalogued mistake that explains the outcomes, else the first failure."""
    some_value = any(state == "value" for state, _ in outcomes)  # a mistake must match a value
    for m in ex.mistakes if some_value else ():
        if m.kind == "output" and _reproduces(m, outcomes, cases, ex):
            return _fail(ex, f"{m.title}. {m.message}", "mistake", mistake=m.key, hint=False)
    i, msg, problem = failures[0]
    tail = (f" {len(failures)} of {len(cases)} cases fail." if len(failures) > 1 else
            f" The other {len(cases) - 1} cases pass." if len(cases) > 1 else "")
    return _fail(ex, msg + tail, problem, case=i)


def _check_speed(ex: Exercise, fn: Callable) -> CheckResult | None:
    """Time ``fn`` on ``ex.perf_case`` (stopped at ``slow_limit``); None when fast enough."""
    if ex.perf_case is None:
        return None
    c = ex.perf_case
    # judged by the worker's CPU time, so a busy machine does not make a fast answer "slow";
    # the wall-clock limit only catches a call that waits (sleeps, blocks) instead of computing
    ok, value, secs = _run_limited(fn, _snapshot(c.args), _snapshot(c.kwargs),
                                   max(ex.time_limit, 10 * ex.slow_limit), cpu_limit=ex.slow_limit)
    if isinstance(value, _Timeout) or (ok and secs > ex.slow_limit):
        slow = next((m for m in ex.mistakes if m.kind == "slow"), None)
        msg = (f"{slow.title}. {slow.message}" if slow else
               "Correct, but far too slow: use array operations instead of Python loops over numbers.")
        return _fail(ex, msg + f" (On inputs {_shapes(c)} it used over {ex.slow_limit:g} s of CPU time; the "
                     "reference takes milliseconds.)" + _stuck_note(), "slow",
                     mistake=slow.key if slow else "too_slow", hint=False)
    if not ok:
        return _fail(ex, f"Your function passes the small cases but raised {_fmt_exc(value)} on a larger "
                     f"input ({_shapes(c)}).{_explain_exc(value)}", "raised")
    return None


def _check_extra(ex: Exercise, fn: Callable) -> CheckResult | None:
    """Run ``ex.extra_check(fn)`` in a worker thread; None when it finds nothing."""
    if ex.extra_check is None:
        return None
    ok, problem, _ = _run_limited(ex.extra_check, (fn,), {}, 2 * ex.time_limit + ex.slow_limit)
    if not ok:
        why = ("it ran too long and was stopped" if isinstance(problem, _Timeout)
               else f"your function raised {_fmt_exc(problem)}")
        return _fail(ex, f"The values are right, but an extra test failed: {why}.", "extra")
    if not problem:
        return None
    m = next((m for m in ex.mistakes if m.key == problem), None)
    if m is not None:
        return _fail(ex, f"{m.title}. {m.message}", "mistake", mistake=m.key, hint=False)
    return _fail(ex, str(problem), "extra")


def _outcome(fn: Callable, case: Case) -> tuple[str, Any]:
    """Run one of *our* functions (a mistake) on a case: ("value", out) or ("raised", exc)."""
    try:
        return "value", _to_numpy(fn(*_snapshot(case.args), **_snapshot(case.kwargs)))
    except Exception as exc:  # noqa: BLE001 - mistakes such as weights.T @ v raise when L != S
        return "raised", exc


def _reproduces(m: Mistake, outcomes: list, cases: list, ex: Exercise) -> bool:
    """Whether mistake ``m`` (or one of its variants) explains the learner's outcomes."""
    for impl in (m.fn, *m.variants):
        values = 0
        for (state, got), case in zip(outcomes, cases):
            mstate, mval = _outcome(impl, case)
            if state != mstate:
                break
            if state == "value":
                if got is None or not _compare(got, mval, ex, kind=_kind_of_value(mval))[0]:
                    break
                values += 1
        else:
            if values:
                return True
    return False
