"""The trusted side of grading one exercise: cases, references, comparison, verdict.

:func:`grade_exercise` makes the exercise's cases here, sends only their inputs (plain
data) to the sandbox through ``call``, and judges what comes back with the checker's own
logic, so a grade says exactly what ``al.exercises.check`` would have said, with the same
named mistake and message. The submission never sees a reference output, and nothing it
returns is more than numbers, strings and arrays.

This module is the one place that talks to the checker's internals
(:mod:`attnlib.exercises`); the sandbox side is :func:`attnlib.grading.runner.run`.
"""
from __future__ import annotations

from typing import Callable

from ..exercises import EXERCISES, CheckResult
from ..exercises import _core
from ..exercises._running import Outcome, Raised
from ..i18n import tr
from .wire import Opaque, WireError, decode, encode

__all__ = ["grade_exercise", "stub_function", "Transport"]

# call(request, timeout) -> reply: sends one request to the sandbox and returns its answer
Transport = Callable[[dict, float], dict]


def stub_function(name: str) -> str:
    """The name of the function the stub of exercise ``name`` defines (usually ``name``)."""
    sig = EXERCISES[name].signature()
    return sig[4:sig.index("(")].strip() if sig.startswith("def ") and "(" in sig else name


def _raised(d: dict) -> Raised:
    r = Raised.__new__(Raised)
    r.type_name = str(d.get("type", "Exception"))[:100]
    r.text = str(d.get("text", ""))[:1000]
    for flag in ("recursion", "not_implemented", "memory", "attribute"):
        setattr(r, flag, bool(d.get(flag)))
    return r


class _Replay:
    """Plays the sandbox's answers to the checker as if its own worker had produced them."""

    def __init__(self, ran: dict, n_cases: int, perf: Callable[[], dict] | None):
        self.outcomes = {}
        self.printed = []
        for o in ran.get("outcomes", [])[:n_cases]:
            i = o.get("i")
            if type(i) is not int or i in self.outcomes or not 0 <= i < n_cases:
                raise WireError("an outcome for a case that was not asked for, or twice")
            self.outcomes[i] = o
        self.status, self.how, self.perf, self.n_cases = ran.get("status"), ran.get("how"), perf, n_cases

    def _outcome(self, o: dict) -> Outcome:
        printed = str(o.get("printed", ""))[:2000]
        if printed:
            self.printed.append(printed)
        state = o.get("state")
        mutated = bool(o.get("mutated"))
        if state == "value":
            value = decode(o.get("value"))
            value = _core._to_numpy(value) if not isinstance(value, Opaque) else value
            payload = ("value", value, mutated)
        elif state == "raised":
            payload = ("raised", _raised(o.get("raised") or {}), mutated)
        else:
            raise WireError(f"unknown state {str(state)[:20]!r}")
        forbidden = o.get("forbidden")
        return Outcome("ok", payload, cpu=float(o.get("cpu") or 0.0), seconds=float(o.get("seconds") or 0.0),
                       forbidden=forbidden if isinstance(forbidden, str) else None)

    def _ended(self) -> Outcome:
        if self.status in ("timeout", "cpu"):
            return Outcome(self.status)
        how = self.how if isinstance(self.how, list) and len(self.how) == 2 else None
        return Outcome("crashed", tuple(how) if how else None)

    def run(self, index: int, limit: float, cpu_limit: float | None = None) -> Outcome:
        """The outcome of case ``index``; index ``n_cases`` is the timed (perf) case."""
        if index < self.n_cases:
            return self._outcome(self.outcomes[index]) if index in self.outcomes else self._ended()
        ran = self.perf() if self.perf is not None else {"status": "crashed"}
        o = (ran.get("outcomes") or [None])[0]
        if ran.get("status") != "ok" or not isinstance(o, dict):
            status = ran.get("status") if ran.get("status") in ("timeout", "cpu") else "crashed"
            return Outcome(status, cpu=cpu_limit or 0.0)
        out = self._outcome(o)
        out.value = None  # only the time counts
        return out


def _cases_request(ex, cases: list) -> dict:
    budget = ex.total_time_limit if ex.total_time_limit is not None else 3 * ex.time_limit
    return {"op": "run", "exercise": ex.name, "time_limit": ex.time_limit, "budget": budget,
            "cpu_limit": None, "forbidden": list(ex.shortcuts()),
            "cases": [{"args": encode(tuple(c.args)), "kwargs": encode(dict(c.kwargs))} for c in cases]}


def grade_exercise(name: str, call: Transport) -> tuple[CheckResult, str]:
    """Grade exercise ``name``; ``call`` talks to the sandbox holding the function.

    Returns:
        the :class:`~attnlib.exercises.CheckResult` (status, named mistake, message, in
        the current language) and what the function printed.
    """
    ex = EXERCISES[name]
    cases = ex.all_cases()
    req = _cases_request(ex, cases)
    ran = call(req, req["budget"] + 30)
    if ran.get("status") == "missing":
        return CheckResult(name, "not_attempted", tr("No function for this exercise was found in the notebook."),
                           details={"problem": "missing"}), ""

    def perf() -> dict:
        c = ex.perf_case
        limit = max(ex.time_limit, 10 * ex.slow_limit)
        preq = {"op": "run", "exercise": name, "time_limit": limit, "budget": limit, "cpu_limit": ex.slow_limit,
                "forbidden": list(ex.shortcuts()),
                "cases": [{"args": encode(tuple(c.args)), "kwargs": encode(dict(c.kwargs))}]}
        return call(preq, limit + 30)

    worker = _Replay(ran, len(cases), perf if ex.perf_case is not None else None)
    found = _core._run_cases(ex, cases, worker)
    printed = "".join(worker.printed)
    if isinstance(found, CheckResult):
        return found, printed
    outcomes, failures = found
    if failures:
        return _core._diagnose(ex, cases, outcomes, failures), printed
    result = _core._check_speed(ex, worker, len(cases))
    if result is not None:
        return result, printed
    note = ""
    for state, got in outcomes:
        note = note or (_core._tolerance_note(got, ex) if state == "value" else "")
    fast = tr(" and it is fast enough") if ex.perf_case is not None else ""
    return CheckResult(name, "passed", tr("All {n} cases match the reference{fast}{note}.").format(
        n=len(cases), fast=fast, note=note), details={"problem": None}), printed
