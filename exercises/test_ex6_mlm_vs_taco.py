"""Checks of exercise 6 (reading speed-ups off curves) on hand-made curves, and a short run of the miniature."""

import numbers

from exercises._check import Mistake, call, expect

EXERCISE = "ex6_mlm_vs_taco"
RISING = [(100, 0.1), (200, 0.3), (300, 0.3), (400, 0.5)]
FALLING = [(100, 5.0), (200, 4.5), (300, 4.2), (400, 4.0)]


def check_first_step_reaching(impl):
    f = impl.first_step_reaching
    for points, target, better, want, what in (
            (RISING, 0.3, True, 200, "the first step where a rising curve reaches 0.3 (equal counts)"),
            (RISING, 0.6, True, None, "a target the curve never reaches"),
            (FALLING, 4.3, False, 300, "a falling curve (a loss: lower is better) reaching 4.3"),
            (FALLING, 5.0, False, 100, "a loss already at its target at the first point"),
            ([(50, 0.2), (100, 0.1), (150, 0.25)], 0.2, True, 50,
             "the first step reaching 0.2, even if the curve falls below it later")):
        got = call(f, points, target, better)
        expect(got == want, f"first_step_reaching({points}, {target}, higher_is_better={better}) should be {want} "
                            f"({what}); got {got}")


def check_speedup(impl):
    cases = (
        ([(100, 0.0), (200, 0.05), (300, 0.1), (400, 0.12)], [(100, 0.13), (200, 0.2), (300, 0.25), (400, 0.26)], True, 4,
         "MLM reaches its final 0.12 at step 400 and TACO at step 100: speed-up 400 / 100 = 4"),
        ([(100, 0.13), (200, 0.2), (300, 0.25), (400, 0.26)], [(100, 0.0), (200, 0.05), (300, 0.1), (400, 0.12)], True,
         None, "a curve that never reaches the baseline's final value has no speed-up (None, not 0 or inf)"),
        (FALLING, [(100, 4.6), (200, 4.0)], False, 2,
         "for a loss, MLM reaches its final 4.0 at step 400, the other at 200: speed-up 2"),
        ([(100, 0.0), (200, 0.1), (300, 0.2), (400, 0.3)], [(100, 0.1), (200, 0.2), (300, 0.3)], True, 4 / 3,
         "MLM reaches its final 0.3 at step 400, the other at step 300: speed-up 400 / 300 = 1.333... (a fraction: "
         "do not round or use integer division)"),
        ([(100, 0.0), (200, 0.3), (300, 0.3), (400, 0.3)], [(100, 0.3), (200, 0.4)], True, 2,
         "MLM is already at its final 0.3 at step 200 (and stays there): the baseline's step is the first step "
         "reaching its final value, 200, not its last step; the other reaches 0.3 at 100: speed-up 2"),
        ([(100, 0.0), (200, 0.0), (300, 0.0), (400, 0.0)], [(100, 0.2), (200, 0.3)], True, 1,
         "a flat baseline is at its final value from its first point (step 100), and so is the other: speed-up 1 "
         "(this is why a flat curve makes a poor yardstick: exercise 6's question)"),
        ([(100, 0.1), (200, 0.4), (300, 0.3), (400, 0.25)], [(100, 0.3), (200, 0.35)], True, 2,
         "the target is the baseline's *final* value, 0.25 (not its best, 0.4); the baseline first reaches 0.25 at "
         "step 200, the other at 100: speed-up 2"),
    )
    step = call(impl.first_step_reaching, RISING, 0.3, True)
    expect(step is None or isinstance(step, numbers.Real) and not isinstance(step, bool),
           f"first_step_reaching({RISING}, 0.3) returned {step!r}, a {type(step).__name__}: it must return a step (a "
           f"number, 200 here) or None, since speedup divides two of them")
    for baseline, other, better, want, why in cases:
        try:
            got = call(impl.speedup, baseline, other, better)
        except (TypeError, ZeroDivisionError) as err:
            steps = [impl.first_step_reaching(c, baseline[-1][1], better) for c in (baseline, other)]
            expect(None in steps or not isinstance(err, TypeError),
                   f"speedup({baseline}, {other}, higher_is_better={better}) failed in your code with "
                   f"{type(err).__name__}: {err}. With the baseline's final value ({baseline[-1][1]}) as the target, "
                   f"first_step_reaching gives {steps[0]} (the baseline) and {steps[1]} (the other): two steps, "
                   f"nothing to divide by None. Your code's target is another number: the final value of `other`, or "
                   f"a best value? The target of both curves is baseline[-1][1]")
            raise Mistake(f"speedup({baseline}, {other}, higher_is_better={better}) failed in your code with "
                          f"{type(err).__name__}: {err}. For these curves first_step_reaching returns {steps[0]!r} "
                          f"(the baseline) and {steps[1]!r} (the other): speedup is the ratio of two steps, or None "
                          f"when the other never reaches the target (test for None before dividing)") from None
        expect(got is None or isinstance(got, numbers.Real) and not isinstance(got, bool),
               f"speedup({baseline}, {other}, higher_is_better={better}) returned {got!r}, a {type(got).__name__}: "
               f"return the ratio as a number (or None), not text or a pair; printing is the caller's job")
        right = got is None if want is None else got is not None and abs(got - want) < 1e-9
        expect(right, f"speedup({baseline}, {other}, higher_is_better={better}) should be "
                      f"{want if want is None or want == int(want) else round(want, 4)}: {why}; got {got}")


def test_first_step_reaching(impl):
    check_first_step_reaching(impl)


def test_speedup(impl):
    check_speedup(impl)


def test_miniature_runs(tmp_path, request):
    """The given driver, 2 steps each, no fine-tuning: it prints, writes JSON and uses the functions under test
    (the student's in --student mode, else the reference)."""
    import importlib

    import pytest

    from exercises import ex6_mlm_vs_taco
    from exercises.conftest import implementations
    names = implementations(EXERCISE, request.config)
    if not names:  # a hand-out copy run without --student: no reference to draw the speed-ups with
        pytest.skip("no reference here: run with --student")
    impl = importlib.import_module(names[0])
    results = ex6_mlm_vs_taco.main(["--steps", "2", "--ft_pairs", "0", "--out", str(tmp_path), "--pictures", str(tmp_path), "--json",
                                    str(tmp_path / "r.json")], functions=impl)
    assert set(results) == {"mlm", "taco"} and (tmp_path / "r.json").exists()
    assert all(r["ctx_curve"] and -1 <= r["ctx"] <= 1 for r in results.values())
