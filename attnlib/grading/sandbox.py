"""A box for one submission: its own process tree, filesystem, network and limits.

The grader runs code that someone else wrote. Each submission runs in a sandbox of its
own (the trusted grader process never imports or unpickles anything from it), made by
well-kept tools rather than by hand: bubblewrap (``bwrap``, Flatpak's sandbox; Debian's
``bubblewrap``) for the namespaces and the filesystem, util-linux's ``prlimit`` for the
resource limits and ``setpriv`` for the user:

============== ========================================================================
network        a new network namespace with no interface up: every connection fails
processes      a new PID namespace whose first process is the submission's runner;
               killing it at the verdict makes the kernel kill every process the
               submission started (forks, ``setsid`` daemons, double forks); the
               grader then checks that none is left
filesystem     a new root (a tmpfs, read-only) that holds only the system's read-only
               folders, the Python installation, attnlib without its exercises' answer
               key (``attnlib/exercises/catalogue`` is an empty folder there), a private
               ``/tmp`` and the submission's own working folder: the other submissions,
               the course's chapters, the report and everyone's home folders do not
               exist there
user           as root: an unprivileged uid of its own (one per parallel slot, so the
               process limit counts only this sandbox); otherwise the user namespace's
               user with no capability; ``no_new_privs`` either way
limits         wall-clock (per notebook, per cell, per request), CPU seconds
               (``RLIMIT_CPU``), memory (``RLIMIT_AS`` per process, plus a memory cgroup
               for the whole tree where the grader may create one), processes (a pids
               cgroup, or ``RLIMIT_NPROC``), file size and open files
output         what it prints reaches the grader through a pipe that is drained and
               cut after ``Limits.output`` bytes
============== ========================================================================

As root ``bwrap`` runs privileged and ``setpriv`` drops to the slot's uid inside; as
another user it makes an unprivileged user namespace where the kernel allows one. Where
neither works the sandbox still runs the submission in a separate process with the
resource limits, but :func:`probe` reports exactly which isolation is missing, the grader
prints it, and ``--require-isolation`` refuses to run.

The channel to the runner is a pair of pipes carrying :mod:`attnlib.runtime.wire`
messages (plain data), each read with a deadline and a size limit.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil

from ..i18n import N_
from ..runtime.processes import kill_tree, watchdog
from ..runtime.wire import Channel, Closed, Message, WireError

__all__ = ["Limits", "Isolation", "probe", "Sandbox", "SandboxError", "survivors"]

BOOT = pathlib.Path(__file__).with_name("_boot.py")  # starts attnlib.grading.runner inside
HOME = "/home/student"
UID_BASE = int(os.environ.get("ATTNLIB_GRADE_UID_BASE", "3210000"))  # root mode: uid = base + slot
NAMESPACES = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--as-pid-1", "--new-session"]


class SandboxError(RuntimeError):
    """The sandbox did not answer as the protocol says (it ended, hung or sent garbage)."""

    def __init__(self, kind: str, text: str):
        super().__init__(text)
        self.kind = kind  # "timeout", "ended", "garbage"


@dataclass
class Limits:
    """What one submission may use.

    Args:
        wall: seconds for the whole notebook: executing it and running its functions.
            Default: 600.
        cell: CPU seconds one cell may use (the clock's backstop,
            :func:`attnlib.runtime.limits.backstop`, on top) before it is interrupted (the
            next cell runs). Default: 60.
        cpu: CPU seconds per process (``RLIMIT_CPU``). Default: 600.
        memory: bytes of memory: ``RLIMIT_AS`` of each process and, where a memory
            cgroup can be created, of the whole sandbox. Default: 4 GiB.
        processes: processes and threads at once (pids cgroup, or ``RLIMIT_NPROC``).
            Default: 128.
        file_size: largest file it may write, in bytes. Default: 64 MiB.
        open_files: open file descriptors per process. Default: 512.
        output: bytes of printed output kept (the rest is read and dropped). Default: 64 KiB.
        tmp: size of its private ``/tmp`` (a tmpfs), in bytes. Default: 256 MiB.
    """

    wall: float = 600.0
    cell: float = 60.0
    cpu: int = 600
    memory: int = 4 * 2**30
    processes: int = 128
    file_size: int = 64 * 2**20
    open_files: int = 512
    output: int = 64 * 1024
    tmp: int = 256 * 2**20


@dataclass(frozen=True)
class Isolation:
    """What the sandbox can enforce on this machine (see :func:`probe`)."""

    mode: str            # "root", "userns" or "none"
    network: bool
    processes: bool      # PID namespace: nothing survives the verdict
    filesystem: bool     # a new root with only what the runner needs
    user: bool           # an unprivileged uid (root) or no capabilities (user namespace)
    cgroup: str = ""     # "v1", "v2" or "" (memory and process limits per sandbox)
    reason: str = ""     # why the namespaces are unavailable (mode "none")

    def missing(self) -> list[str]:
        """English sentences (catalogued: show them with ``tr``) naming each isolation
        that is not available."""
        out = []
        if not self.network:
            out.append(N_("no network namespace: a submission can open network connections"))
        if not self.processes:
            out.append(N_("no PID namespace: a process that a submission detaches (setsid, double fork) "
                          "may survive; the grader kills what it can find from /proc"))
        if not self.filesystem:
            out.append(N_("no private filesystem: a submission can read every file this user can read "
                          "(other submissions, the course's solutions, the report folder)"))
        if not self.user:
            out.append(N_("no separate user: a submission runs with this user's rights"))
        if not self.cgroup:
            out.append(N_("no cgroup: memory and process limits are per process (RLIMIT_AS, RLIMIT_NPROC), "
                          "not for the sandbox as a whole"))
        return out


_PROBED: dict[str, Isolation] = {}


def tool(name: str) -> str | None:
    """The path of a command-line tool (``bwrap``, ``prlimit``, ``setpriv``), or None."""
    return shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/bin/{name}")
                                       if os.access(p, os.X_OK)), None)


def _try(cmd: list[str]) -> tuple[bool, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return r.returncode == 0, (r.stderr or r.stdout).strip()[:300]


def try_bwrap(user_namespace: bool) -> tuple[bool, str]:
    """Whether ``bwrap`` can make the sandbox's namespaces here (with a user namespace:
    as an unprivileged user must), and what it said."""
    exe = tool("bwrap")
    if exe is None:
        return False, "bubblewrap (bwrap) is not installed"
    return _try([exe, *(["--unshare-user"] if user_namespace else []), *NAMESPACES,
                 "--ro-bind", "/", "/", "--", "true"])


def _cgroup_parents() -> tuple[str, list[str]]:
    """("v1"/"v2", [parent folders]) where a child cgroup with memory and pids limits can
    be made for the sandboxes (under the grader's own cgroup), or ("", [])."""
    if os.geteuid() != 0:
        return "", []
    own = {}
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
            num, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                own[c] = path
    base = pathlib.Path("/sys/fs/cgroup")
    v2 = base / own.get("", "/").lstrip("/")
    try:
        ctl = (v2 / "cgroup.subtree_control").read_text().split()
        if {"memory", "pids"} <= set(ctl) and os.access(v2, os.W_OK):
            return "v2", [str(v2)]
    except OSError:
        pass
    parents = []
    for c in ("memory", "pids"):
        d = base / c / own.get(c, "/").lstrip("/")
        if not (d / "cgroup.procs").is_file() or not os.access(d, os.W_OK):
            return "", []
        parents.append(str(d))
    return "v1", parents


def probe(refresh: bool = False) -> Isolation:
    """Find out which isolation works here (tries ``bwrap`` once; cached)."""
    if "iso" in _PROBED and not refresh:
        return _PROBED["iso"]
    cg, _ = _cgroup_parents()
    missing = [t for t in ("prlimit", "setpriv") if tool(t) is None]
    root = os.geteuid() == 0
    ok, why = try_bwrap(user_namespace=not root)
    if missing:
        ok, why = False, f"util-linux's {' and '.join(missing)} not installed"
    if ok:
        iso = Isolation("root", True, True, True, True, cg) if root else Isolation("userns", True, True, True, True, "")
    else:
        iso = Isolation("none", False, False, False, False, cg if root else "",
                        f"bwrap failed{' as root' if root else ' (unprivileged user namespaces)'}: {why}")
    _PROBED["iso"] = iso
    return iso


# --------------------------------------------------------------------------- the new root

def _is_within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def root_layout(protected: list[str], mounted: tuple[str, ...] = ()) -> list[str]:
    """``bwrap`` arguments for the sandbox's root: the system folders, the Python
    installation and attnlib (read-only, never a folder that contains a ``protected``
    one), its answer key hidden under an empty read-only folder. ``mounted``: folders the
    command has already mounted (the private ``/tmp``), which are not made again: a Python
    installation inside one (a checkout under ``/tmp``) is bound on top of it."""
    import attnlib

    args, binds = [], []
    for p in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            binds.append(p)
    package = os.path.dirname(os.path.realpath(attnlib.__file__))
    python = {sys.prefix, os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), package}
    for entry in sys.path:
        if entry and os.path.isabs(entry) and os.path.isdir(entry):
            python.add(os.path.realpath(entry))
    protected = [os.path.realpath(p) for p in protected]
    for p in sorted(python, key=len):
        if any(_is_within(q, p) for q in protected) or any(_is_within(p, b) for b in binds):
            continue
        binds.append(p)
    made = set()
    for b in binds:
        for parent in list(pathlib.PurePosixPath(b).parents)[::-1][1:]:  # (searchable by the sandbox's user)
            if str(parent) not in made and str(parent) not in mounted:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", b, b]
    catalogue = os.path.join(package, "exercises", "catalogue")
    args += ["--tmpfs", catalogue, "--remount-ro", catalogue]
    return args


def _mpl_cache(dest: pathlib.Path) -> None:
    """Give the sandbox a copy of matplotlib's font list (building it costs seconds)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib
        src = pathlib.Path(matplotlib.get_cachedir())
    except Exception:  # noqa: BLE001 - no cache to share
        return
    for f in src.glob("fontlist-*.json"):
        shutil.copy(f, dest / f.name)


# --------------------------------------------------------------------------- one sandbox

@dataclass
class Sandbox:
    """One submission's box. ``start()`` it with the runner's command, talk to it with
    ``send`` and ``recv``, and ``close`` it at the verdict.

    Args:
        staging: a private folder (mode 0700) of the grader where the working folder is made.
        slot: the parallel slot (0, 1, ...): sets the uid as root.
        limits: :class:`Limits`.
        protected: folders that must be invisible inside (the submissions, the report,
            the course); only used to keep them out of the bound folders.
        env: extra environment variables for the runner.
    """

    staging: pathlib.Path
    slot: int
    limits: Limits = field(default_factory=Limits)
    protected: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    isolation: Isolation = field(default_factory=probe)

    def __post_init__(self):
        self.token = secrets.token_hex(8)
        self.workdir = self.staging / f"work-{self.token}"
        self.proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.pidns: str | None = None
        self.uid = UID_BASE + self.slot if os.geteuid() == 0 else None  # root: a uid of its own
        self.cgroups: list[pathlib.Path] = []
        self.channel: Channel | None = None
        self._out = bytearray()
        self._out_total = 0
        self._drain: threading.Thread | None = None
        self.closed = False

    # ---- setup
    def prepare(self, files: dict[str, bytes]) -> pathlib.Path:
        """Make the working folder (owned by the sandbox's uid, mode 0700) with ``files``."""
        self.workdir.mkdir(mode=0o700)
        for name, data in files.items():
            (self.workdir / name).write_bytes(data)
        _mpl_cache(self.workdir / ".config" / "matplotlib")
        if self.uid is not None:
            for p in [self.workdir, *self.workdir.rglob("*")]:
                os.chown(p, self.uid, self.uid)
        return self.workdir

    def _cgroup(self) -> list[str]:
        kind, parents = _cgroup_parents() if self.isolation.cgroup else ("", [])
        procs = []
        for parent in parents:
            d = pathlib.Path(parent) / f"attnlib-grade-{self.token}"
            try:
                d.mkdir()
            except OSError:
                continue
            self.cgroups.append(d)
            settings = {"memory.max": self.limits.memory, "pids.max": self.limits.processes,
                        "memory.swap.max": 0} if kind == "v2" else {
                "memory.limit_in_bytes": self.limits.memory, "memory.memsw.limit_in_bytes": self.limits.memory,
                "pids.max": self.limits.processes}
            for name, value in settings.items():
                with contextlib.suppress(OSError):
                    (d / name).write_text(str(value))
            procs.append(str(d / "cgroup.procs"))
        return procs

    def _env(self, channel: tuple[int, int]) -> dict:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": HOME, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "TMPDIR": "/tmp", "MPLBACKEND": "Agg", "MPLCONFIGDIR": f"{HOME}/.config/matplotlib",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "ATTNLIB_DEVICE": "cpu",
               "CUDA_VISIBLE_DEVICES": "", "ATTNLIB_PROGRESS": "off", "ATTNLIB_SANDBOX": self.token,
               "ATTNLIB_CHANNEL": f"{channel[0]},{channel[1]}"}
        for keep in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES"):
            if keep in os.environ:
                env[keep] = os.environ[keep]
        env.update(self.env)
        if self.isolation.mode == "none":
            env.update(HOME=str(self.workdir), MPLCONFIGDIR=f"{self.workdir}/.config/matplotlib",
                       TMPDIR=str(self.workdir))
        return env

    def command(self, argv: list[str], info_fd: int | None = None) -> list[str]:
        """The command line that runs ``argv`` in this sandbox (see the module docstring)."""
        lim, iso = self.limits, self.isolation
        # RLIMIT_NPROC counts the processes of the real uid: as root the sandbox has a uid of its
        # own; otherwise it shares the user's, so the cap comes on top of what the user runs now
        nproc = lim.processes + (0 if self.uid is not None else _processes_of_user())
        cmd = [tool("prlimit"), f"--cpu={int(lim.cpu)}", f"--as={int(lim.memory)}", f"--fsize={int(lim.file_size)}",
               f"--nofile={int(lim.open_files)}", f"--nproc={int(nproc)}", "--core=0", "--"]
        if iso.mode == "none":
            return cmd + argv
        cmd += [tool("bwrap"), *(["--unshare-user", "--cap-drop", "ALL"] if iso.mode == "userns" else []),
                *NAMESPACES, "--hostname", "sandbox",
                # the private /tmp first: what the root binds under /tmp (a checkout there) stays seen
                "--perms", "1777", "--size", str(int(lim.tmp)), "--tmpfs", "/tmp",
                *root_layout(self.protected, mounted=("/tmp",)),
                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm",
                "--perms", "0755", "--dir", "/home", "--bind", str(self.workdir), HOME, "--remount-ro", "/",
                "--chdir", HOME, *(["--info-fd", str(info_fd)] if info_fd is not None else []), "--"]
        if self.uid is not None:  # root: the slot's own unprivileged user, no capability at all
            cmd += [tool("setpriv"), f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        return cmd + argv

    def start(self, argv: list[str] | None = None) -> None:
        """Start ``argv`` in the sandbox. Default: the runner (:mod:`attnlib.grading.runner`)."""
        argv = argv or [sys.executable, "-I", str(BOOT)]
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        info_r, info_w = os.pipe() if self.isolation.mode != "none" else (None, None)
        cmd = self.command(argv, info_w)
        procs = self._cgroup() if self.isolation.mode == "root" else []
        if procs:  # enter the cgroups first: everything started from then on stays in them
            cmd = ["sh", "-c", "set -e; " + "; ".join(f"echo $$ > {shlex.quote(p)}" for p in procs)
                   + '; exec "$@"', "sh", *cmd]
        keep = tuple(fd for fd in (req_r, rep_w, info_w) if fd is not None)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     pass_fds=keep, close_fds=True, start_new_session=True,
                                     env=self._env((req_r, rep_w)),
                                     cwd=str(self.workdir) if self.isolation.mode == "none" else None)
        for fd in keep:
            os.close(fd)
        self.channel = Channel.from_fds(rep_r, req_w, max_bytes=64 * 2**20)
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()
        self.init_pid = self.proc.pid if info_r is None else self._read_info(info_r)
        if self.init_pid is not None and self.isolation.processes:
            with contextlib.suppress(OSError):
                ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
                if ns != os.readlink("/proc/self/ns/pid"):  # never the grader's own namespace
                    self.pidns = ns

    def _read_info(self, fd: int) -> int | None:
        """The pid (seen from here) of the sandbox's first process, from bwrap's --info-fd."""
        data = b""
        with open(fd, "rb") as f, watchdog(20, self._kill):
            data = f.read(100_000)
        try:
            pid = json.loads(data.decode()).get("child-pid")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return None
        return pid if type(pid) is int else None

    def _read_output(self) -> None:
        out = self.proc.stdout
        while True:
            try:
                chunk = out.read1(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self._out_total += len(chunk)
            room = self.limits.output - len(self._out)
            if room > 0:
                self._out += chunk[:room]

    @property
    def output(self) -> str:
        """What the sandbox printed (first ``Limits.output`` bytes), and how much more."""
        text = self._out.decode("utf-8", "replace")
        more = self._out_total - len(self._out)
        return text + (f"\n[... {more} more bytes dropped]" if more > 0 else "")

    # ---- protocol
    def _kill(self) -> None:
        """End the sandbox now (also a watchdog's way to unblock a read or a write): its
        namespace's first process (the kernel kills the others), or without one its tree."""
        if self.proc is None:
            return
        if self.isolation.processes and self.init_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.init_pid, signal.SIGKILL)  # (bwrap ends once the namespace is empty)
        else:
            kill_tree(self.proc.pid)

    def send(self, header: dict, arrays=(), *, timeout: float) -> None:
        """Send a message; a sandbox that does not read it within ``timeout`` s is ended."""
        expired = []
        try:
            with watchdog(timeout, lambda: (expired.append(1), self._kill())):
                self.channel.send(header, arrays)
        except Closed:
            raise SandboxError("timeout" if expired else "ended",
                               "the sandbox did not read its request in time" if expired else
                               "the sandbox closed its channel") from None

    def recv(self, timeout: float) -> Message:
        """The next message (plain data only), within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self.channel.poll(min(max(deadline - time.monotonic(), 0), 1.0)):
            if time.monotonic() >= deadline:
                raise SandboxError("timeout", "no answer in time")
        expired = []
        try:
            with watchdog(max(deadline - time.monotonic(), 1.0), lambda: (expired.append(1), self._kill())):
                return self.channel.recv()
        except Closed:
            raise SandboxError("timeout" if expired else "ended", "the sandbox ended") from None
        except WireError as exc:
            raise SandboxError("garbage", f"a message that breaks the protocol ({exc})") from None

    # ---- the verdict
    def close(self) -> list[dict]:
        """Kill everything the submission started; returns the processes of the sandbox
        still found once its first process has been killed and reaped (none with a PID
        namespace; any found are killed too)."""
        if self.closed:
            return []
        self.closed = True
        if self.proc is not None:
            # Killing the first process of the PID namespace makes the kernel kill all the others;
            # bwrap waits for it, then exits: waiting for bwrap is waiting for the namespace to be empty.
            self._kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.kill(self.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
        for d in self.cgroups:  # (the PID namespace is gone already; this is belt and braces)
            for pid in _read_pids(d / "cgroup.procs"):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        found = left = survivors(self.pidns, self.uid, self.token)  # reported: should be none
        deadline = time.monotonic() + 5
        while left and time.monotonic() < deadline:  # (only without a PID namespace can one be left)
            for p in left:
                with contextlib.suppress(OSError):
                    os.kill(p["pid"], signal.SIGKILL)
            time.sleep(0.05)
            left = survivors(self.pidns, self.uid, self.token)
        for d in self.cgroups:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)
        if self.channel is not None:
            self.channel.close()
        if self._drain is not None:
            self._drain.join(timeout=5)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return found


def _read_pids(path: pathlib.Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except OSError:
        return []


def _processes_of_user() -> int:
    uid = os.getuid()
    return sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid)


def survivors(pidns: str | None, uid: int | None, token: str) -> list[dict]:
    """Processes that belong to a sandbox: in its PID namespace, owned by its uid, or
    carrying its token in their environment (running ones: not zombies)."""
    with contextlib.suppress(OSError):
        if pidns is not None and pidns == os.readlink("/proc/self/ns/pid"):
            raise ValueError("survivors(): that is the grader's own PID namespace, not a sandbox's")
    if uid is not None and uid in (0, os.getuid()):
        raise ValueError(f"survivors(): uid {uid} is not a sandbox's own uid")
    found = []
    needle = f"ATTNLIB_SANDBOX={token}"
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            why = None
            if pidns and os.readlink(f"/proc/{p.pid}/ns/pid") == pidns:
                why = "pid namespace"
            elif uid is not None and p.uids().real == uid:
                why = "uid"
            elif needle in (f"{k}={v}" for k, v in p.environ().items()):
                why = "environment"
            if why:
                state = p.status()
                if state in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):  # exited, waiting to be reaped
                    continue
                found.append({"pid": p.pid, "why": why, "state": state, "cmdline": " ".join(p.cmdline())[:120]})
        except (psutil.Error, OSError):
            continue
    return found
