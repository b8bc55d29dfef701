"""Exercise 6, reference: the speed-up as study.py reports it (first step at MLM's final value)."""


def first_step_reaching(points, target, higher_is_better=True):
    sign = 1 if higher_is_better else -1
    return next((step for step, value in points if sign * value >= sign * target), None)


def speedup(baseline, other, higher_is_better=True):
    target = baseline[-1][1]
    a, b = first_step_reaching(baseline, target, higher_is_better), first_step_reaching(other, target, higher_is_better)
    return None if b is None else a / b
