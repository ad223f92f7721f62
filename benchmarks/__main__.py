"""Run the benchmarks: ``python -m benchmarks`` (all) or ``python -m benchmarks sdpa flash``.

Discovers every ``benchmarks/bench_*.py`` with a ``main()``; a new benchmark plugs in by
adding such a file, with no change here. ``main()`` prints its own table.
``python -m benchmarks decode`` reports decode time per token with and without the KV cache.

Options:
    --threads N   limit BLAS/OpenMP and torch to N threads (set before NumPy and torch
                  are imported). On a small shared machine ``--threads 1`` makes the
                  ratios much steadier; both sides of every comparison get the same
                  threads either way. Default: the libraries' own choice.
    --list        list the benchmarks and exit.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import time
from pathlib import Path

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def discover() -> dict:
    """``{name: module}`` for every ``bench_<name>`` module that has a ``main()``, by name."""
    found = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name.startswith("bench_"):
            module = importlib.import_module(f"benchmarks.{info.name}")
            if callable(getattr(module, "main", None)):
                found[info.name[len("bench_"):]] = module
    return found


def run(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--threads", type=int, default=None, help="thread limit for BLAS and torch")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.threads is not None:  # must happen before NumPy/torch load their thread pools
        for var in _THREAD_VARS:
            os.environ[var] = str(args.threads)
    benches = discover()
    if args.threads is not None and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(args.threads)
    if args.list:
        print("\n".join(benches))
        return 0
    unknown = [n for n in args.names if n not in benches]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {sorted(benches)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    for name, module in benches.items():
        if args.names and name not in args.names:
            continue
        print(f"== {name} ==", flush=True)
        t = time.perf_counter()
        module.main()
        print(f"   ({time.perf_counter() - t:.1f} s)\n", flush=True)
    print(f"all benchmarks: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run())
