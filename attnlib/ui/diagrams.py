"""Diagrams drawn by code for the chapters (matplotlib, small, no data files).

Not part of the attention API: import as ``from attnlib.ui import diagrams``.

- :func:`token_paths` (chapter 1): how token 1 reaches position ``n`` in an RNN, a stack
  of causal convolutions and one self-attention layer.
- :func:`qkv_path` (chapter 2): one token's path through the query, key and value
  projections to its output.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

from ..instruments.motivation import conv_reach, layers_to_connect
from ..i18n import N_, _

__all__ = ["token_paths", "qkv_path"]


def _token_row(ax, y, n, label, colour="white"):
    for t in range(n):
        ax.add_patch(plt.Circle((t, y), 0.22, facecolor=colour, edgecolor="black", lw=1, zorder=3))
    ax.text(-0.6, y, label, ha="right", va="center", fontsize=8)


def token_paths(n: int = 8, kernel_size: int = 3):
    """Three panels: the routes from token 1 (left) to position ``n`` (right).

    RNN: a chain of ``n - 1`` hops through the states. CNN: the positions that output
    ``n`` reads at every layer (computed with :func:`attnlib.instruments.motivation.conv_reach`);
    it takes :func:`~attnlib.instruments.motivation.layers_to_connect` layers to reach token 1.
    Attention: one layer with a direct line from every token.

    Returns:
        the matplotlib figure.
    """
    m = layers_to_connect(n, kernel_size)
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.6), gridspec_kw={"width_ratios": [1, 1, 1]})
    # RNN: inputs below, states above, arrows along the states
    ax = axes[0]
    _token_row(ax, 0, n, N_("input"))
    _token_row(ax, 1, n, N_("state"))
    for t in range(n):
        ax.annotate("", (t, 0.75), (t, 0.25), arrowprops={"arrowstyle": "->", "lw": 0.8, "color": "gray"})
    for t in range(n - 1):
        ax.annotate("", (t + 0.75, 1), (t + 0.25, 1), arrowprops={"arrowstyle": "->", "lw": 1.6, "color": "C3"})
    ax.set_title(_("RNN: input, then {hops} hops in a row").format(hops=n - 1), fontsize=9)
    # CNN: what output n reads, layer by layer, from the top down
    ax = axes[1]
    for layer in range(m + 1):
        _token_row(ax, layer, n, N_("input") if layer == 0 else _("layer {layer}").format(layer=layer))
    for layer in range(m, 0, -1):
        # positions of layer `layer` that output n depends on (reach from the right end)
        needed = conv_reach(n, m - layer, kernel_size, source=0)[::-1]   # mirrored: from n back
        for t in range(n):
            if needed[t]:
                for tap in range(kernel_size):
                    s = t - tap
                    if s >= 0:
                        ax.plot([t, s], [layer - 0.22, layer - 1 + 0.22], color="C0", lw=0.9)
    ax.set_title(_("CNN (k = {kernel_size}): {layers} layers to reach token 1").format(
        kernel_size=kernel_size, layers=m), fontsize=9)
    # attention: one layer, every input linked to output n
    ax = axes[2]
    _token_row(ax, 0, n, N_("input"))
    _token_row(ax, 1, n, N_("output"))
    for s in range(n):
        ax.plot([n - 1, s], [1 - 0.22, 0.22], color="C2", lw=1.2 if s == 0 else 0.8)
    ax.set_title(N_("attention: 1 layer, a direct line"), fontsize=9)
    for ax, top in zip(axes, (1, m, 1)):
        ax.set_xlim(-2.6, n - 0.4)
        ax.set_ylim(-0.8, top + 0.5)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.text(0, -0.6, "1", ha="center", fontsize=8)
        ax.text(n - 1, -0.6, str(n), ha="center", fontsize=8)
    fig.tight_layout()
    return fig


def _box(ax, xy, text, colour):
    ax.text(*xy, text, ha="center", va="center", fontsize=9,
            bbox={"boxstyle": "round,pad=0.3", "facecolor": colour, "edgecolor": "black", "lw": 0.8})


def _arrow(ax, start, end, *, dashed=False):
    ax.annotate("", end, start, arrowprops={"arrowstyle": "->", "lw": 1.0, "shrinkA": 0, "shrinkB": 0,
                                            "ls": "--" if dashed else "-",
                                            "color": "gray" if dashed else "black"})


def qkv_path():
    """One token ``x_i`` through the three projections to its output ``o_i``.

    ``x_i`` becomes ``q_i = x_i W_Q``, ``k_i = x_i W_K`` and ``v_i = x_i W_V``; its query
    is compared with every key (its own and the other tokens'), the softmax turns the
    scores into weights, and the weights average every value.

    Returns:
        the matplotlib figure.
    """
    fig, ax = plt.subplots(figsize=(8.5, 2.8))
    q_col, k_col, v_col = "#dbe9f6", "#fde2c8", "#d7f0d2"
    _box(ax, (0, 1), N_("token $x_i$\n(1 × $d_{model}$)"), "white")
    rows = [(2, "$q_i = x_i W_Q$\n(1 × $d_k$)", q_col), (1, "$k_i = x_i W_K$\n(1 × $d_k$)", k_col),
            (0, "$v_i = x_i W_V$\n(1 × $d_v$)", v_col)]
    for y, text, colour in rows:
        _box(ax, (2.3, y), text, colour)
        _arrow(ax, (0.75, 1 + 0.25 * (y - 1)), (1.5, y))
    _box(ax, (4.9, 2), N_("scores $q_i \\cdot k_j / \\sqrt{d_k}$\nfor every token $j$"), q_col)
    _arrow(ax, (3.1, 2), (3.85, 2))
    _arrow(ax, (3.1, 1.05), (4.3, 1.6), dashed=True)
    ax.text(4.45, 1.2, N_("and every other token's key $k_j$"), fontsize=8, color="gray")
    _box(ax, (7.4, 2), N_("weights $A_{ij}$\n(softmax, sum 1)"), q_col)
    _arrow(ax, (5.95, 2), (6.55, 2))
    _box(ax, (7.4, 0), N_("$o_i = \\sum_j A_{ij} v_j$\n(1 × $d_v$)"), v_col)
    _arrow(ax, (7.4, 1.65), (7.4, 0.4))
    _arrow(ax, (3.1, 0), (6.5, 0), dashed=True)
    ax.text(4.8, 0.12, N_("and every other token's value $v_j$"), fontsize=8, color="gray", ha="center")
    ax.set_xlim(-0.9, 8.4)
    ax.set_ylim(-0.6, 2.6)
    ax.axis("off")
    ax.set_title(N_("One token's path: its query asks, every key answers, every value is delivered"),
                 fontsize=10)
    fig.tight_layout()
    return fig
