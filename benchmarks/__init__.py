"""Benchmarks for attnlib: ``python -m benchmarks [NAME ...]``.

Every module ``benchmarks/bench_<name>.py`` that defines ``main()`` is discovered and run
(in name order); ``main()`` prints its own table and may return a list of result dicts.
Shared timing helpers live in :mod:`benchmarks._timing`.
"""
