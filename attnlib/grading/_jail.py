"""The first process inside a grading sandbox: build its filesystem, drop its rights, exec.

Run by :mod:`attnlib.grading.sandbox` as ``unshare ... -- python -I _jail.py SPEC`` (SPEC is
a JSON file the trusted grader wrote). When this script starts it is pid 1 of a fresh PID
namespace, in fresh mount, network, IPC and UTS namespaces, and it is still privileged
there (real root, or root of a user namespace). Before it runs a single line of the
submission it:

1. moves itself into the sandbox's cgroups (memory and process limits), when the grader
   created them;
2. builds a new root in a tmpfs: read-only bind mounts of the system (``/usr``, ``/etc``,
   ...), of the Python installation and of the attnlib package (its exercise modules,
   which hold the reference solutions, left out), a private ``/tmp``, ``/dev/shm`` and
   ``/proc``, a minimal ``/dev``, and the submission's own working directory at
   ``/home/student``: nothing else of the machine (other submissions, the course's
   chapters and solutions, the report, anyone's home) exists in it;
3. ``chroot``s into it, sets the resource limits, drops its privileges (to the
   sandbox's own unprivileged uid when it is real root; to no capabilities at all inside
   a user namespace) with ``no_new_privs``;
4. ``exec``s the runner (:mod:`attnlib.grading.runner`), which stays pid 1: when the
   grader kills it, the kernel kills every process of the namespace.

Only the standard library is used, and no attnlib import: this file runs before the
new root exists.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_PDEATHSIG = 38, 24, 1
# the flags of a mount that a bind remount must keep (statvfs's ST_* bits are the MS_* bits)
_KEEP = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # + noatime, nodiratime, relatime

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source} on {target}")


def _make(path: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if not os.path.exists(path):
            with open(path, "w"):
                pass


def bind(src: str, dst: str, *, readonly: bool = True, recursive: bool = False) -> None:
    """Bind ``src`` at ``dst`` (created), read-only unless told otherwise."""
    _make(dst, os.path.isdir(src))
    mount(src, dst, None, MS_BIND | (MS_REC if recursive else 0))
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (MS_RDONLY if readonly else 0)
    flags |= os.statvfs(dst).f_flag & _KEEP  # a remount may not clear a locked flag
    mount(None, dst, None, flags)


def build_root(spec: dict) -> str:
    root = spec["root"]
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
    _make(root + "/tmp", True)  # first: a folder the grader binds may live under /tmp
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={spec['tmp_size']}")
    for link, target in spec["symlinks"]:
        _make(os.path.dirname(root + link), True)
        os.symlink(target, root + link)
    for src, dst, readonly in spec["binds"]:
        if os.path.exists(src):
            bind(src, root + dst, readonly=readonly)
    # parts of a bound tree that must stay invisible (the exercises' reference solutions):
    # an empty tmpfs over the folder, with only the files that may be seen bound back
    for hidden, keep in spec["hide"]:
        target = root + hidden
        if not os.path.isdir(target):
            continue
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
        for f in keep:
            bind(f, root + f)
        mount(None, target, None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_RDONLY)
    dev = root + "/dev"
    _make(dev, True)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=1m")
    for node in ("null", "zero", "full", "random", "urandom"):
        bind("/dev/" + node, f"{dev}/{node}", readonly=False)
    _make(dev + "/shm", True)
    mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={spec['tmp_size']}")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    _make(root + "/proc", True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    bind(spec["workdir"], root + spec["home"], readonly=False)
    mount(None, root, None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_RDONLY)
    return root


def set_limits(limits: dict) -> None:
    for name, value in limits.items():
        which, value = getattr(resource, name), int(value)
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY and value > hard:
            value = hard  # we may not raise a hard limit we were given
        resource.setrlimit(which, (value, value))


def drop_privileges(uid: int | None) -> None:
    if uid is not None:  # real root: become the sandbox's own unprivileged user
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    else:  # root of a user namespace: keep the uid (it is ours outside), drop every capability
        for cap in range(64):
            _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    lite = sys.argv[2:] == ["--lite"]  # no namespaces here: limits and a folder of its own only
    if lite:
        os.chdir(spec["workdir"])
    else:
        if os.getpid() != 1:
            raise SystemExit("the jail must be pid 1 of a new PID namespace (unshare --pid --fork)")
        for procs in spec["cgroups"]:
            with open(procs, "w") as f:
                f.write("0")  # this process; everything it starts stays in the cgroup
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        root = build_root(spec)
        os.chroot(root)
        os.chdir(spec["home"])
    # the channel to the grader on fds 3 and 4; stdin empty; everything else closed
    requests, replies = spec["fds"]
    os.dup2(requests, 100)
    os.dup2(replies, 101)
    os.dup2(100, 3)
    os.dup2(101, 4)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.closerange(5, 1 << 16)
    set_limits(spec["rlimits"])
    drop_privileges(spec["uid"])
    os.execve(spec["argv"][0], spec["argv"], spec["env"])


if __name__ == "__main__":
    main()
