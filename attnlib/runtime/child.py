"""Inside a child that runs someone else's code: its setup, its guard and its loop.

:class:`attnlib.runtime.processes.Child` starts :func:`main` (a ``multiprocessing`` target,
forked or spawned). It never runs the trusted side's code on the untrusted side's behalf
and it answers only with plain data (:mod:`attnlib.runtime.wire`):

1. setup (:func:`setup`): its own output sent nowhere (file descriptors 0-2 to the null
   device, so the notebook's streams are untouched), interrupts ignored (the parent stops
   it), a size cap on files it writes, one torch thread;
2. a spawned child imports what it is told to (calling a module's ``warm_up()`` if it has
   one) and waits for what it serves (``{"attnlib": "load"}``: a pickled
   ``(serve, payload)``, sent by the trusted side, which only sends) and says
   ``{"attnlib": "unsendable", "why": ...}`` if it cannot load it;
3. on Linux it stays as a **guard** (:func:`guarded`): a child subreaper that never runs
   the served code and forks the worker that does, so that a process the worker starts
   and orphans (``setsid``, a double fork, a crash of the worker) stays in the guard's
   tree, where the parent finds and kills it; it says ``{"attnlib": "ended", "status": n}``
   when the worker ends. Elsewhere the child is the worker itself;
4. the worker says ``{"attnlib": "started", "worker": pid}``, then answers each message
   with ``serve(payload, message) -> (header, arrays)`` until the channel closes
   (:func:`loop`). A process the served code forked that returns into the loop ends there:
   only the worker answers.

:class:`Capture` keeps what the served code prints (file descriptors 1 and 2).
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import warnings

from .wire import Channel, Closed, WireError

__all__ = ["main", "setup", "guarded", "loop", "Capture", "limit_memory"]

FILE_CAP = 256 * 2**20      # bytes any file a child writes may reach (its captured output too)
LINUX = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def prctl(option: int, value: int) -> bool:
    """Linux's prctl (False where it is not there or fails)."""
    if not LINUX:
        return False
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
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
    (Linux's ``RLIMIT_DATA``: an allocation beyond it fails with MemoryError); None or
    another platform: no limit."""
    if not extra or not LINUX:
        return False
    try:
        import resource

        cap = _vm_data() + int(extra)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
        return True
    except (ImportError, OSError, ValueError, AttributeError):
        return False


def _fill_std_fds() -> None:
    """Open the null device on whichever of file descriptors 0-2 is closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def setup() -> None:
    """The child's state before it serves anything (see the module docstring)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    if devnull > 2:
        os.close(devnull)
    sink = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
                            write_through=True)
    sys.stdout = sys.stderr = sink
    sys.stdin = io.StringIO("")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles the interrupt and kills us
    with contextlib.suppress(Exception):  # what the served code prints goes to a file: cap its size
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the cap fails instead)
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_CAP, FILE_CAP))
    with contextlib.suppress(Exception):
        import faulthandler
        faulthandler.disable()
    torch = sys.modules.get("torch")
    if torch is not None:  # a forked parent's OpenMP pool does not survive fork: one thread
        with contextlib.suppress(Exception):
            torch.set_num_threads(1)
    warnings.simplefilter("ignore")


def main(conn, serve=None, payload=None, memory_limit: int | None = None, preload: tuple = ()) -> None:
    """The child's entry point (see the module docstring). ``serve`` None: a spawned child
    that imports ``preload`` and waits for its ``load`` message."""
    try:
        channel = Channel(conn)
        setup()
        if serve is None:
            for name in preload:
                with contextlib.suppress(Exception):
                    __import__(name)
                    warm_up = getattr(sys.modules[name], "warm_up", None)
                    if callable(warm_up):  # (what the first request would otherwise pay for)
                        warm_up()
            setup()  # (again: an import may have started torch's threads)
            try:
                msg = channel.recv()
            except (Closed, WireError):
                return
            try:
                import pickle
                with contextlib.suppress(ImportError):
                    import cloudpickle  # noqa: F401 - what was pickled by value needs it to load
                serve, payload = pickle.loads(bytes(msg.arrays[0]))
                memory_limit = msg.header.get("memory_limit")
                memory_limit = memory_limit if type(memory_limit) is int else None
            except BaseException as exc:  # noqa: BLE001 - the payload may fail to load here
                channel.send({"attnlib": "unsendable", "why": f"{type(exc).__name__}: {exc}"[:500]})
                return
        guarded(channel, serve, payload, memory_limit)
    except BaseException:  # noqa: BLE001 - never run the parent's code after fork
        pass
    finally:
        os._exit(0)


def guarded(channel: Channel, serve, payload, memory_limit: int | None = None) -> None:
    """On Linux: become a child subreaper, fork the worker (which runs :func:`loop`) and reap
    until killed, saying when the worker ends. Elsewhere: run :func:`loop` here."""
    if not LINUX:
        limit_memory(memory_limit)
        channel.send({"attnlib": "started", "worker": os.getpid()})
        loop(channel, serve, payload)
        return
    prctl(_PR_SET_CHILD_SUBREAPER, 1)
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # a parent that dies takes the check with it
    worker = os.fork()
    if worker == 0:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        limit_memory(memory_limit)
        channel.send({"attnlib": "started", "worker": os.getpid()})
        loop(channel, serve, payload)
        os._exit(0)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            signal.pause()
            continue
        except InterruptedError:
            continue
        if pid == worker:
            with contextlib.suppress(Closed, OSError):
                channel.send({"attnlib": "ended", "status": status})


def loop(channel: Channel, serve, payload) -> None:
    """Answer messages with ``serve(payload, message)`` until the channel closes."""
    pid = os.getpid()
    while True:
        try:
            msg = channel.recv()
        except (Closed, WireError):
            return
        header, arrays = serve(payload, msg)
        if os.getpid() != pid:
            os._exit(0)  # a process the served code forked, returning here: it does not answer
        channel.send(header, arrays)


class Capture:
    """Everything written to file descriptors 1 and 2 (and ``sys.stdout`` / ``sys.stderr``)
    while it is active goes to an anonymous file; afterwards the first ``limit``
    characters are kept and the rest only counted (``total`` bytes). The served code
    may close or replace file descriptors 0-2: they are put back afterwards."""

    _file: int | None = None
    _owner: int | None = None

    def __init__(self, limit: int):
        self.limit, self.total, self._text = limit, 0, ""

    @classmethod
    def _fd(cls) -> int:
        if cls._file is not None and cls._owner == os.getpid():
            try:
                os.fstat(cls._file)  # (the served code may have closed it)
                return cls._file
            except OSError:
                pass
        try:
            fd = os.memfd_create("attnlib-output", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            import tempfile
            with tempfile.TemporaryFile() as f:
                fd = os.dup(f.fileno())
        cls._file, cls._owner = fd, os.getpid()
        return fd

    def __enter__(self):
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                s.flush()
        _fill_std_fds()  # (so that none of the descriptors below can be 0, 1 or 2)
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
        for saved, fd in zip(self.saved, (1, 2)):
            try:
                os.dup2(saved, fd)
            except OSError:  # the served code closed our copy too: the null device then
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                if null != fd:
                    os.close(null)
            with contextlib.suppress(OSError):
                os.close(saved)
        _fill_std_fds()
        data = b""
        with contextlib.suppress(OSError):
            fd = self._fd()
            self.total = os.fstat(fd).st_size
            os.lseek(fd, 0, os.SEEK_SET)
            data = os.read(fd, 4 * self.limit + 4)
            os.ftruncate(fd, 0)
        self._text = data.decode("utf-8", "replace")[:self.limit]
        return False

    def text(self) -> str:
        return self._text
