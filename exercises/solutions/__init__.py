"""The reference solutions the checks run on by default (mostly the repository's own code).
A teacher handing the exercises out may delete this folder: `pytest exercises/ --student` does not need it."""
