"""The untrusted side of the grader: runs one submission inside its sandbox.

Started by :mod:`attnlib.grading.sandbox` (through ``_boot.py``) as the first process of
the sandbox. Nothing it sends is believed beyond what it is: plain data
(:mod:`attnlib.runtime.wire`) that the trusted grader checks and judges itself. The
submission's code runs in this process (the notebook's cells) and in the checker's
workers (its functions), so it can change anything here; that only ever affects its own
row.

The conversation, one message each way at a time (the pipe descriptors named in
``ATTNLIB_CHANNEL``):

1. ``{"op": "execute", "cells": [source, ...], "exercises": {name: function name},
   "cell_timeout": s, "lang": "en"}``: run the code cells top to bottom in a fresh
   IPython shell, with ``al.exercises.check`` replaced by a recorder (the grader, not the
   notebook, checks). A cell that raises, or passes ``cell_timeout`` CPU seconds (the
   clock's backstop on top: :mod:`attnlib.runtime.limits`), is recorded and the next one
   runs. A process a cell forked that comes back here ends at once, whatever it did. Then
   every other process of the sandbox is killed, and the answer is ``{"op": "executed",
   "errors": [...], "found": {name: how}, "answers": {...}}``: which function each
   exercise will be graded with (the last one passed to ``check(name, fn)``, else the
   global of the stub's name) and the quiz answers given with ``al.assignments.answer``.
2. ``{"op": "run", "exercise": name, "request": HEADER, "limit": s, "wall": s,
   "extra": bool}`` with the request's arrays (and, with ``extra``, the exercise's extra
   check pickled by value as the last array): a request of the checker's trusted side
   (:class:`attnlib.exercises._judge.Plan`). The checker's own worker
   (:class:`attnlib.exercises._worker.Worker`, forked for this request, so the function's
   side effects stay there and a hang costs only this request) answers it. The answer is
   ``{"op": "ran", "status": "ok", "reply": HEADER}`` with the reply's arrays, or the
   status "timeout", "cpu", "crashed" or "garbled" (the limit rule, the worker's end).
   Then every other process of the sandbox is killed (``kill(-1)`` from pid 1: forks,
   ``setsid`` children, double forks).
3. ``{"op": "bye"}``.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from attnlib.runtime.limits import WINDOW, Meter, backstop
from attnlib.runtime.wire import Channel, Closed, Message, WireError

PID = os.getpid()


# --------------------------------------------------------------------------- executing cells

class _CellTimeout(KeyboardInterrupt):
    pass


_CELL: dict = {}  # the running cell's Meter and CPU limit (the clock's alarm asks the one rule)


def _on_alarm(signum, frame):
    meter = _CELL.get("meter")
    if signum == signal.SIGALRM and meter is not None and meter.past(_CELL["limit"]) is None:
        signal.setitimer(signal.ITIMER_REAL, WINDOW)  # past the backstop but computing (starved): look again
        return
    raise _CellTimeout()


def _kill_others() -> None:
    """Kill every other process of the sandbox (from pid 1 of its PID namespace, every
    process there is a descendant, and an orphan is re-parented to it) and wait until
    they are gone, so that they no longer count against its process limit."""
    if os.getpid() != 1:
        _reap(0)
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)  # (again: one may have forked meanwhile)
        if _reap(0.05) == "none left":
            return


def _reap(seconds: float) -> str:
    """Reap the children that have ended, for up to ``seconds``."""
    end = time.monotonic() + seconds
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return "none left"
        if pid == 0:
            if time.monotonic() >= end:
                return "some left"
            time.sleep(0.005)


def _error_text(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 - a broken __str__
        text = type(exc).__name__
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__


def _run_cell(shell, source: str, limit: float) -> tuple[str | None, bool]:
    """Run one cell: (its error, whether it timed out). A process the cell forked never
    returns from here (whatever it caught on the way)."""
    error, timeout = None, False
    try:
        try:
            # a cell may use `limit` CPU seconds (a busy machine does not shorten it), and the
            # clock's backstop on top (a cell that waits instead of computing)
            _CELL.update(meter=Meter(os.getpid()), limit=limit)
            signal.setitimer(signal.ITIMER_PROF, limit)
            signal.setitimer(signal.ITIMER_REAL, backstop(limit))
            result = shell.run_cell(source, store_history=False, silent=True)
            exc = result.error_in_exec or result.error_before_exec
            if isinstance(exc, _CellTimeout):
                timeout = True
            elif exc is not None:
                error = _error_text(exc)
        except _CellTimeout:
            timeout = True
        except BaseException as exc:  # noqa: BLE001 - whatever the cell did
            error = _error_text(exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.setitimer(signal.ITIMER_PROF, 0)
            _CELL.clear()
    finally:
        if os.getpid() != PID:  # a fork of this process ran the rest of the cell: it stops here
            os._exit(0)
    return error, timeout


def execute(req: dict) -> dict:
    checks = sys.modules["attnlib.exercises"].recorded  # filled by the stand-in check() (_boot.py)
    from IPython.core.interactiveshell import InteractiveShell

    import attnlib
    with contextlib.suppress(Exception):
        attnlib.set_language(req.get("lang", "en"))
    shell = InteractiveShell.instance()
    errors, timeouts = [], []
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGPROF, _on_alarm)
    limit = float(req["cell_timeout"])
    for i, source in enumerate(req["cells"]):
        error, timeout = _run_cell(shell, source, limit)
        if timeout:
            timeouts.append(i)
        if error:
            errors.append({"cell": i, "error": error})
    _kill_others()
    ns = shell.user_ns
    functions, found = {}, {}
    for name, fname in req["exercises"].items():
        fn = checks.get(name)
        how = "check" if callable(fn) else None
        if how is None and callable(ns.get(fname)):
            fn, how = ns[fname], "global"
        if how:
            functions[name] = fn
        found[name] = how
    answers = {}
    assignments = sys.modules.get("attnlib.grading.assignments")  # imported by the notebook's answer cells
    for qid, value in dict(getattr(assignments, "_ANSWERS", None) or {}).items():
        if isinstance(qid, str) and isinstance(value, str):
            answers[qid[:40]] = value[:20]
    return {"op": "executed", "errors": errors[:50], "timeouts": timeouts, "found": found,
            "answers": answers, "_functions": functions}


# --------------------------------------------------------------------------- running functions

def run(fn, req: dict, arrays=()) -> Message:
    """Answer one request of the checker with the checker's own worker (forked here), then
    kill every other process of the sandbox."""
    from attnlib.exercises._worker import Worker

    extras = {}
    if req.get("extra") and arrays:  # an extra check, pickled by value by the grader (its module is not here)
        import pickle
        extras[req["exercise"]] = pickle.loads(bytes(arrays[-1]))
        arrays = arrays[:-1]
    head = req.get("request") if isinstance(req.get("request"), dict) else {}
    ran = {"op": "ran", "exercise": req.get("exercise")}
    with Worker(fn, extra_checks=extras, method="fork") as worker:
        got = worker.call(Message(head, tuple(arrays)), str(head.get("id", "")), limit=float(req.get("limit") or 10),
                          wall=float(req["wall"]) if req.get("wall") else None)
    _kill_others()
    if isinstance(got, tuple):
        reply, cpu, seconds = got
        return Message({**ran, "status": "ok", "reply": reply.header, "cpu": cpu, "seconds": seconds}, reply.arrays)
    return Message({**ran, "status": got.status, "how": list(got.how) if got.how else None, "seconds": got.seconds})


# --------------------------------------------------------------------------- main loop

def main() -> None:
    read_fd, write_fd = (int(x) for x in os.environ.pop("ATTNLIB_CHANNEL").split(","))
    channel = Channel.from_fds(read_fd, write_fd, max_bytes=64 * 2**20)
    functions: dict = {}
    channel.send({"op": "ready"})  # before any of the submission's code runs
    while True:
        try:
            header, arrays = channel.recv()
        except (Closed, WireError):
            break
        if header.get("op") == "bye":
            break
        if header.get("op") == "execute":
            reply = execute(header)
            functions = reply.pop("_functions")
            reply = Message(reply)
        elif header.get("op") == "run":
            fn = functions.get(header.get("exercise"))
            reply = (Message({"op": "ran", "exercise": header.get("exercise"), "status": "missing"}) if fn is None
                     else run(fn, header, arrays))
        else:
            reply = Message({"op": "error", "text": f"unknown request {str(header.get('op'))[:40]!r}"})
        if os.getpid() != PID:
            os._exit(0)
        channel.send(*reply)
    _kill_others()


if __name__ == "__main__":
    main()
