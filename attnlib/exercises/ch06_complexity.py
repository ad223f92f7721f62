"""Exercises of chapter 06 (not written yet)."""
