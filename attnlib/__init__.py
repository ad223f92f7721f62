"""attnlib: small, exact attention for NumPy and PyTorch, and the course's exercises.

Shape symbols used in every docstring and shape comment::

    N...  any number of batch dimensions (may be none)
    h     number of heads
    L     target (query) sequence length
    S     source (key/value) sequence length
    E     query/key embedding size (per head inside multi-head attention)
    Ev    value embedding size
    d_model  model width; d_head = d_model / h

The names below are the public API (``al.softmax``, ``al.flash_attention``, ...) and the
submodules every chapter uses (``al.exercises``, ``al.quiz``, ``al.widgets``, ``al.plots``), with
``al.evidence`` (a collapsed block of per-seed tables and checks, :mod:`attnlib.ui.evidence`).

The package's folders are its layers; each imports only the layers above it in this list
(``tests/test_layout.py`` fails on an import cycle or an import the wrong way):

=============== ====================================================================
``i18n``        the language of what attnlib shows, and its message catalogues
``kernels``     attention itself: softmax, masks, attention, multi-head, RoPE, and the
                exact or approximate variants (flash, sparse, linear, performer, ring)
``data``        real text from packages on disk (chapter 13): the plays' archive, a
                character tokenizer
``models``      the Transformer block (chapter 6), the small GPT (chapters 9 to 13) and
                the trained weights shipped with attnlib (``pretrained``, chapter 13)
``instruments`` the chapters' measuring helpers, imported by name, not re-exported:
                ``from attnlib.instruments import motivation as mo`` (chapter 1),
                ``scaling`` (3), ``complexity`` (7 and 8), ``train`` (9), ``inference``
                and ``positions`` (10), ``text`` (13)
``ui``          plots, explorers, quizzes and diagrams
``runtime``     what runs someone else's code, for the checker and the grader alike: one
                framing, one limit rule, one supervisor
``exercises``   the checker, its data model, each chapter's catalogue of exercises and
                the worker that runs a learner's code
``grading``     the teacher's tools: student notebooks, the sandboxed grader, reports
=============== ====================================================================

The text attnlib shows (quizzes, checker verdicts, explorer labels, figure titles) is in
English or Chinese: ``al.set_language("zh")``, or ``ATTNLIB_LANG=zh`` (:mod:`attnlib.i18n`).
"""
from . import exercises
from .i18n import get_language, set_language, tr
from .kernels import (apply_rope, attention_state, causal_mask, default_device, elu_feature_map, flash_attention,
                      linear_attention, masked_softmax, multi_head_attention, online_softmax_merge, padding_mask,
                      performer_feature_map, random_feature_attention, random_projection, repeat_kv,
                      ring_attention_distributed, ring_attention_simulated, ring_schedule,
                      scaled_dot_product_attention, shard_bounds, shard_parts, sliding_window_attention,
                      sliding_window_mask, sliding_window_pairs, softmax, to_device)
from .ui import plots, quiz, style, widgets
from .ui.evidence import evidence

__all__ = [
    "softmax", "masked_softmax", "scaled_dot_product_attention", "causal_mask", "padding_mask",
    "multi_head_attention", "repeat_kv", "apply_rope", "default_device", "to_device",
    "flash_attention", "online_softmax_merge", "attention_state",
    "sliding_window_attention", "sliding_window_mask", "sliding_window_pairs",
    "linear_attention", "elu_feature_map",
    "ring_attention_simulated", "ring_attention_distributed", "ring_schedule", "shard_bounds",
    "random_feature_attention", "performer_feature_map", "random_projection", "shard_parts",
    "exercises", "quiz", "widgets", "plots", "style", "evidence", "assignments", "set_language", "get_language", "tr",
]


def __getattr__(name):  # ``al.assignments`` (the answer cells of an assignment), imported when first used
    if name == "assignments":
        import importlib
        return importlib.import_module(".grading.assignments", __name__)
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")
