"""The machinery behind every exercise: run the learner's function safely, compare it
with the reference on deterministic cases, and name the known mistake it matches.

An :class:`Exercise` bundles a stub, a reference solution, a list of :class:`Case`
inputs and a catalogue of :class:`Mistake` implementations. :func:`check` never raises
and never hangs: every failure of the learner's code becomes a :class:`CheckResult`.
"""
from __future__ import annotations

import copy
import ctypes
import html
import math
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["Case", "Mistake", "Exercise", "CheckResult", "EXERCISES", "register", "check"]


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
    mistake when the learner's outputs equal ``fn``'s outputs on every case. With
    ``kind="slow"`` it is recognised by time instead (see ``Exercise.perf_case``), and
    with ``kind="mutates"`` by the input being changed in place.
    """

    key: str
    title: str
    message: str
    fn: Callable
    kind: str = "output"  # "output" | "slow" | "mutates" | "custom"


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
        rtol, atol: tolerances of the comparison (done in float64).
        output_kind: ``"float"`` (arrays of reals), ``"bool"`` (bool arrays), ``"int"``
            (integers) or ``"any"`` (compared with ``==`` after conversion).
        time_limit: seconds one call may take before it is stopped. Default: 5.
        perf_case: an optional larger case that is only timed.
        slow_limit: seconds ``perf_case`` may take before the answer is called too slow.
        extra_check: ``extra_check(fn) -> str | None``, run after the value checks pass
            (e.g. a peak-memory limit); a string is the failure message.
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

    def mistake(self, key: str) -> Mistake:
        for m in self.mistakes:
            if m.key == key:
                return m
        raise KeyError(f"exercise {self.name!r} has no mistake {key!r}; known: "
                       f"{[m.key for m in self.mistakes]}")


EXERCISES: dict[str, Exercise] = {}


def register(ex: Exercise) -> Exercise:
    """Add ``ex`` to :data:`EXERCISES` (names must be unique)."""
    if ex.name in EXERCISES:
        raise ValueError(f"exercise {ex.name!r} is registered twice")
    keys = [m.key for m in ex.mistakes]
    if len(set(keys)) != len(keys):
        raise ValueError(f"exercise {ex.name!r} has duplicate mistake keys: {keys}")
    EXERCISES[ex.name] = ex
    return ex


# --------------------------------------------------------------------------- results

_ICON = {"passed": "✓", "failed": "✗", "not_attempted": "…", "error": "!"}
_COLOUR = {"passed": "#1a7f37", "failed": "#cf222e", "not_attempted": "#6e7781", "error": "#9a6700"}


@dataclass
class CheckResult:
    """What :func:`check` found. ``status`` is passed, failed, not_attempted or error."""

    name: str
    status: str
    message: str
    hint: str = ""
    mistake: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        head = {"passed": "passed", "failed": "not yet", "not_attempted": "not attempted",
                "error": "could not check"}[self.status]
        lines = [f"{_ICON[self.status]} {self.name}: {head}", f"  {self.message}"]
        if self.hint:
            lines.append(f"  Hint: {self.hint}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        c = _COLOUR[self.status]
        hint = (f'<div style="margin-top:.3em"><b>Hint:</b> {html.escape(self.hint)}</div>'
                if self.hint else "")
        title = str(self).splitlines()[0]
        return (f'<div class="attnlib-check attnlib-check-{self.status}" '
                f'style="border-left:4px solid {c};padding:.4em .8em;margin:.3em 0">'
                f'<b style="color:{c}">{html.escape(title)}</b>'
                f'<div style="white-space:pre-wrap">{html.escape(self.message)}</div>{hint}</div>')


# --------------------------------------------------------------------------- running

class _Timeout(BaseException):
    """Raised inside a learner's function that ran past its time limit."""


def _run_limited(fn: Callable, args: tuple, kwargs: dict, limit: float):
    """Run ``fn`` in a daemon thread. Returns ``(ok, value_or_exc, seconds)``; a call
    still running after ``limit`` seconds is interrupted (pure-Python loops stop at once,
    a long C call when it returns) and reported as ``(False, _Timeout(), limit)``."""
    box: dict[str, Any] = {}

    def target():
        t0 = time.perf_counter()
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                box["value"] = fn(*args, **kwargs)
            box["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
            box["value"], box["ok"] = exc, False
        box["seconds"] = time.perf_counter() - t0

    th = threading.Thread(target=target, daemon=True, name="attnlib-exercise")
    th.start()
    th.join(limit)
    if th.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(th.ident), ctypes.py_object(_Timeout))
        th.join(0.5)
        return False, _Timeout(), limit
    return box["ok"], box["value"], box["seconds"]


def _to_numpy(obj: Any) -> Any:
    """Torch tensors, NumPy arrays, scalars and (nested) tuples/lists -> NumPy / Python."""
    if isinstance(obj, (tuple, list)):
        return tuple(_to_numpy(o) for o in obj)
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # a torch tensor
        t = obj.detach().cpu()
        if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
            t = t.float()
        return t.numpy()
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, (bool, int, float, np.generic)):
        return np.asarray(obj)
    if hasattr(obj, "__array__"):
        return np.asarray(obj)
    return obj


def _describe(obj: Any) -> str:
    if isinstance(obj, np.ndarray):
        return f"array of shape {tuple(obj.shape)} and dtype {obj.dtype}"
    if isinstance(obj, tuple):
        return "tuple of " + ", ".join(_describe(o) for o in obj)
    return f"{type(obj).__name__}"


def _shapes(case: Case) -> str:
    parts = []
    for a in case.args:
        a_np = _to_numpy(a)
        parts.append(str(tuple(a_np.shape)) if isinstance(a_np, np.ndarray) and a_np.ndim else repr(a))
    parts += [f"{k}={_to_numpy(v).shape if hasattr(v, 'shape') else v!r}" for k, v in case.kwargs.items()]
    return ", ".join(parts)


def _snapshot(obj: Any) -> Any:
    if hasattr(obj, "detach") and hasattr(obj, "clone"):
        return obj.detach().clone()
    try:
        return copy.deepcopy(obj)
    except Exception:  # noqa: BLE001
        return obj


def _same_input(a: Any, b: Any) -> bool:
    a_np, b_np = _to_numpy(a), _to_numpy(b)
    if isinstance(a_np, np.ndarray) and isinstance(b_np, np.ndarray):
        return a_np.shape == b_np.shape and np.array_equal(a_np, b_np, equal_nan=a_np.dtype.kind in "fc")
    if isinstance(a_np, tuple) and isinstance(b_np, tuple):
        return len(a_np) == len(b_np) and all(_same_input(x, y) for x, y in zip(a_np, b_np))
    try:
        return bool(a_np == b_np)
    except Exception:  # noqa: BLE001
        return True


def _compare(got: Any, want: Any, ex: Exercise) -> tuple[bool, str]:
    """Return ``(equal, why_not)``; ``got`` and ``want`` are already converted."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return False, f"expected a tuple of {len(want)} items, got {_describe(got)}"
        for i, (g, w) in enumerate(zip(got, want)):
            ok, why = _compare(g, w, ex)
            if not ok:
                return False, f"item {i}: {why}"
        return True, ""
    if not isinstance(got, np.ndarray):
        return False, f"expected {_describe(want)}, got {_describe(got)}"
    if got.shape != want.shape:
        return False, f"expected shape {tuple(want.shape)}, got shape {tuple(got.shape)}"
    if ex.output_kind == "bool" or want.dtype == bool:
        if got.dtype != bool:
            return False, f"expected a bool array, got dtype {got.dtype} (build it with comparisons or dtype=bool)"
        wrong = np.argwhere(got != want)
        if len(wrong):
            return False, f"{len(wrong)} entries differ, first at index {tuple(int(i) for i in wrong[0])}"
        return True, ""
    if ex.output_kind == "int":
        if not np.array_equal(got, want):
            return False, f"expected {want.tolist()}, got {got.tolist()}"
        return True, ""
    if got.dtype.kind not in "biuf":
        return False, f"expected numbers, got dtype {got.dtype}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if np.isnan(g).any() and not np.isnan(w).any():
        return False, f"the output contains NaN at {int(np.isnan(g).sum())} entries"
    if np.isinf(g).any() and not np.isinf(w).any():
        return False, f"the output contains inf at {int(np.isinf(g).sum())} entries"
    if not np.allclose(g, w, rtol=ex.rtol, atol=ex.atol, equal_nan=True):
        with np.errstate(invalid="ignore"):
            diff = np.abs(g - w)
        diff = np.where(np.isnan(diff), np.inf, diff)
        idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
        return False, (f"largest difference {float(diff[idx]):.3g} at index {tuple(int(i) for i in idx)} "
                       f"(got {float(g[idx]):.6g}, expected {float(w[idx]):.6g})")
    return True, ""


def _matches(got: Any, other: Any, ex: Exercise) -> bool:
    """Whether two outputs are equal (used to recognise a mistake)."""
    ok, _ = _compare(got, other, ex)
    if ok:
        return True
    # NaN-for-NaN: a mistake that overflows produces NaN where the learner's does too.
    try:
        g, o = np.asarray(got, dtype=np.float64), np.asarray(other, dtype=np.float64)
        return g.shape == o.shape and np.allclose(g, o, rtol=ex.rtol, atol=ex.atol, equal_nan=True)
    except Exception:  # noqa: BLE001
        return False


def _fmt_exc(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _check(name, fn)
    except BaseException as exc:  # noqa: BLE001 - check itself must never raise
        if isinstance(exc, KeyboardInterrupt):
            raise
        return CheckResult(name, "error", f"The checker itself failed ({_fmt_exc(exc)}). "
                           "This is a bug in attnlib, not in your code: please report it.")


def _check(name: str, fn: Callable) -> CheckResult:
    ex = EXERCISES.get(name)
    if ex is None:
        return CheckResult(str(name), "error", f"There is no exercise called {name!r}. "
                           f"Known exercises: {', '.join(sorted(EXERCISES))}.")
    if not callable(fn):
        return CheckResult(name, "error", f"check({name!r}, fn) needs a function, got {type(fn).__name__}. "
                           "Pass the function itself, without calling it: check(name, my_fn).")

    cases = ex.cases()
    outs, wants, failures = [], [], []
    for i, case in enumerate(cases):
        args, kwargs = _snapshot(case.args), _snapshot(case.kwargs)
        before = (_snapshot(args), _snapshot(kwargs))
        ok, value, _ = _run_limited(fn, args, kwargs, ex.time_limit)
        where = f"case {i + 1} of {len(cases)} ({case.label}; inputs {_shapes(case)})"
        if not ok:
            if isinstance(value, NotImplementedError):
                return CheckResult(name, "not_attempted", "Not attempted yet: the function still raises "
                                   "NotImplementedError. Replace `raise NotImplementedError` with your code.",
                                   hint=ex.hint)
            if isinstance(value, _Timeout):
                return CheckResult(name, "failed", f"Your function ran longer than {ex.time_limit:g} s on {where} "
                                   "and was stopped. Look for an infinite loop, or replace Python loops over "
                                   "single numbers with array operations.", hint=ex.hint)
            return CheckResult(name, "failed", f"Your function raised {_fmt_exc(value)} on {where}.",
                               hint=ex.hint)
        if not (_same_input(args, before[0]) and _same_input(kwargs, before[1])):
            m = next((m for m in ex.mistakes if m.kind == "mutates"), None)
            msg = (m.message if m else "Your function changed its input in place. Work on a copy "
                   "(e.g. x = x - m instead of x -= m) so the caller's array is left unchanged.")
            return CheckResult(name, "failed", msg, mistake=m.key if m else "mutates_input")
        if value is None:
            return CheckResult(name, "failed", f"Your function returned None on {where}. "
                               "Did you forget the `return` statement?", hint=ex.hint)
        got = _to_numpy(value)
        want = _to_numpy(ex.reference(*_snapshot(case.args), **_snapshot(case.kwargs)))
        same, why = _compare(got, want, ex)
        outs.append(got)
        wants.append(want)
        if not same:
            failures.append((i, case, where, why))

    if failures:
        for m in ex.mistakes:
            if m.kind != "output":
                continue
            if all(_matches(got, _to_numpy(m.fn(*_snapshot(c.args), **_snapshot(c.kwargs))), ex)
                   for got, c in zip(outs, cases)):
                return CheckResult(name, "failed", f"{m.title}. {m.message}", mistake=m.key)
        i, case, where, why = failures[0]
        return CheckResult(name, "failed", f"Wrong result on {where}: {why}. "
                           f"{len(failures)} of {len(cases)} cases differ from the reference.",
                           hint=ex.hint, details={"case": i})

    if ex.perf_case is not None:
        c = ex.perf_case
        ok, value, secs = _run_limited(fn, _snapshot(c.args), _snapshot(c.kwargs), ex.time_limit)
        slow = next((m for m in ex.mistakes if m.kind == "slow"), None)
        if (ok and secs > ex.slow_limit) or isinstance(value, _Timeout):
            msg = (f"{slow.title}. {slow.message}" if slow else
                   "Correct, but far too slow: use array operations instead of Python loops over numbers.")
            return CheckResult(name, "failed", msg + f" (On inputs {_shapes(c)} it took over "
                               f"{ex.slow_limit:g} s; the reference takes milliseconds.)",
                               mistake=slow.key if slow else "too_slow")
        if not ok:
            return CheckResult(name, "failed", f"Your function raised {_fmt_exc(value)} on a larger input "
                               f"({_shapes(c)}).", hint=ex.hint)

    if ex.extra_check is not None:
        problem = ex.extra_check(fn)
        if problem:
            return CheckResult(name, "failed", problem, hint=ex.hint)

    return CheckResult(name, "passed", f"All {len(cases)} cases match the reference"
                       + (" and it is fast enough." if ex.perf_case is not None else "."))
