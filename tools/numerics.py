"""Run a command in the second numerical environment of `make test` (`make nbval-zh`; `make nbval-alt`).

    python tools/numerics.py -- COMMAND ...   # e.g. -- .venv/bin/python -m pytest --nbval ...
    python tools/numerics.py --print          # the variables, as a shell line to copy

The chapters' stored outputs must not depend on the machine's kernels or thread count, so
strict nbval runs twice: once as the machine is, once here, on the same machine, with

* torch's portable kernels instead of the vectorised ones (``ATEN_CPU_CAPABILITY=default``);
* NumPy without the SIMD families it dispatches to on this CPU
  (``NPY_DISABLE_CPU_FEATURES``, computed from NumPy at run time: naming a family that the
  CPU lacks is an error, so the list differs between machines);
* one thread instead of several (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
  ``MKL_NUM_THREADS`` = 1; torch reads ``OMP_NUM_THREADS`` for ``torch.get_num_threads()``).

``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` are left as the machine sets them. Before
the command runs, a child Python checks that each setting took effect (so a second run
that would repeat the first fails instead of passing), and prints what changed.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# what torch and NumPy run with; printed as JSON by a child Python
PROBE = """
import json, torch
from numpy._core import _multiarray_umath as m
print(json.dumps({"torch": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
                  "numpy": [f for f in m.__cpu_dispatch__ if m.__cpu_features__.get(f)]}))
"""


def probe(env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def environment(machine: dict | None = None) -> dict[str, str]:
    """The variables of the second environment (NumPy's SIMD families from ``machine``,
    a probe of this machine by default)."""
    machine = machine or probe()
    return {"ATEN_CPU_CAPABILITY": "default",
            "NPY_DISABLE_CPU_FEATURES": " ".join(machine["numpy"]),
            **{name: "1" for name in THREADS}}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--print"]:
        print(" ".join(f"{k}={shlex.quote(v)}" for k, v in environment().items()))
        return 0
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    before = probe()
    extra = environment(before)
    env = {**os.environ, **extra}
    after = probe(env)
    problems = []
    if after["torch"].upper() != "DEFAULT":
        problems.append(f"torch still runs its {after['torch']} kernels")
    if after["numpy"]:
        problems.append(f"NumPy still dispatches to {after['numpy']}")
    if after["threads"] != 1:
        problems.append(f"torch runs {after['threads']} threads")
    if problems:
        print("the second numerical environment did not take effect: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"numerical environment: torch kernels {before['torch']} -> {after['torch']}, "
          f"NumPy SIMD {' '.join(before['numpy']) or '(baseline only)'} -> baseline only, "
          f"threads {before['threads']} -> 1", flush=True)
    print("  " + " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items()), flush=True)
    return subprocess.call(argv, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
