"""Run the suites of `make test` in parallel with readable output (the Makefile calls it).

    python tools/suites.py run LOGS NAME COMMAND ...  # one suite: its output to LOGS/NAME.log
    python tools/suites.py summary LOGS NAME ...      # what each suite did; fails if one failed

``run`` starts a suite's command with its output in ``LOGS/<name>.log``; when it ends, it
writes ``LOGS/<name>.status`` ("<exit code> <seconds> <CPU seconds>", the CPU time of the
suite's processes on all cores together) and prints the log between two rules that name the
suite (holding a lock, so that two suites ending at once do not interleave), and exits
with the command's code. ``summary`` prints one line per suite (passed, FAILED, or not run because a suite it needs
failed), with its time and pytest's counts, then the counts of all suites together in
pytest's words (a suite that failed without a failed test, such as a book build, or that
did not run, counts as one failed), and exits 1 if a suite failed or did not run.
"""
from __future__ import annotations

import fcntl
import pathlib
import re
import resource
import subprocess
import sys
import time

# pytest's closing line: "== 3 failed, 3156 passed, 434 skipped, 11 warnings in 209.42s (0:03:29) =="
# (with -q: the same without the rules)
CLOSING = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s(?: \([\d:]+\))?\s*=*$")
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


def status(logs: pathlib.Path, name: str) -> tuple[int, int, int] | None:
    """(exit code, seconds, CPU seconds) of a suite that ended, None for one that did not run."""
    f = logs / f"{name}.status"
    if not f.is_file():
        return None
    rc, secs, cpu = f.read_text().split()
    return int(rc), int(secs), int(cpu)


def counts(logs: pathlib.Path, name: str) -> dict[str, int]:
    """pytest's counts from every closing line of a suite's log (a suite may run pytest twice)."""
    total: dict[str, int] = {}
    f = logs / f"{name}.log"
    if not f.is_file():
        return total
    for line in f.read_text(errors="replace").splitlines():
        m = CLOSING.match(line.strip())
        if m:
            for n, what in COUNT.findall(m.group(1)):
                what = "errors" if what.startswith("error") else what
                total[what] = total.get(what, 0) + int(n)
    return total


def minutes(secs: int) -> str:
    return f"{secs // 60}m{secs % 60:02d}s"


def run(logs: pathlib.Path, name: str, command: list[str]) -> int:
    print(f"--> {name} started at {time.strftime('%H:%M:%S')}", flush=True)
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(logs / f"{name}.log", "w") as log:
        # close_fds=False: a `make` command keeps the jobserver of the `make -j` that runs the suites
        rc = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             close_fds=False)
    secs = round(time.monotonic() - start)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    (logs / f"{name}.status").write_text(f"{rc} {secs} {round(usage.ru_utime + usage.ru_stime)}\n")
    show(logs, name)
    return rc


def show(logs: pathlib.Path, name: str) -> int:
    st = status(logs, name)
    verdict = "passed" if st and st[0] == 0 else f"FAILED (exit {st[0]})" if st else "?"
    took = f" in {minutes(st[1])} ({minutes(st[2])} of CPU)" if st else ""
    log = (logs / f"{name}.log").read_text(errors="replace") if (logs / f"{name}.log").is_file() else ""
    with open(logs / ".print", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sys.stdout.write(f"\n{'=' * 25} {name}: log ({logs / name}.log) {'=' * 25}\n")
        sys.stdout.write(log if log.endswith("\n") or not log else log + "\n")
        sys.stdout.write(f"{'=' * 25} {name}: {verdict}{took} {'=' * 25}\n\n")
        sys.stdout.flush()
    return 0


def summary(logs: pathlib.Path, names: list[str]) -> int:
    rows, total, bad, uncounted = [], {}, [], 0
    for name in names:
        st = status(logs, name)
        c = counts(logs, name)
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
        said = ", ".join(f"{v} {k}" for k, v in c.items())
        if (st is None or st[0]) and not (c.get("failed") or c.get("errors")):
            uncounted += 1
        if st is None:
            rows.append(f"  {name:14s} not run      (a suite it needs failed)")
            bad.append(name)
        elif st[0]:
            rows.append(f"  {name:14s} FAILED {minutes(st[1]):>8s} {minutes(st[2]):>8s}  {said}   "
                        f"see {logs / name}.log")
            bad.append(name)
        else:
            rows.append(f"  {name:14s} passed {minutes(st[1]):>8s} {minutes(st[2]):>8s}  {said}")
    print(f"{'=' * 25} make test: summary {'=' * 25}")
    print(f"  {'suite':14s} {'result':6s} {'time':>8s} {'CPU':>8s}  tests")
    print("\n".join(rows))
    if bad:
        print(f"make test FAILED: {', '.join(bad)}")
    # one closing line in pytest's words for all suites together
    failed = total.get("failed", 0) + total.get("errors", 0) + uncounted
    line = f"tests: {total.get('passed', 0)} passed, {failed} failed"
    if total.get("skipped"):
        line += f", {total['skipped']} skipped"
    print(line)
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "run":
        return run(pathlib.Path(argv[1]), argv[2], argv[3:])
    if len(argv) >= 2 and argv[0] == "summary":
        return summary(pathlib.Path(argv[1]), argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
