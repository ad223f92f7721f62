"""The time a call has taken, not counting the time it waited for a CPU held by others.

A checker's time limit must not depend on what else the machine is doing: on two cores
shared with six busy programs, a function that needs 0.2 s of CPU takes 0.6 s or more on
the clock, and a fair limit would stop it. Linux reports, per thread, how long it has
waited on a run queue while it was ready to run (``/proc/PID/schedstat``: CPU time, wait
time, time slices, all since the thread started). So::

    own time = clock time since the call started - time the process waited for a CPU

is what the call would have taken on a machine of its own: CPU time while it computes,
clock time while it sleeps or waits for something (``time.sleep(30)`` is still stopped at
the limit). The wait is read from the process's main thread, where the learner's function
runs. Where the file is missing (macOS, Windows, a kernel built without it) own time is
clock time, as before.

The kernel adds a wait to the count when the wait ends (when the thread gets a CPU), so
a process waiting right now looks as if it had been running: :meth:`CallClock.own`
with ``settle=True`` first waits briefly for such a wait to end.
"""
from __future__ import annotations

import os
import time

__all__ = ["CallClock", "available", "backstop"]

BACKSTOP = 10.0   # a call is stopped at this many times its limit on the clock, whatever its own time


def backstop(limit: float) -> float:
    """Clock seconds after which a call with a ``limit`` of own time is stopped anyway (on
    a machine so busy that it got less than a tenth of a CPU)."""
    return max(BACKSTOP * limit, limit + 5.0)


def _schedstat(pid: int) -> tuple[int, int, int] | None:
    """(nanoseconds waited for a CPU, time slices, nanoseconds on a CPU) of process
    ``pid``'s main thread (the CPU time includes the slice it is running now)."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[1]), int(fields[2]), int(fields[0])
    except (OSError, ValueError, IndexError):
        return None


def _runnable(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"R"
    except (OSError, IndexError):
        return False


def available() -> bool:
    """Whether own time can be measured here (else it is clock time)."""
    return _schedstat(os.getpid()) is not None


class CallClock:
    """Own time of one call, followed across the processes that serve it.

    ``CallClock(pid)`` starts now; :meth:`follow` moves it to another process (the
    checker's guard hands a call over to its worker); :meth:`own` is clock time minus the
    waits for a CPU seen since; :meth:`wall` is clock time; :meth:`past` says whether a
    limit is reached and :meth:`left` how long to wait before asking again. ``pid=None``:
    a plain clock (own time is clock time)."""

    def __init__(self, pid: int | None):
        self.t0 = time.perf_counter()
        self.waited = 0.0          # seconds of waiting, of processes no longer followed
        self.pid: int | None = None
        self.base: int | None = None
        self.follow(pid)

    def follow(self, pid: int | None) -> None:
        """Count the waits of ``pid`` from now on (those of the previous process are kept)."""
        if pid == self.pid:
            return
        self.waited += self._waited_now()
        got = _schedstat(pid) if pid is not None else None
        self.pid, self.base = pid, (None if got is None else got[0])

    def _waited_now(self) -> float:
        if self.pid is None or self.base is None:
            return 0.0
        got = _schedstat(self.pid)
        if got is None:  # the process has ended: its last reading is lost, count none
            return 0.0
        return max(got[0] - self.base, 0) / 1e9

    def wall(self) -> float:
        return time.perf_counter() - self.t0

    def own(self, *, settle: bool = False, grace: float = 0.25) -> float:
        """Seconds of own time so far. ``settle``: if the process is waiting for a CPU right
        now, wait (up to ``grace`` seconds) until it gets one, so that this wait is counted
        (a process that is running, not waiting, is seen at once: its CPU time moves)."""
        if settle and self.pid is not None and self.base is not None and _runnable(self.pid):
            first = _schedstat(self.pid)
            deadline = time.perf_counter() + grace
            while first is not None and time.perf_counter() < deadline:
                now = _schedstat(self.pid)
                if now is None or now[1] != first[1] or now[2] != first[2] or not _runnable(self.pid):
                    break
                time.sleep(0.005)
        return max(self.wall() - self.waited - self._waited_now(), 0.0)

    def past(self, limit: float) -> bool:
        """Whether the call is past ``limit`` seconds of own time (a wait for a CPU going on
        now counted first) or past :func:`backstop` of it on the clock."""
        if self.wall() >= backstop(limit):
            return True
        return self.own() >= limit and (self.own(settle=True) >= limit or self.wall() >= backstop(limit))

    def left(self, limit: float) -> float:
        """Clock seconds that pass before the call can be :meth:`past` ``limit`` (own time
        grows no faster than clock time)."""
        return max(min(limit - self.own(), backstop(limit) - self.wall()), 0.0)
