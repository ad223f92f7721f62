"""The untrusted side of the grader: runs one submission inside its sandbox.

Started by :mod:`attnlib.grading.sandbox` (through ``_boot.py``) as the first process of
the sandbox. Nothing it sends is believed beyond what it is: plain data
(:mod:`attnlib.exercises._wire`) that the trusted grader checks and judges itself. The
submission's code runs in this process (the notebook's cells) and in its forked workers
(its functions), so it can change anything here; that only ever affects its own row.

The conversation, one JSON frame each way at a time (fd 3 in, fd 4 out):

1. ``{"op": "execute", "cells": [source, ...], "exercises": {name: function name},
   "cell_timeout": s, "lang": "en"}``: run the code cells top to bottom in a fresh
   IPython shell (a cell that raises, or uses ``cell_timeout`` seconds of CPU time or
   three times that on the clock, is recorded and the next one runs), with ``al.exercises.check`` replaced by a recorder (the grader, not
   the notebook, checks). Then every other process of the sandbox is killed, and the
   answer is ``{"op": "executed", "errors": [...], "found": {name: how}, "answers": {...}}``:
   which function each exercise will be graded with (the last one passed to
   ``check(name, fn)``, else the global of the stub's name) and the quiz answers given
   with ``al.assignments.answer``.
2. ``{"op": "run", "exercise": name, "request": text, "limit": s, "cpu_limit": s or
   null}``: a request of the checker's trusted side (:class:`attnlib.exercises._judge.Plan`).
   A worker is forked (so the function's side effects stay there, and a hang costs only
   this request) and answers it with the checker's untrusted side,
   :func:`attnlib.exercises._worker.run_cases`: the function called on each case, its
   output, exception, printed text, changed inputs and borrowed library answers, as plain
   data (JSON text). The answer is ``{"op": "ran", "status": "ok", "reply": text}``, or
   the status "timeout" (past ``limit`` seconds of the worker's own time, see
   :mod:`attnlib.exercises._clock`), "cpu" (past ``cpu_limit`` CPU seconds)
   or "crashed". Then every other process of the sandbox is killed (``kill(-1)`` from
   pid 1: forks, ``setsid`` children, double forks).
3. ``{"op": "bye"}``.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import sys
import time
import types

_HEADER = struct.Struct(">Q")
PID = os.getpid()


# --------------------------------------------------------------------------- frames

def _write_frame(fd: int, obj) -> None:
    data = json.dumps(obj, allow_nan=True).encode()
    data = _HEADER.pack(len(data)) + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(fd: int, deadline: float | None = None):
    head = _read_exact(fd, _HEADER.size, deadline)
    if head is None:
        return None
    body = _read_exact(fd, _HEADER.unpack(head)[0], deadline)
    return None if body is None else json.loads(body)


# --------------------------------------------------------------------------- executing cells

class _CellTimeout(KeyboardInterrupt):
    pass


def _on_alarm(signum, frame):
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
        error = None
        try:
            # a cell may use `limit` seconds of CPU time (a busy machine does not shorten it), and
            # three times that on the clock (a cell that waits instead of computing)
            signal.setitimer(signal.ITIMER_PROF, limit)
            signal.setitimer(signal.ITIMER_REAL, 3 * limit)
            result = shell.run_cell(source, store_history=False, silent=True)
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.setitimer(signal.ITIMER_PROF, 0)
            exc = result.error_in_exec or result.error_before_exec
            if isinstance(exc, _CellTimeout):
                timeouts.append(i)
            elif exc is not None:
                error = _error_text(exc)
        except _CellTimeout:
            timeouts.append(i)
        except BaseException as exc:  # noqa: BLE001 - whatever the cell did
            error = _error_text(exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.setitimer(signal.ITIMER_PROF, 0)
        if os.getpid() != PID:  # a fork of this process ran the rest of the cell: it stops here
            os._exit(0)
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

def _worker(fn, req: dict, out_fd: int) -> None:
    """In the forked worker: answer the checker's request with the checker's own
    untrusted side (``run_cases``), one frame."""
    from attnlib.exercises import _worker as checker
    checker._setup(None)  # as the checker's own worker: output captured, one torch thread, warnings off
    if req.get("extra"):  # an extra check, pickled by value by the grader (its module is not here)
        import base64
        import pickle
        checker.EXTRA_CHECKS[req["exercise"]] = pickle.loads(base64.b64decode(req["extra"]))
    if req.get("cpu_limit"):
        signal.signal(signal.SIGPROF, lambda *a: os._exit(86))
        signal.setitimer(signal.ITIMER_PROF, float(req["cpu_limit"]))
    me = os.getpid()
    reply = checker.run_cases(fn, req["request"])
    if os.getpid() != me:  # a fork of the function returning here: only the worker answers
        os._exit(0)
    signal.setitimer(signal.ITIMER_PROF, 0)
    _write_frame(out_fd, {"reply": reply})


def _await(fd: int, pid: int, limit: float) -> None:
    """Wait until the worker ``pid`` starts its reply on ``fd``; TimeoutError past ``limit``
    seconds of its own time (the checker's measure: clock time less its waits for a CPU
    that other programs held, so that grading many notebooks at once does not fail a
    correct answer) or ten times that on the clock."""
    from attnlib.exercises._clock import CallClock
    clock = CallClock(pid)
    while not select.select([fd], [], [], clock.left(limit))[0]:
        if clock.past(limit) and not select.select([fd], [], [], 0)[0]:
            raise TimeoutError


def run(fn, req: dict) -> dict:
    """Fork a worker for one request of the checker; wait for its reply within the
    request's limit; then kill every other process of the sandbox."""
    r, w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    for attempt in range(50):
        try:
            pid = os.fork()
            break
        except BlockingIOError:  # processes being reaped still count against the limit
            _kill_others()
            time.sleep(0.1)
    else:
        return {"op": "ran", "exercise": req.get("exercise"), "status": "crashed", "how": ["exit", 0], "seconds": 0.0}
    if pid == 0:
        status = 0
        try:
            os.close(r)
            for fd in (3, 4):  # the worker never talks to the grader
                with contextlib.suppress(OSError):
                    os.close(fd)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.signal(signal.SIGPROF, signal.SIG_DFL)
            _worker(fn, req, w)
        except BaseException:  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)
    os.close(w)
    start = time.monotonic()
    reply, status, how = None, "ok", None
    try:
        _await(r, pid, float(req.get("limit") or 10))
        frame = _read_frame(r, time.monotonic() + 30)
        if frame is None:
            status = "crashed"
        elif isinstance(frame, dict) and isinstance(frame.get("reply"), str):
            reply = frame["reply"]
        else:
            status = "garbled"
    except TimeoutError:
        status = "timeout"
    except ValueError:
        status = "garbled"
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        _, st = os.waitpid(pid, 0)
        if status == "crashed":
            how = (["signal", os.WTERMSIG(st)] if os.WIFSIGNALED(st) else ["exit", os.WEXITSTATUS(st)])
            if how == ["exit", 86]:
                status, how = "cpu", None
    os.close(r)
    _kill_others()
    return {"op": "ran", "exercise": req.get("exercise"), "status": status, "how": how, "reply": reply,
            "seconds": time.monotonic() - start}


# --------------------------------------------------------------------------- main loop

def main() -> None:
    inp, out = 3, 4
    functions: dict = {}
    _write_frame(out, {"op": "ready"})  # before any of the submission's code runs
    while True:
        req = _read_frame(inp)
        if req is None or req.get("op") == "bye":
            break
        if os.getpid() != PID:
            os._exit(0)
        if req["op"] == "execute":
            reply = execute(req)
            functions = reply.pop("_functions")
        elif req["op"] == "run":
            fn = functions.get(req["exercise"])
            reply = ({"op": "ran", "exercise": req["exercise"], "status": "missing", "outcomes": []}
                     if fn is None else run(fn, req))
        else:
            reply = {"op": "error", "text": f"unknown request {req.get('op')!r}"}
        if os.getpid() != PID:
            os._exit(0)
        _write_frame(out, reply)
    _kill_others()


if __name__ == "__main__":
    main()
