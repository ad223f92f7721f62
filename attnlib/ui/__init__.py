"""What a learner sees besides printed numbers: ``plots.py`` (heat maps and bars),
``widgets.py`` (the explorers, live in Jupyter and still on the website), ``quiz.py``
(concept questions), ``diagrams.py`` (the chapters' drawn diagrams), ``evidence.py``
(collapsed evidence blocks) and ``columns.py`` (padding by display width, so that printed
tables line up in Chinese). Chapters reach them as ``al.plots``, ``al.widgets``,
``al.quiz`` and ``al.evidence``.
"""
