"""The trusted side of grading one exercise, through the checker's own judge.

:func:`grade_exercise` drives :class:`attnlib.exercises._judge.Plan` (the checker's
trusted side: it makes fresh cases from a seed, computes the references, compares, and
names the mistake) and carries each of its requests to the sandbox, where the runner
answers it with :func:`attnlib.exercises._worker.run_cases` on the student's function
(:func:`attnlib.grading.runner.run`). A grade therefore says exactly what
``al.exercises.check`` would say, with the same named mistake and message. The sandbox
sees the inputs only, never a reference output, and what it sends back is plain data
(:mod:`attnlib.runtime.wire`) that ``Plan.take`` validates field by field
(:mod:`attnlib.exercises._wire`).

The transport's own failures (the runner's worker past its time or CPU limit, a crash, an
answer that is not a frame) are given to the plan as ``_wire.Outcome.failure(...)``.

One thing crosses the other way besides inputs: an exercise's ``extra_check`` (chapter 7's
peak-memory test) runs next to the student's function, but its module, which holds the
reference solutions, is not in the sandbox. It is sent pickled *by value* (cloudpickle):
the check's own code and the helpers it calls, nothing else of the module (checked by
``tests/test_grade.py``).
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Callable

import numpy as np

from ..exercises import EXERCISES, CheckResult
from ..exercises import _wire
from ..exercises._judge import Plan
from ..i18n import _
from ..runtime.wire import Message

__all__ = ["grade_exercise", "stub_function", "extra_check_payload", "Transport"]

# call(request, timeout) -> reply: sends one request (a Message) to the sandbox and returns its answer
Transport = Callable[[Message, float], Message]

_PICKLE_LOCK = threading.Lock()
_EXTRA_CACHE: dict[str, bytes] = {}


def stub_function(name: str) -> str:
    """The name of the function the stub of exercise ``name`` defines (usually ``name``)."""
    sig = EXERCISES[name].signature()
    return sig[4:sig.index("(")].strip() if sig.startswith("def ") and "(" in sig else name


def extra_check_payload(name: str) -> bytes:
    """Exercise ``name``'s ``extra_check``, pickled by value: its code and the module-level
    helpers it uses travel, the rest of its module (the references) does not."""
    if name in _EXTRA_CACHE:
        return _EXTRA_CACHE[name]
    import cloudpickle

    check = EXERCISES[name].extra_check
    module = sys.modules[check.__module__]
    with _PICKLE_LOCK:  # register_pickle_by_value is process-wide
        cloudpickle.register_pickle_by_value(module)
        try:
            blob = cloudpickle.dumps(check)
        finally:
            cloudpickle.unregister_pickle_by_value(module)
    _EXTRA_CACHE[name] = blob
    return blob


def _failure(ran: dict) -> _wire.Outcome:
    status = ran.get("status")
    how = ran.get("how")
    how = tuple(how) if isinstance(how, list) and len(how) == 2 else None
    seconds = ran.get("seconds") if type(ran.get("seconds")) in (int, float) else 0.0
    if status in ("timeout", "cpu", "crashed"):
        return _wire.Outcome.failure(status, how=how, seconds=float(seconds))
    return _wire.Outcome.failure("garbled", text=_("the sandbox answered {what}").format(what=str(status)[:40]))


def grade_exercise(name: str, call: Transport, *, seed: int | None = None) -> tuple[CheckResult, str]:
    """Grade exercise ``name``; ``call`` carries a request to the sandbox holding the function.

    Args:
        name: the exercise.
        call: ``call(request, timeout) -> reply`` (see :mod:`attnlib.grading.runner`).
        seed: the seed of the cases. Default: ``None`` (a fresh one; the result's
            ``details["seed"]`` replays it).

    Returns:
        the :class:`~attnlib.exercises.CheckResult` (status, named mistake, message, in
        the current language) and the start of what the function printed.
    """
    ex = EXERCISES[name]
    plan = Plan(ex, seed=seed, batch=True, answer_key=False)  # a grader never lets the answer key pass
    while (req := plan.next_request()) is not None:
        envelope = {"op": "run", "exercise": name, "request": req.message.header, "limit": req.limit,
                    "wall": req.wall, "extra": req.stage == "extra"}
        arrays = req.message.arrays
        if req.stage == "extra":
            arrays += (np.frombuffer(extra_check_payload(name), dtype=np.uint8),)
        ran = call(Message(envelope, arrays), req.wall + 30)  # (the runner stops the call itself before)
        head = ran.header
        if head.get("status") == "missing":
            return CheckResult(name, "not_attempted", _("No function for this exercise was found in the notebook."),
                               details={"problem": "missing"}), ""
        if head.get("status") == "ok" and isinstance(head.get("reply"), dict):
            cpu = head.get("cpu") if type(head.get("cpu")) in (int, float) else None
            plan.take(req, Message(head["reply"], ran.arrays), cpu=cpu)
        else:
            plan.take(req, _failure(head))
    result = plan.result()
    printed = ""
    with contextlib.suppress(Exception):
        printed = str(result.details.get("printed", ""))
    return result, printed
