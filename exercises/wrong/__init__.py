"""Deliberately wrong solutions, each with one bug a student typically makes. They are test
fixtures: test_wrong_solutions.py proves that the checks reject each one with a helpful message."""
