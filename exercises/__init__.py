"""Classroom exercises on TACO: a page (exN_*.md) and a stub (exN_*.py) each; see README.md."""
