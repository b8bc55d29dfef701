"""Correct solutions written as students write them, several per exercise (vectorised, with loops,
drawing in another order): `pytest exercises/` runs every check on each of them as well as on
solutions/, so a check that rejects a correct answer fails CI. One file per solution, named
<exercise>_<how>.py, with the functions the exercise's stub asks for."""
