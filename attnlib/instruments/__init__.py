"""The chapters' measuring instruments, one module per chapter that needs one; they are
imported by name and not re-exported::

    from attnlib.instruments import motivation as mo   # chapter 1: RNN relay, CNN reach, soft lookup
    from attnlib.instruments import scaling as sc      # chapter 3: dot-product moments, saturation
    from attnlib.instruments import complexity as cx   # chapters 1, 5, 7, 8, 11, 12: timing, FLOPs, memory, bytes
    from attnlib.instruments import train              # chapter 9: tasks, training seeds together, head scores
    from attnlib.instruments import inference as inf   # chapters 11 and 12: KV cache, generation, cache sizes
    from attnlib.instruments import positions as pos   # chapter 12: losses by position
    from attnlib.instruments import text as tx         # chapter 13: head patterns on real text, sampling

They measure; the kernels (:mod:`attnlib.kernels`) and models (:mod:`attnlib.models`)
compute. Nothing here is an exercise's answer key.
"""
