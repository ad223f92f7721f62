"""Exercises of chapter 04 (not written yet)."""
