"""Run a learner's function in a worker thread with a time limit, capturing what it prints.

A call still running past its limit is interrupted by raising :class:`_Timeout` inside the
thread (a pure-Python loop stops at once; a long C call when it returns). Threads that do
not stop are remembered in ``_STUCK`` and interrupted again at the next check.
"""
from __future__ import annotations

import ctypes
import io
import threading
import time
from typing import Any, Callable

import numpy as np

class _Timeout(BaseException):
    """Raised inside a learner's function that ran past its time limit."""


_THREAD_NAME = "attnlib-exercise"
_STACK_BYTES = 64 * 2**20   # deep (but finite) recursion must raise RecursionError, not crash
_STUCK: list = []            # worker threads that did not stop when asked (inside a long C call)


def _interrupt(th: threading.Thread) -> None:
    """Ask thread ``th`` to raise :class:`_Timeout` at its next Python instruction."""
    if not th.is_alive() or th.ident is None:
        return
    tid = ctypes.c_ulong(th.ident)
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, ctypes.py_object(_Timeout))
    if n > 1:  # never expected; undo as the C API documentation says
        ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, None)


def _stop(th: threading.Thread, seconds: float = 1.0) -> bool:
    """Interrupt ``th`` repeatedly (it may catch one exception) for up to ``seconds``;
    returns whether it stopped."""
    deadline = time.perf_counter() + seconds
    while th.is_alive() and time.perf_counter() < deadline:
        _interrupt(th)
        th.join(0.02)
    return not th.is_alive()


def _reap_stuck() -> int:
    """Interrupt again the threads that were stuck earlier; returns how many still run."""
    for th in list(_STUCK):
        if th.is_alive():
            _stop(th, 0.1)
        if not th.is_alive():
            _STUCK.remove(th)
    return len(_STUCK)


class _Tee(io.TextIOBase):
    """Collects at most ``limit`` characters of what is printed."""

    def __init__(self, limit: int = 2000):
        self.parts: list[str] = []
        self.size, self.limit = 0, limit

    def writable(self) -> bool:
        return True

    def write(self, s) -> int:
        s = str(s)
        if self.size < self.limit:
            self.parts.append(s[: self.limit - self.size])
            self.size += len(self.parts[-1])
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


def _thread_cpu_seconds(th: threading.Thread) -> float | None:
    """CPU time used so far by thread ``th`` (None where the platform cannot tell)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(th.ident))
    except (AttributeError, OSError, TypeError):  # not Linux/BSD, or the thread has ended
        return None


def _run_limited(fn: Callable, args: tuple, kwargs: dict, limit: float, cpu_limit: float | None = None):
    """Run ``fn(*args, **kwargs)`` in a daemon thread. Returns ``(ok, value_or_exc,
    seconds)``; a call still running after ``limit`` seconds is interrupted (pure-Python
    loops stop at once, a long C call when it returns) and reported as
    ``(False, _Timeout(), limit)``; if it keeps running it is listed in ``_STUCK``.

    With ``cpu_limit``, the call is also stopped once the worker thread has used that much
    CPU time, and ``seconds`` is the thread's CPU time rather than the wall time. CPU time
    is what a speed verdict should use: on a busy machine the wall time of a fast function
    can grow many-fold while it waits for a core, but its CPU time does not."""
    box: dict[str, Any] = {}

    def target():
        try:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                with np.errstate(all="ignore"):  # errstate is per thread; warnings are global
                    box["value"] = fn(*args, **kwargs)
                box["ok"] = True
            except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
                box["value"], box["ok"] = exc, False
            box["cpu"] = time.thread_time() - c0
            box["seconds"] = time.perf_counter() - t0
        except _Timeout:  # arrived just after fn returned; the call is reported as a timeout
            pass

    old = threading.stack_size()
    try:
        threading.stack_size(_STACK_BYTES)
    except (ValueError, RuntimeError):  # pragma: no cover - platform without the setting
        pass
    th = threading.Thread(target=target, daemon=True, name=_THREAD_NAME)
    try:
        th.start()
    finally:
        threading.stack_size(old)
    try:
        if cpu_limit is None:
            th.join(max(limit, 0.0))
        else:  # poll the worker's CPU clock as well as the wall clock
            deadline = time.perf_counter() + max(limit, 0.0)
            while th.is_alive() and time.perf_counter() < deadline:
                th.join(0.02)
                used = _thread_cpu_seconds(th)
                if used is not None and used > cpu_limit:
                    break
    except KeyboardInterrupt:  # the learner pressed "interrupt": stop the worker too
        _stop(th)
        raise
    if th.is_alive() or "seconds" not in box:
        # Past the limit: a timeout even if the function swallows _Timeout and returns.
        if th.is_alive() and not _stop(th):
            _STUCK.append(th)
        return False, _Timeout(), limit
    return box["ok"], box["value"], box["cpu"] if cpu_limit is not None else box["seconds"]
