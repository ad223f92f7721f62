"""A notebook that uses every markup construct CONTRIBUTING.md allows in a chapter.

The JupyterLab test and the website test render this same notebook, so a construct that
one of them shows raw (or a citation anchor that does not resolve) is caught without
waiting for a chapter to use it.
"""
from __future__ import annotations

import nbformat

# (name, markdown) — the name is the id of a <div> around the cell's check text
CELLS = [
    ("heading", "# Markup sample\n\nInline math $\\alpha_{ij} = \\operatorname{softmax}_j(s_{ij})$ and display math:\n\n"
                "$$\n\\operatorname{Attention}(Q, K, V) = \\operatorname{softmax}\\!\\left(\\frac{QK^\\top}{\\sqrt{d_k}}\\right) V\n$$"),
    ("details", "**Question.** Is the score matrix symmetric when $W_Q = W_K$?\n\n"
                "<details>\n<summary>Answer</summary>\n\n"
                "Yes. With $W_Q = W_K$ the scores are $s_{ij} = x_i^\\top W W^\\top x_j = s_{ji}$.\n\n"
                "$$\ns = X W W^\\top X^\\top\n$$\n\n"
                "</details>"),
    ("table", "| symbol | shape |\n|---|---|\n| $Q$ | $(L, d_k)$ |\n| $K$ | $(S, d_k)$ |"),
    ("cite", "Attention is defined as in "
             "[Vaswani et al., 2017](../appendix/bibliography.md#vaswani2017attention); "
             "tiling follows [Dao et al., 2022](../appendix/bibliography.md#dao2022flashattention)."),
    ("note", "> **Note.** A block quote that starts with a bold word is a note.\n\n"
             "<span style=\"color: #0969da\">Plain HTML</span> with <kbd>Shift</kbd>+<kbd>Enter</kbd>."),
]


def sample_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [nbformat.v4.new_markdown_cell(md) for _, md in CELLS]
    nb.cells.append(nbformat.v4.new_code_cell("1 + 1"))
    for c in nb.cells:
        c.pop("id", None)
    nb.nbformat, nb.nbformat_minor = 4, 4
    return nb
