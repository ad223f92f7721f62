"""The machinery behind every exercise: run the learner's function safely, compare it
with the reference on deterministic cases, and name the known mistake it matches.

An :class:`Exercise` bundles a stub, a reference solution, a list of :class:`Case`
inputs and a catalogue of :class:`Mistake` implementations. :func:`check` never raises
and never hangs: every failure of the learner's code becomes a :class:`CheckResult`.

How a check runs:

1. The learner's function is called on every case in a worker (a forked process by
   default; see :mod:`._running`) with a time limit; when the check ends the worker is
   killed, so none of the learner's code keeps running (an interrupt of the kernel
   during a check kills it too). What it prints (stdout and stderr) is captured, inputs
   are compared before and after the call (mutation), calls of the exercise's
   ``forbidden`` library functions are noted, and the output is converted to NumPy
   (torch tensors, CPU or CUDA, any float dtype, are fine) and compared with the
   reference in float64, with the tolerance of the answer's dtype.
2. A call of a forbidden function (the library's own answer) fails the check whatever
   the values. If any case fails, every catalogued mistake (``kind="output"``) is run
   on the same cases; a mistake is recognised when, case by case, it gives the
   learner's output or raises where the learner's code raised, and it gave a value on
   at least one case. The result then names the misconception and the fix; otherwise
   it reports the first failing case, its input shapes and the largest difference.
3. If every case passes, the optional ``perf_case`` is timed (``kind="slow"``) and the
   optional ``extra_check`` runs (it may name a ``kind="custom"`` mistake by its key),
   both in the same killable worker.
"""
from __future__ import annotations

import contextlib
import difflib
import html
import inspect
import re
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..i18n import N_, _, join_sentences, tr
from ._compare import _compare, _kind_of_value, _same_input, _shapes, _snapshot, _to_numpy, _tolerance_note
from ._running import _STUCK, Outcome, Raised, _Tee, _Timeout, fork_unsafe_reason, session

__all__ = ["Case", "Mistake", "Exercise", "CheckResult", "EXERCISES", "register", "check", "check_solution",
           "SOFTMAX_SHORTCUTS", "ATTENTION_SHORTCUTS", "MULTIHEAD_SHORTCUTS"]

# Library functions that *are* the answer of a kind of exercise (``Exercise.forbidden``).
# Dotted paths; a path whose module is not imported is simply skipped.
SOFTMAX_SHORTCUTS = ("attnlib.softmax", "attnlib.scaling.softmax_np", "torch.softmax",
                     "torch.nn.functional.softmax", "torch.special.softmax", "torch.Tensor.softmax",
                     "scipy.special.softmax")
ATTENTION_SHORTCUTS = ("attnlib.scaled_dot_product_attention", "attnlib.flash_attention",
                       "attnlib.multi_head_attention", "attnlib.attention_state",
                       "attnlib.sliding_window_attention", "attnlib.ring_attention_simulated",
                       "torch.nn.functional.scaled_dot_product_attention",
                       "torch.nn.functional.multi_head_attention_forward",
                       "torch.nn.MultiheadAttention.forward")
MULTIHEAD_SHORTCUTS = ("attnlib.multi_head_attention", "attnlib.transformer.self_attention",
                       "torch.nn.functional.multi_head_attention_forward",
                       "torch.nn.MultiheadAttention.forward")


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
    fix: str = ""  # level 2 of the hint ladder: the concrete fix, shown when asked for


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
        hint: shown with any failure that matches no catalogued mistake (and after a
            time-out). **A hint gives the idea, in words, never the solution**: lead with
            the idea ("each query shares its attention among the keys..."), no code. The
            checker does not display a hint, or the part of it from the first sentence
            on, that looks like code (an assignment, a function or method call such as
            ``np.exp(...)``, ``return``, ``lambda``); see :func:`displayed_hint`.
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
        forbidden: dotted names of library functions that are the exercise's answer
            (e.g. :data:`SOFTMAX_SHORTCUTS`, :data:`ATTENTION_SHORTCUTS`); a submission
            that calls one fails with a message naming it. Always added: the attnlib
            function of the exercise's own name, if there is one (``attnlib.softmax``
            for "softmax"). Methods and classes work too (``"torch.Tensor.softmax"``,
            ``"torch.nn.MultiheadAttention.forward"``). ``extra_check`` must not call
            them itself: calls are watched during the whole task.
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
    forbidden: tuple = ()
    hints: tuple = ()  # steps from the idea to a near-solution, for failures no mistake explains

    def mistake(self, key: str) -> Mistake:
        for m in self.mistakes:
            if m.key == key:
                return m
        raise KeyError(f"exercise {self.name!r} has no mistake {key!r}; known: "
                       f"{[m.key for m in self.mistakes]}")

    def all_cases(self, seed: int = 0) -> list:
        """The cases as a list, made with ``np.random.default_rng(seed)`` (``cases`` may be
        ``cases(rng)``, ``cases()`` or a plain list)."""
        if not callable(self.cases):
            return list(self.cases)
        if inspect.signature(self.cases).parameters:
            return list(self.cases(np.random.default_rng(seed)))
        return list(self.cases())

    def shortcuts(self) -> tuple:
        """The forbidden functions: ``forbidden`` plus ``attnlib.<name>`` if it exists."""
        import attnlib

        own = (f"attnlib.{self.name}",) if callable(getattr(attnlib, self.name, None)) else ()
        return tuple(dict.fromkeys((*own, *self.forbidden)))

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
    if isinstance(ex.forbidden, str) or not all(isinstance(n, str) and "." in n for n in ex.forbidden):
        raise ValueError(f"exercise {ex.name!r}: forbidden must be a tuple of dotted names such as "
                         f"'attnlib.softmax'; got {ex.forbidden!r}")
    if ex.output_kind not in ("float", "bool", "int", "any"):
        raise ValueError(f"exercise {ex.name!r}: output_kind={ex.output_kind!r}; use float, bool, int or any")
    EXERCISES[ex.name] = ex
    return ex


# --------------------------------------------------------------------------- results

_ICON = {"passed": "✓", "failed": "✗", "not_attempted": "…", "error": "!"}
_COLOUR = {"passed": "#1a7f37", "failed": "#cf222e", "not_attempted": "#6e7781", "error": "#9a6700"}
_HEAD = {"passed": "passed", "failed": "not yet", "not_attempted": "not attempted",  # i18n
         "error": "could not check"}


@dataclass
class CheckResult:
    """What :func:`check` found. ``status`` is passed, failed, not_attempted or error.

    ``mistake`` is the key of the recognised mistake (or None); ``details["problem"]``
    names the kind of failure (``"raised"``, ``"none"``, ``"type"``, ``"shape"``,
    ``"dtype"``, ``"nan"``, ``"inf"``, ``"value"``, ``"timeout"``, ``"signature"``,
    ``"mutates"``, ``"slow"``, ``"mistake"``, ``"extra"``, ``"crashed"``, ``"forbidden"``);
    ``details["printed"]`` holds the start of what the learner's function printed (stdout
    and stderr), ``details["called"]`` the forbidden library function it called.
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
            return f"{_ICON[self.status]} {self.name}: " + _(
                "the course's solution {verdict} (this checks the solution above, not your answer)"
            ).format(verdict=tr(_HEAD[self.status]))
        return f"{_ICON[self.status]} {self.name}: {tr(_HEAD[self.status])}"

    def __str__(self) -> str:
        lines = [self._title(), f"  {self.message}"]
        if self.hint:
            lines.append("  " + _("Hint: {hint}").format(hint=self.hint))
        if self._printed():
            lines.append("  " + _("Your function printed (first lines):"))
            lines += ["    " + s for s in self._printed().splitlines()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        c = _COLOUR[self.status]
        hint = (f'<div style="margin-top:.3em"><b>{_("Hint:")}</b> {html.escape(self.hint)}</div>'
                if self.hint else "")
        printed = (f'<div style="margin-top:.3em"><b>{_("Your function printed (first lines):")}</b>'
                   f'<pre style="margin:.2em 0">{html.escape(self._printed())}</pre></div>'
                   if self._printed() else "")
        title = self._title()
        return (f'<div class="attnlib-check attnlib-check-{self.status}" '
                f'style="border-left:4px solid {c};padding:.4em .8em;margin:.3em 0">'
                f'<b style="color:{c}">{html.escape(title)}</b>'
                f'<div style="white-space:pre-wrap">{html.escape(self.message)}</div>{hint}{printed}</div>')


# --------------------------------------------------------------------------- messages

def _fmt_exc(exc) -> str:
    """'Type: first line of the message' for an exception or a :class:`Raised` record."""
    if not isinstance(exc, Raised):
        exc = Raised(exc)
    text = exc.text.strip()
    text = text.splitlines()[0] if text else ""
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{exc.type_name}: {text}" if text else exc.type_name


def _explain_exc(exc) -> str:
    """A sentence that helps with common errors (empty when there is nothing to add)."""
    if not isinstance(exc, Raised):
        exc = Raised(exc)
    text = exc.text
    if exc.recursion:
        return tr(" Your function calls itself without end. In a notebook this often happens when a "
                  "helper has the same name as your function (e.g. your softmax calls softmax): rename one. "
                  "(The checker keeps Python's recursion limit while your function runs.)")
    if ("Tensor" in text and "ndarray" in text) or (
            exc.attribute and "'numpy.ndarray' object has no attribute" in text):
        return tr(" The checker passes NumPy arrays. To work in PyTorch, convert first, e.g. "
                  "x = torch.as_tensor(x) (you may return a tensor).")
    if exc.memory:
        return tr(" Your function asked for more memory than the machine has.")
    return ""


_CODE = re.compile(r"(?:\b(?:return|lambda|def|for|while)\b\s*[\w(]"      # statements
                   r"|(?:^|[\s;(])[A-Za-z_][\w\[\]:, ]*\s(?:[+\-*/@]?=)\s*[^=\s]"  # x = ..., x += ...
                   r"|[A-Za-z_][\w\]\)]*\.[A-Za-z_]\w*\("                   # np.exp(, x.max(
                   r"|\b[A-Za-z_]\w*\((?:[^()]*[,=][^()]*)\)"              # f(a, b) / f(axis=1)
                   r"|\b[A-Za-z_]\w*\[[^\]]*\]"                              # x[None, :], k[j:j + b]
                   r"|\w\)?\s*[@&|]\s*\(?\w)")                                # a @ b, m1 & m2


def _looks_like_code(text: str) -> bool:
    return bool(_CODE.search(text))


def displayed_hint(hint: str) -> str:
    """The part of ``hint`` the checker shows, in the current language: its sentences up
    to the first one that looks like code (hints give the idea, never the solution)."""
    shown = shown_part_of_hint(hint)
    return tr(shown) if shown else tr(_GENERIC_HINT)


def shown_part_of_hint(hint: str) -> str:
    """The English sentences of ``hint`` before the first one that looks like code, or
    ``""`` when that leaves too little (the generic hint is shown instead). The message
    catalogue holds this part (tools/i18n_extract.py calls this function)."""
    shown = []
    for sentence in re.split(r"(?<=[.!?;:])\s+", (hint or "").strip()):
        if not sentence or _looks_like_code(sentence):
            break
        shown.append(sentence)
    while shown and shown[-1].endswith(":"):  # "For example:" only introduced the code
        shown.pop()
    text = " ".join(shown).rstrip(";:,")
    return text if len(text) >= 12 else ""


_GENERIC_HINT = ("Work through the first failing case by hand, on paper, and compare each step with the "  # i18n
                 "chapter's formula and the shapes in the stub's docstring.")


def _display_name(dotted: str) -> str:
    for long, short in (("attnlib.", "al."), ("torch.nn.functional.", "F."), ("torch.nn.", "nn.")):
        if dotted.startswith(long):
            return short + dotted[len(long):].replace(".forward", "")
    return dotted


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
        return tr(f"Your function cannot be called the way the checker calls it, {fname}({shown}): {exc}. "
                  f"Keep the stub's signature: `{ex.signature()}`.")
    return ""


# --------------------------------------------------------------------------- check

def check(name: str, fn: Callable) -> CheckResult:
    """Check the learner's ``fn`` for exercise ``name``; never raises (except
    KeyboardInterrupt, after stopping the learner's code) and leaves nothing running.

    Args:
        name: an exercise name (a key of :data:`EXERCISES`).
        fn: the learner's function.

    Returns:
        a :class:`CheckResult` with ``.passed`` and ``.message``; it displays itself in
        a notebook.

    ``fn`` runs in a separate worker process (threads where fork is unsafe): what it
    prints is shown with the verdict, and changes it makes to notebook variables are not
    kept.

    Example::

        >>> al.exercises.check("softmax", my_softmax).passed
    """
    tee = _Tee()
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings(), contextlib.redirect_stdout(tee), \
                contextlib.redirect_stderr(tee):
            warnings.simplefilter("ignore")
            result = _check(name, fn)
    except BaseException as exc:  # noqa: BLE001 - check itself must never raise
        if isinstance(exc, KeyboardInterrupt):
            raise
        result = CheckResult(str(name), "error", tr(f"The checker itself failed ({_fmt_exc(exc)}). "
                                                    "This is a bug in attnlib, not in your code: please report it."))
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
    the solution, so after "Run All" nobody reads it as their own pass. It runs through
    exactly the same machinery as :func:`check`.

    Args:
        name: an exercise name (a key of :data:`EXERCISES`).
        fn: the solution function.

    Returns:
        a :class:`CheckResult` with ``solution=True``.
    """
    result = check(name, fn)
    result.solution = True
    return result


def _mistake_text(m: Mistake) -> str:
    """A catalogued mistake as the checker reports it: its title, then its message."""
    return join_sentences(tr(m.title), tr(m.message))


def _fail(ex: Exercise, message: str, problem: str, *, mistake: str | None = None,
          hint: bool = True, **details) -> CheckResult:
    return CheckResult(ex.name, "failed", message, hint=displayed_hint(ex.hint) if hint else "",
                       mistake=mistake, details={"problem": problem, **details})


def _stuck_note(out: Outcome) -> str:
    if not (out.stuck or _STUCK):
        return ""
    reason = tr(fork_unsafe_reason() or N_("fork is unavailable"))
    return tr(" It is still running in the background: the checker runs your function in a thread here "
              f"(because {reason}), and a thread cannot be stopped "
              "inside a long NumPy/C call or a sleep (until that call returns) or in a loop that catches "
              "every exception (a bare `except:`). If the notebook gets slow, restart the kernel.")


def _crash_message(out: Outcome, where: str) -> str:
    how = out.value
    if how and how[0] == "signal":
        try:
            sig = signal.Signals(how[1]).name
        except ValueError:
            sig = f"signal {how[1]}"
        why = {"SIGSEGV": "a segmentation fault: usually recursion so deep that the C stack overflows "  # i18n
                          "(after sys.setrecursionlimit was raised) or a broken C extension call",
               "SIGKILL": "it was killed from outside, most often because the machine ran out of memory",
               "SIGABRT": "an abort inside a C library"}.get(sig, "a fatal signal")
        what = tr(f"was ended by {sig} ({tr(why)})")
    elif how and how[0] == "exit":
        what = tr(f"exited with status {how[1]} (os._exit or a C library ending the process)")
    else:
        what = tr("ended unexpectedly")
    return tr(f"Your function crashed the separate process the checker ran it in: it {what}, on {where}. "
              "Your notebook is not affected.")


def _forbidden_result(ex: Exercise, dotted: str, where: str) -> CheckResult:
    shown = _display_name(dotted)
    return _fail(ex, tr(f"Your function calls {shown} (on {where}): that is the library's own answer, and "
                        f"the exercise is to write {ex.name} yourself, so it does not count. Build it from basic "
                        "array operations (what the chapter shows) instead of calling a ready-made version."),
                 "forbidden", mistake="library_shortcut", hint=False, called=shown)


def _check(name: str, fn: Callable) -> CheckResult:
    if not isinstance(name, str):
        if isinstance(fn, str) and callable(name):
            return CheckResult(str(fn), "error", tr("The arguments are swapped: call "
                                                    f"check({fn!r}, your_function), the exercise name first."))
        return CheckResult(repr(name), "error", tr("check(name, fn) needs the exercise name as a string, "
                                                   f"e.g. check('softmax', my_softmax); got {type(name).__name__}."))
    ex = EXERCISES.get(name)
    if ex is None:
        close = difflib.get_close_matches(name, list(EXERCISES), n=1)
        return CheckResult(name, "error", tr(f"There is no exercise called {name!r}.")
                           + (tr(f" Did you mean {close[0]!r}?") if close else "")
                           + tr(f" Known exercises: {', '.join(sorted(EXERCISES))}."))
    if not callable(fn):
        return CheckResult(name, "error", tr(f"check({name!r}, fn) needs a function, got {type(fn).__name__}. "
                                             "Pass the function itself, without calling it: check(name, my_fn)."))
    cases = ex.all_cases(int(np.random.SeedSequence().entropy % 2**32))
    for case in cases:
        problem = _signature_problem(fn, case, ex)
        if problem:
            return _fail(ex, problem, "signature", hint=False)
    tasks = [_case_task(fn, c) for c in cases] + [_perf_task(ex, fn), _extra_task(ex, fn)]
    with session(tasks, ex.shortcuts(), fn) as worker:
        found = _run_cases(ex, cases, worker)
        if isinstance(found, CheckResult):
            return found
        outcomes, failures = found
        if not failures:
            for later in (_check_speed, _check_extra):  # (a failed CheckResult is falsy: no `or` chain)
                result = later(ex, worker, len(cases))
                if result is not None:
                    return result
    if failures:
        return _diagnose(ex, cases, outcomes, failures)
    note = ""
    for state, got in outcomes:
        note = note or (_tolerance_note(got, ex) if state == "value" else "")
    fast = _(" and it is fast enough") if ex.perf_case is not None else ""
    return CheckResult(name, "passed", _("All {n} cases match the reference{fast}{note}.").format(
                           n=len(cases), fast=fast, note=note),
                       details={"problem": None})


def _case_task(fn: Callable, case: Case) -> Callable:
    """Runs in the worker: call ``fn`` on fresh copies of the case's inputs; returns
    ``(state, value, mutated)`` with state "value" (converted to NumPy) or "raised"."""
    def task():
        args, kwargs = _snapshot(case.args), _snapshot(case.kwargs)
        before = (_snapshot(args), _snapshot(kwargs))
        try:
            state, value = "value", fn(*args, **kwargs)
        except _Timeout:
            raise
        except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
            state, value = "raised", Raised(exc)
        mutated = not (_same_input(args, before[0]) and _same_input(kwargs, before[1]))
        return state, (_to_numpy(value) if state == "value" else value), mutated
    return task


def _perf_task(ex: Exercise, fn: Callable) -> Callable:
    def task():
        c = ex.perf_case
        fn(*_snapshot(c.args), **_snapshot(c.kwargs))
        return None  # only the time matters: nothing big goes back
    return task


def _extra_task(ex: Exercise, fn: Callable) -> Callable:
    def task():
        return ex.extra_check(fn)
    return task


def _run_cases(ex: Exercise, cases: list, worker):
    """Run the learner's function on every case in ``worker``. Returns a final
    :class:`CheckResult` (not attempted, timeout, crash, mutation, forbidden call) or
    ``(outcomes, failures)``: one ``("value", output)`` or ``("raised", Raised)`` per case,
    and ``(case index, message, problem)`` for each case that differs from the reference."""
    budget = ex.total_time_limit if ex.total_time_limit is not None else 3 * ex.time_limit
    start = time.perf_counter()
    outcomes: list[tuple[str, Any]] = []
    failures: list[tuple[int, str, str]] = []
    forbidden = None
    for i, case in enumerate(cases):
        where = tr(f"case {i + 1} of {len(cases)} ({tr(case.label)}; inputs {_shapes(case)})")
        limit = min(ex.time_limit, max(budget - (time.perf_counter() - start), 0.05))
        out = worker.run(i, limit)
        if out.printed:
            sys.stdout.write(out.printed)
        if out.status in ("timeout", "cpu"):
            what = (tr(f"ran longer than {ex.time_limit:g} s on {where}") if limit >= ex.time_limit else
                    tr(f"took more than {budget:g} s for the first {i + 1} cases (stopped on {where})"))
            return _fail(ex, tr(f"Your function {what} and was stopped. Look for an infinite loop, or "
                                "replace Python loops over single numbers with array operations.") + _stuck_note(out),
                         "timeout", case=i)
        if out.status == "crashed":
            return _fail(ex, _crash_message(out, where), "crashed", case=i)
        if out.status == "raised":  # our task code failed, not the learner's function
            raise RuntimeError(f"the checker's task failed: {_fmt_exc(out.value)}")
        forbidden = forbidden or (out.forbidden and (out.forbidden, where))
        state, value, mutated = out.value
        if state == "raised" and value.not_implemented and i == 0:
            return CheckResult(ex.name, "not_attempted", tr("Not attempted yet: the function still raises "
                                                            "NotImplementedError. Replace `raise NotImplementedError` with your code."),
                               details={"problem": "not_attempted"})
        if forbidden:
            return _forbidden_result(ex, *forbidden)
        if mutated:
            m = next((m for m in ex.mistakes if m.kind == "mutates"), None)
            msg = (_mistake_text(m) if m else tr("Your function changed its input in place. Work on "
                   "a copy (e.g. x = x - m instead of x -= m) so the caller's array is left unchanged."))
            return _fail(ex, msg + tr(f" (Seen on {where}.)"), "mutates",
                         mistake=m.key if m else "mutates_input", hint=False, case=i)
        if state == "raised":
            outcomes.append(("raised", value))
            failures.append((i, tr(f"Your function raised {_fmt_exc(value)} on {where}.") + _explain_exc(value),
                             "raised"))
            continue
        got = value
        outcomes.append(("value", got))
        if got is None:
            failures.append((i, tr(f"Your function returned None on {where}. Did you forget the `return` "
                                   "statement (in every branch, e.g. with and without a mask)?"), "none"))
            continue
        want = _to_numpy(ex.reference(*_snapshot(case.args), **_snapshot(case.kwargs)))
        same, why, problem = _compare(got, want, ex)
        if not same:
            failures.append((i, tr(f"Wrong result on {where}: {why}."), problem))
    return outcomes, failures


def _diagnose(ex: Exercise, cases: list, outcomes: list, failures: list) -> CheckResult:
    """Name the catalogued mistake that explains the outcomes, else the first failure."""
    some_value = any(state == "value" for state, _ in outcomes)  # a mistake must match a value
    for m in ex.mistakes if some_value else ():
        if m.kind == "output" and _reproduces(m, outcomes, cases, ex):
            return _fail(ex, _mistake_text(m), "mistake", mistake=m.key, hint=False)
    i, msg, problem = failures[0]
    tail = (tr(f" {len(failures)} of {len(cases)} cases fail.") if len(failures) > 1 else
            tr(f" The other {len(cases) - 1} cases pass.") if len(cases) > 1 else "")
    return _fail(ex, msg + tail, problem, case=i)


def _check_speed(ex: Exercise, worker, n: int) -> CheckResult | None:
    """Time the learner's function on ``ex.perf_case`` (stopped at ``slow_limit`` seconds
    of CPU time); None when fast enough."""
    if ex.perf_case is None:
        return None
    c = ex.perf_case
    # judged by the worker's CPU time, so a busy machine does not make a fast answer "slow";
    # the wall-clock limit only catches a call that waits (sleeps, blocks) instead of computing
    out = worker.run(n, max(ex.time_limit, 10 * ex.slow_limit), cpu_limit=ex.slow_limit)
    if out.printed:
        sys.stdout.write(out.printed)
    if out.forbidden:
        return _forbidden_result(ex, out.forbidden, tr(f"a larger input ({_shapes(c)})"))
    if out.status in ("timeout", "cpu") or (out.status == "ok" and out.cpu > ex.slow_limit):
        slow = next((m for m in ex.mistakes if m.kind == "slow"), None)
        msg = (_mistake_text(slow) if slow else
               tr("Correct, but far too slow: use array operations instead of Python loops over numbers."))
        return _fail(ex, msg + tr(f" (On inputs {_shapes(c)} it used over {ex.slow_limit:g} s of CPU time; the "
                                  "reference takes milliseconds.)") + _stuck_note(out), "slow",
                     mistake=slow.key if slow else "too_slow", hint=False)
    if out.status == "crashed":
        return _fail(ex, _crash_message(out, tr(f"a larger input ({_shapes(c)})")), "crashed")
    if out.status == "raised":
        return _fail(ex, tr(f"Your function passes the small cases but raised {_fmt_exc(out.value)} on a larger "
                            f"input ({_shapes(c)}).") + _explain_exc(out.value), "raised")
    return None


def _check_extra(ex: Exercise, worker, n: int) -> CheckResult | None:
    """Run ``ex.extra_check(fn)`` in the worker; None when it finds nothing."""
    if ex.extra_check is None:
        return None
    limit = 2 * ex.time_limit + ex.slow_limit
    out = worker.run(n + 1, limit)
    if out.printed:
        sys.stdout.write(out.printed)
    if out.forbidden:
        return _forbidden_result(ex, out.forbidden, tr("the extra test's input"))
    if out.status in ("timeout", "cpu"):
        return _fail(ex, tr("Your function is right on the small cases, but the extra test (which runs it on "
                            f"a larger input) took longer than {limit:g} s, so the checker stopped it. Look for a "
                            "loop that only ends for small inputs, or Python loops over single numbers.")
                     + _stuck_note(out), "timeout")
    if out.status == "crashed":
        return _fail(ex, _crash_message(out, tr("the extra test's input")), "crashed")
    if out.status == "raised":
        return _fail(ex, tr(f"The values are right, but an extra test failed: your function raised "
                            f"{_fmt_exc(out.value)}.") + _explain_exc(out.value), "extra")
    problem = out.value
    if not problem:
        return None
    m = next((m for m in ex.mistakes if m.key == problem), None)
    if m is not None:
        return _fail(ex, _mistake_text(m), "mistake", mistake=m.key, hint=False)
    return _fail(ex, tr(str(problem)), "extra")


def _run_limited(fn: Callable, args: tuple, kwargs: dict, limit: float):
    """Deprecated helper kept for extra checks written before the forked worker: the
    extra check already runs in the killable worker, so this simply calls ``fn`` and
    returns ``(ok, value_or_exception, seconds)``; ``limit`` is not enforced here."""
    t0 = time.perf_counter()
    try:
        return True, fn(*args, **kwargs), time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        return False, exc, time.perf_counter() - t0


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
