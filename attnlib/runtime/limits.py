"""The one limit rule for code the course runs on someone's behalf: CPU time, with the
clock as a backstop.

A limit is **CPU seconds**: what a call computes, whatever else the machine is doing. On
two cores shared with six busy programs a call that needs 0.2 s of CPU takes 0.6 s or more
on the clock, so a clock limit fails correct answers on a busy machine; its CPU time stays
0.2 s. CPU time does not move while code waits (``time.sleep``, a lock, a blocked read),
so the clock stops such a call too, at :func:`backstop` of the limit: three times the
limit, plus two seconds. Past the backstop a call that is still *computing* (it got at
least :data:`COMPUTING` of a CPU over the last second: it is starved, not waiting) goes on,
up to :func:`hard_stop` (twenty times the limit, plus two seconds), so that a machine that
gives a call less than a third of a CPU does not fail a correct answer either.

Who applies it: the notebook checker and the grader's runner measure their worker's CPU
time from outside (:class:`Meter`, psutil: Linux, macOS and Windows alike); the runner
limits a notebook cell from inside with the same numbers (``ITIMER_PROF`` and
``ITIMER_REAL``).
"""
from __future__ import annotations

import time

import psutil

__all__ = ["WALL_FACTOR", "COMPUTING", "backstop", "hard_stop", "cpu_seconds", "Meter"]

WALL_FACTOR = 3.0    # the clock stops a waiting call at this many times its CPU limit, plus WALL_EXTRA
WALL_EXTRA = 2.0
HARD_FACTOR = 20.0   # ... and a starved, still computing one at this many times
COMPUTING = 0.05     # the share of a CPU above which a call counts as computing: a waiting
                     # call gets ~0; a starved one got 9% in `make unit` on a loaded machine
WINDOW = 1.0         # seconds over which that share is measured


def backstop(limit: float) -> float:
    """Clock seconds after which a call with a CPU ``limit`` is stopped anyway (it waits,
    or the machine gives it less than a third of a CPU)."""
    return WALL_FACTOR * limit + WALL_EXTRA


def hard_stop(limit: float) -> float:
    """Clock seconds after which a call is stopped even while it computes (a CPU shared
    twenty ways, or a call that alternates waiting and computing)."""
    return HARD_FACTOR * limit + WALL_EXTRA


def _cpu(proc: psutil.Process) -> float | None:
    try:
        t = proc.cpu_times()
    except (psutil.Error, OSError):
        return None
    # (children_*: the children it has reaped; 0 where the platform does not say)
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds used by process ``pid`` (all its threads, and the children it reaped),
    or None when it cannot be read (it has ended)."""
    try:
        return _cpu(psutil.Process(pid))
    except (psutil.Error, OSError):
        return None


class Meter:
    """CPU and clock time of one call served by process ``pid`` (``None``: the clock
    only), from now on. :meth:`past` applies the rule."""

    def __init__(self, pid: int | None = None):
        self.t0 = time.perf_counter()
        self.proc = None
        if pid is not None:
            try:
                self.proc = psutil.Process(pid)
            except (psutil.Error, OSError):
                self.proc = None
        self.cpu0 = _cpu(self.proc) if self.proc is not None else None
        self._samples = [(0.0, 0.0)]  # (clock, CPU) since the start: the share of a CPU it gets

    def wall(self) -> float:
        """Clock seconds so far."""
        return time.perf_counter() - self.t0

    def cpu(self) -> float | None:
        """CPU seconds so far (None: not measured)."""
        if self.proc is None or self.cpu0 is None:
            return None
        now = _cpu(self.proc)
        return None if now is None else max(now - self.cpu0, 0.0)

    def past(self, limit: float, wall: float | None = None) -> str | None:
        """``"cpu"`` past ``limit`` CPU seconds, ``"timeout"`` past ``wall`` seconds on the
        clock (default: :func:`backstop` of the limit; ``limit`` when CPU time is not
        measured), else None."""
        cpu = self.cpu()
        if cpu is not None and cpu >= limit:
            return "cpu"
        if wall is None:
            wall = backstop(limit) if cpu is not None else limit
        now = self.wall()
        if now < wall:
            if cpu is not None:
                self._note(now, cpu)
            return None
        if cpu is not None and now < max(hard_stop(limit), wall) and self._computing(now, cpu):
            return None  # starved, not waiting: its CPU limit will stop it if it runs away
        return "timeout"

    def _note(self, now: float, cpu: float) -> None:
        self._samples.append((now, cpu))
        while len(self._samples) > 2 and now - self._samples[1][0] >= WINDOW:
            self._samples.pop(0)  # keep one sample at least WINDOW old

    def _computing(self, now: float, cpu: float) -> bool:
        """Whether the call got at least COMPUTING of a CPU over the last WINDOW seconds
        (since the start, when it has not been watched that long)."""
        self._note(now, cpu)
        t, c = self._samples[0]
        return now > t and (cpu - c) / (now - t) >= COMPUTING
