"""Self-test exercises: ``check(name, fn)`` says whether ``fn`` is right and, if not,
which known mistake it makes and how to fix it.

Each chapter's exercises live in their own module and register themselves in
:data:`EXERCISES` on import.
"""
from ._core import EXERCISES, Case, CheckResult, Exercise, Mistake, check, check_solution, register
from . import ch01_motivation, ch02_qkv, ch03_scaling, ch04_masking, ch05_multihead, ch06_complexity  # noqa: F401,E402
from . import ch08_inference  # noqa: F401,E402

__all__ = ["check", "check_solution", "EXERCISES", "Exercise", "Mistake", "Case", "CheckResult", "register"]
