"""The runtime that runs someone else's code: one for the notebook checker
(:mod:`attnlib.exercises`) and the grader (:mod:`attnlib.grading`) alike.

- :mod:`.wire`: the one framing: messages of a JSON header and ``.npy`` arrays over
  :mod:`multiprocessing.connection`, and plain-data values; nothing is unpickled from the
  untrusted side;
- :mod:`.limits`: the one limit rule: CPU seconds, the clock as a backstop;
- :mod:`.processes`: the one supervisor: start a child (forked, or spawned where fork is
  unsafe), wait for its answers within the limit, end it and everything it started
  (psutil), with :mod:`.child` running inside it.

Nothing here knows about exercises: what a child serves is given to it.
"""
