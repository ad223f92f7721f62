"""The runtime that runs learner code (attnlib.runtime): one framing, one limit rule, one
supervisor, on every platform the checker supports (these tests run on Linux, macOS and
Windows in CI; on Linux both start methods are exercised, spawn being what macOS and
Windows use)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

from attnlib.runtime import limits, processes, wire
from conftest import start_methods

METHODS = start_methods()


# --------------------------------------------------------------------------- the framing

def test_a_message_round_trips_with_arrays_of_every_dtype():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 3)).astype(d) if d[0] in "fc" else np.arange(6).astype(d).reshape(2, 3)
              for d in wire.DTYPES]
    arrays += [np.arange(3, dtype=">f8"), np.asfortranarray(np.eye(3)), np.float32(2.5), np.zeros((0, 4)),
               np.arange(10.0)[::3], np.array(3.0)]
    header = {"id": "x", "nested": {"list": [1, 2.5, "text", None, True]}}
    got = wire.unpack(wire.pack(header, arrays))
    assert got.header == header and len(got.arrays) == len(arrays)
    arrays2 = []
    node = wire.encode_value((np.array(2.0), np.float32(1.5), np.arange(4.0).reshape(2, 2)), arrays2)
    back = wire.decode_value(node, wire.unpack(wire.pack({}, arrays2)).arrays)
    assert [np.shape(b) for b in back] == [(), (), (2, 2)]  # (a 0-d array stays 0-d)
    for a, b in zip(arrays, got.arrays):
        a = np.asarray(a)
        assert b.dtype.name == a.dtype.name and b.dtype.isnative and b.shape == a.shape and b.flags.writeable
        assert np.array_equal(a, b)


def test_nothing_is_unpickled_and_nothing_oversized_is_allocated():
    import io
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array([object()], dtype=object), allow_pickle=True)
    pickled = buf.getvalue()
    head = b"{}"
    with pytest.raises(wire.WireError, match="dtype"):
        wire.unpack(wire._HEAD.pack(len(head), 1) + head + wire._SIZE.pack(len(pickled)) + pickled)
    with pytest.raises(wire.WireError):
        wire.unpack(wire._HEAD.pack(10**6, 0) + head)  # a header longer than the message


def _echo(payload, msg: wire.Message):
    """Serve: answer with the header, the arrays doubled, the worker's pid and the payload."""
    return {**msg.header, "pid": os.getpid(), "payload": payload}, [2 * a for a in msg.arrays]


def _mine(pid):
    return lambda m: m.header.get("pid") == pid


@pytest.mark.parametrize("method", METHODS)
def test_a_child_answers_with_plain_data(method):
    with processes.Child(_echo, "hello", method=method) as child:
        assert child.start() is None and child.worker is not None and child.worker != os.getpid()
        for i in range(3):
            got = child.ask({"i": i}, [np.arange(4.0)], limit=30.0, answers=_mine(child.worker))
            assert isinstance(got, processes.Answer), got
            assert got.message.header == {"i": i, "pid": child.worker, "payload": "hello"}
            assert np.array_equal(got.message.arrays[0], 2 * np.arange(4.0))
            assert got.cpu is not None and got.cpu >= 0 and got.seconds >= 0


# --------------------------------------------------------------------------- the limit rule

def _spins(payload, msg):
    while True:
        pass


def _sleeps(payload, msg):
    time.sleep(60)


def _exits(payload, msg):
    os._exit(7)


@pytest.mark.parametrize("method", METHODS)
def test_the_cpu_limit_stops_a_computing_child_and_the_clock_one_that_waits(method):
    with processes.Child(_spins, None, method=method) as child:
        assert child.start() is None
        got = child.ask({}, limit=0.5, answers=lambda m: True)
        assert isinstance(got, processes.Ended) and got.status in ("cpu", "timeout"), got
        # stopped by its CPU limit; past the clock's backstop only if it was still computing
        # there (a machine so busy that it got less than a third of a CPU), never past the
        # hard stop. "timeout": starved below limits.COMPUTING of a CPU, taken for waiting.
        if got.status == "cpu":
            assert got.cpu >= 0.5 and got.seconds < limits.hard_stop(0.5), got
    with processes.Child(_sleeps, None, method=method) as child:
        assert child.start() is None
        t0 = time.perf_counter()
        got = child.ask({}, limit=0.2, answers=lambda m: True)
        assert isinstance(got, processes.Ended) and got.status == "timeout", got
        assert limits.backstop(0.2) <= time.perf_counter() - t0 < limits.backstop(0.2) + 2.0


@pytest.mark.parametrize("method", METHODS)
def test_a_child_that_exits_is_a_crash_with_its_status(method):
    with processes.Child(_exits, None, method=method) as child:
        assert child.start() is None
        got = child.ask({}, limit=30.0, answers=lambda m: True)
        assert isinstance(got, processes.Ended) and got.status == "crashed" and got.how == ("exit", 7), got
        assert child.ask({}, limit=30.0, answers=lambda m: True).status == "crashed"  # and stays ended


def test_what_cannot_be_pickled_is_unsendable_in_a_spawned_child():
    lock = threading.Lock()
    child = processes.Child(_echo, lock, method="spawn")
    got = child.start()
    assert isinstance(got, processes.Ended) and got.status == "unsendable" and "lock" in got.text.lower(), got
    child.close()


# --------------------------------------------------------------------------- the supervisor

def _starts_a_grandchild(pidfile, msg):
    """Serve: start a Python that computes without end (its pid noted first), then answer."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    pathlib.Path(pidfile).write_text(str(p.pid))
    return {"pid": os.getpid()}, []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("method", METHODS)
def test_closing_a_child_ends_every_process_it_started(method, tmp_path):
    pidfile = tmp_path / "pid"
    with processes.Child(_starts_a_grandchild, str(pidfile), method=method) as child:
        assert child.start() is None
        worker = child.worker
        got = child.ask({}, limit=30.0, answers=_mine(worker))
        assert isinstance(got, processes.Answer), got
        grandchild = int(pidfile.read_text())
        assert _alive(grandchild)
    deadline = time.monotonic() + 5
    while (_alive(grandchild) or _alive(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild) and not _alive(worker)


def test_a_spawned_child_does_not_run_the_parents_script_again(tmp_path):
    """multiprocessing's spawn runs the parent's __main__ again in the child; a learner's
    script that checks an answer at its top level (no ``if __name__ == "__main__":``) must
    not run twice."""
    marker = tmp_path / "runs"
    script = tmp_path / "learner.py"
    script.write_text(textwrap.dedent(f"""
        import os, numpy as np
        os.environ["ATTNLIB_CHECK_WORKER"] = "spawn"
        with open({str(marker)!r}, "a") as f:
            f.write("ran\\n")
        from attnlib.exercises import check
        def softmax(x, axis=-1):
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)
        print(check("softmax", softmax).status)
    """))
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["passed"], out.stdout + out.stderr
    assert marker.read_text() == "ran\n"


@pytest.mark.slow  # spawned children: new Pythons
def test_the_child_started_ahead_is_the_next_ones_unless_the_environment_changed(monkeypatch):
    """After a spawned child ends, the next one starts ahead (a standby). It serves the next
    child although pytest changed PYTEST_CURRENT_TEST meanwhile (as it does at every phase
    of every test); a change to any other variable needs a new Python, started then."""
    with processes.Child(_echo, None, method="spawn") as child:
        assert child.start() is None
    ahead = processes._Standby.current[1].pid
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_runtime.py::another_test (call)")
    with processes.Child(_echo, None, method="spawn") as child:
        assert child.start() is None
        assert child.proc.pid == ahead
    ahead = processes._Standby.current[1].pid
    monkeypatch.setenv("ATTNLIB_A_VARIABLE_THE_CHILD_MAY_READ", "1")
    with processes.Child(_echo, None, method="spawn") as child:
        assert child.start() is None
        assert child.proc.pid != ahead
        got = child.ask({}, limit=30.0, answers=_mine(child.worker))
        assert isinstance(got, processes.Answer) and got.message.header["payload"] is None
