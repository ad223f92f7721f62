"""The learner's code is untrusted (issue 21): each hole the adversarial probe found in the
notebook checker is a test here, in both worker modes where it applies (forked, and
spawned as where fork is unsafe: macOS and Windows, where the portable ones run in CI
too), plus the plain-data protocol between the two sides.

- a returned object whose unpickling would run code: nothing crosses but plain data;
- children that call ``setsid`` (fork + setsid, double fork, ``Popen(start_new_session=True)``)
  do not survive the verdict (checked from /proc);
- ``os.fork()`` with both processes returning does not shift later cases;
- ``os.write(1, ...)`` / ``os.write(2, ...)`` are captured, limited in size;
- side effects (``torch.set_default_dtype``) stay in the worker; ``os._exit`` is a crash;
- an answer the worker cannot encode, or a 10 GB allocation, is the learner's failure;
- switching the watch off (``sys.setprofile``) fails the check;
- the reply is validated field by field; ``run_cases`` / :class:`Plan` work as a grader
  uses them, in one process.
"""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import torch

import attnlib as al
from attnlib.exercises import EXERCISES, Case, check
from attnlib.exercises import _wire
from attnlib.exercises._judge import Plan
from attnlib.exercises._worker import run_cases
from attnlib.runtime import processes, wire
from exercise_toys import toys

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason=(
    "fork, setsid and RLIMIT_DATA: on macOS and Windows the worker is spawned, and a process that "
    "leaves its tree is out of reach (attnlib.runtime.processes)"))


def _double(x):
    return 2.0 * np.asarray(x, dtype=float)


def _cases():
    rng = np.random.default_rng(0)
    return [Case((rng.standard_normal(3),), label="a vector"), Case((rng.standard_normal((2, 3)),), label="a matrix"),
            Case((rng.standard_normal((2, 2)),), label="a square")]


@pytest.fixture
def toy():
    yield from toys("hostile_double", cases=_cases, hint="Each entry doubles.", time_limit=2.0, total_time_limit=6.0)


# the spawned worker (where fork is unsafe: CUDA initialised, macOS) starts a new Python per
# check: seconds each, so `make check` runs the forked one and `make test` both
@pytest.fixture(params=["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def mode(request, monkeypatch):
    monkeypatch.setenv("ATTNLIB_CHECK_WORKER", request.param)
    return request.param


def _running_pids(pids) -> list[int]:
    """Those of ``pids`` that still run (not gone, not a zombie)."""
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _cpu(pids) -> float:
    total = 0.0
    for p in pids:
        try:
            t = psutil.Process(p).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


# --------------------------------------------------------------------------- results as plain data

class Evil:
    """Unpickling this runs code: in the old checker, in the kernel."""

    marker = ""

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_returned_object_whose_unpickling_runs_code_never_runs_it_in_the_kernel(toy, mode, tmp_path):
    toy()
    marker = tmp_path / "pwned"
    Evil.marker = str(marker)

    r = check("hostile_double", lambda x: Evil())
    assert r.status == "failed" and r.details["problem"] == "type", str(r)
    assert "Evil" in r.message and "bug in attnlib" not in r.message
    assert not marker.exists(), "the object's __reduce__ ran"
    # the old exploit replaced the comparison; every later wrong answer must still fail
    assert not check("prev_token_score", lambda w: 42.0).passed
    assert not check("hostile_double", lambda x: np.zeros(np.shape(x))).passed


def test_an_ndarray_subclass_cannot_answer_the_comparison(toy):
    toy()

    class Agreeable(np.ndarray):
        def __array_function__(self, func, types, args, kwargs):
            return True  # np.allclose(...) -> True, whatever the values

        def __eq__(self, other):
            return True

    r = check("hostile_double", lambda x: np.zeros(np.shape(x)).view(Agreeable))
    assert r.status == "failed" and r.details["problem"] == "value", str(r)
    for name in ("prev_token_score", "repeat_kv", "apply_rope", "lower_right_causal_mask"):
        ex = EXERCISES[name]
        zeros = lambda *a, _ex=ex, **k: np.zeros_like(np.asarray(_ex.reference(*a, **k))).view(Agreeable)  # noqa: E731
        assert not check(name, zeros).passed, name


def test_an_answer_the_worker_cannot_encode_is_the_learners_problem(toy, mode):
    toy()

    class Broken:
        def __array__(self, *a, **k):
            raise RuntimeError("no array for you")

    r = check("hostile_double", lambda x: Broken())
    assert r.status == "failed" and r.details["problem"] == "type", str(r)
    assert "Broken" in r.message and "bug in attnlib" not in r.message
    r = check("hostile_double", lambda x: np.empty(np.shape(x), dtype=object))
    assert r.status == "failed" and "object" in r.message and "bug in attnlib" not in r.message, str(r)


# --------------------------------------------------------------------------- processes that try to survive

def _spinner_code() -> str:
    return "import os, sys\nopen(sys.argv[1], 'a').write(f'{os.getpid()}\\n')\nwhile True:\n    pass\n"


def _escapes(pidfile: str, how: str):
    """A correct answer that leaves a CPU-bound process behind, escaping its process group.
    The process that starts the escaper writes its pid at once (the escaper itself may be
    killed before it could), so the test always knows what to look for."""
    def note(pid):
        with open(pidfile, "a") as f:
            f.write(f"{pid}\n")

    def double(x):
        if np.ndim(x) == 1:  # on the first case only
            if how == "popen":
                note(subprocess.Popen([sys.executable, "-c", _spinner_code(), pidfile], start_new_session=True).pid)
            else:
                pid = os.fork()
                if pid == 0:
                    os.setsid()
                    if how == "double_fork":
                        grandchild = os.fork()
                        if grandchild != 0:
                            note(grandchild)
                            os._exit(0)  # the middle process ends: the grandchild is an orphan
                    while True:
                        pass
                if how != "double_fork":
                    note(pid)
                else:  # wait until the middle process has written the grandchild's pid
                    os.waitpid(pid, 0)
        return 2.0 * np.asarray(x, dtype=float)
    return double


@linux_only
@pytest.mark.parametrize("how", ["fork_setsid", "double_fork", "popen", "popen_then_crash"])
def test_children_that_escape_the_process_group_do_not_survive_the_verdict(toy, mode, tmp_path, how):
    """Also when the worker itself ends right after starting them (its orphans stay in the
    guard's tree)."""
    toy()
    pidfile = str(tmp_path / "pids")
    fn = _escapes(pidfile, how.removesuffix("_then_crash"))
    if how.endswith("crash"):
        def crashes(x, _fn=fn):
            _fn(x)
            time.sleep(0.2)
            os._exit(3)
        fn = crashes
    r = check("hostile_double", fn)
    assert r.passed or (how.endswith("crash") and r.details["problem"] == "crashed"), str(r)
    pids = [int(p) for p in open(pidfile).read().split()]  # written before the verdict
    assert pids, f"{how}: the escaping process was never started"
    time.sleep(0.5)
    assert _running_pids(pids) == [], f"{how}: still running after the verdict: {_running_pids(pids)}"
    before = _cpu(pids)
    time.sleep(1.0)
    assert _cpu(pids) - before < 0.05


@linux_only
@pytest.mark.slow  # ~10 s on 2 cores: 8 processes spin until the verdict
def test_a_fork_bomb_ends_with_the_verdict(toy, tmp_path):
    toy(time_limit=1.0, total_time_limit=3.0)
    pidfile = str(tmp_path / "pids")

    def bomb(x):
        for _ in range(3):  # 8 processes, each in a session of its own, each spinning
            if os.fork() == 0:
                os.setsid()
        with open(pidfile, "a") as f:
            f.write(f"{os.getpid()}\n")
        while True:
            pass

    r = check("hostile_double", bomb)
    assert r.details["problem"] == "timeout", str(r)
    time.sleep(0.3)
    pids = [int(p) for p in open(pidfile).read().split()] if os.path.exists(pidfile) else []
    assert pids and _running_pids(pids) == []


@linux_only
def test_a_fork_that_returns_twice_does_not_shift_later_cases(toy, mode):
    """Both processes return from os.fork(); only the worker's own answer counts, once."""
    toy()

    def forks(x, _done=[]):  # noqa: B006 - forks on the first call only
        if not _done:
            _done.append(1)
            if os.fork() == 0:  # the child answers with a wrong value, then goes on
                return -np.asarray(x)
        return 2.0 * np.asarray(x, dtype=float)

    r = check("hostile_double", forks)
    assert r.passed, str(r)
    assert check("hostile_double", _double).passed
    assert not [p for p in processes.descendants(os.getpid()) if p not in processes.standby_pids()]


# --------------------------------------------------------------------------- output and side effects

def test_output_written_to_file_descriptors_1_and_2_is_captured_and_limited(toy, mode, capfd):
    toy()

    def loud(x):
        os.write(1, b"x" * 6_000_000)
        os.write(2, b"to fd 2\n")
        print("printed")
        return 2.0 * np.asarray(x, dtype=float)

    r = check("hostile_double", loud)
    assert r.passed, str(r)
    out = capfd.readouterr()
    assert out.out == "" and out.err == "", "the learner's output reached the kernel's own descriptors"
    printed = r.details["printed"]
    assert printed.startswith("xxx") and len(printed) < 3000


def test_side_effects_do_not_reach_the_kernel(toy, mode):
    toy()
    default = torch.get_default_dtype()

    def meddles(x):
        torch.set_default_dtype(torch.float16)
        np.seterr(all="raise")
        al.i18n._state["lang"] = "zh"  # (what set_language does, without loading fonts)
        return 2.0 * np.asarray(x, dtype=float)

    assert check("hostile_double", meddles).passed
    assert torch.get_default_dtype() == default and al.get_language() == "en"
    assert np.geterr()["divide"] != "raise"


@linux_only
def test_a_huge_allocation_is_the_learners_memory_error(toy, mode):
    toy()
    t0 = time.perf_counter()
    r = check("hostile_double", lambda x: np.ones(10 * 2**30 // 8))
    assert r.status == "failed" and r.details["problem"] == "raised", str(r)
    assert "MemoryError" in r.message and "more memory" in r.message
    assert time.perf_counter() - t0 < 20 + (0 if mode == "fork" else 60)
    r = check("hostile_double", lambda x: torch.ones(10 * 2**30 // 8, dtype=torch.float64))
    assert r.status == "failed" and "more memory" in r.message, str(r)


def test_switching_the_watch_off_fails_the_check(toy):
    def softmax(x, axis=-1):
        sys.setprofile(None)
        return al.softmax(x, axis=axis)

    r = check("softmax", softmax)
    assert r.status == "failed" and r.mistake == "tampered" and "sys.setprofile" in r.message, str(r)

    def softmax2(x, axis=-1):
        import threading
        threading.setprofile(None)
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    assert check("softmax", softmax2).mistake == "tampered"


# --------------------------------------------------------------------------- the protocol

def test_run_cases_and_plan_work_as_a_grader_uses_them():
    """The grader's path: the trusted Plan writes requests, run_cases (in the kernel that ran
    the student's notebook) answers with text, and the Plan judges it."""
    for batch in (False, True):
        for fn, passed in ((EXERCISES["softmax"].reference, True), (lambda x, axis=-1: x, False)):
            plan = Plan(EXERCISES["softmax"], seed=7, batch=batch, answer_key=True)
            n = 0
            while (req := plan.next_request()) is not None:
                plan.take(req, run_cases(fn, req.message))
                n += 1
            r = plan.result()
            assert r.passed is passed and r.details["seed"] == 7, str(r)
            assert n == (1 if batch else len(plan.cases))


def _pack_npy(arr, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


def _npy_header(shape) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _message(header: dict, blobs: list[bytes]) -> bytes:
    """The bytes of a message whose arrays are given as raw .npy bytes (any, even broken)."""
    head = json.dumps(header).encode()
    return (wire._HEAD.pack(len(head), len(blobs)) + head
            + b"".join(wire._SIZE.pack(len(b)) + b for b in blobs))


def test_a_reply_is_checked_field_by_field():
    plan = Plan(EXERCISES["softmax"], seed=1, answer_key=True)
    req = plan.next_request()
    good = run_cases(EXERCISES["softmax"].reference, req.message)
    _wire.read_reply(good, req.id, 1, len(plan.rules))  # fine

    def broken(edit):
        header = json.loads(json.dumps(good.header))
        edit(header)
        return wire.Message(header, good.arrays)

    value = lambda m: m["outcomes"][0]["value"]  # noqa: E731
    bad = {
        "another request": lambda m: m.update(id="r0"),
        "not a reply": lambda m: m.update(attnlib="request"),
        "two outcomes": lambda m: m["outcomes"].append(m["outcomes"][0]),
        "an array node naming no array": lambda m: value(m).update(i=7),
        "an array node naming an array by text": lambda m: value(m).update(i="0"),
        "an unknown value type": lambda m: value(m).update(t="pickle"),
        "evidence naming no rule": lambda m: m["outcomes"][0].update(borrowed=[{"rule": 999, "name": "x"}]),
        "a computed value that is no value": lambda m: m["outcomes"][0].update(computed=[{"name": "f", "value": 3}]),
        "a status not allowed": lambda m: m["outcomes"][0].update(status="passed"),
        "a negative time": lambda m: m["outcomes"][0].update(seconds=-1),
    }
    for what, edit in bad.items():
        with pytest.raises(_wire.WireError):
            _wire.read_reply(broken(edit), req.id, 1, len(plan.rules))
    with pytest.raises(_wire.WireError):
        _wire.read_reply(good, req.id, 1, len(plan.rules), pid=good.header["pid"] + 1)
    # the bytes of a message: every part is checked before anything is built from it
    head = good.header
    data = wire.pack(head, good.arrays)
    assert wire.unpack(data).header == head
    for what, raw in {
        "an object array (a pickle)": _message(head, [_pack_npy(np.array([Evil()], dtype=object), allow_pickle=True)]),
        "bytes that do not fit the shape": _message(head, [_pack_npy(np.zeros(7))[:-8]]),
        "more bytes than the shape": _message(head, [_pack_npy(np.zeros(7)) + b"\0" * 8]),
        "a shape of 2**40 floats in 64 bytes": _message(head, [_npy_header((2**40,)) + b"\0" * 64]),
        "a dtype not allowed": _message(head, [_pack_npy(np.zeros(2, dtype="datetime64[s]"))]),
        "not an .npy": _message(head, [b"PK\x03\x04 a zip file"]),
        "a cut message": data[:-5],
        "bytes after the end": data + b"x",
        "a header that is not JSON": _message({}, [])[:8] + b"not json",
        "NaN in the header": wire._HEAD.pack(3, 0) + b"NaN",
        "a header nested too deeply": wire._HEAD.pack(200_000, 0) + b"[" * 100_000 + b"]" * 100_000,
        "not UTF-8": wire._HEAD.pack(2, 0) + b"\xff\xfe",
        "a header that is not an object": wire._HEAD.pack(2, 0) + b"[]",
    }.items():
        with pytest.raises(wire.WireError):
            wire.unpack(raw)
    # judged, not raised: a garbled reply is the answer's failure
    plan.take(req, wire.Message({"attnlib": "garbage"}))
    r = plan.result()
    assert r.status == "failed" and r.details["problem"] == "garbled" and "bug in attnlib" not in r.message


def test_values_survive_the_wire_exactly():
    values = (np.arange(6.0).reshape(2, 3), np.array([1, -2], dtype=np.int8), np.array([True, False]),
              np.float32(1.5), 3, -2**70, 0.1, float("nan"), float("-inf"), 1 + 2j, "text", None,
              [np.zeros((0, 3))], {"k": (1, 2.5)}, np.arange(4.0)[::2], np.asfortranarray(np.eye(3)),
              np.arange(3, dtype=">i4"))
    arrays = []
    node = wire.encode_value(values, arrays)
    got = wire.unpack(wire.pack({"v": node}, arrays))
    back = wire.decode_value(got.header["v"], got.arrays)
    for a, b in zip(values, back):
        if isinstance(a, np.ndarray):
            assert type(b) is np.ndarray and a.dtype.name == b.dtype.name and a.shape == b.shape
            assert np.array_equal(a, b) and b.flags.writeable and b.dtype.isnative
        elif isinstance(a, float) and np.isnan(a):
            assert np.isnan(b)
        elif isinstance(a, list):
            assert type(b) is list and b[0].shape == (0, 3)
        else:
            assert a == b and type(a) is type(b)
    arrays = []
    bf = wire.decode_value(wire.encode_value(torch.tensor([1.0, 2.0], dtype=torch.bfloat16), arrays), arrays)
    assert type(bf).__name__ == "BFloat16Values" and list(bf) == [1.0, 2.0]


# --------------------------------------------------------------------------- messages on the channel

def _child_reading(messages: list[tuple]):
    """A Child whose channel already holds ``messages`` (sent at once, as a worker's
    messages are found when the checker wakes late on a busy machine), with a sleeping
    process standing in for its guard and worker 4242."""
    ctx = multiprocessing.get_context(processes.start_method())
    mine, theirs = ctx.Pipe(duplex=True)
    stand_in = ctx.Process(target=time.sleep, args=(60,), daemon=True)
    stand_in.start()
    child = processes.Child(None, None)
    child.proc, child.channel, child.worker = stand_in, wire.Channel(mine), 4242
    other = wire.Channel(theirs)
    for header, arrays in messages:
        other.send(header, arrays)
    return child, other


def test_only_the_workers_reply_to_the_request_counts():
    """Messages of another process (a fork of the function) or to an earlier request are
    read whole and skipped, never matched as text."""
    stray = _wire.reply("r1", [], [], 999)
    old = _wire.reply("r0", [], [], 4242)
    mine = _wire.reply("r1", [], [np.arange(3.0)], 4242)
    child, other = _child_reading([stray, old, ({"attnlib": "started", "worker": 1}, ()), mine])
    try:
        got = child.ask({"attnlib": "request"}, limit=5.0, answers=lambda m: _wire.answers(m, "r1", child.worker))
        assert isinstance(got, processes.Answer) and got.message.header == mine.header
        assert np.array_equal(got.message.arrays[0], np.arange(3.0))
    finally:
        child.close()
        other.close()


def test_a_worker_that_ends_right_after_its_reply_is_a_crash_on_the_next_call():
    """A reply and the guard's "ended" message read one after the other: the next request
    is told at once that the worker crashed, not left to run into its time limit."""
    reply = _wire.reply("r1", [], [], 4242)
    child, other = _child_reading([reply, ({"attnlib": "ended", "status": 9}, ())])
    try:
        got = child.ask({"attnlib": "request"}, limit=5.0, answers=lambda m: _wire.answers(m, "r1", 4242))
        assert got.message.header == reply.header
        t0 = time.perf_counter()
        out = child.ask({"attnlib": "request"}, limit=5.0, answers=lambda m: _wire.answers(m, "r2", 4242))
        assert isinstance(out, processes.Ended) and out.status == "crashed" and out.how == ("signal", 9), out
        assert time.perf_counter() - t0 < 1.0
    finally:
        child.close()
        other.close()
