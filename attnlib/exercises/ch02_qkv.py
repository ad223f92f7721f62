"""Exercises of chapter 02 (not written yet)."""
