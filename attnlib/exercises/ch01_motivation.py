"""Exercises of chapter 01 (not written yet)."""
