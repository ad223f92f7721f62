"""The exercise registry and :func:`check`: say whether a learner's function is right and,
if not, which known mistake it makes.

An :class:`Exercise` bundles a stub, a reference solution, a case generator and a
catalogue of :class:`Mistake` implementations. :func:`check` never raises and never
hangs: every failure of the learner's code becomes a :class:`CheckResult`.

How a check runs (the trusted / untrusted split; a grader reuses both halves):

1. The trusted side (:class:`._judge.Plan`, here in the kernel) makes this check's cases
   from a fresh seed (``details["seed"]`` replays them: ``check(name, fn, seed=...)``).
2. The untrusted side (:func:`._worker.run_cases`, here in a process forked or spawned
   for this check by :class:`._running.Worker`) calls the function on each case's inputs
   and sends back plain data (:mod:`._wire`): the value (arrays rebuilt from raw bytes,
   numbers, text), or what it raised, what it printed, whether it changed its inputs,
   which of the library's own answers it called (:mod:`._watch`), its times. Nothing
   sent back is unpickled, and when the verdict is shown nothing it started still runs.
3. The trusted side compares each value with the reference at the exercise's tolerance;
   if a case fails it runs every catalogued mistake (``kind="output"``) on the same cases:
   a mistake is recognised when, case by case, it gives the learner's output or raises
   where the learner's code raised, and it gave a value on at least one case. The result
   names the misconception and its idea (level 1 of the hint ladder, :mod:`._hints`);
   otherwise it reports the first failing case, its input shapes and the largest difference.
4. A call of the library's own answer (``Exercise.borrowed``, the answer key of the
   course) fails the check whatever the values. If every case passes, the optional
   ``perf_case`` is timed (``kind="slow"``) and the optional ``extra_check`` runs (it may
   name a ``kind="custom"`` mistake by its key), in the same worker.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import warnings
from typing import Callable

import numpy as np

from ..i18n import _
from . import _hints, _wire
from ._judge import Plan, _fmt_exc
from ._model import EXERCISES, CheckResult
from ._running import Worker

__all__ = ["check", "check_solution", "mistakes"]


# --------------------------------------------------------------------------- check

class _Sink(io.TextIOBase):
    """Swallows what the trusted side's own code prints during a check."""

    def writable(self) -> bool:
        return True

    def write(self, s) -> int:
        return len(s)


def check(name: str, fn: Callable, seed: int | None = None) -> CheckResult:
    """Check the learner's ``fn`` for exercise ``name``; never raises (except
    KeyboardInterrupt, after stopping the learner's code) and leaves nothing running.

    Args:
        name: an exercise name (a key of :data:`EXERCISES`).
        fn: the learner's function.
        seed: seed of the cases. Default: ``None``, a fresh one each check (memorised
            answers fail); ``result.details["seed"]`` replays a check.

    Returns:
        a :class:`CheckResult` with ``.passed`` and ``.message``; it displays itself in
        a notebook.

    ``fn`` runs in a separate process (forked, or spawned where forking is unsafe): what
    it prints is shown with the verdict, changes it makes to notebook variables are not
    kept, and nothing it started runs on after the verdict.

    Example::

        >>> al.exercises.check("softmax", my_softmax).passed
    """
    return _checked(name, fn, seed, solution=False)


def check_solution(name: str, fn: Callable, seed: int | None = None) -> CheckResult:
    """Check the course's solution ``fn`` of exercise ``name``, labelled as the solution.

    The hidden solution cell under each stub defines ``<name>_solution`` (so it never
    replaces the learner's function) and calls this. The verdict says that it checked
    the solution, so after "Run All" nobody reads it as their own pass. It runs through
    exactly the same machinery as :func:`check`, and does not count on the hint ladder.

    Args:
        name: an exercise name (a key of :data:`EXERCISES`).
        fn: the solution function.
        seed: as in :func:`check`.

    Returns:
        a :class:`CheckResult` with ``solution=True``.
    """
    return _checked(name, fn, seed, solution=True)


def mistakes(name: str) -> list[str]:
    """The known mistakes that the checker of exercise ``name`` recognises, by title, in
    the current language (:func:`attnlib.set_language`), in the order it tries them.

    Args:
        name: an exercise name (a key of :data:`EXERCISES`).

    Returns:
        a list of str, one title per catalogued :class:`Mistake`.

    Raises:
        KeyError: ``name`` is not an exercise (the message lists the exercises).

    Example::

        >>> for title in al.exercises.mistakes("softmax"):
        ...     print("-", title)
    """
    ex = EXERCISES.get(name) if isinstance(name, str) else None
    if ex is None:
        raise KeyError(f"mistakes(name): no exercise is named {name!r}; pass one of "
                       f"{', '.join(sorted(EXERCISES))}")
    return [_(m.title) for m in ex.mistakes]


def _checked(name, fn, seed, *, solution: bool) -> CheckResult:
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings(), contextlib.redirect_stdout(_Sink()), \
                contextlib.redirect_stderr(_Sink()):
            warnings.simplefilter("ignore")
            result = _check(name, fn, seed)
    except BaseException as exc:  # noqa: BLE001 - check itself must never raise
        if isinstance(exc, KeyboardInterrupt):
            raise
        result = CheckResult(str(name), "error", _("The checker itself failed ({error}). This is a bug in attnlib, not in your "
                                                   "code: please report it.").format(error=_fmt_exc(exc)))
    result.solution = solution
    ex = EXERCISES.get(name) if isinstance(name, str) else None
    if ex is not None:
        _hints.record(ex, result)
    return result


def _check(name: str, fn: Callable, seed: int | None) -> CheckResult:
    if not isinstance(name, str):
        if isinstance(fn, str) and callable(name):
            return CheckResult(str(fn), "error", _("The arguments are swapped: call check({name}, your_function), the exercise "
                                                   "name first.").format(name=repr(fn)))
        return CheckResult(repr(name), "error", _("check(name, fn) needs the exercise name as a string, e.g. check('softmax', "
                                                  "my_softmax); got {type}.").format(type=type(name).__name__))
    ex = EXERCISES.get(name)
    if ex is None:
        close = difflib.get_close_matches(name, list(EXERCISES), n=1)
        return CheckResult(name, "error", _("There is no exercise called {name}.").format(name=repr(name))
                           + (_(" Did you mean {close}?").format(close=repr(close[0])) if close else "")
                           + _(" Known exercises: {names}.").format(names=", ".join(sorted(EXERCISES))))
    if not callable(fn):
        return CheckResult(name, "error", _("check({name}, fn) needs a function, got {type}. Pass the function itself, "
                                            "without calling it: check(name, my_fn).").format(
                                                name=repr(name), type=type(fn).__name__))
    plan = Plan(ex, seed)
    extra = {ex.name: ex.extra_check} if ex.extra_check is not None else {}
    with Worker(fn, memory_limit=ex.memory_limit, extra_checks=extra) as worker:
        failed = worker.start()  # (the cases' time limits start once the worker is ready)
        while (req := plan.next_request()) is not None:
            if failed is not None:
                plan.take(req, failed)
                continue
            got = worker.call(req.id, req.text, limit=req.limit, cpu_limit=req.cpu_limit)
            if isinstance(got, _wire.Outcome):
                plan.take(req, got)
            else:
                reply, cpu, seconds = got
                plan.take(req, reply, cpu=cpu, pid=worker.last_pid, seconds=seconds)
    return plan.result()

