"""Self-test exercises: ``check(name, fn)`` says whether ``fn`` is right and, if not,
which known mistake it makes; ``hint(name)`` gives the next step after a failure.

The layout of this layer:

- :mod:`._model`: the data model (:class:`Exercise`, :class:`Mistake`, :class:`Case`,
  :class:`CheckResult`) and the registry :data:`EXERCISES`;
- :mod:`.catalogue`: each chapter's exercises (stub, cases, reference, named mistakes),
  registered on import: the course's answer key, which the grader's sandbox hides;
- :mod:`._core`: :func:`check` and :func:`check_solution`; the trusted side that judges a
  check is :mod:`._judge` (with :mod:`._compare` and the hint ladder, :mod:`._hints`), the
  untrusted side runs the learner's function in a separate, killable process
  (:mod:`._running`, :mod:`._worker`, :mod:`._wire`): its results come back as plain data,
  and after a verdict nothing it started still runs;
- :mod:`.tracking`: which exercises a learner has passed (:func:`progress`).
"""
from ._model import (ATTENTION_SHORTCUTS, EXERCISES, MULTIHEAD_SHORTCUTS, SOFTMAX_SHORTCUTS, Case, CheckResult,
                     Exercise, Mistake, register)
from ._core import check, check_solution, mistakes
from ._hints import displayed_hint, hint
from .catalogue import ch01_motivation, ch02_qkv, ch03_scaling, ch04_masking, ch05_multihead  # noqa: F401
from .catalogue import ch06_transformer_block, ch07_cost, ch08_long_sequences  # noqa: F401
from .catalogue import ch09_learning, ch10_trained_claims, ch11_inference, ch12_gqa_rope  # noqa: F401
from .catalogue import ch13_real_text  # noqa: F401
# A learner's progress: check() notes a pass of the learner's own function; check_solution
# (which calls _core.check directly) never does.
from .tracking import progress, recording as _recording

__all__ = ["check", "check_solution", "hint", "mistakes", "EXERCISES", "Exercise", "Mistake", "Case", "CheckResult",
           "register", "displayed_hint", "SOFTMAX_SHORTCUTS", "ATTENTION_SHORTCUTS", "MULTIHEAD_SHORTCUTS", "progress"]

check = _recording(check)
