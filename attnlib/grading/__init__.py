"""Grading a class's notebooks: ``python -m attnlib.grading.grade SUBMISSIONS/ --out REPORT/``.

The grader runs code that students wrote, so it is split in two, and only one side is
trusted:

- **the trusted grader** (:mod:`attnlib.grading.grade`, :mod:`.judge`, :mod:`.report`) reads each
  notebook as JSON (never its stored outputs), makes every exercise's cases, computes the
  references, compares, names the mistake and writes the report;
- **the sandboxed runner** (:mod:`.runner`, inside :mod:`.sandbox`) executes one notebook in
  a fresh IPython shell and runs its functions on the inputs it receives, and sends back
  plain data only (:mod:`attnlib.exercises._wire`): numbers, strings and arrays of known
  dtypes.

:mod:`.submissions` finds the notebooks and the students' names (a folder, a CSV, or an
LMS export), :mod:`.course` reads the chapters (exercises, quiz keys).
"""
