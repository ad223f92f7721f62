"""Start the runner inside a sandbox: ``python -I _boot.py`` (a script, not ``-m``).

``attnlib.exercises`` is replaced before ``attnlib`` is first imported: the notebook's
``al.exercises.check(name, fn)`` records ``fn`` for the grader instead of checking it
(the grader checks, outside), and the chapter modules with the reference solutions,
which the sandbox cannot see, are never imported. The checker's own helper modules
(``attnlib/exercises/_*.py``) import from the real folder.
"""
import importlib.util
import os
import sys
import types


class _Recorded:
    """What ``al.exercises.check`` gives while grading: the notebook's verdicts do not count."""

    def __init__(self, name):
        self.name, self.passed, self.status, self.message, self.details = name, False, "recorded", "", {}

    def __bool__(self):
        return False

    def __repr__(self):
        return f"{self.name}: recorded for grading"


def install() -> types.ModuleType:
    spec = importlib.util.find_spec("attnlib")
    mod = types.ModuleType("attnlib.exercises")
    mod.__path__ = [os.path.join(os.path.dirname(spec.origin), "exercises")]
    mod.__package__ = "attnlib.exercises"
    mod.recorded = {}

    def check(name, fn=None, *args, **kwargs):
        if isinstance(name, str) and callable(fn):
            mod.recorded[name] = fn
        return _Recorded(name)

    def check_solution(name, fn=None, *args, **kwargs):
        return _Recorded(name)

    mod.check, mod.check_solution = check, check_solution
    mod.EXERCISES = {}
    mod.progress = lambda *a, **k: None
    mod.hint = lambda *a, **k: "(hints are not given while a notebook is graded)"
    sys.modules["attnlib.exercises"] = mod
    import attnlib
    attnlib.exercises = mod
    return mod


if __name__ == "__main__":
    install()
    from attnlib.grading import runner
    runner.main()
