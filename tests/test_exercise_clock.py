"""A time limit that a busy machine cannot fail: the one limit rule
(:mod:`attnlib.runtime.limits`) counts a call's CPU time, with the clock only as a
backstop, in the notebook's checker (forked and spawned worker) and in the grader's runner.

The busy machine is made, not hoped for: this process and its children are pinned to one
CPU with two programs that compute without end, so every process there gets about a third
of it. On two cores under ``make test`` the same happens by chance; a clock limit failed
correct answers in spawn mode before (issue 20's closing note).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from attnlib.exercises import Case, check
from attnlib.exercises._judge import Plan
from attnlib.exercises._worker import Worker
from attnlib.runtime import limits, processes
from attnlib.runtime.wire import Message
from exercise_toys import toys

pinnable = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")


def test_cpu_time_is_measured_on_every_platform():
    """The rule needs a process's CPU time: psutil reads it on Linux, macOS and Windows
    (the checker's CI jobs run this on all three)."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.05:
        pass
    assert limits.cpu_seconds(os.getpid()) >= 0.05
    assert limits.cpu_seconds(2**22 + 12345) is None  # (no such process)
    assert limits.backstop(0.5) == 3.5 and limits.backstop(2.0) == 8.0


@contextlib.contextmanager
def crowded_cpu(burners: int = 2):
    """Pin this process (and so the processes it starts) to one CPU, shared with
    ``burners`` programs that compute without end; undo it afterwards."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        for pid in [p.pid for p in procs] + sorted(processes.standby_pids()):  # (a spawned worker waiting)
            os.sched_setaffinity(pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.2)  # let them start computing
        yield
    finally:
        os.sched_setaffinity(0, before)
        for pid in processes.standby_pids():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, before)
        for p in procs:
            p.kill()
            p.wait()


def _child(code: str) -> subprocess.Popen:
    """A Python child that says "go" when it starts the measured part, "done" at its end,
    then waits (so that it can still be measured)."""
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


_BUSY = ("import time,sys\nprint('go',flush=True)\nt=time.thread_time()\n"
         "while time.thread_time()-t<{s}: pass\nprint('done',flush=True)\ntime.sleep(30)\n")
_SLEEPY = "import time\nprint('go',flush=True)\ntime.sleep({s})\nprint('done',flush=True)\ntime.sleep(30)\n"


def _measure_on_a_crowded_cpu(code: str, limit: float, burners: int = 2) -> tuple[float, float, str | None]:
    """(CPU time, clock time, what the rule says of ``limit`` at the end) of a child's
    measured part, on a crowded CPU."""
    with crowded_cpu(burners):
        p = _child(code)
        try:
            assert p.stdout.readline().strip() == "go"
            meter = limits.Meter(p.pid)
            assert p.stdout.readline().strip() == "done"
            return meter.cpu(), meter.wall(), meter.past(limit)
        finally:
            p.kill()
            p.wait()


@pinnable
def test_a_computing_process_is_measured_by_its_cpu_time_not_the_clock():
    cpu, wall, verdict = _measure_on_a_crowded_cpu(_BUSY.format(s=0.3), limit=0.5)
    # it shared one CPU with two others: about three times its CPU time on the clock, and
    # more than the limit; by its CPU time it is well within it
    assert wall > 1.8 * cpu and wall > 0.5, (wall, cpu)
    assert abs(cpu - 0.3) < 0.1 and verdict is None, f"CPU {cpu:.3f} s, clock {wall:.3f} s"


@pinnable
def test_a_waiting_process_is_stopped_by_the_clock_backstop():
    cpu, wall, verdict = _measure_on_a_crowded_cpu(_SLEEPY.format(s=2.5), limit=0.05)
    # sleeping uses no CPU, so its CPU time never reaches even 0.05 s; the clock's
    # backstop (3 x 0.05 + 2 = 2.15 s) stops it
    assert cpu < 0.05 and wall >= 2.5 and verdict == "timeout", (cpu, wall, verdict)


@pinnable
@pytest.mark.slow  # crowds one CPU for several seconds (make unit, make test)
def test_a_starved_computing_process_is_not_stopped_by_the_backstop():
    """Less than a third of a CPU (here a sixth): past the clock's backstop, but computing,
    so it goes on; its CPU limit still bounds it (and the hard stop, 20x the limit)."""
    cpu, wall, verdict = _measure_on_a_crowded_cpu(_BUSY.format(s=1.6), limit=2.0, burners=5)
    assert wall > limits.backstop(2.0), f"the CPU was not crowded enough ({wall:.1f} s): the test proves nothing"
    assert cpu < 2.0 and verdict is None, (cpu, wall, verdict)
    assert wall < limits.hard_stop(2.0)


# --------------------------------------------------------------------------- the checker

def _cases():
    rng = np.random.default_rng(0)
    return [Case((rng.standard_normal(3),), label="a vector"), Case((rng.standard_normal((2, 3)),), label="a matrix"),
            Case((rng.standard_normal(4),), label="another vector")]


@pytest.fixture
def toy():
    yield from toys("clock_double", cases=_cases, hint="Each entry doubles.", time_limit=0.4, total_time_limit=1.5)


def _computes(seconds):
    def double_slowly(x):
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass
        return 2.0 * np.asarray(x, dtype=float)
    return double_slowly


def _sleeps(x):
    time.sleep(30)


@pytest.fixture(params=["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def mode(request, monkeypatch):
    monkeypatch.setenv("ATTNLIB_CHECK_WORKER", request.param)
    if request.param == "fork" and processes.fork_unsafe_reason():
        pytest.skip(f"no forked worker here: {processes.fork_unsafe_reason()}")
    return request.param


@pinnable
@pytest.mark.slow  # crowds one CPU for several seconds (make unit, make test)
def test_a_correct_answer_passes_on_a_crowded_cpu(toy, mode):
    """0.2 s of CPU per case, limit 0.4 s: on a CPU shared three ways each case takes about
    0.6 s on the clock (a wall-clock limit failed it), 0.2 s of CPU time."""
    toy()
    check("clock_double", _computes(0.0))  # (spawn: start the standby worker before crowding)
    with crowded_cpu():
        t0 = time.perf_counter()
        r = check("clock_double", _computes(0.2))
        wall = time.perf_counter() - t0
    assert r.passed, str(r)
    assert wall > 3 * 0.4, f"the CPU was not crowded ({wall:.2f} s for 3 cases): the test proves nothing"


@pinnable
@pytest.mark.slow  # crowds one CPU for several seconds (make unit, make test)
def test_on_a_crowded_cpu_runaway_code_is_still_stopped_and_sleeping_code_at_its_limit(toy, mode, monkeypatch):
    toy()
    check("clock_double", _computes(0.0))
    calls = []  # clock seconds of each call to the worker (a spawned worker's start is not one)
    real_call = Worker.call

    def timed_call(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real_call(self, *args, **kwargs)
        finally:
            calls.append(time.perf_counter() - t0)

    monkeypatch.setattr(Worker, "call", timed_call)
    with crowded_cpu():
        r = check("clock_double", _computes(10.0))  # 10 s of CPU: far past the limit
        spin, calls[:] = list(calls), []
        s = check("clock_double", _sleeps)
        sleep = list(calls)
    assert r.details["problem"] == "timeout" and "0.4 s" in r.message, str(r)
    # stopped at 0.4 s of CPU (about 1.2 s on the clock here), before the clock's backstop
    assert len(spin) == 1 and spin[0] < limits.backstop(0.4) - 0.5, spin
    assert s.details["problem"] == "timeout", str(s)
    # sleeping uses no CPU: the clock's backstop stops it, not much later
    assert len(sleep) == 1 and limits.backstop(0.4) <= sleep[0] < limits.backstop(0.4) + 1.0, sleep


@pinnable
@pytest.mark.slow  # crowds one CPU for several seconds (make unit, make test)
def test_the_total_budget_counts_own_time_too(toy):
    """Three cases of 0.25 s of CPU within a 1 s budget pass on a crowded CPU (about 2.3 s
    on the clock); three of 0.45 s do not (1.35 s of CPU)."""
    toy(time_limit=0.5, total_time_limit=1.0)
    with crowded_cpu():
        ok = check("clock_double", _computes(0.25))
        over = check("clock_double", _computes(0.45))
    assert ok.passed, str(ok)
    assert over.details["problem"] == "timeout" and "more than 1 s for the first 3 cases" in over.message, str(over)


# --------------------------------------------------------------------------- the grader's runner

@pinnable
@pytest.mark.slow  # crowds one CPU for several seconds (make unit, make test)
def test_the_graders_runner_counts_cpu_time_too(toy):
    """The grader runs many notebooks at once: its runner applies the same rule."""
    from attnlib.grading import runner

    plan = Plan(toy(), seed=1, batch=True)
    req = plan.next_request()
    envelope = {"op": "run", "exercise": "clock_double", "request": req.message.header, "limit": req.limit,
                "wall": req.wall}
    with crowded_cpu():
        t0 = time.perf_counter()
        ok = runner.run(_computes(0.35), envelope, req.message.arrays)  # 1.05 s of CPU in a 1.5 s budget: ~3 s on the clock
        wall = time.perf_counter() - t0
        slept = runner.run(_sleeps, envelope, req.message.arrays)
    assert ok.header["status"] == "ok", ok.header
    assert wall > req.limit, f"the CPU was not crowded ({wall:.2f} s): the test proves nothing"
    plan.take(req, Message(ok.header["reply"], ok.arrays))
    assert plan.result().passed
    assert slept.header["status"] == "timeout" and slept.header["seconds"] < req.wall + 1.0, slept.header
