"""Exercises of chapter 03 (not written yet)."""
