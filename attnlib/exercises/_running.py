"""The process that runs a learner's function for one check, seen from the trusted side.

A :class:`Worker` is started once per check (not per case) and serves the requests of
:class:`attnlib.exercises._judge.Plan` through two pipes, in frames (:mod:`._wire`); its
loop is :func:`attnlib.exercises._worker.serve`. Two ways to start it:

- **fork** (the default on Linux): the worker is forked from the kernel, so the function
  (notebook-defined, a closure, anything) is already in its memory and nothing is
  pickled.
- **spawn** where fork is unsafe: no ``os.fork`` (Windows), macOS (system libraries are
  not fork-safe), or CUDA initialised in this process (a forked child cannot use it).
  A fresh Python process is started and the function is sent to it, pickled by value
  with ``cloudpickle`` (a notebook's functions and the globals they use); something that
  cannot be pickled (an open file, a lock) is the learner's problem and is reported as
  such. ``ATTNLIB_CHECK_WORKER=spawn`` forces this mode (``fork`` forces the other).

Either way the guarantees are the same. The process started is a **guard**
(:func:`._worker.guarded`): a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``) that never
runs the learner's code and forks the worker, so that a child that double-forks or calls
``setsid``, or is orphaned by a crash of the worker, stays in the guard's tree. Only the
reply of the worker's own process to the request just sent counts (a reply is matched by
request id and pid; anything else on the pipe is ignored or, if it breaks the framing,
reported as a garbled answer). A call past its time limit (its own time: clock time less
the time it waited for a CPU that other programs held, :mod:`._clock`, so that a busy
machine does not fail a correct answer; ten times the limit on the clock at most), a
timed call past its CPU-time limit (read from ``/proc``, so the function cannot stop the
clock), a kernel interrupt (KeyboardInterrupt) while waiting, and the end of the check
all end **every process in the tree**: it is stopped from the top down (SIGSTOP: a
stopped process can neither start nor reap one), every descendant found in ``/proc`` is
killed until none is left, and only then is anything reaped, while this process is briefly a subreaper itself
so that the dead are reaped here. A crash of the worker (a segmentation fault,
``os._exit``) is reported as a crash; the kernel is not affected.

Without ``/proc`` (macOS) the worker's process group is killed instead: a descendant that
left the group may survive there. A PID namespace would also catch that, but needs
privileges a notebook does not have.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Callable

from ..i18n import N_, get_language
from . import _clock, _wire, _worker

__all__ = ["Worker", "fork_unsafe_reason", "worker_mode", "kill_tree", "end_tree", "descendants", "standby_pids"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_START_LIMIT = 120.0        # seconds a spawned worker may take to start (imports, unpickling)


def fork_unsafe_reason() -> str | None:
    """Why the checker must spawn a fresh process here (None: forking is safe)."""
    forced = os.environ.get("ATTNLIB_CHECK_WORKER", "").lower()
    if forced == "fork" and hasattr(os, "fork"):
        return None
    if forced in ("spawn", "thread"):
        return N_("ATTNLIB_CHECK_WORKER=spawn is set")
    if not hasattr(os, "fork"):
        return N_("this platform has no fork")
    if sys.platform == "darwin":
        return N_("macOS system libraries are not fork-safe")
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return N_("CUDA is initialised in this process (a forked child cannot use it)")
        except Exception:  # noqa: BLE001 - an odd torch build: do not guess
            return N_("torch.cuda could not say whether CUDA is initialised")
    return None


def worker_mode() -> str:
    """``"fork"`` or ``"spawn"``: how the next check starts its worker."""
    return "spawn" if fork_unsafe_reason() else "fork"


# --------------------------------------------------------------------------- processes

def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def process_cpu(pid: int) -> float | None:
    """CPU seconds used by process ``pid`` and its reaped children (None without /proc)."""
    st = _stat(pid)
    if st is None:
        return None
    return sum(int(v) for v in st[11:15]) / _TICK


def _children(pid: int) -> list[int] | None:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return [] if os.path.isdir("/proc/self/task") else None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return kids


def _scan_children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                tree.setdefault(int(st[1]), []).append(int(name))
    return tree


def descendants(pid: int) -> list[int]:
    """The live (not zombie) descendants of ``pid``, found in /proc ([] without /proc)."""
    if not os.path.isdir("/proc"):
        return []
    found, frontier, tree = [], [pid], None
    while frontier:
        p = frontier.pop()
        kids = _children(p)
        if kids is None:  # no children files (an old kernel): scan every process once
            tree = tree if tree is not None else _scan_children()
            kids = tree.get(p, [])
        for k in kids:
            st = _stat(k)
            if st is None:
                continue
            if st[0] not in ("Z", "X"):
                found.append(k)
            frontier.append(k)
    return found


def _signal(pid: int, sig: int) -> None:
    if pid > 1 and pid != os.getpid():
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.kill(pid, sig)


def kill_tree(pid: int) -> list[int]:
    """Kill process ``pid`` and every process descended from it (see the module docstring);
    returns the pids killed (and the zombies found), to be reaped.

    ``pid`` must be an unreaped child of this process (alive or a zombie), so that it
    cannot be another process's pid. The tree is stopped from the top down before anything
    is killed: a stopped parent cannot reap its children, so every pid found stays that
    process's until it is killed (no pid can be reused under our hands)."""
    if pid <= 1 or pid == os.getpid():
        return []
    _stop(pid)
    killed: list[int] = []
    for _ in range(100):
        stopped, frontier = [], [pid]
        while frontier:  # stop every descendant, parents before their children
            p = frontier.pop()
            live, dead = _children_by_state(p)  # (p is stopped: its children are all there)
            killed += [k for k in dead if k not in killed]  # zombies: only to be reaped
            for k in live:
                if k not in killed:
                    _stop(k)
                    stopped.append(k)
                frontier.append(k)
        if not stopped:
            break
        for k in stopped:
            _signal(k, signal.SIGKILL)
        killed += stopped
    if os.path.isdir("/proc"):
        _signal(pid, signal.SIGKILL)
    else:  # no /proc: the worker's process group, then the worker
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(pid, signal.SIGKILL)
        _signal(pid, signal.SIGKILL)
    return killed


_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _prctl(option: int, value: int = 0):
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if option == _PR_GET_CHILD_SUBREAPER:
            out = ctypes.c_int(0)
            return out.value if libc.prctl(option, ctypes.byref(out), 0, 0, 0) == 0 else None
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return None


def end_tree(pid: int) -> int | None:
    """Kill child ``pid`` and its descendants (:func:`kill_tree`), reap it and them, and
    return its wait status (None if unknown). While it dies this process is a child
    subreaper, so the dead descendants become its zombies and are reaped here instead of
    being left to init."""
    was = _prctl(_PR_GET_CHILD_SUBREAPER) if sys.platform.startswith("linux") else None
    if was == 0:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        killed = kill_tree(pid)
        status = None
        with contextlib.suppress(ChildProcessError, OSError):
            _, status = os.waitpid(pid, 0)
        # ``pid`` is gone: what it had not reaped is ours now (we are a subreaper), or was
        # reaped before it was stopped; each killed process dies at once
        if was == 0:
            for k in killed:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(k, 0)
        return status
    finally:
        if was == 0:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _stop(pid: int) -> None:
    """Send SIGSTOP and wait (briefly) until ``pid`` is stopped: only then are its children
    all known (a signal is delivered asynchronously; a fork can still complete meanwhile)."""
    _signal(pid, signal.SIGSTOP)
    deadline = time.perf_counter() + 0.5
    while time.perf_counter() < deadline:
        st = _stat(pid)
        if st is None or st[0] in ("T", "t", "Z", "X"):
            return
        os.sched_yield()


def _children_by_state(pid: int) -> tuple[list[int], list[int]]:
    """(live children, zombie children) of ``pid``."""
    kids = _children(pid)
    if kids is None:
        kids = _scan_children().get(pid, [])
    live, dead = [], []
    for k in kids:
        st = _stat(k)
        if st is not None:
            (dead if st[0] in ("Z", "X") else live).append(k)
    return live, dead


# --------------------------------------------------------------------------- the worker

class Worker:
    """The process that runs ``fn`` for one check. ``call`` sends one request and returns
    the reply's bytes, or a failure :class:`._wire.Outcome` (timeout, cpu, crashed,
    garbled, unsendable); ``close`` ends it and everything it started. Use as a context
    manager."""

    def __init__(self, fn: Callable, *, memory_limit: int | None = None, mode: str | None = None,
                 extra_checks: dict | None = None):
        self.fn, self.memory_limit = fn, memory_limit
        self.extra_checks = dict(extra_checks or {})  # sent along to a spawned worker
        self.mode = mode or worker_mode()
        self.pid: int | None = None        # the worker (the guard until it said "started")
        self.guard: int | None = None      # the process this one started (a child)
        self.last_pid: int | None = None
        self.ended: int | None = None      # the worker's wait status, if the guard reported it
        self.closed = False
        self.proc: subprocess.Popen | None = None
        self.failed: _wire.Outcome | None = None
        self._out = self._in = None
        self.reader: _wire.FrameReader | None = None
        self._pending: collections.deque[bytes] = collections.deque()  # frames read, not yet used

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    # -- starting
    def _pipes(self):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        return req_r, req_w, rep_r, rep_w

    def _start(self) -> _wire.Outcome | None:
        if self.failed is not None:
            return self.failed
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if self.mode == "spawn":
            self.failed = self._spawn()
            return self.failed
        _Standby.discard()  # forking again: a spawned standby is not needed
        req_r, req_w, rep_r, rep_w = self._pipes()
        pid = os.fork()
        if pid == 0:  # the guard, which forks the worker
            try:
                os.setpgid(0, 0)
                os.close(req_w)
                os.close(rep_r)
                _worker.guarded(req_r, rep_w, self.fn, memory_limit=self.memory_limit)
            finally:
                os._exit(0)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        os.close(req_r)
        os.close(rep_w)
        self._connect(pid, req_w, rep_r)
        return None  # (the worker's "started" frame comes before its first reply: see _wait)

    def _started(self) -> _wire.Outcome | None:
        """Wait for the guard's "started" frame: from then on ``pid`` is the worker's."""
        got = self._wait(None, _START_LIMIT, None, ready=True)
        if isinstance(got, _wire.Outcome):
            return got
        try:
            msg = json.loads(got[0])
            worker = int(msg["worker"]) if msg.get("attnlib") == "started" else None
        except (ValueError, KeyError, TypeError, AttributeError):
            worker = None
        if worker is None:
            self.close()
            return _wire.Outcome.failure("garbled", text="the worker did not start")
        self.pid = self.last_pid = worker
        return None

    def _connect(self, guard: int, out_fd: int, in_fd: int) -> None:
        os.set_blocking(in_fd, False)
        self.guard = self.pid = self.last_pid = guard
        self._out, self._in = out_fd, in_fd
        self.ended: int | None = None
        self.reader = _wire.FrameReader(in_fd)
        self._pending.clear()

    def _spawn(self) -> _wire.Outcome | None:
        try:
            payload = _pickle(self.fn, self.extra_checks)
        except Exception as exc:  # noqa: BLE001 - the learner's objects may not pickle
            return _wire.Outcome.failure("unsendable", text=f"{type(exc).__name__}: {exc}"[:500])
        extra = self.memory_limit
        if extra and sys.modules.get("torch") is not None and "CUDA" in (fork_unsafe_reason() or ""):
            extra += 8 * 2**30  # a CUDA context maps host memory of its own
        pid, self.proc, out_fd, in_fd = _Standby.take()
        self._connect(pid, out_fd, in_fd)
        try:
            _wire.write_frame(self._out, json.dumps({"memory_limit": int(extra or 0)}).encode())
            _wire.write_frame(self._out, payload)
        except OSError:
            return self._ended(0.0)
        got = self._wait(None, _START_LIMIT, None, ready=True)
        if isinstance(got, _wire.Outcome):
            return got
        try:
            ready = json.loads(got[0])
        except ValueError:
            ready = {}
        if not isinstance(ready, dict) or not ready.get("ok"):
            why = ready.get("why") if isinstance(ready, dict) and isinstance(ready.get("why"), str) else "?"
            self.close()
            return _wire.Outcome.failure("unsendable", text=why[:500])
        return self._started()

    def close(self):
        """End the worker and everything it started; returns how the worker ended
        (``("signal", n)``, ``("exit", n)`` or None). A spawned worker's successor is
        started in the background, so that the next check need not wait for Python to
        start and import its modules."""
        how = self._close()
        if self.mode == "spawn" and self.proc is not None:
            _Standby.prepare()
        return how

    def start(self) -> _wire.Outcome | None:
        """Start the worker now (a spawned one: until it is ready); a failure Outcome
        (unsendable, crashed) if it cannot be."""
        try:
            return self._start() if self.guard is None else None
        except KeyboardInterrupt:
            self.close()
            raise

    # -- one request
    def call(self, request_id: str, text: str, *, limit: float, cpu_limit: float | None = None):
        """Send a request; wait up to ``limit`` seconds of its own time (see :meth:`_wait`)
        and ``cpu_limit`` CPU seconds for its reply. Returns ``(reply_bytes, cpu_seconds or
        None, own_seconds)`` or a failure Outcome."""
        try:
            if self.guard is None:
                if self.closed:  # it ended (a crash, a time-out): a check never starts a second one
                    return _wire.Outcome.failure("crashed")
                failed = self._start()
                if failed is not None:
                    return failed
            cpu0 = process_cpu(self.pid)
            t0 = time.perf_counter()
            try:
                _wire.write_frame(self._out, text.encode("utf-8"))
            except OSError:
                return self._ended(time.perf_counter() - t0)
            return self._wait(request_id, limit, cpu_limit, cpu0=cpu0, pid0=self.pid)
        except KeyboardInterrupt:  # the learner pressed "interrupt": stop the worker too
            self.close()
            raise

    def _wait(self, request_id, limit, cpu_limit, *, cpu0=None, pid0=None, ready=False):
        """Wait for the reply of the worker to ``request_id``, or (``ready``) for the next
        frame. A call is stopped past ``limit`` seconds of its own time (clock time less the
        time it waited for a CPU held by other programs, :mod:`._clock`), past ten times
        that on the clock (:func:`._clock.backstop`), or past ``cpu_limit`` CPU seconds; a
        wait for ``ready`` is stopped past ``limit`` seconds on the clock."""
        clock = _clock.CallClock(None if ready else self.pid)  # (None: a plain clock)
        limit = max(limit, 0.0)
        step = 0.02 if cpu_limit is not None else None
        timeout = min(limit, step) if step else limit
        last_look = False
        while True:
            if not self._pending and select.select([self._in], [], [], max(timeout, 0.0))[0]:
                try:
                    self._pending.extend(self.reader.feed())
                except _wire.WireError as exc:
                    self.close()
                    return _wire.Outcome.failure("garbled", text=str(exc), seconds=clock.wall())
            while self._pending:  # one at a time: frames read together are kept for the next wait
                frame = self._pending.popleft()
                if ready:
                    return frame, None
                if _answers(frame, request_id, self.pid):
                    used = process_cpu(self.pid) if self.pid == pid0 else None
                    return frame, (None if used is None or cpu0 is None else used - cpu0), clock.own()
                if frame.startswith(b'{"attnlib": "started"') and self.pid == self.guard:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        self.pid = self.last_pid = int(json.loads(frame)["worker"])
                    clock.follow(self.pid)
                    continue
                if frame.startswith(b'{"attnlib": "ended"'):  # the guard: the worker has ended
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        self.ended = int(json.loads(frame)["status"])
                    return self._ended(clock.wall())
            if self.reader.eof:
                return self._ended(clock.wall())
            if cpu_limit is not None and cpu0 is not None and self.pid == pid0:
                used = process_cpu(self.pid)
                if used is not None and used - cpu0 > cpu_limit:
                    self.close()
                    return _wire.Outcome.failure("cpu", seconds=clock.wall(), cpu=used - cpu0)
            if clock.past(limit):
                if not last_look and select.select([self._in], [], [], 0)[0]:
                    last_look, timeout = True, 0.0  # something arrived meanwhile: read it first (once)
                    continue
                self.close()
                return _wire.Outcome.failure("timeout", seconds=clock.wall())
            timeout = min(clock.left(limit), step) if step else clock.left(limit)

    def _ended(self, seconds: float) -> _wire.Outcome:
        how = self.close()
        return _wire.Outcome.failure("crashed", how=how, seconds=seconds)

    # -- ending
    def _close(self):
        if self.guard is None:
            return None
        guard, self.guard, self.pid = self.guard, None, None
        self.closed = True
        # kill before closing the pipes (the worker would end at their end of file, and
        # orphan what it started) and before reaping (until then no pid can be another's)
        status = end_tree(guard)
        for fd in (self._out, self._in):
            with contextlib.suppress(OSError, TypeError):
                os.close(fd)
        if self.ended is not None:
            status = self.ended
        elif self.last_pid != guard:  # the worker was killed by us, not ended by itself
            status = None
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.returncode = -9  # reaped above: keep Popen from waiting again
        if status is None:
            return None
        if os.WIFSIGNALED(status):
            return ("signal", os.WTERMSIG(status))
        if os.WIFSTOPPED(status):
            return ("signal", os.WSTOPSIG(status))
        return ("exit", os.WEXITSTATUS(status))


class _Standby:
    """A spawned worker started ahead of its check: a fresh Python process that has
    imported what this kernel uses (numpy, attnlib.exercises, torch if imported here) and
    waits for its function. Nothing of a learner's has run in it. It ends by itself when
    this process ends (its pipe closes); one made with another environment, working
    directory or path is not used."""

    current: tuple | None = None   # (key, Popen, out_fd, in_fd)

    @staticmethod
    def _key() -> tuple:
        preload = tuple(m for m in ("torch",) if m in sys.modules)
        return (os.getcwd(), tuple(sys.path), tuple(sorted(os.environ.items())), preload, get_language())

    @classmethod
    def _start(cls, key: tuple) -> tuple:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        # the worker speaks this kernel's language (an extra check's message is made there)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), ATTNLIB_LANG=key[4])
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", "from attnlib.exercises._worker import main; main()",
                 str(req_r), str(rep_w), ",".join(key[3])],
                pass_fds=(req_r, rep_w), start_new_session=True, stdin=subprocess.DEVNULL, env=env)
        finally:
            os.close(req_r)
            os.close(rep_w)
        return (key, proc, req_w, rep_r)

    @classmethod
    def prepare(cls) -> None:
        """Start the next standby now (in the background)."""
        key = cls._key()
        if cls.current is not None and cls.current[0] == key and cls.current[1].poll() is None:
            return
        cls.discard()
        try:
            cls.current = cls._start(key)
        except OSError:
            cls.current = None

    @classmethod
    def take(cls) -> tuple:
        """``(pid, Popen, out_fd, in_fd)`` of a started worker (the standby, if it fits)."""
        key = cls._key()
        got = cls.current
        cls.current = None
        if got is None or got[0] != key or got[1].poll() is not None:
            if got is not None:
                cls._end(got)
            got = cls._start(key)
        _key, proc, out_fd, in_fd = got
        return proc.pid, proc, out_fd, in_fd

    @classmethod
    def discard(cls) -> None:
        if cls.current is not None:
            cls._end(cls.current)
            cls.current = None

    @staticmethod
    def _end(got: tuple) -> None:
        _key, proc, out_fd, in_fd = got
        for fd in (out_fd, in_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        if proc.returncode is None:  # not reaped yet: its pid is still its own
            end_tree(proc.pid)
            proc.returncode = -9


atexit.register(_Standby.discard)


def standby_pids() -> set[int]:
    """The pid of the spawned standby worker, if one waits (it has run no learner code)."""
    return {_Standby.current[1].pid} if _Standby.current is not None else set()


def _answers(frame: bytes, request_id: str, pid: int | None) -> bool:
    """Whether a frame is the reply of process ``pid`` to ``request_id`` (checked again,
    fully, when the reply is read)."""
    head = frame[:400]
    return (f'"id":"{request_id}"'.encode() in head) and (pid is None or f'"pid":{pid},'.encode() in head)


def _pickle(fn: Callable, extra_checks: dict) -> bytes:
    try:
        import cloudpickle
    except ImportError:  # only functions importable by name can be sent then
        import pickle
        return pickle.dumps((fn, extra_checks))
    return cloudpickle.dumps((fn, extra_checks))
