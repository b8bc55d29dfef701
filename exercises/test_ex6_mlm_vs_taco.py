"""Checks of exercise 6 (reading speed-ups off curves) on hand-made curves, and a short run of the miniature."""

from exercises._check import call, expect

EXERCISE = "ex6_mlm_vs_taco"
RISING = [(100, 0.1), (200, 0.3), (300, 0.3), (400, 0.5)]
FALLING = [(100, 5.0), (200, 4.5), (300, 4.2), (400, 4.0)]


def check_first_step_reaching(impl):
    f = impl.first_step_reaching
    for points, target, better, want, what in (
            (RISING, 0.3, True, 200, "the first step where a rising curve reaches 0.3 (equal counts)"),
            (RISING, 0.6, True, None, "a target the curve never reaches"),
            (FALLING, 4.3, False, 300, "a falling curve (a loss: lower is better) reaching 4.3"),
            (FALLING, 5.0, False, 100, "a loss already at its target at the first point")):
        got = call(f, points, target, better)
        expect(got == want, f"first_step_reaching({points}, {target}, higher_is_better={better}) should be {want} "
                            f"({what}); got {got}")


def check_speedup(impl):
    mlm = [(100, 0.0), (200, 0.05), (300, 0.1), (400, 0.12)]
    taco = [(100, 0.13), (200, 0.2), (300, 0.25), (400, 0.26)]
    got = call(impl.speedup, mlm, taco, True)
    expect(got == 4, f"MLM reaches its final 0.12 at step 400 and TACO at step 100: speed-up 4; got {got}")
    got = call(impl.speedup, taco, mlm, True)
    expect(got is None, f"a curve that never reaches the baseline's final value has no speed-up (None); got {got}")
    got = call(impl.speedup, FALLING, [(100, 4.6), (200, 4.0)], False)
    expect(got == 2, f"for a loss, MLM reaches its final 4.0 at step 400, the other at 200: speed-up 2; got {got}")


def test_first_step_reaching(impl):
    check_first_step_reaching(impl)


def test_speedup(impl):
    check_speedup(impl)


def test_miniature_runs(tmp_path, impl):
    """The given driver, 2 steps each, no fine-tuning: it prints, writes JSON and uses the functions under test."""
    from exercises import ex6_mlm_vs_taco
    results = ex6_mlm_vs_taco.main(["--steps", "2", "--ft_pairs", "0", "--out", str(tmp_path), "--pictures", str(tmp_path), "--json",
                                    str(tmp_path / "r.json")], functions=impl)
    assert set(results) == {"mlm", "taco"} and (tmp_path / "r.json").exists()
    assert all(r["ctx_curve"] and -1 <= r["ctx"] <= 1 for r in results.values())
