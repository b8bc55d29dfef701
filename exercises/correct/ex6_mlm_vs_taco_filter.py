"""Exercise 6, a correct student solution: a loss turned into a higher-is-better curve by negation."""


def first_step_reaching(points, target, higher_is_better=True):
    sign = 1 if higher_is_better else -1
    reached = [step for step, value in points if sign * value >= sign * target]
    return reached[0] if reached else None


def speedup(baseline, other, higher_is_better=True):
    target = baseline[-1][1]
    steps = [first_step_reaching(c, target, higher_is_better) for c in (baseline, other)]
    return None if steps[1] is None else steps[0] / steps[1]
