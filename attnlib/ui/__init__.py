"""What a learner sees besides printed numbers: ``plots.py`` (heat maps and bars),
``widgets.py`` (the explorers, live in Jupyter and still on the website), ``quiz.py``
(concept questions) and ``diagrams.py`` (the chapters' drawn diagrams). Chapters reach
the first three as ``al.plots``, ``al.widgets`` and ``al.quiz``.
"""
