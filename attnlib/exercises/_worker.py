"""The untrusted side of the checker: call a learner's function on the inputs of a request,
and report what happened as plain data.

API (for the checker's worker and for a grader's sandboxed worker)::

    from attnlib.exercises._worker import run_cases
    reply = run_cases(fn, request)      # attnlib.runtime.wire.Message in, Message out

``request`` comes from the trusted side (:class:`attnlib.exercises._judge.Plan`); ``reply``
goes back to it and is read with every field checked
(:func:`attnlib.exercises._wire.read_reply`). Nothing here is trusted: the function may
have patched anything in this process, so the trusted side judges the values itself, on
cases it made fresh for this check. For each call of the request, this module:

- decodes fresh copies of the inputs and checks that ``fn`` can be called with them
  (outcome ``"signature"`` otherwise);
- captures what the call prints, at the level of file descriptors 1 and 2 (``print``,
  ``sys.stderr``, ``os.write(1, ...)``, a C library's output), keeping the first
  ``print_limit`` characters and counting the rest (:class:`attnlib.runtime.child.Capture`);
- watches for borrowed answers and tampering (:mod:`attnlib.exercises._watch`), and keeps
  the arrays attnlib's own functions returned to it that have the answer's shape (the
  trusted side refuses a function that computed the answer, whatever its name);
- keeps Python's recursion limit (a raised limit and deep recursion would crash the
  process) and ignores NumPy's floating-point warnings;
- notes whether the inputs were changed in place;
- encodes the returned value as plain data (:func:`attnlib.runtime.wire.encode_value`):
  a value that cannot be encoded becomes an ``opaque`` record, the learner's problem,
  reported as such;
- if the process was forked by the function and this is the child returning, it ends
  at once (``os._exit``): only the process that received the request answers it.

The worker itself is a :class:`attnlib.runtime.processes.Child` that serves :func:`answer`;
:class:`Worker` is the trusted side's handle on it, for the notebook's checker
(:func:`attnlib.exercises.check`) and for the grader's sandbox alike.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys
import time
import warnings
from typing import Any, Callable

import numpy as np

from ..i18n import get_language
from ..runtime import processes
from ..runtime.child import Capture
from ..runtime.wire import Message
from . import _wire
from ._watch import Recorder

__all__ = ["Worker", "run_cases", "answer", "IN_WORKER", "EXTRA_CHECKS"]

IN_WORKER = False             # True in a process started by the checker (it dies after the check)
EXTRA_CHECKS: dict[str, Callable] = {}   # extra checks sent along with the function
_RECORDERS: dict[str, Recorder] = {}


# --------------------------------------------------------------------------- the trusted side's handle

class Worker:
    """The process that runs ``fn`` for one check. :meth:`call` sends one request and
    returns ``(reply, cpu_seconds, clock_seconds)`` or a failure :class:`._wire.Outcome`
    (timeout, cpu, crashed, garbled, unsendable); :meth:`close` ends it and everything it
    started. Use as a context manager.

    Args:
        fn: the learner's function.
        memory_limit: bytes of memory the worker may add (Linux). Default: no limit.
        extra_checks: ``{exercise: extra_check}`` the worker may run (sent along when it
            is spawned, or into a sandbox where the exercise modules are not).
        method: ``"fork"`` or ``"spawn"``. Default: :func:`attnlib.runtime.processes.start_method`.
    """

    def __init__(self, fn: Callable, *, memory_limit: int | None = None, extra_checks: dict | None = None,
                 method: str | None = None):
        method = method or processes.start_method()
        if memory_limit and method == "spawn" and "CUDA" in (processes.fork_unsafe_reason() or ""):
            memory_limit += 8 * 2**30  # a CUDA context maps host memory of its own
        self.child = processes.Child(answer, (fn, dict(extra_checks or {}), get_language()), method=method,
                                     memory_limit=memory_limit)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    @property
    def pid(self) -> int | None:
        """The process that runs the function (once started)."""
        return self.child.worker

    @staticmethod
    def _failure(ended: processes.Ended) -> _wire.Outcome:
        return _wire.Outcome.failure(ended.status, text=ended.text, how=ended.how, seconds=ended.seconds,
                                     cpu=ended.cpu)

    def start(self) -> _wire.Outcome | None:
        """Start the worker now (a spawned one: until it is ready); a failure Outcome if it
        cannot be (unsendable, crashed)."""
        ended = self.child.start()
        return None if ended is None else self._failure(ended)

    def call(self, message: Message, request_id: str, *, limit: float, wall: float | None = None):
        """Send a request; wait for its reply within ``limit`` CPU seconds of the worker
        (``wall`` clock seconds at most; default: :func:`attnlib.runtime.limits.backstop`)."""
        got = self.child.ask(message.header, message.arrays, limit=limit, wall=wall,
                             answers=lambda m: _wire.answers(m, request_id, self.child.worker))
        if isinstance(got, processes.Ended):
            return self._failure(got)
        return got.message, got.cpu, got.seconds

    def close(self):
        """End the worker and everything it started; how it ended by itself, if it did."""
        return self.child.close()


# --------------------------------------------------------------------------- the untrusted side

def answer(payload: tuple, msg: Message) -> Message:
    """What the checker's worker serves: ``payload`` is ``(fn, extra_checks, language)``
    (see :class:`attnlib.exercises._core.Worker`)."""
    global IN_WORKER
    fn, extras, lang = payload
    if not IN_WORKER:  # the first request in this process
        IN_WORKER = True
        EXTRA_CHECKS.update(extras or {})
        with contextlib.suppress(Exception):
            from ..i18n import get_language, set_language
            if lang and get_language() != lang:  # a spawned worker speaks the kernel's language
                set_language(lang)
    return run_cases(fn, msg)


def warm_up() -> None:
    """Run one request on a stand-in function: a spawned worker does this before it gets the
    learner's function, so that its first case does not pay for the watch's first use
    (torch's dispatch machinery: about 0.1 s of CPU)."""
    rules = [{"aten": "aten::_softmax"}, {"name": "attnlib.softmax"}]
    run_cases(lambda x: x, _wire.request("warm", [{"kind": "case", "args": (np.zeros(2),)}], rules))


def run_cases(fn: Callable, msg: Message) -> Message:
    """Run ``fn`` on every call of the request; return the reply. Never raises (except
    that a process forked by ``fn`` ends here)."""
    pid = os.getpid()
    try:
        req = _wire.read_request(msg)
    except _wire.WireError as exc:
        return Message({"attnlib": "reply", "version": _wire.VERSION, "id": "", "pid": pid, "outcomes": [],
                        "error": str(exc)[:500]})
    key = json.dumps(req.watch, sort_keys=True)
    rec = _RECORDERS.get(key)
    if rec is None:
        rec = _RECORDERS[key] = Recorder(req.watch)
    arrays: list = []
    nodes = [_run_call(fn, call, req, rec, pid, arrays) for call in req.calls]
    return _wire.reply(req.id, nodes, arrays, pid)


def _function_name(fn: Any) -> str:
    try:
        name = getattr(fn, "__name__", None)
    except Exception:  # noqa: BLE001
        name = None
    return name if isinstance(name, str) else type(fn).__name__


def _run_call(fn: Callable, call: dict, req: _wire.Request, rec: Recorder, pid: int, arrays: list) -> dict:
    kind = call["kind"]
    out = _wire.Outcome("value", function=_function_name(fn)[:200])
    value = None
    rec.evidence, rec.tampered, rec.lost, rec.returned = [], None, False, []
    with Capture(req.print_limit) as cap, _Quiet():
        try:
            args, kwargs = req.inputs(call) if kind != "extra" else ((), {})
            problem = "" if kind == "extra" else _signature_problem(fn, args, kwargs)
        except _wire.WireError as exc:  # only the trusted side writes requests: never expected
            args, kwargs, problem = (), {}, f"the request could not be read: {exc}"
        if problem:
            out.status, out.text = "signature", problem
        else:
            torch_before = "torch" in sys.modules
            value, out = _call(fn, call, args, kwargs, rec, out)
            if os.getpid() != pid:
                os._exit(0)  # a child the function forked, returning here: it does not answer
            if not torch_before and "torch" in sys.modules and not rec.evidence and kind != "extra":
                # torch was imported inside the call, so its operators were not watched yet:
                # run it once more under the watch (the values of the first run count)
                with contextlib.suppress(BaseException):
                    a2, k2 = req.inputs(call)
                    with _KeptRecursionLimit(), rec.watching():
                        fn(*a2, **k2)
                if os.getpid() != pid:
                    os._exit(0)
            if kind == "case":
                before = req.inputs(call)
                out.mutated = not _same_input((args, kwargs), before)
                if out.status == "value":
                    out.computed = rec.computed_like(value)
            if out.status == "value" and kind == "extra":
                out.extra = value if value is None or isinstance(value, str) else str(value)
        if os.getpid() != pid:
            os._exit(0)
    rec.returned = []
    out.borrowed = tuple(_wire.Evidence(r, n) for r, n in rec.evidence)
    out.tampered = rec.tampered
    if out.tampered is None and rec.lost and out.status == "value":
        out.tampered = "the profile hook was removed (sys.setprofile or ctypes)"
    out.printed, out.printed_bytes = cap.text(), cap.total
    return _wire.outcome_node(out, arrays, value if kind == "case" else None)


def _call(fn, call, args, kwargs, rec, out):
    t0, c0 = time.perf_counter(), time.process_time()
    value = None
    try:
        if call["kind"] == "extra":
            check = EXTRA_CHECKS.get(call["exercise"])
            if check is None:
                from ._model import EXERCISES
                check = EXERCISES[call["exercise"]].extra_check
            with _KeptRecursionLimit():
                value = check(rec.watched(fn))
        else:
            with _KeptRecursionLimit(), rec.watching():
                value = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
        out.status, out.raised = "raised", _wire.Raised.of(exc)
        value = None
    out.seconds, out.cpu = time.perf_counter() - t0, time.process_time() - c0
    return value, out


def _signature_problem(fn: Callable, args: tuple, kwargs: dict) -> str:
    """The TypeError of binding the arguments to ``fn``'s signature ('' when they fit or
    when the signature cannot be read)."""
    try:
        sig = inspect.signature(fn)
    except Exception:  # noqa: BLE001 - builtins and odd callables: the call itself will tell
        return ""
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)[:500] or "the arguments do not fit"
    except Exception:  # noqa: BLE001
        return ""
    return ""


def _same_input(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        try:
            return (a.shape == b.shape and a.dtype == b.dtype
                    and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")))
        except Exception:  # noqa: BLE001
            return False
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_input(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_input(a[k], b[k]) for k in b)
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return False


class _Quiet:
    """NumPy's floating-point warnings and Python's warnings off while the function runs."""

    def __enter__(self):
        self.err = np.seterr(all="ignore")
        self.warn = warnings.catch_warnings()
        self.warn.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        self.warn.__exit__(*exc)
        np.seterr(**self.err)
        return False


class _KeptRecursionLimit:
    """While the learner's code runs, ``sys.setrecursionlimit`` keeps the current limit
    (a learner who raises it and recurses deeply would crash the process with SIGSEGV)."""

    def __enter__(self):
        self.limit = sys.getrecursionlimit()
        self.setter = sys.setrecursionlimit
        sys.setrecursionlimit = lambda n: None  # noqa: E731 - the learner's request is ignored
        return self

    def __exit__(self, *exc):
        sys.setrecursionlimit = self.setter
        sys.setrecursionlimit(self.limit)
        return False
