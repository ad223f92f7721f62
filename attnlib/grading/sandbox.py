"""A box for one submission: its own process tree, filesystem, network and limits.

The grader runs code that someone else wrote. Each submission runs in a sandbox of its
own (the trusted grader process never imports or unpickles anything from it):

============== ========================================================================
network        a new network namespace with no interface up: every connection fails
processes      a new PID namespace whose first process is the submission's runner;
               killing it at the verdict makes the kernel kill every process the
               submission started (forks, ``setsid`` daemons, double forks); the
               grader then checks from ``/proc`` that none is left
filesystem     a new root (mount namespace + ``chroot``) that holds only the system's
               read-only folders, the Python installation, attnlib without its
               exercises' reference solutions, a private ``/tmp`` and the submission's
               own working folder: the other submissions, the course's chapters, the
               report and everyone's home folders do not exist there
user           as root: an unprivileged uid of its own (one per parallel slot, so the
               process limit counts only this sandbox); otherwise the user namespace's
               root with every capability dropped; ``no_new_privs`` either way
limits         wall-clock (per notebook, per cell, per request), CPU seconds
               (``RLIMIT_CPU``), memory (``RLIMIT_AS`` per process, plus a memory cgroup
               for the whole tree where the grader may create one), processes (a pids
               cgroup, or ``RLIMIT_NPROC``), file size and open files
output         what it prints reaches the grader through a pipe that is drained and
               cut after ``Limits.output`` bytes
============== ========================================================================

The namespaces come from util-linux's ``unshare``: as root directly, as another user
through an unprivileged user namespace (``unshare --user --map-root-user``) where the
kernel allows one. Where neither works the sandbox still runs the submission in a
separate process with the resource limits, but :func:`probe` reports exactly which
isolation is missing, the grader prints it, and ``--require-isolation`` refuses to run.

The channel to the runner is a pair of pipes carrying length-prefixed JSON frames
(plain data), each read with a deadline and a size limit.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from ..i18n import N_

__all__ = ["Limits", "Isolation", "probe", "Sandbox", "SandboxError", "survivors"]

JAIL = pathlib.Path(__file__).with_name("_jail.py")
BOOT = pathlib.Path(__file__).with_name("_boot.py")  # starts attnlib.grading.runner inside
HOME = "/home/student"
UID_BASE = int(os.environ.get("ATTNLIB_GRADE_UID_BASE", "3210000"))  # root mode: uid = base + slot
_NS = ["--net", "--pid", "--fork", "--mount", "--mount-proc", "--ipc", "--uts"]
_HEADER = struct.Struct(">Q")


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
        cell: CPU seconds one cell may use (three times that on the clock) before it is
            interrupted (the next cell runs). Default: 60.
        cpu: CPU seconds per process (``RLIMIT_CPU``). Default: 600.
        memory: bytes of memory: ``RLIMIT_AS`` of each process and, where a memory
            cgroup can be created, of the whole sandbox. Default: 4 GiB.
        processes: processes and threads at once (pids cgroup, or ``RLIMIT_NPROC``).
            Default: 128.
        file_size: largest file it may write, in bytes. Default: 64 MiB.
        open_files: open file descriptors per process. Default: 512.
        output: bytes of printed output kept (the rest is read and dropped). Default: 64 KiB.
        tmp: size of its private ``/tmp`` (a tmpfs). Default: ``"256m"``.
    """

    wall: float = 600.0
    cell: float = 60.0
    cpu: int = 600
    memory: int = 4 * 2**30
    processes: int = 128
    file_size: int = 64 * 2**20
    open_files: int = 512
    output: int = 64 * 1024
    tmp: str = "256m"


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


def _unshare() -> str | None:
    return shutil.which("unshare") or next((p for p in ("/usr/bin/unshare", "/bin/unshare")
                                            if os.access(p, os.X_OK)), None)


def _try(cmd: list[str]) -> tuple[bool, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return r.returncode == 0, (r.stderr or r.stdout).strip()[:300]


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
    """Find out which isolation works here (tries ``unshare`` once; cached)."""
    if "iso" in _PROBED and not refresh:
        return _PROBED["iso"]
    exe = _unshare()
    cg, _ = _cgroup_parents()
    if exe is None:
        iso = Isolation("none", False, False, False, False, cg, "util-linux's unshare is not installed")
    elif os.geteuid() == 0:
        ok, why = _try([exe, *_NS, "--", "true"])
        iso = (Isolation("root", True, True, True, True, cg) if ok else
               Isolation("none", False, False, False, False, cg, f"unshare failed as root: {why}"))
    else:
        ok, why = _try([exe, "--user", "--map-root-user", *_NS, "--", "true"])
        iso = (Isolation("userns", True, True, True, True, "") if ok else
               Isolation("none", False, False, False, False, "",
                         f"unprivileged user namespaces are not available: {why}"))
    _PROBED["iso"] = iso
    return iso


# --------------------------------------------------------------------------- the new root

def _is_within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def root_layout(protected: list[str]) -> tuple[list, list, list]:
    """(symlinks, binds, hidden) of the sandbox's root: the system folders, the Python
    installation and attnlib, never a folder that contains a ``protected`` one."""
    import attnlib

    symlinks, binds = [], []
    for p in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(p):
            symlinks.append([p, os.readlink(p)])
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
    exercises = os.path.join(package, "exercises")
    keep = sorted(str(f) for f in pathlib.Path(exercises).glob("_*.py") if f.name != "__init__.py")
    return symlinks, [[b, b, True] for b in binds], [[exercises, keep]]


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
        staging: a private folder (mode 0700) of the grader where the working folder and
            the mount point of the new root are made.
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
        self.rootdir = self.staging / f"root-{self.token}"
        self.proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.pidns: str | None = None
        self.uid = UID_BASE + self.slot if os.geteuid() == 0 else None  # root: a uid of its own
        self.cgroups: list[pathlib.Path] = []
        self._out = bytearray()
        self._out_total = 0
        self._drain: threading.Thread | None = None
        self.closed = False

    # ---- setup
    def prepare(self, files: dict[str, bytes]) -> pathlib.Path:
        """Make the working folder (owned by the sandbox's uid, mode 0700) with ``files``."""
        self.workdir.mkdir(mode=0o700)
        self.rootdir.mkdir(mode=0o700)
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

    def _env(self) -> dict:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": HOME, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "TMPDIR": "/tmp", "MPLBACKEND": "Agg", "MPLCONFIGDIR": f"{HOME}/.config/matplotlib",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "ATTNLIB_DEVICE": "cpu",
               "CUDA_VISIBLE_DEVICES": "", "ATTNLIB_PROGRESS": "off", "ATTNLIB_SANDBOX": self.token}
        for keep in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES"):
            if keep in os.environ:
                env[keep] = os.environ[keep]
        env.update(self.env)
        return env

    def start(self, argv: list[str] | None = None) -> None:
        """Start ``argv`` in the sandbox. Default: the runner (:mod:`attnlib.grading.runner`)."""
        argv = argv or [sys.executable, "-I", str(BOOT)]
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        lim = self.limits
        rlimits = {"RLIMIT_CPU": lim.cpu, "RLIMIT_AS": lim.memory, "RLIMIT_FSIZE": lim.file_size,
                   "RLIMIT_NOFILE": lim.open_files, "RLIMIT_CORE": 0}
        iso = self.isolation
        # RLIMIT_NPROC counts the processes of the real uid: as root the sandbox has a uid of its
        # own; otherwise it shares the user's, so the cap comes on top of what the user runs now
        rlimits["RLIMIT_NPROC"] = lim.processes + (0 if self.uid is not None else _processes_of_user())
        workdir = str(self.workdir) if iso.mode == "none" else HOME
        env = self._env()
        if iso.mode == "none":
            env["HOME"], env["MPLCONFIGDIR"] = workdir, f"{workdir}/.config/matplotlib"
            env["TMPDIR"] = workdir
        spec = {"root": str(self.rootdir), "workdir": str(self.workdir), "home": HOME,
                "fds": [req_r, rep_w], "rlimits": rlimits, "uid": self.uid, "argv": argv, "env": env,
                "tmp_size": lim.tmp, "cgroups": self._cgroup() if iso.mode == "root" else []}
        if iso.mode != "none":
            symlinks, binds, hidden = root_layout(self.protected)
            spec.update(symlinks=symlinks, binds=binds, hide=hidden)
        spec_path = self.staging / f"spec-{self.token}.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        jail = [sys.executable, "-I", "-S", str(JAIL), str(spec_path)]
        if iso.mode == "root":
            cmd = [_unshare(), *_NS, "--kill-child", "--", *jail]
        elif iso.mode == "userns":
            cmd = [_unshare(), "--user", "--map-root-user", *_NS, "--kill-child", "--", *jail]
        else:
            cmd = jail + ["--lite"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, pass_fds=(req_r, rep_w), close_fds=True,
                                     start_new_session=True)
        os.close(req_r)
        os.close(rep_w)
        self._req, self._rep = req_w, rep_r
        os.set_blocking(self._req, False)
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()
        self.init_pid = self._find_init()
        if self.init_pid is not None and self.isolation.processes:
            with contextlib.suppress(OSError):
                ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
                if ns != os.readlink("/proc/self/ns/pid"):  # never the grader's own namespace
                    self.pidns = ns

    def _find_init(self) -> int | None:
        """The pid (seen from here) of the sandbox's first process, the child of unshare."""
        if self.isolation.mode == "none":
            return self.proc.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            for task in pathlib.Path(f"/proc/{self.proc.pid}/task").glob("*"):
                with contextlib.suppress(OSError):
                    kids = (task / "children").read_text().split()
                    if kids:
                        return int(kids[0])
            time.sleep(0.005)
        return None

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
    def send(self, obj, timeout: float) -> None:
        data = json.dumps(obj, allow_nan=True).encode()
        frame = _HEADER.pack(len(data)) + data
        deadline = time.monotonic() + timeout
        view = memoryview(frame)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError("timeout", "the sandbox did not read its request in time")
            _, writable, _ = select.select([], [self._req], [], left)
            if not writable:
                continue
            try:
                n = os.write(self._req, view[:65536])
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise SandboxError("ended", "the sandbox closed its channel") from None
            view = view[n:]

    def _read_exact(self, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError("timeout", "no answer in time")
            ready, _, _ = select.select([self._rep], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._rep, min(n - len(buf), 1 << 20))
            if not chunk:
                raise SandboxError("ended", "the sandbox ended")
            buf += chunk
        return bytes(buf)

    def recv(self, timeout: float, max_bytes: int = 64 * 2**20):
        """The next frame, decoded from JSON (plain data only), within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        (n,) = _HEADER.unpack(self._read_exact(_HEADER.size, deadline))
        if n > max_bytes:
            raise SandboxError("garbage", f"a frame of {n} bytes announced (limit {max_bytes})")
        data = self._read_exact(n, deadline)
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise SandboxError("garbage", f"a frame that is not JSON ({type(exc).__name__})") from None

    # ---- the verdict
    def close(self) -> list[dict]:
        """Kill everything the submission started; returns the processes of the sandbox
        still found in /proc once its first process has been killed and reaped (none
        with a PID namespace; any found are killed too)."""
        if self.closed:
            return []
        self.closed = True
        if self.proc is not None:
            # Killing the first process of the PID namespace makes the kernel kill all the others;
            # unshare reaps it once they are all gone, then exits: waiting for unshare is waiting
            # for the whole namespace to be empty.
            with contextlib.suppress(OSError):
                os.kill(self.init_pid or self.proc.pid, signal.SIGKILL)
            if self.isolation.mode == "none":
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
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
        for fd in (getattr(self, "_req", None), getattr(self, "_rep", None)):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self._drain is not None:
            self._drain.join(timeout=5)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        with contextlib.suppress(OSError):
            (self.staging / f"spec-{self.token}.json").unlink()
        shutil.rmtree(self.workdir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.rootdir.rmdir()
        return found


def _read_pids(path: pathlib.Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except OSError:
        return []


def _processes_of_user() -> int:
    uid, n = os.getuid(), 0
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                n += d.stat().st_uid == uid
    return n


def survivors(pidns: str | None, uid: int | None, token: str) -> list[dict]:
    """Processes that belong to a sandbox, seen from /proc: in its PID namespace, owned
    by its uid, or carrying its token in their environment."""
    found = []
    needle = f"ATTNLIB_SANDBOX={token}".encode()
    with contextlib.suppress(OSError):
        if pidns is not None and pidns == os.readlink("/proc/self/ns/pid"):
            raise ValueError("survivors(): that is the grader's own PID namespace, not a sandbox's")
    if uid is not None and uid in (0, os.getuid()):
        raise ValueError(f"survivors(): uid {uid} is not a sandbox's own uid")
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        why = None
        try:
            if pidns and os.readlink(d / "ns" / "pid") == pidns:
                why = "pid namespace"
            elif uid is not None and d.stat().st_uid == uid:
                why = "uid"
            elif needle in (d / "environ").read_bytes().split(b"\0"):
                why = "environment"
            if why:
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state in ("Z", "X"):  # exited, waiting to be reaped: not running
                    continue
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")[:120]
                found.append({"pid": int(d.name), "why": why, "state": state, "cmdline": cmd})
        except OSError:
            continue
    return found
