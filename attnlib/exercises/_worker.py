"""The untrusted side of the checker: call a learner's function on the inputs of a request,
and report what happened as plain data.

API (for the checker's own worker process and for a grader's sandboxed kernel)::

    from attnlib.exercises._worker import run_cases
    reply_text = run_cases(fn, request_text)

``request_text`` comes from the trusted side (:class:`attnlib.exercises._judge.Plan`);
``reply_text`` goes back to it and is read with every field checked
(:func:`attnlib.exercises._wire.read_reply`). Nothing here is trusted: the function may
have patched anything in this process, so the trusted side judges the values itself, on
cases it made fresh for this check. For each call of the request, this module:

- decodes fresh copies of the inputs and checks that ``fn`` can be called with them
  (outcome ``"signature"`` otherwise);
- captures what the call prints, at the level of file descriptors 1 and 2 (``print``,
  ``sys.stderr``, ``os.write(1, ...)``, a C library's output), keeping the first
  ``print_limit`` characters and counting the rest;
- watches for borrowed answers and tampering (:mod:`attnlib.exercises._watch`);
- keeps Python's recursion limit (a raised limit and deep recursion would crash the
  process) and ignores NumPy's floating-point warnings;
- notes whether the inputs were changed in place;
- encodes the returned value as plain data (:func:`attnlib.exercises._wire.encode_value`):
  a value that cannot be encoded becomes an ``opaque`` record, the learner's problem,
  reported as such;
- if the process was forked by the function and this is the child returning, it ends
  at once (``os._exit``): only the process that received the request answers it.

:func:`serve` is the loop of the worker process that :mod:`attnlib.exercises._running`
starts for one check (its output sent nowhere, a memory limit), under a guard process
(:func:`guarded`, a child subreaper that never runs the learner's code, so that nothing the
worker starts can leave the tree); :func:`main` is the entry point of a spawned one.
"""
from __future__ import annotations

import contextlib
import ctypes
import inspect
import io
import json
import os
import signal
import sys
import time
import warnings
from typing import Any, Callable

import numpy as np

from . import _wire
from ._watch import Recorder

__all__ = ["run_cases", "serve", "guarded", "main"]

IN_WORKER = False             # True in a process started by the checker (it dies after the check)
EXTRA_CHECKS: dict[str, Callable] = {}   # extra checks sent along with the function (spawned worker)
_RECORDERS: dict[str, Recorder] = {}


# --------------------------------------------------------------------------- one request

def run_cases(fn: Callable, request_text: str) -> str:
    """Run ``fn`` on every call of the request; return the reply text. Never raises
    (except that a process forked by ``fn`` ends here)."""
    pid = os.getpid()
    try:
        req = _wire.read_request(request_text)
    except _wire.WireError as exc:
        return json.dumps({"attnlib": "reply", "version": _wire.VERSION, "id": "", "pid": pid,
                           "outcomes": [], "error": str(exc)[:500]})
    key = json.dumps(req.watch, sort_keys=True)
    rec = _RECORDERS.get(key)
    if rec is None:
        rec = _RECORDERS[key] = Recorder(req.watch)
    nodes = [_run_call(fn, call, req, rec, pid) for call in req.calls]
    return _wire.reply(req.id, nodes, pid)


def _function_name(fn: Any) -> str:
    try:
        name = getattr(fn, "__name__", None)
    except Exception:  # noqa: BLE001
        name = None
    return name if isinstance(name, str) else type(fn).__name__


def _run_call(fn: Callable, call: dict, req: _wire.Request, rec: Recorder, pid: int) -> dict:
    kind = call["kind"]
    out = _wire.Outcome("value", function=_function_name(fn)[:200])
    value_node = None
    rec.evidence, rec.tampered, rec.lost = [], None, False
    with _Capture(req.print_limit) as cap, _Quiet():
        try:
            args, kwargs = req.inputs(call) if kind != "extra" else ((), {})
            problem = "" if kind == "extra" else _signature_problem(fn, args, kwargs)
        except _wire.WireError as exc:  # only the trusted side writes requests: never expected
            args, kwargs, problem = (), {}, f"the request could not be read: {exc}"
        if problem:
            out.status, out.text = "signature", problem
        else:
            torch_before = "torch" in sys.modules
            value, out = _call(fn, call, args, kwargs, rec, out)
            if os.getpid() != pid:
                os._exit(0)  # a child the function forked, returning here: it does not answer
            if not torch_before and "torch" in sys.modules and not rec.evidence and kind != "extra":
                # torch was imported inside the call, so its operators were not watched yet:
                # run it once more under the watch (the values of the first run count)
                with contextlib.suppress(BaseException):
                    a2, k2 = req.inputs(call)
                    with _KeptRecursionLimit(), rec.watching():
                        fn(*a2, **k2)
                if os.getpid() != pid:
                    os._exit(0)
            if kind == "case":
                before = req.inputs(call)
                out.mutated = not _same_input((args, kwargs), before)
            if out.status == "value":
                if kind == "case":
                    value_node = _wire.encode_value(value)
                elif kind == "extra":
                    out.extra = value if value is None or isinstance(value, str) else str(value)
        if os.getpid() != pid:
            os._exit(0)
    out.borrowed = tuple(_wire.Evidence(r, n) for r, n in rec.evidence)
    out.tampered = rec.tampered
    if out.tampered is None and rec.lost and out.status == "value":
        out.tampered = "the profile hook was removed (sys.setprofile or ctypes)"
    out.printed, out.printed_bytes = cap.text(), cap.total
    return _wire.outcome_node(out, value_node)


def _call(fn, call, args, kwargs, rec, out):
    t0, c0 = time.perf_counter(), time.process_time()
    value = None
    try:
        if call["kind"] == "extra":
            check = EXTRA_CHECKS.get(call["exercise"])
            if check is None:
                from ._model import EXERCISES
                check = EXERCISES[call["exercise"]].extra_check
            with _KeptRecursionLimit():
                value = check(rec.watched(fn))
        else:
            with _KeptRecursionLimit(), rec.watching():
                value = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
        out.status, out.raised = "raised", _wire.Raised.of(exc)
        value = None
    out.seconds, out.cpu = time.perf_counter() - t0, time.process_time() - c0
    return value, out


def _signature_problem(fn: Callable, args: tuple, kwargs: dict) -> str:
    """The TypeError of binding the arguments to ``fn``'s signature ('' when they fit or
    when the signature cannot be read)."""
    try:
        sig = inspect.signature(fn)
    except Exception:  # noqa: BLE001 - builtins and odd callables: the call itself will tell
        return ""
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)[:500] or "the arguments do not fit"
    except Exception:  # noqa: BLE001
        return ""
    return ""


def _same_input(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        try:
            return (a.shape == b.shape and a.dtype == b.dtype
                    and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")))
        except Exception:  # noqa: BLE001
            return False
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_input(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_input(a[k], b[k]) for k in b)
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return False


class _Quiet:
    """NumPy's floating-point warnings and Python's warnings off while the function runs."""

    def __enter__(self):
        self.err = np.seterr(all="ignore")
        self.warn = warnings.catch_warnings()
        self.warn.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        self.warn.__exit__(*exc)
        np.seterr(**self.err)
        return False


class _KeptRecursionLimit:
    """While the learner's code runs, ``sys.setrecursionlimit`` keeps the current limit
    (a learner who raises it and recurses deeply would crash the process with SIGSEGV)."""

    def __enter__(self):
        self.limit = sys.getrecursionlimit()
        self.setter = sys.setrecursionlimit
        sys.setrecursionlimit = lambda n: None  # noqa: E731 - the learner's request is ignored
        return self

    def __exit__(self, *exc):
        sys.setrecursionlimit = self.setter
        sys.setrecursionlimit(self.limit)
        return False


class _Capture:
    """Everything written to file descriptors 1 and 2 (and ``sys.stdout`` / ``sys.stderr``)
    while it is active goes to an anonymous file; afterwards the first ``limit``
    characters are kept and the rest only counted. (In the checker's worker the file's size
    is capped, see :func:`_setup`: a function that writes gigabytes gets an error, not the
    machine's memory.)"""

    _file: int | None = None

    def __init__(self, limit: int):
        self.limit, self.total, self._text = limit, 0, ""

    @classmethod
    def _fd(cls) -> int:
        if cls._file is None or cls._owner != os.getpid():
            try:
                cls._file = os.memfd_create("attnlib-output", os.MFD_CLOEXEC)
            except (AttributeError, OSError):
                import tempfile
                cls._file = os.dup(tempfile.TemporaryFile().fileno())
            cls._owner = os.getpid()
        return cls._file

    def __enter__(self):
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                s.flush()
        fd = self._fd()
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        self.old = (sys.stdout, sys.stderr)
        self.stream = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
                                       write_through=True)
        sys.stdout = sys.stderr = self.stream
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(Exception):
            self.stream.flush()
        sys.stdout, sys.stderr = self.old
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        fd = self._fd()
        try:
            self.total = os.fstat(fd).st_size
            data = os.pread(fd, 4 * self.limit + 4, 0)
        except OSError:
            data = b""
        self._text = data.decode("utf-8", "replace")[:self.limit]
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        return False

    def text(self) -> str:
        return self._text


# --------------------------------------------------------------------------- the worker process

_PR_SET_CHILD_SUBREAPER = 36
_FILE_CAP = 256 * 2**20      # bytes any file the worker writes may reach (its captured output too)


def _become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux): a child that
    double-forks or calls setsid stays in this process's tree, where the checker finds it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _vm_data() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("VmData")


def limit_memory(extra: int | None) -> bool:
    """Let this process map at most ``extra`` more bytes of private writable memory
    (``RLIMIT_DATA``; an allocation beyond it fails with MemoryError); None: no limit."""
    if not extra:
        return False
    try:
        import resource

        cap = _vm_data() + int(extra)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
        return True
    except (ImportError, OSError, ValueError, AttributeError):
        return False


def _setup(memory_limit: int | None) -> None:
    """The worker's state before the first call: subreaper, its own output sent nowhere
    (the kernel's streams are not touched), one torch thread, no interrupt, a memory limit."""
    global IN_WORKER
    IN_WORKER = True
    _become_subreaper()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    sink = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
                            write_through=True)
    sys.stdout = sys.stderr = sink
    sys.stdin = io.StringIO("")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel handles the interrupt and kills us
    with contextlib.suppress(Exception):  # what the function prints is kept in a file: cap its size
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the cap fails instead)
        resource.setrlimit(resource.RLIMIT_FSIZE, (_FILE_CAP, _FILE_CAP))
    with contextlib.suppress(Exception):
        import faulthandler
        faulthandler.disable()
    torch = sys.modules.get("torch")
    if torch is not None:  # the parent's OpenMP pool does not survive fork: run on one thread
        with contextlib.suppress(Exception):
            torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    limit_memory(memory_limit)


def serve(fd_in: int, fd_out: int, fn: Callable, *, memory_limit: int | None = None, setup: bool = True) -> None:
    """Answer the requests read from ``fd_in`` (frames of :mod:`._wire`) on ``fd_out``
    until end of file; then end the process."""
    try:
        if setup:
            _setup(memory_limit)
        pid = os.getpid()
        while True:
            try:
                frame = _wire.read_frame(fd_in)
            except _wire.WireError:
                break
            if frame is None:
                break
            text = run_cases(fn, frame.decode("utf-8", "replace"))
            if os.getpid() != pid:
                os._exit(0)
            _wire.write_frame(fd_out, text.encode("utf-8"))
    except BaseException:  # noqa: BLE001 - never run the parent's code after fork
        pass
    finally:
        os._exit(0)


def _pdeathsig() -> None:
    """Linux: be killed when the parent ends (a kernel that dies takes the check with it)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def guarded(fd_in: int, fd_out: int, fn: Callable, *, memory_limit: int | None = None, setup: bool = True) -> None:
    """Run :func:`serve` in a child of this process (the worker), and stay as its guard: a
    child subreaper that never runs the learner's code. Whatever the worker does (fork,
    ``setsid``, crash), its processes stay in the guard's tree, where the checker finds and
    kills them. The guard writes a ``{"attnlib": "started", "worker": pid}`` frame, and
    ``{"attnlib": "ended", "status": wait_status}`` if the worker ends; it reaps orphans
    until it is killed. Without Linux's subreaper the worker runs here directly."""
    try:
        linux = sys.platform.startswith("linux")
        if linux:
            _become_subreaper()
            _pdeathsig()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        worker = os.fork() if linux else 0
        if worker == 0:
            if linux:
                _pdeathsig()
            _wire.write_frame(fd_out, json.dumps({"attnlib": "started", "worker": os.getpid()}).encode())
            serve(fd_in, fd_out, fn, memory_limit=memory_limit, setup=setup)
        os.close(fd_in)
        for fd in (0, 1, 2):
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_RDWR), fd)
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                signal.pause()
                continue
            except InterruptedError:
                continue
            if pid == worker:
                _wire.write_frame(fd_out, json.dumps({"attnlib": "ended", "status": status}).encode())
    except BaseException:  # noqa: BLE001 - never run the parent's code after fork
        pass
    finally:
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """A spawned worker: ``python -c '...main()' FD_IN FD_OUT PRELOAD``. It imports the
    modules named in ``PRELOAD`` (comma-separated) and waits. The first frame it reads is
    its configuration (JSON: ``memory_limit``), the second the function (pickled by the
    trusted side, which only sends); it answers with a "ready" frame, then :func:`serve`
    answers requests. End of file before that ends the process (its parent is gone)."""
    argv = sys.argv[1:] if argv is None else argv
    fd_in, fd_out = int(argv[0]), int(argv[1])
    preload = [m for m in (argv[2] if len(argv) > 2 else "").split(",") if m]
    try:
        _setup(None)
        for name in preload:
            with contextlib.suppress(Exception):
                __import__(name)
        torch = sys.modules.get("torch")
        if torch is not None:
            with contextlib.suppress(Exception):
                torch.set_num_threads(1)
        config = _wire.read_frame(fd_in)
        frame = _wire.read_frame(fd_in)
        if config is None or frame is None:
            return
        try:
            memory = int(json.loads(config).get("memory_limit") or 0)
        except (ValueError, AttributeError, TypeError):
            memory = 0
        limit_memory(memory or None)
        try:
            import pickle
            with contextlib.suppress(ImportError):
                import cloudpickle  # noqa: F401 - functions pickled by value need it to load
            fn, extras = pickle.loads(frame)
            EXTRA_CHECKS.update(extras)
            ready = {"attnlib": "ready", "ok": True, "pid": os.getpid()}
        except BaseException as exc:  # noqa: BLE001 - the learner's objects may fail to load
            fn, ready = None, {"attnlib": "ready", "ok": False, "pid": os.getpid(),
                               "why": f"{type(exc).__name__}: {exc}"[:500]}
        _wire.write_frame(fd_out, json.dumps(ready).encode())
        if fn is not None:
            guarded(fd_in, fd_out, fn, setup=False)
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
