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
submodules every chapter uses (``al.exercises``, ``al.quiz``, ``al.widgets``, ``al.plots``).
The measuring instruments of single chapters are submodules that are not re-exported:
import them by name, e.g. ``from attnlib import motivation`` (chapter 1), ``scaling``
(chapter 3), ``transformer`` (chapter 5), ``complexity`` (chapter 6), ``model`` (the small
GPT of chapters 7 and 8: ``from attnlib.model import GPT, GPTConfig``), ``train`` (chapter
7's tasks, training loop and head scores) and ``inference`` (chapter 8: KV cache,
generation, cache sizes).

The text attnlib shows (quizzes, checker verdicts, explorer labels, figure titles) is in
English or Chinese: ``al.set_language("zh")``, or ``ATTNLIB_LANG=zh`` (:mod:`attnlib.i18n`).
"""
from . import exercises, plots, quiz, widgets
from .attention import scaled_dot_product_attention
from .devices import default_device, to_device
from .i18n import get_language, set_language, tr
from .flash import attention_state, flash_attention, online_softmax_merge
from .linear import elu_feature_map, linear_attention
from .masks import causal_mask, padding_mask
from .multihead import multi_head_attention, repeat_kv
from .performer import performer_feature_map, random_feature_attention, random_projection
from .ring import ring_attention_distributed, ring_attention_simulated, ring_schedule, shard_bounds, shard_parts
from .rope import apply_rope
from .softmax import masked_softmax, softmax
from .sparse import sliding_window_attention, sliding_window_mask, sliding_window_pairs

__all__ = [
    "softmax", "masked_softmax", "scaled_dot_product_attention", "causal_mask", "padding_mask",
    "multi_head_attention", "repeat_kv", "apply_rope", "default_device", "to_device",
    "flash_attention", "online_softmax_merge", "attention_state",
    "sliding_window_attention", "sliding_window_mask", "sliding_window_pairs",
    "linear_attention", "elu_feature_map",
    "ring_attention_simulated", "ring_attention_distributed", "ring_schedule", "shard_bounds",
    "random_feature_attention", "performer_feature_map", "random_projection", "shard_parts",
    "exercises", "quiz", "widgets", "plots", "assignments", "set_language", "get_language", "tr",
]


def __getattr__(name):  # ``al.assignments`` (the answer cells of an assignment), imported when first used
    if name == "assignments":
        import importlib
        return importlib.import_module(".assignments", __name__)
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")
