"""Exercise 6, a correct student solution with a plain loop."""


def first_step_reaching(points, target, higher_is_better=True):
    for step, value in points:
        if higher_is_better and value >= target:
            return step
        if not higher_is_better and value <= target:
            return step
    return None


def speedup(baseline, other, higher_is_better=True):
    final = baseline[-1][1]
    mine = first_step_reaching(baseline, final, higher_is_better)
    theirs = first_step_reaching(other, final, higher_is_better)
    if theirs is None:
        return None
    return float(mine) / float(theirs)
