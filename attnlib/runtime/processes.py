"""The supervisor: start a child that runs someone else's code, wait for its answers
within the limit rule, and end it with everything it started.

A :class:`Child` is a ``multiprocessing`` process (:func:`attnlib.runtime.child.main`)
connected by a ``Pipe`` that carries :mod:`attnlib.runtime.wire` messages:

- **fork** where it is safe (Linux): what it serves is already in its memory, nothing is
  pickled;
- **spawn** where fork is unsafe (:func:`fork_unsafe_reason`: Windows has no fork, macOS's
  system libraries are not fork-safe, CUDA initialised here cannot be used by a forked
  child; ``ATTNLIB_CHECK_WORKER=spawn`` forces it, ``fork`` the other way): a fresh Python
  gets ``(serve, payload)`` pickled by value (cloudpickle) in a ``load`` message; what
  cannot be pickled is reported as ``unsendable``. A spawned child is started ahead, in
  the background, so that the next one need not wait for Python to start (a standby:
  nothing of anyone's runs in it until it is loaded). The parent's ``__main__`` is not
  imported there: a script is not run a second time.

:meth:`Child.ask` sends a message and waits for the answer that ``answers`` accepts,
reading every message whole (its header parsed, never matched as text) and ignoring
others (a process the served code forked may write too). The wait ends at the limit rule
(:mod:`attnlib.runtime.limits`: CPU seconds of the worker, the clock as a backstop), at a
keyboard interrupt, or when the worker ends; a message that stalls half-way is ended by a
watchdog at the backstop. Then, and at :meth:`Child.close`, **every process in the tree
ends**: stopped from the top down (a stopped process can neither fork nor reap) until a
scan finds no new one, then killed (:func:`kill_tree`, psutil: every platform). On Linux
the child is a guard (a child subreaper, see :mod:`attnlib.runtime.child`), so processes
that ``setsid`` or double-fork stay in the tree, and this process is briefly a subreaper
itself so that the dead are reaped here. Elsewhere a process that leaves the tree (its
parent ended first) is out of reach: macOS and Windows have no subreaper.
"""
from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Callable

import numpy as np
import psutil

from ..i18n import N_
from . import child as _child
from .limits import Meter, backstop
from .wire import Channel, Closed, Message, WireError

__all__ = ["Child", "Answer", "Ended", "fork_unsafe_reason", "start_method", "kill_tree", "descendants",
           "standby_pids", "watchdog"]

START_LIMIT = 120.0     # clock seconds a child may take to start (a spawned one: Python, imports, unpickling)
STEP = 0.05             # seconds between two looks at the worker's CPU time
LINUX = sys.platform.startswith("linux")


def fork_unsafe_reason() -> str | None:
    """Why a child must be spawned here (None: forking is safe). English, catalogued."""
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


def start_method() -> str:
    """``"fork"`` or ``"spawn"``: how the next :class:`Child` starts."""
    return "spawn" if fork_unsafe_reason() else "fork"


# --------------------------------------------------------------------------- the process tree

def _stop(p: psutil.Process) -> None:
    """Suspend ``p`` and wait (briefly) until it is stopped: only then are its children all
    known (a signal is delivered asynchronously; a fork can still complete meanwhile)."""
    with contextlib.suppress(psutil.Error, OSError):
        p.suspend()
        if sys.platform == "win32":  # (NtSuspendProcess has returned once the process is suspended)
            return
        deadline = time.perf_counter() + 0.5
        while time.perf_counter() < deadline and p.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE,
                                                                     psutil.STATUS_DEAD, "tracing-stop"):
            time.sleep(0.0005)


def kill_tree(pid: int) -> list[psutil.Process]:
    """Kill process ``pid`` and every process descended from it; returns the descendants
    killed (to be reaped). Stopped from the top down first, scanning again until no new
    process appears, so nothing forks away while the tree is collected (psutil checks
    that a pid still names the process it found)."""
    try:
        root = psutil.Process(pid)
    except (psutil.Error, OSError):
        return []
    if root.pid == os.getpid():
        return []
    _stop(root)
    found: dict[int, psutil.Process] = {}
    for _ in range(100):
        kids = _children(root)  # (parents before their children)
        new = [p for p in kids if p.pid not in found]
        if not new:
            break
        for p in new:
            found[p.pid] = p
            _stop(p)
    for p in [*found.values(), root]:
        with contextlib.suppress(psutil.Error, OSError):
            p.kill()
    return list(found.values())


def _children(root: psutil.Process) -> list[psutil.Process]:
    """Every process descended from ``root``, parents before their children.

    On Linux each thread's ``/proc/PID/task/TID/children`` lists the children it started,
    so the tree is read from its own branches: a handful of reads, where psutil's
    ``children(recursive=True)`` reads the ``stat`` file of every process on the machine
    (hundreds, twice per check). Where those files are missing (a kernel without
    CONFIG_PROC_CHILDREN, macOS, Windows), psutil's way."""
    if LINUX:
        try:
            return _children_from_proc(root)
        except OSError:
            pass
    try:
        return root.children(recursive=True)
    except (psutil.Error, OSError):
        return []


def _children_from_proc(root: psutil.Process) -> list[psutil.Process]:
    out: list[psutil.Process] = []
    seen = {root.pid}
    todo = [root.pid]
    first = True
    while todo:
        pid = todo.pop(0)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            if first:
                raise  # the root itself cannot be read this way: fall back
            continue  # a descendant ended meanwhile
        kids: list[int] = []
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    kids += [int(k) for k in f.read().split()]
            except FileNotFoundError:
                if first and tid == str(pid):
                    raise  # no children files on this kernel: fall back
            except OSError:
                pass  # a thread that ended meanwhile
        first = False
        for kid in kids:
            if kid in seen:
                continue
            seen.add(kid)
            try:
                out.append(psutil.Process(kid))  # (psutil checks the pid still names it later)
            except (psutil.Error, OSError):
                continue
            todo.append(kid)
    return out


def descendants(pid: int) -> list[int]:
    """The live (not zombie) descendants of process ``pid``."""
    try:
        kids = _children(psutil.Process(pid))
    except (psutil.Error, OSError):
        return []
    out = []
    for p in kids:
        with contextlib.suppress(psutil.Error, OSError):
            if p.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                out.append(p.pid)
    return out


_PR_GET_CHILD_SUBREAPER = 37


@contextlib.contextmanager
def _reaping():
    """Linux: this process is a child subreaper inside the block, so that the processes of
    a dying tree become its own to reap (not init's, which a container may not have)."""
    was = None
    if LINUX:
        try:
            import ctypes
            out = ctypes.c_int(0)
            if ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(out), 0, 0, 0) == 0:
                was = out.value
        except (OSError, AttributeError):
            was = None
    if was == 0:
        _child.prctl(_child._PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield was == 0
    finally:
        if was == 0:
            _child.prctl(_child._PR_SET_CHILD_SUBREAPER, 0)


class _Watchdogs:
    """One thread that calls each armed watchdog's ``on_expiry`` at its deadline. Starting a
    thread per message (a ``threading.Timer``) cost two thread starts per case of every
    check: on a busy machine each start waits for the scheduler, a third of a check's time."""

    def __init__(self):
        self.cond = threading.Condition()
        self.armed: dict[int, tuple[float, Callable[[], None]]] = {}
        self.next_id = 0
        self.thread: threading.Thread | None = None

    def arm(self, seconds: float, on_expiry: Callable[[], None]) -> int:
        with self.cond:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="attnlib-watchdog", daemon=True)
                self.thread.start()
            self.next_id += 1
            self.armed[self.next_id] = (time.monotonic() + max(seconds, 0.0), on_expiry)
            self.cond.notify()
            return self.next_id

    def disarm(self, key: int) -> None:
        with self.cond:
            self.armed.pop(key, None)

    def _run(self) -> None:
        while True:
            with self.cond:
                now = time.monotonic()
                due = [k for k, (t, _) in self.armed.items() if t <= now]
                calls = [self.armed.pop(k)[1] for k in due]
                if not calls:
                    wait = min((t for t, _ in self.armed.values()), default=now + 60.0) - now
                    self.cond.wait(max(wait, 0.0))
                    continue
            for call in calls:  # outside the lock: a call may arm or disarm another
                with contextlib.suppress(Exception):
                    call()


_WATCHDOGS = _Watchdogs()


def _fresh_watchdogs_after_fork() -> None:
    # a forked child inherits neither the thread nor, safely, the lock (the thread may have
    # held it at the fork): it gets its own, started when first needed
    global _WATCHDOGS
    _WATCHDOGS = _Watchdogs()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_watchdogs_after_fork)


@contextlib.contextmanager
def watchdog(seconds: float, on_expiry: Callable[[], None]):
    """Call ``on_expiry`` (from another thread) if the block is still running after
    ``seconds``: it bounds a blocking read or write by ending the process at the other end."""
    key = _WATCHDOGS.arm(seconds, on_expiry)
    try:
        yield
    finally:
        _WATCHDOGS.disarm(key)


# --------------------------------------------------------------------------- a child

@dataclass
class Answer:
    """The message that answered, with the worker's CPU seconds and the clock seconds it took."""

    message: Message
    cpu: float | None
    seconds: float


@dataclass
class Ended:
    """A wait that ended without an answer: ``status`` is "timeout" (the clock backstop),
    "cpu" (the CPU limit), "crashed" (the worker ended; ``how`` is ``("signal", n)`` or
    ``("exit", n)`` when known), "garbled" (a message broke the protocol; ``text``) or
    "unsendable" (what it serves could not be sent to a spawned child; ``text``)."""

    status: str
    text: str = ""
    how: tuple | None = None
    seconds: float = 0.0
    cpu: float | None = None


def _pickle(obj) -> bytes:
    try:
        import cloudpickle
    except ImportError:  # only what is importable by name can be sent then
        import pickle
        return pickle.dumps(obj)
    return cloudpickle.dumps(obj)


class Child:
    """A child that answers messages with ``serve(payload, message) -> (header, arrays)``
    (see the module docstring). ``serve`` must be importable by name where the child is
    spawned; ``payload`` is pickled by value there. Use as a context manager, or call
    :meth:`close`.

    Args:
        serve: the function the worker answers with.
        payload: its first argument (e.g. the learner's function).
        method: ``"fork"`` or ``"spawn"``. Default: :func:`start_method`.
        memory_limit: bytes of memory the worker may add (Linux). Default: no limit.
    """

    def __init__(self, serve: Callable, payload, *, method: str | None = None, memory_limit: int | None = None):
        self.serve, self.payload, self.memory_limit = serve, payload, memory_limit
        self.method = method or start_method()
        self.proc = None                  # the multiprocessing process (the guard on Linux)
        self.channel: Channel | None = None
        self.worker: int | None = None    # the pid of the process that serves
        self.status: int | None = None    # the worker's wait status, when the guard said it ended
        self.how: tuple | None = None
        self.closed = False

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    # -- starting
    def start(self) -> Ended | None:
        """Start the child and wait until its worker is ready; an :class:`Ended` if it
        cannot be (unsendable, crashed)."""
        if self.proc is not None or self.closed:
            return Ended("crashed", how=self.how) if self.closed else None
        try:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            if self.method == "spawn":
                try:
                    blob = _pickle((self.serve, self.payload))
                except Exception as exc:  # noqa: BLE001 - the payload may not pickle
                    self.closed = True
                    return Ended("unsendable", text=f"{type(exc).__name__}: {exc}"[:500])
                self.proc, self.channel = _Standby.take()
                try:
                    self.channel.send({"attnlib": "load", "memory_limit": int(self.memory_limit or 0)},
                                      [np.frombuffer(blob, dtype=np.uint8)])
                except Closed:
                    return self._crashed(0.0)
            else:
                _Standby.discard()  # forking from now on: a spawned standby is not needed
                ctx = multiprocessing.get_context("fork")
                mine, theirs = ctx.Pipe(duplex=True)
                self.proc = ctx.Process(target=_child.main, args=(theirs, self.serve, self.payload, self.memory_limit),
                                        daemon=True)
                self.proc.start()
                theirs.close()
                self.channel = Channel(mine)
            got = self._receive(Meter(None), START_LIMIT, START_LIMIT,
                                lambda m: m.header.get("attnlib") in ("started", "unsendable"))
            if isinstance(got, Ended):
                return got
            if got.message.header.get("attnlib") == "unsendable":
                why = got.message.header.get("why")
                self.close()
                return Ended("unsendable", text=why[:500] if isinstance(why, str) else "?")
            worker = got.message.header.get("worker")
            if type(worker) is not int:
                self.close()
                return Ended("garbled", text="the worker did not say which process it is")
            self.worker = worker
            return None
        except KeyboardInterrupt:
            self.close()
            raise

    # -- one question
    def ask(self, header: dict, arrays=(), *, limit: float, wall: float | None = None,
            answers: Callable[[Message], bool]) -> Answer | Ended:
        """Send a message and wait for the one ``answers`` accepts, within ``limit`` CPU
        seconds of the worker and ``wall`` seconds on the clock (default: the backstop,
        :func:`attnlib.runtime.limits.backstop`). Past the limit, at a keyboard interrupt
        or a garbled message, the tree is ended."""
        if self.proc is None and not self.closed:
            failed = self.start()
            if failed is not None:
                return failed
        if self.closed:
            return Ended("crashed", how=self.how)
        try:
            meter = Meter(self.worker)
            wall = backstop(limit) if wall is None else wall
            try:
                with watchdog(wall, self._kill):
                    self.channel.send(header, arrays)
            except Closed:
                return self._crashed(meter.wall())
            return self._receive(meter, limit, wall, answers)
        except KeyboardInterrupt:  # the learner pressed "interrupt": stop the worker too
            self.close()
            raise

    def _receive(self, meter: Meter, limit: float, wall: float, answers: Callable[[Message], bool]) -> Answer | Ended:
        last_look = False
        while True:
            reason = meter.past(limit, wall)
            if reason is not None:
                if not last_look and self.channel.poll(0):
                    last_look = True  # it answered meanwhile: read that first (once)
                else:
                    cpu = meter.cpu()
                    self.close()
                    return Ended(reason, seconds=meter.wall(), cpu=cpu)
            if not self.channel.poll(STEP if reason is None else 0):
                continue
            try:
                with watchdog(max(wall - meter.wall(), 1.0), self._kill):
                    msg = self.channel.recv()
            except WireError as exc:
                self.close()
                return Ended("garbled", text=str(exc), seconds=meter.wall())
            except Closed:
                return self._crashed(meter.wall())
            kind = msg.header.get("attnlib")
            if kind == "ended" and type(msg.header.get("status")) is int:  # the guard: the worker ended
                self.status = msg.header["status"]
                return self._crashed(meter.wall())
            if answers(msg):
                return Answer(msg, meter.cpu(), meter.wall())

    def _crashed(self, seconds: float) -> Ended:
        return Ended("crashed", how=self.close(), seconds=seconds)

    # -- ending
    def _kill(self) -> None:
        if self.proc is not None and self.proc.pid is not None:
            kill_tree(self.proc.pid)

    def close(self):
        """End the child and everything it started; returns how the worker ended by itself
        (``("signal", n)``, ``("exit", n)``), or None (it was stopped, or it is not known)."""
        if self.closed or self.proc is None:
            self.closed = True
            return self.how
        self.closed = True
        proc, self.proc = self.proc, None
        ended_before = proc.exitcode if self.worker == proc.pid else None  # (no guard: the root serves)
        with _reaping() as reaping:
            killed = kill_tree(proc.pid)
            proc.join(10)
            if reaping:  # what the dead guard had not reaped is ours now
                for p in killed:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(p.pid, 0)
        if self.channel is not None:
            self.channel.close()
        if self.status is not None:
            s = self.status
            self.how = (("signal", os.WTERMSIG(s)) if os.WIFSIGNALED(s) else ("signal", os.WSTOPSIG(s))
                        if os.WIFSTOPPED(s) else ("exit", os.WEXITSTATUS(s)))
        elif ended_before is not None:
            self.how = ("signal", -ended_before) if ended_before < 0 else ("exit", ended_before)
        _Standby.after(self.method)
        return self.how


# --------------------------------------------------------------------------- the standby

@contextlib.contextmanager
def _without_main_module():
    """multiprocessing's spawn makes the child run the parent's ``__main__`` again (a
    script, under ``__mp_main__``); a child gets what it serves by value, so it is started
    as from an interactive session, whose ``__main__`` has no file to run."""
    main = sys.modules.get("__main__")
    if main is None or (getattr(main, "__file__", None) is None and getattr(main, "__spec__", None) is None):
        yield
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class _Standby:
    """A spawned child started ahead: a fresh Python that has imported what this process
    uses (numpy, attnlib's checker, torch if imported here) and waits for its ``load``
    message. One made with another working directory, path or environment is not used."""

    current: tuple | None = None    # (key, process, channel)
    PRELOAD = ("numpy", "attnlib.exercises._worker")
    # environment variables that change on their own and mean nothing to a child: pytest
    # sets PYTEST_CURRENT_TEST at every phase of every test, so a standby made for the next
    # check was never the next test's (a whole unit run started 31 Pythons, 1.7 s of CPU each,
    # for nothing)
    VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST"})

    @staticmethod
    def _key() -> tuple:
        preload = _Standby.PRELOAD + tuple(m for m in ("torch",) if m in sys.modules)
        env = tuple(sorted((k, v) for k, v in os.environ.items() if k not in _Standby.VOLATILE_ENV))
        return (os.getcwd(), tuple(sys.path), env, preload)

    @classmethod
    def _start(cls, key: tuple) -> tuple:
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_child.main, args=(theirs, None, None, None, key[3]), daemon=True)
        with _without_main_module():
            proc.start()
        theirs.close()
        return key, proc, Channel(mine)

    @classmethod
    def take(cls) -> tuple:
        """``(process, channel)`` of a started spawned child (the standby, if it fits)."""
        key, got, cls.current = cls._key(), cls.current, None
        if got is None or got[0] != key or not got[1].is_alive():
            if got is not None:
                cls._end(got)
            got = cls._start(key)
        return got[1], got[2]

    @classmethod
    def after(cls, method: str) -> None:
        """A child has ended: a spawned one's successor starts now, in the background."""
        if method != "spawn":
            return
        key = cls._key()
        if cls.current is not None and cls.current[0] == key and cls.current[1].is_alive():
            return
        cls.discard()
        try:
            cls.current = cls._start(key)
        except OSError:
            cls.current = None

    @classmethod
    def discard(cls) -> None:
        if cls.current is not None:
            cls._end(cls.current)
            cls.current = None

    @staticmethod
    def _end(got: tuple) -> None:
        _key, proc, channel = got
        channel.close()
        with _reaping():
            kill_tree(proc.pid)
            proc.join(10)


atexit.register(_Standby.discard)


def standby_pids() -> set[int]:
    """The runtime's own idle helpers, where they run (nothing of anyone's has run in
    them): the spawned standby child and multiprocessing's resource tracker (which a
    spawn starts once per process, and which ends with it)."""
    pids = {_Standby.current[1].pid} if _Standby.current is not None else set()
    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    if getattr(tracker, "_pid", None):
        pids.add(tracker._pid)
    return pids
