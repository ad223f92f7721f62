"""Self-test exercises: ``check(name, fn)`` says whether ``fn`` is right and, if not,
which known mistake it makes; ``hint(name)`` gives the next step after a failure.

Each chapter's exercises live in their own module and register themselves in
:data:`EXERCISES` on import. The learner's function runs in a separate, killable process
and its results come back as plain data (see :mod:`attnlib.exercises._judge` for the
trusted side, :mod:`attnlib.exercises._worker` for the untrusted side and
:mod:`attnlib.exercises._wire` for what crosses between them): after a verdict nothing
it started still runs.
"""
from ._core import (ATTENTION_SHORTCUTS, EXERCISES, MULTIHEAD_SHORTCUTS, SOFTMAX_SHORTCUTS, Case, CheckResult,
                    Exercise, Mistake, check, check_solution, displayed_hint, hint, mistakes, register)
from . import ch01_motivation, ch02_qkv, ch03_scaling, ch04_masking, ch05_multihead, ch06_complexity  # noqa: F401,E402
from . import ch07_learning  # noqa: F401,E402
from . import ch08_inference  # noqa: F401,E402

__all__ = ["check", "check_solution", "hint", "mistakes", "EXERCISES", "Exercise", "Mistake", "Case", "CheckResult", "register",
           "displayed_hint", "SOFTMAX_SHORTCUTS", "ATTENTION_SHORTCUTS", "MULTIHEAD_SHORTCUTS"]

# A learner's progress (attnlib.progress): check() notes a pass of the learner's own function;
# check_solution (which calls _core.check directly) never does.
from ..progress import progress, recording as _recording  # noqa: E402

check = _recording(check)
__all__ += ["progress"]
