"""The exercises of each chapter, one module per chapter: the stub a learner fills in, the
case generator, the reference solution and the catalogue of known mistakes. Each module
registers its exercises in :data:`attnlib.exercises.EXERCISES` when imported.

This folder is the course's answer key: the grader's sandbox hides it from the code it
grades (:func:`attnlib.grading.sandbox.root_layout`).
"""
