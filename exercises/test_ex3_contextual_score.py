"""Checks of exercise 3 (the contextual score): hand-made states with known answers, and an
independent reference (the full cosine matrix with a pair mask)."""
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
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(3, 6, 4, generator=gen) + torch.randn(3, 1, 4, generator=gen)  # a shared part per sequence
    real = torch.arange(6)[None, :] < torch.tensor([[6], [4], [3]])
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
    expect(close(got, {"intra": 1.0, "inter": 1.0, "score": 0.0}),
           f"{name}: when every token has the same vector, every cosine is 1: intra = inter = 1, score 0; got {got}")
    h = torch.eye(3)[:, None, :].repeat(1, 4, 1)  # sequence b: 4 copies of e_b
    got = call(fn, h, torch.ones(3, 4, dtype=torch.bool))
    expect(close(got, {"intra": 1.0, "inter": 0.0, "score": 1.0}),
           f"{name}: with orthogonal sequences (each of 4 equal tokens) intra = 1, inter = 0, score 1; got {got}")


def check_matches_the_pairs(impl, name):
    fn = getattr(impl, name)
    for seed in range(3):
        h, real = small_batch(seed)
        got, want = call(fn, h, real), by_matrix(h, real)
        if close(got, want):
            continue
        z = F.normalize(h.double(), dim=-1)
        n = real.sum(1).double()
        with_self = ((z * real[..., None]).sum(1).pow(2).sum(1).sum() / (n ** 2).sum()).item()
        with_pad = by_matrix(h, torch.ones_like(real))
        hint = (" Your intra includes each token paired with itself (cosine 1): exclude a == b."
                if abs(float(got["intra"]) - with_self) < 1e-5 else
                " Padding is counted: use only real tokens." if close(got, with_pad) else "")
        expect(False, f"{name}: on random states (batch of 3 sequences with 6, 4 and 3 real tokens) the pairs give "
                      f"intra {want['intra']:.5f}, inter {want['inter']:.5f}; yours: intra {float(got['intra']):.5f}, "
                      f"inter {float(got['inter']):.5f}.{hint}")


def check_closed_form_at_scale(impl):
    """The closed form on a batch too large for the brute force, against the matrix reference."""
    gen = torch.Generator().manual_seed(5)
    h = torch.randn(8, 64, 16, generator=gen) + 0.5 * torch.randn(8, 1, 16, generator=gen)
    real = torch.arange(64)[None, :] < torch.randint(2, 65, (8, 1), generator=gen)
    got, want = call(impl.score_closed_form, h, real), by_matrix(h, real)
    expect(close(got, want, 1e-4), f"score_closed_form on 8 x 64 tokens: expected {want}, got {got}")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_known_values(impl, name):
    check_known_values(impl, name)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_matches_the_pairs(impl, name):
    check_matches_the_pairs(impl, name)


def test_closed_form_at_scale(impl):
    check_closed_form_at_scale(impl)
