"""Run a learner's code so that none of it can still run after the verdict.

One :func:`session` serves one ``check``: it holds a list of *tasks* (zero-argument
callables prepared by the checker: "run case 3", "time the perf case", "run the extra
check") and runs the ones the checker asks for, one at a time, each with a wall-clock
limit (and optionally a CPU-time limit).

**Forked worker (the default).** The session forks one worker process before the first
task; the tasks (and the learner's function, notebook-defined or a closure) are already
in its memory, so nothing is pickled on the way in. Results come back through a pipe as
plain data: NumPy arrays, a :class:`Raised` record instead of the exception, an
:class:`Opaque` note for a value that cannot be pickled. A task past its limit, a
kernel interrupt (KeyboardInterrupt) in the waiting parent, or the end of the check
kills the worker's whole process group with SIGKILL: a loop that swallows every
exception, a long C call, a thread the learner started -- all end with it. A crash of the
worker (a segmentation fault after ``sys.setrecursionlimit``, ``os._exit``) is reported
as a crash; the kernel is not affected. One fork per check (not per case) keeps a check
fast. In the worker, torch's intra-op pool is limited to one thread (an OpenMP pool used
by the parent before the fork deadlocks in the child otherwise), stdout and stderr are
captured, and the exercise's forbidden library calls are watched (see :class:`Watch`).
Side effects of the learner's function on notebook variables stay in the worker.

**Threads (the fallback)** are used where fork is unsafe or missing: no ``os.fork``
(Windows), macOS (system libraries are not fork-safe), or CUDA already initialised in
the parent (a forked child cannot use it). There each task runs in a daemon thread; a
thread past its limit is interrupted by raising :class:`_Timeout` inside it, repeatedly
(a pure-Python loop stops at once, also when it catches the first interrupt), but a long
C call or ``sleep`` only stops when it returns: such threads are remembered in
``_STUCK``, interrupted again at the next check, and the verdict says they still run.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any, Callable

import numpy as np

from ..i18n import N_

__all__ = ["session", "Raised", "Opaque", "Outcome", "Watch", "fork_unsafe_reason"]


class _Timeout(BaseException):
    """Raised inside a learner's function (thread fallback) that ran past its time limit."""


_THREAD_NAME = "attnlib-exercise"
_STACK_BYTES = 64 * 2**20   # threads: deep (but finite) recursion must raise RecursionError, not crash
_THREAD_RECURSION_CAP = 10_000  # threads: a limit the 64 MiB stack holds (a crash would kill the kernel)
_STUCK: list = []            # worker threads that did not stop when asked (inside a long C call)
_CPU_EXIT = 86               # exit status of a forked worker stopped by its CPU-time limit
_PRINT_LIMIT = 2000          # characters of printed output kept per task
IN_FORKED_WORKER = False     # True inside a forked worker (the process dies after the check)


# --------------------------------------------------------------------------- plain-data records

class Raised:
    """An exception raised by the learner's code, as plain data (it crosses the pipe, and
    its ``__str__`` is called once, safely: a broken ``__str__`` is the learner's problem,
    not a crash of the checker)."""

    def __init__(self, exc: BaseException):
        self.type_name = type(exc).__name__
        try:
            self.text = str(exc)
        except BaseException as inner:  # noqa: BLE001 - the learner's __str__ may raise anything
            self.text = f"<its message could not be shown: __str__ raised {type(inner).__name__}>"
        self.recursion = isinstance(exc, RecursionError)
        self.not_implemented = isinstance(exc, NotImplementedError)
        self.memory = isinstance(exc, MemoryError)
        self.attribute = isinstance(exc, AttributeError)

    def __repr__(self) -> str:
        return f"Raised({self.type_name}: {self.text[:60]!r})"


class Opaque:
    """A returned value that could not be sent back (e.g. a generator): only its type."""

    def __init__(self, obj: Any):
        self.type_name = type(obj).__name__

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


class Outcome:
    """What one task did. ``status``: "ok", "raised" (``value`` is a :class:`Raised`),
    "timeout" (past the wall-clock limit), "cpu" (past the CPU-time limit) or "crashed"
    (the worker process died; ``value`` says how). ``seconds`` is the wall time,
    ``cpu`` the worker's CPU time, ``forbidden`` the first forbidden library call seen,
    ``stuck`` whether a thread could not be stopped (thread fallback only)."""

    def __init__(self, status: str, value: Any = None, *, seconds: float = 0.0, cpu: float = 0.0,
                 printed: str = "", forbidden: str | None = None, stuck: bool = False):
        self.status, self.value, self.seconds, self.cpu = status, value, seconds, cpu
        self.printed, self.forbidden, self.stuck = printed, forbidden, stuck

    def __repr__(self) -> str:
        return f"Outcome({self.status}, {self.value!r})"


class _Tee(io.TextIOBase):
    """Collects at most ``limit`` characters of what is printed."""

    def __init__(self, limit: int = _PRINT_LIMIT):
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


# --------------------------------------------------------------------------- forbidden calls

class Watch:
    """Notes calls of forbidden library functions while the learner's code runs.

    ``names`` are dotted paths (``"attnlib.softmax"``, ``"torch.Tensor.softmax"``,
    ``"torch.nn.MultiheadAttention.forward"``); names whose top module is not imported
    are skipped (and patched if the learner's code imports it). Each function is
    replaced, where it is defined and wherever the same object is bound (attnlib's and
    torch's modules, the learner's globals, closure cells and default arguments), by a
    wrapper that records its name and calls the original. Only the outermost forbidden
    call is recorded (``al.multi_head_attention`` calling the library's attention is one
    shortcut, not two). In a forked worker the patches are never undone (the worker
    dies); in the thread fallback :meth:`undo` restores everything.
    """

    _ALIAS_MODULES = ("torch", "torch.nn.functional", "torch._C._nn", "torch.special", "torch.nn",
                      "torch.func", "torch.autograd", "torch.autograd.functional", "scipy.special")

    def __init__(self, names, fn: Callable | None = None):
        self.names = tuple(names)
        self.fn = fn
        self.active = False
        self.seen: str | None = None
        self._depth = 0
        self._undo: list = []
        self._done: set = set()
        self._import = None
        self.fn_is: str | None = None  # the learner passed a forbidden function itself

    # -- recording
    def _wrap(self, name: str, original: Callable) -> Callable:
        watch = self

        def forbidden_call(*args, **kwargs):
            if watch.active and watch._depth == 0 and watch.seen is None:
                watch.seen = name
            watch._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                watch._depth -= 1

        forbidden_call.__wrapped__ = original
        forbidden_call.__name__ = getattr(original, "__name__", "forbidden_call")
        forbidden_call.__doc__ = getattr(original, "__doc__", None)
        return forbidden_call

    def take(self) -> str | None:
        seen, self.seen = self.seen, None
        return seen or self.fn_is

    # -- patching
    @staticmethod
    def _resolve(name: str):
        """(owner, attribute, object) for a dotted name, or None (not imported / absent)."""
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            mod = sys.modules.get(".".join(parts[:i]))
            if mod is None:
                continue
            owner = mod
            try:
                for p in parts[i:-1]:
                    owner = getattr(owner, p)
                return owner, parts[-1], getattr(owner, parts[-1])
            except AttributeError:
                return None
        return None

    def _set(self, holder, key, value, how: str) -> None:
        try:
            if how == "attr":
                old = getattr(holder, key)
                setattr(holder, key, value)
            elif how == "dict":
                old = holder[key]
                holder[key] = value
            else:  # closure cell
                old = holder.cell_contents
                holder.cell_contents = value
        except (AttributeError, TypeError, KeyError, ValueError):
            return
        self._undo.append((holder, key, old, how))

    def install(self) -> "Watch":
        wrapped: dict[int, Callable] = {}
        for name in self.names:
            if name in self._done:
                continue
            found = self._resolve(name)
            if found is None:
                continue
            self._done.add(name)
            owner, attr, obj = found
            if getattr(obj, "__name__", "") == "forbidden_call":
                continue
            if getattr(self.fn, "__func__", self.fn) is obj:
                self.fn_is = self.fn_is or name
            w = self._wrap(name, obj)
            wrapped[id(obj)] = (obj, w)
            self._set(owner, attr, w, "attr")
        if not wrapped:
            self._hook_imports()
            return self
        # the same objects bound elsewhere: attnlib's and torch's modules, the learner's namespace
        spaces = [m.__dict__ for n, m in list(sys.modules.items())
                  if m is not None and (n == "attnlib" or n.startswith("attnlib.") or n in self._ALIAS_MODULES)]
        fn = self.fn
        for f in self._functions(fn):
            spaces.append(f.__globals__)
            for cell in f.__closure__ or ():
                try:
                    hit = wrapped.get(id(cell.cell_contents))
                except ValueError:  # an empty cell
                    continue
                if hit is not None and hit[0] is cell.cell_contents:
                    self._set(cell, None, hit[1], "cell")
            if f.__defaults__ and any(id(d) in wrapped for d in f.__defaults__):
                new = tuple(wrapped[id(d)][1] if id(d) in wrapped and wrapped[id(d)][0] is d else d
                            for d in f.__defaults__)
                self._set(f, "__defaults__", new, "attr")
        for space in spaces:
            for key, value in list(space.items()):
                hit = wrapped.get(id(value))
                if hit is not None and hit[0] is value:
                    self._set(space, key, hit[1], "dict")
        self._hook_imports()
        return self

    @staticmethod
    def _functions(fn) -> list:
        """The learner's function and the plain functions it closes over (one level)."""
        out = []
        f = getattr(fn, "__func__", fn)  # a bound method
        if hasattr(f, "__globals__"):
            out.append(f)
            for cell in f.__closure__ or ():
                try:
                    c = cell.cell_contents
                except ValueError:
                    continue
                if hasattr(c, "__globals__") and c.__globals__ is not f.__globals__:
                    out.append(c)
        return out

    def _hook_imports(self) -> None:
        """Patch again after an import inside the learner's code (``import torch`` there)."""
        if self._import is not None or all(n in self._done for n in self.names):
            return
        import builtins
        original = builtins.__import__
        watch = self

        depth = [0]

        def watched_import(*args, **kwargs):
            depth[0] += 1
            try:
                module = original(*args, **kwargs)
            finally:
                depth[0] -= 1
            # patch once the outermost import is complete (torch sets docstrings on its
            # functions while it imports itself: a wrapper there would break that)
            if depth[0] == 0 and not all(n in watch._done for n in watch.names):
                watch.install()
            return module

        self._import = original
        self._set(builtins, "__import__", watched_import, "attr")

    def undo(self) -> None:
        for holder, key, old, how in reversed(self._undo):
            with contextlib.suppress(Exception):
                if how == "attr":
                    setattr(holder, key, old)
                elif how == "dict":
                    holder[key] = old
                else:
                    holder.cell_contents = old
        self._undo.clear()


# --------------------------------------------------------------------------- one task, in the worker

class _KeptRecursionLimit:
    """While the learner's code runs, ``sys.setrecursionlimit`` keeps the current limit
    (a learner who raises it and recurses deeply would crash the process with SIGSEGV)."""

    def __init__(self, cap: int | None = None):
        self.cap = cap

    def __enter__(self):
        self.limit = sys.getrecursionlimit()
        self.setter = sys.setrecursionlimit
        if self.cap is not None and self.limit > self.cap:
            sys.setrecursionlimit(self.cap)
        sys.setrecursionlimit = lambda n: None  # noqa: E731 - the learner's request is ignored
        return self

    def __exit__(self, *exc):
        sys.setrecursionlimit = self.setter
        sys.setrecursionlimit(self.limit)
        return False


def _execute(task: Callable, watch: Watch | None, cpu_clock: Callable[[], float],
             recursion_cap: int | None = None) -> Outcome:
    """Run one task with stdout and stderr captured and forbidden calls watched."""
    tee = _Tee()
    t0, c0 = time.perf_counter(), cpu_clock()
    try:
        with contextlib.redirect_stdout(tee), contextlib.redirect_stderr(tee), \
                np.errstate(all="ignore"), _KeptRecursionLimit(recursion_cap):
            if watch is not None:
                watch.active = True
            try:
                value, status = task(), "ok"
            finally:
                if watch is not None:
                    watch.active = False
    except _Timeout:
        raise
    except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
        value, status = Raised(exc), "raised"
    return Outcome(status, value, seconds=time.perf_counter() - t0, cpu=cpu_clock() - c0,
                   printed=tee.text(), forbidden=watch.take() if watch is not None else None)


# --------------------------------------------------------------------------- forked worker

def fork_unsafe_reason() -> str | None:
    """Why the checker must use threads here (None: a forked worker is safe)."""
    if os.environ.get("ATTNLIB_CHECK_WORKER", "").lower() == "thread":
        return N_("ATTNLIB_CHECK_WORKER=thread is set")
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


def _child_main(conn, tasks: list, watch_names: tuple, fn: Callable | None) -> None:
    """The forked worker: run the tasks the parent asks for until it closes the pipe."""
    global IN_FORKED_WORKER
    IN_FORKED_WORKER = True
    try:
        torch = sys.modules.get("torch")
        if torch is not None:  # the parent's OpenMP pool does not survive fork: run on one thread
            with contextlib.suppress(Exception):
                torch.set_num_threads(1)
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):  # a crash is reported by the parent, not dumped here
            import faulthandler
            faulthandler.disable()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles the interrupt
        signal.signal(signal.SIGPROF, lambda *_: os._exit(_CPU_EXIT))
        try:
            watch = Watch(watch_names, fn).install() if watch_names else None
        except Exception:  # noqa: BLE001 - an odd module state: check the values at least
            watch = None
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            index, cpu_limit = msg
            if cpu_limit is not None:
                signal.setitimer(signal.ITIMER_PROF, max(cpu_limit, 1e-3))
            out = _execute(tasks[index], watch, time.process_time)
            signal.setitimer(signal.ITIMER_PROF, 0)
            try:
                conn.send(out)
            except Exception:  # noqa: BLE001 - an unpicklable value (a generator, a lambda...)
                v = out.value
                if isinstance(v, tuple) and len(v) == 3:  # a case task: (state, value, mutated)
                    out.value = (v[0], Opaque(v[1]), v[2])
                else:
                    out.value = Opaque(v)
                try:
                    conn.send(out)
                except Exception:  # noqa: BLE001
                    conn.send(Outcome("raised", Raised(RuntimeError("the result could not be sent back"))))
    except BaseException:  # noqa: BLE001 - never run the parent's code after fork
        pass
    finally:
        os._exit(0)


class _ForkWorker:
    def __init__(self, tasks: list, watch_names: tuple, fn: Callable | None):
        from multiprocessing import Pipe

        self.tasks, self.watch_names, self.fn = tasks, watch_names, fn
        self.pid: int | None = None
        self.conn = self._child_conn = None
        self._Pipe = Pipe

    def _start(self) -> None:
        parent, child = self._Pipe(duplex=True)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                os.setpgid(0, 0)
                parent.close()
            except BaseException:  # noqa: BLE001
                pass
            _child_main(child, self.tasks, self.watch_names, self.fn)
            os._exit(0)  # not reached
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also here: no race with an early kill
        child.close()
        self.pid, self.conn = pid, parent

    def run(self, index: int, limit: float, cpu_limit: float | None = None) -> Outcome:
        if self.pid is None:
            self._start()
        t0 = time.perf_counter()
        try:
            self.conn.send((index, cpu_limit))
            ready = self.conn.poll(max(limit, 0.0))
        except (BrokenPipeError, EOFError, OSError):
            ready = True
        if not ready:
            self.close()
            return Outcome("timeout", seconds=time.perf_counter() - t0)
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            how = self.close()
            if how == ("exit", _CPU_EXIT):
                return Outcome("cpu", seconds=time.perf_counter() - t0, cpu=cpu_limit or 0.0)
            return Outcome("crashed", how, seconds=time.perf_counter() - t0)

    def close(self):
        """Kill the worker and its process group; returns how it ended."""
        if self.pid is None:
            return None
        pid, self.pid = self.pid, None
        with contextlib.suppress(Exception):
            self.conn.close()
        status = None
        with contextlib.suppress(ChildProcessError, OSError):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                status = None
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                target()
        if status is None:
            with contextlib.suppress(ChildProcessError, OSError):
                _, status = os.waitpid(pid, 0)
        if status is None:
            return None
        if os.WIFSIGNALED(status):
            return ("signal", os.WTERMSIG(status))
        return ("exit", os.WEXITSTATUS(status))


# --------------------------------------------------------------------------- thread fallback

def _interrupt(th: threading.Thread) -> None:
    """Ask thread ``th`` to raise :class:`_Timeout` at its next Python instruction."""
    if th.ident is None:
        return
    tid = ctypes.c_ulong(th.ident)
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, ctypes.py_object(_Timeout))
    if n > 1:  # never expected; undo as the C API documentation says
        ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, None)


def _running(th: threading.Thread) -> bool:
    # not th.is_alive(): on Python 3.11 a join interrupted by KeyboardInterrupt marks the
    # thread as stopped although it still runs; the thread's own flag is the truth
    return not th._attnlib_done.is_set()


def _stop(th: threading.Thread, seconds: float = 1.0) -> bool:
    """Interrupt ``th`` repeatedly (it may catch one exception) for up to ``seconds``;
    returns whether it stopped."""
    deadline = time.perf_counter() + seconds
    while _running(th) and time.perf_counter() < deadline:
        _interrupt(th)
        th._attnlib_done.wait(0.02)
    return not _running(th)


def _reap_stuck() -> int:
    """Interrupt again the threads that were stuck earlier; returns how many still run."""
    for th in list(_STUCK):
        if _running(th):
            _stop(th, 0.1)
        if not _running(th):
            _STUCK.remove(th)
    return len(_STUCK)


def _thread_cpu_seconds(th: threading.Thread) -> float | None:
    """CPU time used so far by thread ``th`` (None where the platform cannot tell)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(th.ident))
    except (AttributeError, OSError, TypeError):  # not Linux/BSD, or the thread has ended
        return None


class _ThreadWorker:
    def __init__(self, tasks: list, watch_names: tuple, fn: Callable | None):
        self.tasks, self.watch_names, self.fn = tasks, watch_names, fn

    def run(self, index: int, limit: float, cpu_limit: float | None = None) -> Outcome:
        _reap_stuck()
        box: dict[str, Outcome] = {}
        done = threading.Event()
        watch = Watch(self.watch_names, self.fn) if self.watch_names else None

        def target():
            try:
                try:
                    if watch is not None:
                        watch.install()
                    box["out"] = _execute(self.tasks[index], watch, time.thread_time, _THREAD_RECURSION_CAP)
                finally:
                    if watch is not None:
                        watch.undo()
            except _Timeout:  # arrived after the task returned; reported as a timeout
                pass
            finally:
                done.set()

        old = threading.stack_size()
        with contextlib.suppress(ValueError, RuntimeError):
            threading.stack_size(_STACK_BYTES)
        th = threading.Thread(target=target, daemon=True, name=_THREAD_NAME)
        th._attnlib_done = done
        try:
            th.start()
        finally:
            threading.stack_size(old)
        hit_cpu = False
        try:
            deadline = time.perf_counter() + max(limit, 0.0)
            while not done.is_set() and time.perf_counter() < deadline:
                done.wait(0.02)
                if cpu_limit is not None:
                    used = _thread_cpu_seconds(th)
                    if used is not None and used > cpu_limit:
                        hit_cpu = True
                        break
        except KeyboardInterrupt:  # the learner pressed "interrupt": stop the worker too
            if not _stop(th):
                _STUCK.append(th)
            raise
        if not done.is_set() or "out" not in box:
            stuck = not done.is_set() and not _stop(th)
            if stuck:
                _STUCK.append(th)
                if watch is not None:  # a stuck thread must not leave the library wrapped
                    watch.active = False
                    watch.undo()
            return Outcome("cpu" if hit_cpu else "timeout", seconds=limit, cpu=cpu_limit or 0.0, stuck=stuck)
        out = box["out"]
        if cpu_limit is not None and out.cpu > cpu_limit:
            out.status = "cpu"
        return out

    def close(self):
        return None


@contextlib.contextmanager
def session(tasks: list, watch: tuple = (), fn: Callable | None = None):
    """Yield a worker whose ``run(i, limit, cpu_limit=None) -> Outcome`` runs ``tasks[i]``.
    On leaving (normally, by an exception or by KeyboardInterrupt) nothing of the
    learner's code is left running (threads: as far as they can be stopped)."""
    worker = _ThreadWorker(tasks, tuple(watch), fn) if fork_unsafe_reason() else _ForkWorker(tasks, tuple(watch), fn)
    try:
        yield worker
    finally:
        worker.close()
