"""Wrong speed-ups, one plausible bug each (test fixtures for the checks of exercise 6). Each module-level
pair is (first_step_reaching, speedup); the bug is in one of them, marked "# BUG"."""
import math


def _first(points, target, higher_is_better=True):
    """A correct first_step_reaching, for the wrong speedups below."""
    for step, value in points:
        if (value >= target) if higher_is_better else (value <= target):
            return step
    return None


def speedup_integer_division(baseline, other, higher_is_better=True):
    """Bug: a // b (the speed-up of the page's examples happens to be a whole number)."""
    a, b = _first(baseline, baseline[-1][1], higher_is_better), _first(other, baseline[-1][1], higher_is_better)
    return None if b is None else a // b  # BUG


def speedup_rounded(baseline, other, higher_is_better=True):
    """Bug: rounded to a whole number 'for the table'."""
    a, b = _first(baseline, baseline[-1][1], higher_is_better), _first(other, baseline[-1][1], higher_is_better)
    return None if b is None else round(a / b)  # BUG


def speedup_baseline_last_step(baseline, other, higher_is_better=True):
    """Bug: the baseline's *last* step over the step the other reaches the target (a flat baseline
    reaches its final value long before its last step)."""
    b = _first(other, baseline[-1][1], higher_is_better)
    return None if b is None else baseline[-1][0] / b  # BUG


def speedup_inverted(baseline, other, higher_is_better=True):
    """Bug: other's step over the baseline's (a speed-up below 1 for a faster curve)."""
    a, b = _first(baseline, baseline[-1][1], higher_is_better), _first(other, baseline[-1][1], higher_is_better)
    return None if b is None else b / a  # BUG


def speedup_zero_if_never(baseline, other, higher_is_better=True):
    """Bug: 0 when the other curve never gets there (the docstring asks for None)."""
    a, b = _first(baseline, baseline[-1][1], higher_is_better), _first(other, baseline[-1][1], higher_is_better)
    return 0 if b is None else a / b  # BUG


def speedup_infinite_if_never(baseline, other, higher_is_better=True):
    """Bug: math.inf when the other curve never gets there."""
    a, b = _first(baseline, baseline[-1][1], higher_is_better), _first(other, baseline[-1][1], higher_is_better)
    return math.inf if b is None else a / b  # BUG


def speedup_best_not_final(baseline, other, higher_is_better=True):
    """Bug: the target is the baseline's best value, not its final one."""
    target = (max if higher_is_better else min)(v for _, v in baseline)  # BUG
    a, b = _first(baseline, target, higher_is_better), _first(other, target, higher_is_better)
    return None if b is None else a / b


def speedup_ignores_direction(baseline, other, higher_is_better=True):
    """Bug: higher_is_better not passed on: a loss is read as if higher were better."""
    a, b = _first(baseline, baseline[-1][1]), _first(other, baseline[-1][1])  # BUG
    return None if b is None else a / b


def first_strictly_above(points, target, higher_is_better=True):
    """Bug: > instead of >= (a curve that reaches the target exactly does not count)."""
    for step, value in points:
        if (value > target) if higher_is_better else (value < target):  # BUG
            return step
    return None


def first_ignores_direction(points, target, higher_is_better=True):
    """Bug: always 'value >= target', also for a loss."""
    return next((step for step, value in points if value >= target), None)  # BUG


def first_returns_index(points, target, higher_is_better=True):
    """Bug: the position in the list, not the step."""
    for i, (step, value) in enumerate(points):
        if (value >= target) if higher_is_better else (value <= target):
            return i  # BUG
    return None


def first_last_crossing(points, target, higher_is_better=True):
    """Bug: the step from which the curve *stays* at the target (scanned from the end)."""
    step = None
    for s, value in reversed(points):
        if not ((value >= target) if higher_is_better else (value <= target)):
            break
        step = s  # BUG
    return step


def speedup_none_not_tested(baseline, other, higher_is_better=True):
    """Bug: divides before asking whether the other curve reaches the target at all (None)."""
    target = baseline[-1][1]
    sign = 1 if higher_is_better else -1
    a = next((s for s, v in baseline if sign * v >= sign * target), None)
    b = next((s for s, v in other if sign * v >= sign * target), None)
    return a / b  # BUG: b may be None: TypeError


def speedup_returns_text(baseline, other, higher_is_better=True):
    """Bug: returns the speed-up formatted for printing ("4.00x"), not a number."""
    target = baseline[-1][1]
    sign = 1 if higher_is_better else -1
    a = next((s for s, v in baseline if sign * v >= sign * target), None)
    b = next((s for s, v in other if sign * v >= sign * target), None)
    return None if b is None else f"{a / b:.2f}x"  # BUG: a string


def speedup_of_pairs(baseline, other, higher_is_better=True):
    """Bug: its own helper returns the (step, value) point, and speedup divides the points."""
    target = baseline[-1][1]
    sign = 1 if higher_is_better else -1
    a = next((p for p in baseline if sign * p[1] >= sign * target), None)  # BUG: the point, not its step
    b = next((p for p in other if sign * p[1] >= sign * target), None)
    return None if b is None else a / b


def speedup_target_from_the_other_curve(baseline, other, higher_is_better=True):
    """Bug: the target is the final value of the other curve, not of the baseline."""
    target = other[-1][1]  # BUG: baseline[-1][1]
    sign = 1 if higher_is_better else -1
    a = next((s for s, v in baseline if sign * v >= sign * target), None)
    b = next((s for s, v in other if sign * v >= sign * target), None)
    return None if b is None else a / b
