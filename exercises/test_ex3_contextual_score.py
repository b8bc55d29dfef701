"""Checks of exercise 3 (the contextual score): hand-made states with known answers, and an
independent reference (the full cosine matrix with a pair mask)."""
import math

import pytest
import torch
import torch.nn.functional as F

from exercises._check import call, expect

EXERCISE = "ex3_contextual_score"
FUNCTIONS = ("score_brute_force", "score_closed_form")


def by_matrix(h, real):
    """The reference: every pair's cosine in one matrix, masked by kind."""
    B, T, _ = h.shape
    z = F.normalize(h.double(), dim=-1).reshape(B * T, -1)
    cos = z @ z.T
    seq = torch.arange(B).repeat_interleave(T)
    ok = real.flatten()[:, None] & real.flatten()[None, :]
    same = (seq[:, None] == seq[None, :]) & ok & ~torch.eye(B * T, dtype=torch.bool)
    other = (seq[:, None] != seq[None, :]) & ok
    intra, inter = cos[same].mean().item(), cos[other].mean().item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def small_batch(seed):
    """4 sequences of 6, 4, 3 and 1 real tokens (the second padded on the LEFT, the last one alone:
    it has no intra pair but is in inter pairs); padding far off, so counting it shows."""
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(4, 6, 4, generator=gen) + torch.randn(4, 1, 4, generator=gen)  # a shared part per sequence
    t = torch.arange(6)[None, :]
    real = torch.cat([t < 6, t >= 2, t < 3, t < 1])
    h[~real] = 100 * torch.randn(int((~real).sum()), 4, generator=gen)  # padding: far off
    return h, real


def close(got, want, tol=1e-5):
    return all(abs(float(got[k]) - want[k]) < tol for k in ("intra", "inter", "score"))


def check_known_values(impl, name):
    fn = getattr(impl, name)
    h = torch.ones(2, 5, 3)
    got = call(fn, h, torch.ones(2, 5, dtype=torch.bool))
    expect(isinstance(got, dict) and {"intra", "inter", "score"} <= got.keys(),
           f"{name} must return a dict with intra, inter and score, got {got!r}")
    real = torch.ones(2, 5, dtype=torch.bool)
    expect(close(got, {"intra": 1.0, "inter": 1.0, "score": 0.0}),
           f"{name}: when every token has the same vector, every cosine is 1: intra = inter = 1, score 0; got {got}"
           + (" Cosines, not dot products: normalise the states first." if abs(float(got["intra"]) - 3) < 1e-5 else
              diagnose(got, h, real)))
    h = torch.eye(3)[:, None, :].repeat(1, 4, 1)  # sequence b: 4 copies of e_b
    real = torch.ones(3, 4, dtype=torch.bool)
    got = call(fn, h, real)
    expect(close(got, {"intra": 1.0, "inter": 0.0, "score": 1.0}),
           f"{name}: with orthogonal sequences (each of 4 equal tokens) intra = 1, inter = 0, score 1; got {got}"
           + (" The score is intra - inter, not inter - intra." if abs(float(got["score"]) + 1) < 1e-5 else
              diagnose(got, h, real)))


def diagnose(got, h, real):
    """What a wrong (intra, inter) on small_batch most likely means."""
    z = F.normalize(h.double(), dim=-1) * real[..., None]
    n = real.sum(1).double()
    per_seq = z.sum(1)  # (B, H)
    pairs = per_seq.pow(2).sum(1) - n  # intra sums per sequence
    with_self = (per_seq.pow(2).sum(1).sum() / (n ** 2).sum()).item()
    has_pairs = n >= 2
    mean_of_means = (pairs[has_pairs] / (n * (n - 1))[has_pairs]).mean().item()
    every_pair = by_matrix(h, real)
    N = n.sum()
    all_pairs = ((per_seq.sum(0).pow(2).sum() - N) / (N * (N - 1))).item()
    intra, inter = float(got["intra"]), float(got["inter"])
    T = real.shape[1]
    right = torch.arange(T)[None, :] < real.sum(1, keepdim=True)  # the first n_b positions of each sequence
    by_count = {k: float(v) for k, v in zip(("intra", "inter"), counted_with_padding(z, n, T))}
    if abs(intra - every_pair["intra"]) < 1e-5 and abs(inter - every_pair["inter"]) < 1e-5:
        return " intra and inter are right, the score is not: score = intra - inter."
    if any(abs(every_pair[k] - float(got[k])) >= 1e-5 and abs(float(got[k]) - 2 * every_pair[k]) < 1e-5
           for k in ("intra", "inter")):
        return (" Twice the right value: you count unordered pairs (n(n-1)/2), but |sum z|^2 - n sums every pair twice "
                "(a.b and b.a): count ordered pairs, n(n-1), or halve the sums.")
    over_tokens = [F.normalize(x, dim=1) for x in (h.double(), h.double() * real[..., None])]
    if any(close(got, closed_form_of(x, real)) for x in over_tokens):
        return (" Your vectors are normalised over the tokens (dim=1), not each over its hidden dimension: "
                "F.normalize(h, dim=-1) makes every token a unit vector.")
    intra_wrong = abs(intra - every_pair["intra"]) >= 1e-5  # (on degenerate states two readings can agree)
    if intra_wrong and abs(intra - (pairs + n).sum().item() / (n * (n - 1)).sum().item()) < 1e-5:
        return (" Your intra keeps the n self-pairs: |sum z|^2 includes z_a . z_a = 1 for every token; the identity "
                "subtracts n (|sum z|^2 - n) to leave the pairs a != b.")
    if intra_wrong and abs(intra - with_self) < 1e-5:
        return " Your intra includes each token paired with itself (cosine 1): exclude a == b."
    if close(got, by_matrix(h, torch.ones_like(real))):
        return " Padding is counted: use only real tokens."
    if intra_wrong and abs(intra - mean_of_means) < 1e-5:
        return (" Your intra is the mean of each sequence's mean: pool the pairs of all sequences instead (a "
                "sequence with n tokens has n(n-1) pairs, so long sequences weigh more).")
    if abs(inter - every_pair["inter"]) >= 1e-5 and abs(inter - all_pairs) < 1e-5:
        return " Your inter is the mean over all pairs, intra pairs included: inter pairs are all pairs minus intra pairs."
    if close(got, by_matrix(h, right)):
        return (" You took each sequence's first n_b positions as its real tokens, but sequence 1 is padded on the "
                "left: select the real tokens with the mask.")
    if abs(intra - by_count["intra"]) < 1e-5 and abs(inter - by_count["inter"]) < 1e-5:
        return " Your pair counts include the padding (n = T per sequence): count the real tokens only."
    if abs(intra - every_pair["intra"]) < 1e-5:
        return (" Your intra is right, inter is not: every pair of real tokens of two different sequences counts "
                "(N^2 - sum of n_b^2 ordered pairs).")
    return ""


def closed_form_of(z, real):
    """{intra, inter} of the closed form applied to the vectors z as they are (unit or not)."""
    z, n = z * real[..., None], real.sum(1).double()
    per_seq = z.sum(1)
    pairs = (per_seq.pow(2).sum(1) - n).sum()
    intra = pairs / (n * (n - 1)).sum()
    inter = (per_seq.sum(0).pow(2).sum() - n.sum() - pairs) / (n.sum() ** 2 - n.pow(2).sum())
    return {"intra": intra.item(), "inter": inter.item(), "score": (intra - inter).item()}


def counted_with_padding(z, n, T):
    """(intra, inter) with the padding's vectors zeroed but counted: n = T for every sequence."""
    per_seq = z.sum(1)
    pairs = per_seq.pow(2).sum(1) - n
    B = len(n)
    intra = pairs.sum() / (B * T * (T - 1))
    inter = (per_seq.sum(0).pow(2).sum() - n.sum() - pairs.sum()) / ((B * T) ** 2 - B * T * T)
    return intra, inter


def check_matches_the_pairs(impl, name):
    fn = getattr(impl, name)
    for seed in range(3):
        h, real = small_batch(seed)
        got, want = call(fn, h, real), by_matrix(h, real)
        expect(all(math.isfinite(float(got[k])) for k in ("intra", "inter", "score")),
               f"{name}: your result has a nan or inf ({got}) on a batch where one sequence has a single real token: "
               f"it has no intra pair (0 of them), which must not divide by zero")
        if close(got, want):
            continue
        expect(False, f"{name}: on random states (batch of 4 sequences with 6, 4, 3 and 1 real tokens, the second "
                      f"padded on the left) the pairs give intra {want['intra']:.5f}, inter {want['inter']:.5f}; yours: "
                      f"intra {float(got['intra']):.5f}, inter {float(got['inter']):.5f}.{diagnose(got, h, real)}")


def check_closed_form_at_scale(impl):
    """The closed form on a batch too large for the brute force, against the matrix reference."""
    gen = torch.Generator().manual_seed(5)
    h = torch.randn(8, 64, 16, generator=gen) + 0.5 * torch.randn(8, 1, 16, generator=gen)
    real = torch.arange(64)[None, :] < torch.randint(2, 65, (8, 1), generator=gen)
    got, want = call(impl.score_closed_form, h, real), by_matrix(h, real)
    expect(close(got, want, 1e-4), f"score_closed_form on 8 x 64 tokens: expected {want}, got {got}")


def check_returns_python_floats(impl, name):
    """The stub asks for Python floats: the probe logs them as JSON, and a tensor is not JSON."""
    h, real = small_batch(0)
    got = call(getattr(impl, name), h, real)
    expect(isinstance(got, dict) and {"intra", "inter", "score"} <= got.keys(),
           f"{name} must return a dict with intra, inter and score, got {got!r}")
    wrong = {k: type(got[k]).__name__ for k in ("intra", "inter", "score") if not isinstance(got[k], float)}
    expect(not wrong, f"{name} must return Python floats (the training log writes them as JSON); yours are {wrong}: "
                      f"call .item() on a 0-dim tensor, or float(...)")


def check_closed_form_in_bfloat16(impl):
    """Under autocast the model's states are bfloat16 (3 significant digits). |sum z|^2 - n subtracts
    two large numbers, so the closed form must be computed in float64 (or float32), not in bf16."""
    gen = torch.Generator().manual_seed(5)
    h = (torch.randn(8, 64, 16, generator=gen) + 0.5 * torch.randn(8, 1, 16, generator=gen)).bfloat16()
    real = torch.arange(64)[None, :] < torch.randint(2, 65, (8, 1), generator=gen)
    in_float32 = call(impl.score_closed_form, h.float(), real)
    want = by_matrix(h.float(), real)
    expect(close(in_float32, want, 1e-4), f"score_closed_form on these states in float32 (8 x 64 tokens) is already "
                                          f"wrong: expected {want}, got {in_float32}; see the other checks first")
    got = call(impl.score_closed_form, h, real)
    expect(close(got, want, 1e-4),
           f"score_closed_form on bfloat16 states (what the model gives under autocast, 8 x 64 tokens): expected "
           f"intra {want['intra']:.5f}, inter {want['inter']:.5f}; yours intra {float(got['intra']):.5f}, inter "
           f"{float(got['inter']):.5f}. The closed form subtracts two large numbers (|sum z|^2 - n): compute it in "
           f"float64, h.double() (bf16 keeps 3 significant digits)")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_returns_python_floats(impl, name):
    check_returns_python_floats(impl, name)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_known_values(impl, name):
    check_known_values(impl, name)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_matches_the_pairs(impl, name):
    check_matches_the_pairs(impl, name)


def test_closed_form_at_scale(impl):
    check_closed_form_at_scale(impl)


def test_closed_form_in_bfloat16(impl):
    check_closed_form_in_bfloat16(impl)
