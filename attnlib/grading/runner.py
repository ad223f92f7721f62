"""The untrusted side of the grader: runs one submission inside its sandbox.

Started by :mod:`attnlib.grading.sandbox` (``python -I -m attnlib.grading.runner``) as the
first process of the sandbox. Nothing it sends is believed beyond what it is: plain data
(:mod:`attnlib.grading.wire`) that the trusted grader checks and judges itself. The
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
2. ``{"op": "run", "exercise": name, "cases": [...], "time_limit": s, "budget": s,
   "cpu_limit": s or null, "forbidden": [...]}``: a worker is forked (so the function's
   side effects stay there, and a hang costs only this request); it calls the function on
   each case (inputs decoded from plain data) and sends back, case by case, the output as
   plain data, or the exception's type and text, whether the input was changed in place,
   what it printed and which forbidden library function it called. A case past its time
   limit, or the worker's death, ends the request; then every other process of the
   sandbox is killed (``kill(-1)`` from pid 1: forks, ``setsid`` children, double forks).
   A fork inside the function cannot answer twice: a process that is not the worker
   exits as soon as the function returns in it.
3. ``{"op": "bye"}``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import struct
import sys
import time
import types

_HEADER = struct.Struct(">Q")
_PRINT_LIMIT = 2000
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
    assignments = sys.modules.get("attnlib.assignments")  # imported by the notebook's answer cells
    for qid, value in dict(getattr(assignments, "_ANSWERS", None) or {}).items():
        if isinstance(qid, str) and isinstance(value, str):
            answers[qid[:40]] = value[:20]
    return {"op": "executed", "errors": errors[:50], "timeouts": timeouts, "found": found,
            "answers": answers, "_functions": functions}


# --------------------------------------------------------------------------- running functions

class _Tee(io.TextIOBase):
    def __init__(self):
        self.parts, self.size = [], 0

    def writable(self):
        return True

    def write(self, s):
        s = str(s)
        if self.size < _PRINT_LIMIT:
            self.parts.append(s[: _PRINT_LIMIT - self.size])
            self.size += len(self.parts[-1])
        return len(s)

    def text(self):
        return "".join(self.parts)


def _raised(exc: BaseException) -> dict:
    try:
        text = str(exc)
    except BaseException as inner:  # noqa: BLE001
        text = f"<its message could not be shown: __str__ raised {type(inner).__name__}>"
    return {"type": type(exc).__name__, "text": text[:1000],
            "not_implemented": isinstance(exc, NotImplementedError), "recursion": isinstance(exc, RecursionError),
            "memory": isinstance(exc, MemoryError), "attribute": isinstance(exc, AttributeError)}


def _worker(fn, req: dict, out_fd: int) -> None:
    """In the forked worker: call ``fn`` on every case, one frame per case."""
    from attnlib.exercises._compare import _same_input, _snapshot, _to_numpy

    from .wire import decode, encode
    import warnings

    import numpy as np
    warnings.simplefilter("ignore")  # as in the checker: what the function prints, not the library's warnings
    np.seterr(all="ignore")
    me = os.getpid()
    watch = None
    if req.get("forbidden"):
        with contextlib.suppress(Exception):
            from attnlib.exercises._running import Watch
            watch = Watch(tuple(req["forbidden"]), fn).install()
    if req.get("cpu_limit"):
        signal.signal(signal.SIGPROF, lambda *a: os._exit(86))
    for i, case in enumerate(req["cases"]):
        args, kwargs = decode(case["args"]), decode(case["kwargs"])
        args, kwargs = tuple(args), dict(kwargs)
        before = (_snapshot(args), _snapshot(kwargs))
        tee = _Tee()
        if req.get("cpu_limit"):
            signal.setitimer(signal.ITIMER_PROF, float(req["cpu_limit"]))
        c0, t0 = time.process_time(), time.perf_counter()
        with contextlib.redirect_stdout(tee), contextlib.redirect_stderr(tee):
            if watch is not None:
                watch.active = True
            try:
                state, value = "value", fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the submission may raise anything
                state, value = "raised", exc
            finally:
                if watch is not None:
                    watch.active = False
        if os.getpid() != me:  # the function forked and its child returned too: it stops here
            os._exit(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        reply = {"i": i, "state": state, "printed": tee.text(), "cpu": cpu, "seconds": wall,
                 "forbidden": watch.take() if watch is not None else None}
        try:
            reply["mutated"] = not (_same_input(args, before[0]) and _same_input(kwargs, before[1]))
            if state == "value":
                reply["value"] = encode(_to_numpy(value))
            else:
                reply["raised"] = _raised(value)
        except BaseException as exc:  # noqa: BLE001 - converting the answer ran its code and failed
            reply.update(state="raised", raised=_raised(exc), value=None, mutated=False)
        _write_frame(out_fd, reply)
    _write_frame(out_fd, {"done": True})


def run(fn, req: dict) -> dict:
    """Fork a worker for one request; collect its frames with the time limits."""
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
        return {"op": "ran", "exercise": req.get("exercise"), "status": "crashed", "how": ["fork", 0],
                "outcomes": [], "seconds": 0.0}
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
    outcomes, status = [], "ok"
    start = time.monotonic()
    budget = float(req.get("budget") or 1e9)
    for i in range(len(req["cases"])):
        limit = min(float(req["time_limit"]), max(budget - (time.monotonic() - start), 0.05))
        try:
            frame = _read_frame(r, time.monotonic() + limit)
        except TimeoutError:
            status = "timeout"
            break
        except ValueError:
            status = "garbage"
            break
        if frame is None:
            status = "crashed"
            break
        outcomes.append(frame)
    how = None
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        _, st = os.waitpid(pid, 0)
        if status == "crashed":
            how = (["signal", os.WTERMSIG(st)] if os.WIFSIGNALED(st) else ["exit", os.WEXITSTATUS(st)])
            if how == ["exit", 86]:
                status = "cpu"
    os.close(r)
    _kill_others()
    return {"op": "ran", "exercise": req.get("exercise"), "status": status, "how": how,
            "outcomes": outcomes, "seconds": time.monotonic() - start}


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
