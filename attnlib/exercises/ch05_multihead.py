"""Exercises of chapter 05 (not written yet)."""
