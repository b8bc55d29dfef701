"""Checks of exercise 1 (the TC loss, Eq. 3-4), on inputs whose answer is known in closed form.

Each check_* raises Mistake with a sentence about the mistake; test_wrong_solutions.py proves
that they reject typical wrong solutions. Run on your stub: python -m pytest exercises/test_ex1_tc_loss.py --student
"""
import math

import pytest
import torch
import torch.nn.functional as F

from exercises._check import call, expect

EXERCISE = "ex1_tc_loss"


def orthogonal_states(lengths=(16, 16, 16, 16), H=8, scale=3.0, seed=0):
    """(h, e, mask): every real token of sequence b has the global part g = h - e = scale * u_b,
    u_b orthonormal, so a positive (same sequence) has cosine 1 and every negative cosine 0.
    e is large and random: a loss that looks at h instead of g sees random cosines."""
    B, T = len(lengths), max(lengths)
    e = 5 * torch.randn(B, T, H, generator=torch.Generator().manual_seed(seed))
    u = torch.eye(H)[:B]
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return e + scale * u[:, None, :], e, mask


def describe(value, expected, K, tau, n_anchors, scale):
    """What a wrong value on orthogonal_states most likely means."""
    guesses = [(math.log1p(K * math.exp(1 / tau)), "the sign is flipped: the loss must be low when the anchor "
                "is close to its positive (positive logit first, target 0, cross-entropy)"),
               (math.log1p(K * math.exp(-tau)), "the temperature multiplies the cosines: divide them by tau"),
               (math.log1p(K * math.exp(-scale ** 2 / tau)), "these are dot products of g, not cosines: normalise g first"),
               (expected * n_anchors, "the loss is summed over anchors: take the mean"),
               (math.log(K + 1), "every logit is equal: do the cosines see g = h - e, positive at index 0?")]
    for guess, why in guesses:
        if abs(value - guess) < 1e-3 * max(1.0, abs(guess)):
            return f" Your value is what you get when {why}."
    return ""


def check_returns_a_scalar(impl):
    h, e, _ = orthogonal_states()
    h.requires_grad_(True)
    loss = call(impl.tc_loss, h, e, num_negatives=5, generator=torch.Generator().manual_seed(0))
    expect(isinstance(loss, torch.Tensor) and loss.dim() == 0,
           f"tc_loss must return a 0-dim tensor (the mean over anchors), got "
           f"{type(loss).__name__}{'' if not isinstance(loss, torch.Tensor) else ' of shape ' + str(tuple(loss.shape))}")
    expect(torch.isfinite(loss), f"tc_loss returned {loss.item()} on ordinary inputs")
    expect(loss.requires_grad, "the loss carries no gradient: did you detach the anchors too, or call .item()?")


def check_collapsed_gives_log_k_plus_1(impl):
    """All global parts equal: every cosine is 1, every logit 1/tau, the loss log(K + 1)."""
    B, T, H, K = 4, 16, 8, 10
    e = 5 * torch.randn(B, T, H, generator=torch.Generator().manual_seed(1))
    h = e + torch.randn(H, generator=torch.Generator().manual_seed(2))  # the same g for every token
    loss = call(impl.tc_loss, h, e, num_negatives=K, generator=torch.Generator().manual_seed(0)).item()
    expected = math.log(K + 1)
    expect(abs(loss - expected) < 1e-4,
           f"every token here has the same global part g = h - e (while e differs from token to token), so "
           f"every cosine is 1 and the loss must be log(K + 1) = {expected:.4f} for K = {K}; yours is {loss:.4f}. "
           f"Do you use g = h - e (not h), cosines, and the mean over anchors?"
           + (" (Your value is K+1 times too large or small: check the mean.)" if abs(loss - expected * B * T) < 1e-2 else ""))


def check_orthogonal_closed_form(impl, tau=1.0):
    """Positive cosine 1, negatives 0: loss = -log(e^(1/tau) / (e^(1/tau) + K)) = log(1 + K e^(-1/tau))."""
    K, scale = 10, 3.0
    h, e, _ = orthogonal_states(scale=scale)
    loss = call(impl.tc_loss, h, e, num_negatives=K, temperature=tau, generator=torch.Generator().manual_seed(0)).item()
    expected = math.log1p(K * math.exp(-1 / tau))
    expect(abs(loss - expected) < 1e-4,
           f"here the positive (same sequence) has cosine 1 and every negative (other sequences) cosine 0, so the "
           f"loss must be log(1 + K e^(-1/tau)) = {expected:.4f} (K = {K}, tau = {tau}); yours is {loss:.4f}."
           + describe(loss, expected, K, tau, h.shape[0] * h.shape[1], scale))


def check_scale_invariant(impl):
    """TC compares cosines: stretching some g by positive factors changes nothing."""
    gen = torch.Generator().manual_seed(3)
    e, g = torch.randn(4, 12, 16, generator=gen), torch.randn(4, 12, 16, generator=gen)
    stretch = 0.5 + 4 * torch.rand(4, 12, 1, generator=gen)
    a = call(impl.tc_loss, e + g, e, num_negatives=8, generator=torch.Generator().manual_seed(5)).item()
    b = call(impl.tc_loss, e + stretch * g, e, num_negatives=8, generator=torch.Generator().manual_seed(5)).item()
    expect(abs(a - b) < 1e-4 * max(1, abs(a)),
           f"multiplying the global parts g of some tokens by positive numbers changed the loss ({a:.4f} -> {b:.4f}): "
           f"TC compares cosines, normalise g before the dot products")


def check_positions_restrict_the_anchors(impl):
    """Window 3: in sequence 0 the global parts alternate u0, u4, so an inner anchor's positive
    (one step away) has cosine 0 like its negatives: loss log(K + 1). Anchors of the other
    sequences have a positive of cosine 1: loss log(1 + K e^(-1/tau))."""
    K, tau = 10, 0.5
    h, e, _ = orthogonal_states()
    h[0, 1::2] = e[0, 1::2] + 3.0 * torch.eye(8)[4]
    inner0 = torch.zeros(4, 16, dtype=torch.bool)
    inner0[0, 1:-1] = True
    others = torch.zeros(4, 16, dtype=torch.bool)
    others[1:] = True
    for pos, expected, what in ((inner0, math.log(K + 1), "the inner tokens of sequence 0"),
                                (others, math.log1p(K * math.exp(-1 / tau)), "the tokens of sequences 1-3")):
        loss = call(impl.tc_loss, h, e, window=3, num_negatives=K, temperature=tau, positions=pos,
                    generator=torch.Generator().manual_seed(0)).item()
        expect(abs(loss - expected) < 1e-4,
               f"with `positions` selecting {what} only, the loss is the mean over those anchors, {expected:.4f} "
               f"here; yours is {loss:.4f}. Is `positions` ignored, or combined with the real tokens wrongly?")


def check_gradient_reaches_the_anchor_only(impl):
    """One anchor: its positive and negatives are detached targets, so only it gets gradient."""
    gen = torch.Generator().manual_seed(4)
    h = torch.randn(4, 12, 16, generator=gen).requires_grad_(True)
    e = torch.randn(4, 12, 16, generator=gen)
    only = torch.zeros(4, 12, dtype=torch.bool)
    only[0, 6] = True
    loss = call(impl.tc_loss, h, e, num_negatives=20, positions=only, generator=torch.Generator().manual_seed(0))
    loss.backward()
    expect(h.grad is not None and h.grad[0, 6].abs().sum() > 0,
           "the anchor (sequence 0, token 6) received no gradient: do not detach the anchor, only its positive and negatives")
    got = h.grad.abs().sum(-1) > 0  # (B, T)
    got[0, 6] = False
    own, other = got[0].nonzero().flatten().tolist(), got[1:].sum().item()
    expect(got.sum() < got.numel() - 1,
           "with `positions` selecting one anchor, the gradient reached every token: `positions` is ignored, "
           "or nothing is detached")
    expect(not own, f"the positive is not detached: the gradient reached token {own} of the anchor's sequence, "
                    f"which was only its positive (a target; detach it)")
    expect(not other, f"the negatives are not detached: the gradient reached {other} tokens of other sequences, "
                      f"which were only negatives (targets; detach them)")


def check_padding_never_used(impl):
    """Padding holds a global part with cosine -0.5 to every real token: if it is ever an anchor,
    a positive or a negative, the loss moves away from the closed form."""
    K, tau = 10, 0.5
    h, e, mask = orthogonal_states(lengths=(16, 10, 6, 3))
    pad = mask == 0
    h[pad] = e[pad] - 1.5 * torch.ones(8) * (torch.arange(8) < 4)  # -(u0 + u1 + u2 + u3) * 1.5
    loss = call(impl.tc_loss, h, e, attention_mask=mask, num_negatives=K, temperature=tau,
                generator=torch.Generator().manual_seed(0)).item()
    expected = math.log1p(K * math.exp(-1 / tau))
    expect(abs(loss - expected) < 1e-4,
           f"padding leaked into the loss: with it ignored the loss is {expected:.4f}, yours is {loss:.4f}. Padded "
           f"tokens are never anchors, positives or negatives: pass the real-token mask to the samplers and "
           f"average over real anchors only")


def check_generator_makes_it_reproducible(impl):
    gen = torch.Generator().manual_seed(6)
    h, e = torch.randn(3, 10, 16, generator=gen), torch.randn(3, 10, 16, generator=gen)
    a, b = (call(impl.tc_loss, h, e, num_negatives=7, generator=torch.Generator().manual_seed(9)).item() for _ in range(2))
    expect(a == b, f"two calls with generators seeded alike gave different losses ({a:.6f}, {b:.6f}): "
                   f"draw every random number from `generator` (pass it to both samplers)")


def check_matches_eq34_token_by_token(impl, monkeypatch):
    """On random states, with the positives and negatives the implementation drew (recorded),
    the loss equals Eq. 3-4 written as a loop over anchors."""
    drawn = {}
    names = impl.tc_loss.__globals__
    if not {"sample_positives", "sample_negatives"} <= names.keys():
        pytest.skip("tc_loss does not call sample_positives / sample_negatives by name")
    for name in ("sample_positives", "sample_negatives"):
        def record(*args, _f=names[name], _name=name, **kwargs):
            drawn[_name] = _f(*args, **kwargs)
            return drawn[_name]
        monkeypatch.setitem(names, name, record)
    gen = torch.Generator().manual_seed(7)
    B, T, H, K, tau = 3, 10, 16, 7, 0.3
    h, e = torch.randn(B, T, H, generator=gen), torch.randn(B, T, H, generator=gen)
    mask = (torch.arange(T)[None, :] < torch.tensor([10, 7, 4])[:, None]).long()
    positions = torch.rand(B, T, generator=gen) < 0.6
    loss = call(impl.tc_loss, h, e, mask, 5, K, tau, torch.Generator().manual_seed(0), positions).item()
    if len(drawn) < 2:
        pytest.skip("tc_loss did not call both samplers through their names")
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    pos, neg = drawn["sample_positives"].reshape(-1), drawn["sample_negatives"].reshape(B * T, -1)
    terms = []
    for n in range(B * T):
        if mask.flatten()[n] and positions.flatten()[n]:
            logits = torch.stack([z[n] @ z[pos[n]]] + [z[n] @ z[k] for k in neg[n]]) / tau
            terms.append(torch.logsumexp(logits, 0) - logits[0])  # -log softmax at the positive
    expected = torch.stack(terms).mean().item()
    expect(abs(loss - expected) < 1e-4 * max(1, expected),
           f"on random states your loss is {loss:.5f}, but Eq. 3-4 written as a loop over anchors gives "
           f"{expected:.5f} with the same positives and negatives")


def test_returns_a_scalar(impl):
    check_returns_a_scalar(impl)


def test_collapsed_gives_log_k_plus_1(impl):
    check_collapsed_gives_log_k_plus_1(impl)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_orthogonal_closed_form(impl, tau):
    check_orthogonal_closed_form(impl, tau)


def test_scale_invariant(impl):
    check_scale_invariant(impl)


def test_positions_restrict_the_anchors(impl):
    check_positions_restrict_the_anchors(impl)


def test_gradient_reaches_the_anchor_only(impl):
    check_gradient_reaches_the_anchor_only(impl)


def test_padding_never_used(impl):
    check_padding_never_used(impl)


def test_generator_makes_it_reproducible(impl):
    check_generator_makes_it_reproducible(impl)


def test_matches_eq34_token_by_token(impl, monkeypatch):
    check_matches_eq34_token_by_token(impl, monkeypatch)
