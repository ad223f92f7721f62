"""Borrowed-answer rules as plain data (``Exercise.forbidden``, ``Exercise.borrowed``,
``Mistake.calls``): parsed where an exercise is registered, matched by the untrusted side's
watch (:mod:`attnlib.exercises._watch`) and named in the verdict by the trusted side."""
from __future__ import annotations

import ast

__all__ = ["parse_rule"]


def _display_name(dotted: str) -> str:
    for long, short in (("attnlib.", "al."), ("torch.nn.functional.", "F."), ("torch.nn.", "nn.")):
        if dotted.startswith(long):
            return short + dotted[len(long):].replace(".forward", "")
    return dotted


def parse_rule(text: str) -> dict:
    """A borrowed-answer rule as plain data, from its declaration (``Exercise.borrowed``):

    - ``"attnlib.softmax"``: a public dotted name (a function, builtin or method);
    - ``"attnlib.kernels.masks:causal_mask"``: module and qualified name of the code that runs
      (fnmatch patterns: ``"torch.nn.attention.bias:*"``);
    - either one with required argument values: ``"attnlib.causal_mask(align='lower_right')"``;
    - ``"aten::_softmax"``: a torch operator (patterns too: ``"aten::_scaled_dot_product_*"``).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a borrowed-answer rule must be text, got {text!r}")
    text = text.strip()
    if text.startswith("aten::"):
        return {"aten": text}
    when = None
    if text.endswith(")") and "(" in text:
        head, _, args = text.partition("(")
        call = ast.parse(f"f({args}", mode="eval").body
        if call.args or not isinstance(call, ast.Call):
            raise ValueError(f"rule {text!r}: give required arguments as name=value")
        when = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        text = head
    if ":" in text:
        module, _, qual = text.partition(":")
        rule = {"module": module, "qualname": qual or "*"}
    else:
        if "." not in text:
            raise ValueError(f"rule {text!r}: use a dotted name such as 'attnlib.softmax'")
        rule = {"name": text, "label": _display_name(text)}
    if when:
        rule["when"] = when
    return rule
