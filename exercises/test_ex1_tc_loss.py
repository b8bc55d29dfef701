"""Checks of exercise 1 (the TC loss, Eq. 3-4), on inputs whose answer is known in closed form,
and against Eq. 3-4 written as a loop over anchors (value and gradients with respect to h and e).

Each check_* raises Mistake with a sentence about the mistake; test_wrong_solutions.py proves
that they reject typical wrong solutions. Run on your stub: python -m pytest exercises/test_ex1_tc_loss.py --student
"""
import contextlib
import math

import pytest
import torch

from exercises._check import Mistake, call, expect

EXERCISE = "ex1_tc_loss"


def orthogonal_states(lengths=(16, 16, 16, 16), H=8, scale=3.0, seed=0, left=()):
    """(h, e, mask): every real token of sequence b has the global part g = h - e = scale * u_b,
    u_b orthonormal, so a positive (same sequence) has cosine 1 and every negative cosine 0.
    e is large and random: a loss that looks at h instead of g sees random cosines.
    Sequences listed in `left` are padded on the left, the others on the right."""
    B, T = len(lengths), max(lengths)
    e = 5 * torch.randn(B, T, H, generator=torch.Generator().manual_seed(seed))
    u = torch.eye(H)[:B]
    mask = padding_mask(lengths, T, left)
    return e + scale * u[:, None, :], e, mask


def padding_mask(lengths, T, left=()):
    """(B, T) long, 1 = real: sequence b has lengths[b] real tokens, at its end if b is in `left`."""
    t = torch.arange(T)[None, :]
    n = torch.tensor(lengths)[:, None]
    is_left = torch.tensor([b in left for b in range(len(lengths))])[:, None]
    return torch.where(is_left, t >= T - n, t < n).long()


def describe(value, expected, K, tau, n_anchors, scale):
    """What a wrong value on orthogonal_states most likely means."""
    guesses = [(math.log1p(K * math.exp(1 / tau)), "the sign is flipped: the loss must be low when the anchor "
                "is close to its positive (positive logit first, target 0, cross-entropy)"),
               (math.log(K + math.exp(1 / tau)), "the target of the cross-entropy is not the positive: put the "
                "positive's logit in column 0 (target 0)"),
               (math.log1p(K * math.exp(-tau)), "the temperature multiplies the cosines: divide them by tau"),
               (math.log1p(K * math.exp(-1 / 0.07)), "tau is always 0.07: use the `temperature` argument"),
               (math.log1p(K * math.exp(-scale ** 2 / tau)), "these are dot products of g, not cosines: normalise g first"),
               (expected * n_anchors, f"the loss is summed over the {n_anchors} anchors: take the mean"),
               (math.log(K) - 1 / tau, "the positive is missing from the softmax's denominator (it sums over the "
                "positive and the K negatives)"),
               (math.log1p(K * math.exp(-1 / tau ** 2)), "the temperature is applied twice (cos / tau / tau, or "
                "tau divided into both the cosines and the logits): divide the cosines by tau once"),
               (-expected, "the whole loss is negated (a flipped sign: -cross_entropy, or log p instead of -log p): the "
                "loss is -log of the positive's softmax probability, always >= 0"),
               (math.log(K + 1), "every logit is equal: do the cosines see g = h - e, positive at index 0?")]
    for guess, why in guesses:
        if abs(value - guess) < 1e-3 * max(1.0, abs(guess)):
            return f" Your value is what you get when {why}."
    return ""


def below_zero(value):
    """The hint for a loss below 0, which -log of a probability never is."""
    return (" A loss below 0 is impossible for -log of a probability: the sign is flipped (the loss must be "
            "-log softmax at the positive)" if value < -1e-6 else "")


def step_reached(out, drawn, B, T, H, K):
    """Where a tc_loss that does not return the loss yet has got to, read from what it returns."""
    done = (f"; it calls {' and '.join(sorted(drawn))} (step 2)" if drawn else
            "; it does not call sample_positives and sample_negatives yet (step 2)")
    if out is None:
        return f"It returns None{done}: finish the steps and `return` the mean over anchors (step 5)"
    if not isinstance(out, torch.Tensor):
        return (f"It returns a {type(out).__name__}{done}: " + ("a Python number carries no gradient (no .item())"
                if isinstance(out, (int, float)) else "return the loss alone, a 0-dim tensor"))
    shape, per_token = tuple(out.shape), lambda *tail: {(B, T, *tail), (B * T, *tail)}
    if shape in per_token(H):
        return f"It returns a {shape} tensor, a vector per token: g or its normalised z (step 1){done}; steps 3-5 follow"
    if shape in per_token(K + 1):
        return (f"It returns a {shape} tensor, each anchor's 1 + K cosines or logits (steps 3-4){done}: step 4 "
                f"ends with the cross-entropy with target 0 (the positive in column 0), step 5 averages over anchors")
    if shape in per_token(K):
        return (f"It returns a {shape} tensor, K = {K} numbers per anchor: the negatives' cosines? Put the "
                f"positive's cosine in column 0 before them (step 3), then steps 4-5")
    if shape in per_token() | per_token(1):
        return (f"It returns a {shape} tensor, one number per token: each anchor's loss (step 4)? Step 5 averages it "
                f"over the anchors (real tokens, in `positions`, of sequences with >= 2 real tokens)")
    if out.numel() == 1:
        return f"It returns a tensor of shape {shape}: the loss as a 0-dim tensor, please (.mean() without keepdim)"
    return f"It returns a tensor of shape {shape}{done}"


def check_returns_a_scalar(impl):
    """What tc_loss returns, read as the step of its docstring it has reached."""
    B, T, H, K = 4, 16, 8, 5
    h, e, _ = orthogonal_states()
    h.requires_grad_(True)
    with recorded_draws(impl.tc_loss, require=False) as drawn:
        try:
            loss = call(impl.tc_loss, h, e, num_negatives=K, generator=torch.Generator().manual_seed(0))
        except Mistake as err:
            if "is not written yet" not in str(err) or not drawn:
                raise
            raise Mistake(f"tc_loss still ends in `raise NotImplementedError`, after calling {' and '.join(sorted(drawn))} "
                          f"(steps 1-2 run): go on with step 3, and end with `return` of the loss instead of the "
                          f"raise") from None
    expect(isinstance(loss, torch.Tensor) and loss.dim() == 0,
           "tc_loss must return a 0-dim tensor, the mean over anchors. " + step_reached(loss, drawn, B, T, H, K))
    expect(torch.isfinite(loss), f"tc_loss returned {loss.item()} on ordinary inputs")
    expect(loss.requires_grad, "the loss carries no gradient: did you detach the anchors too, or call .item()?")


def check_collapsed_gives_log_k_plus_1(impl):
    """All global parts equal: every cosine is 1, every logit 1/tau, the loss log(K + 1)."""
    B, T, H, K = 4, 16, 8, 10
    e = 5 * torch.randn(B, T, H, generator=torch.Generator().manual_seed(1))
    h = e + torch.randn(H, generator=torch.Generator().manual_seed(2))  # the same g for every token
    loss = call(impl.tc_loss, h, e, num_negatives=K, generator=torch.Generator().manual_seed(0)).item()
    expected = math.log(K + 1)
    guesses = [(expected * B * T, f"{B * T} times too large, the number of anchors: take the mean, not the sum"),
               (math.log(51), "log(51): is num_negatives passed to sample_negatives?"),
               (math.log(B * T), f"log({B * T}), the log of the number of anchors: is the softmax taken over the "
                                 f"anchors (dim=0) instead of over each anchor's 1 + K candidates (dim=-1)?"),
               (math.log(K), "log(K): the positive is missing from the softmax's denominator, which sums over the "
                             "positive and the K negatives"),
               (math.log1p(K * math.exp(1 - 1 / 0.07)), "what you get when tau divides only the positive's cosine: "
                                                         "divide every logit by tau"),
               (-expected, "minus the right value: the loss is negated (a flipped sign: -cross_entropy, or log p "
                           "instead of -log p); the loss is -log of the positive's probability, always >= 0")]
    hint = next((f" (Your value is {why}.)" for guess, why in guesses if abs(loss - guess) < 1e-3 * max(1, abs(guess))), "")
    expect(abs(loss - expected) < 1e-4,
           f"every token here has the same global part g = h - e (while e differs from token to token), so "
           f"every cosine is 1 and the loss must be log(K + 1) = {expected:.4f} for K = {K}; yours is {loss:.4f}. "
           f"Do you use g = h - e (not h), cosines, and the mean over anchors?" + hint)


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
    a, again = (call(impl.tc_loss, e + g, e, num_negatives=8, generator=torch.Generator().manual_seed(5)).item()
                for _ in range(2))
    expect(a == again, f"two calls with generators seeded alike gave different losses ({a:.6f}, {again:.6f}): "
                       f"draw every random number from `generator` (pass it to both samplers)")
    b = call(impl.tc_loss, e + stretch * g, e, num_negatives=8, generator=torch.Generator().manual_seed(5)).item()
    expect(abs(a - b) < 1e-4 * max(1, abs(a)),
           f"multiplying the global parts g of some tokens by positive numbers changed the loss ({a:.4f} -> {b:.4f}): "
           f"TC compares cosines, normalise each g over its hidden dimension (dim=-1) before the dot products")


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
        loss, everywhere = (call(impl.tc_loss, h, e, window=3, num_negatives=K, temperature=tau, positions=where,
                                 generator=torch.Generator().manual_seed(0)).item() for where in (pos, None))
        own = math.log1p(K * math.exp(-1 / tau))  # what an anchor compared with itself as its positive gets
        expect(abs(loss - expected) < 1e-4,
               f"with `positions` selecting {what} only, the loss is the mean over those anchors, {expected:.4f} "
               f"here; yours is {loss:.4f}."
               + (" That is the loss of anchors whose positive has cosine 1, but every neighbour of these tokens is "
                  "orthogonal to them: is each anchor its own positive (z instead of z[pos], or the positive "
                  "gathered with the anchor's index)?" if what.startswith("the inner") and abs(loss - own) < 1e-4
                  else " It is the same as without `positions`: is `positions` ignored?" if abs(loss - everywhere) < 1e-6
                  else " Is `positions` combined with the real tokens wrongly, or is the value wrong already "
                       "without it (see the closed-form checks)?"))


def check_gradient_reaches_the_anchor_only(impl):
    """One anchor: its positive and negatives are detached targets, so only it gets gradient."""
    gen = torch.Generator().manual_seed(4)
    h = torch.randn(4, 12, 16, generator=gen).requires_grad_(True)
    e = torch.randn(4, 12, 16, generator=gen)
    only = torch.zeros(4, 12, dtype=torch.bool)
    only[0, 6] = True
    loss = call(impl.tc_loss, h, e, num_negatives=20, positions=only, generator=torch.Generator().manual_seed(0))
    expect(loss.requires_grad, "the loss carries no gradient: did you detach the anchors too, or call .item()?")
    loss.backward()
    expect(h.grad is not None and h.grad[0, 6].abs().sum() > 0,
           "the anchor (sequence 0, token 6) received no gradient: do not detach the anchor, only its positive and negatives")
    got = h.grad.abs().sum(-1) > 1e-4 * h.grad[0, 6].abs().sum()  # (B, T); float rounding (e.g. through a max) is no gradient
    got[0, 6] = False
    own, other = got[0].nonzero().flatten().tolist(), got[1:].sum().item()
    expect(got.sum() < got.numel() - 1,
           "with `positions` selecting one anchor, the gradient reached every token: `positions` is ignored, "
           "or nothing is detached")
    expect(len(own) < h.shape[1] - 1,
           "the gradient reached every token of the anchor's sequence, not only its positive: is g normalised over "
           "the tokens (dim=1) instead of its hidden dimension (dim=-1)? Or is the positive not detached?")
    expect(not own, f"the positive is not detached: the gradient reached token {own} of the anchor's sequence, "
                    f"which was only its positive (a target; detach it)")
    expect(not other, f"the negatives are not detached: the gradient reached {other} tokens of other sequences, "
                      f"which were only negatives (targets; detach them)")


def check_padding_never_used(impl):
    """Padding (on the right of some sequences, on the left of one) holds a global part with
    cosine -0.5 to every real token; one sequence has a single real token (never an anchor: it
    has no positive; still a negative for the others). If padding is ever an anchor, a positive
    or a negative, the loss moves away from the closed form."""
    K, tau = 10, 0.5
    h, e, mask = orthogonal_states(lengths=(16, 10, 6, 3, 1), left=(2,))
    pad = mask == 0
    h[pad] = e[pad] - 1.5 * torch.ones(8) * (torch.arange(8) < 5)  # -(u0 + ... + u4) * 1.5
    expected = math.log1p(K * math.exp(-1 / tau))
    clean = call(impl.tc_loss, *orthogonal_states(lengths=(16,) * 5)[:2], num_negatives=K, temperature=tau,
                 generator=torch.Generator().manual_seed(0)).item()
    expect(abs(clean - expected) < 1e-4,
           f"before padding: without any padding these states give the loss {expected:.4f} in closed form; yours "
           f"is {clean:.4f}: see the closed-form checks first")
    without_lone = call(impl.tc_loss, h[:4], e[:4], attention_mask=mask[:4], num_negatives=K, temperature=tau,
                        generator=torch.Generator().manual_seed(0)).item()  # sequences 0-3: padding, no lone token
    if abs(without_lone - expected) < 1e-4:
        loss = call(impl.tc_loss, h, e, attention_mask=mask, num_negatives=K, temperature=tau,
                    generator=torch.Generator().manual_seed(0)).item()
        expect(abs(loss - expected) < 1e-4,
               f"with padding on the right and on the left the loss is right ({expected:.4f}), but a sequence with a "
               f"single real token moves it to {loss:.4f}: a sequence with a single real token counts as an anchor. "
               f"It has no positive (its 'positive' is padding or itself): anchors need >= 2 real tokens in their "
               f"sequence; its token stays a negative for the others")
    for positions, what in ((None, ""), (torch.ones(5, 16, dtype=torch.bool), " with `positions` all True")):
        loss = call(impl.tc_loss, h, e, attention_mask=mask, num_negatives=K, temperature=tau, positions=positions,
                    generator=torch.Generator().manual_seed(0)).item()
        expect(abs(loss - expected) < 1e-4,
               f"padding leaked into the loss{what}: with it ignored the loss is {expected:.4f}, yours is {loss:.4f} "
               f"(sequence 2 is padded on the left, sequence 4 has one real token). Padded tokens are never anchors, "
               f"positives or negatives: pass the real-token mask to the samplers and average over real anchors only"
               + (" (`positions` only narrows the real tokens down)" if positions is not None else ""))


def check_generator_makes_it_reproducible(impl):
    """The draws come from `generator` alone: generators seeded alike give one loss whatever PyTorch's
    global random state, other seeds another, and two calls with one generator differ (it advances)."""
    gen = torch.Generator().manual_seed(6)
    h, e = torch.randn(3, 10, 16, generator=gen), torch.randn(3, 10, 16, generator=gen)

    def loss(generator, global_seed=0):
        return call(impl.tc_loss, h, e, num_negatives=7, generator=generator, global_seed=global_seed).item()
    a, b = loss(torch.Generator().manual_seed(9)), loss(torch.Generator().manual_seed(9), global_seed=1)
    expect(a == b, f"two calls with generators seeded alike gave different losses ({a:.6f}, {b:.6f}) when PyTorch's "
                   f"global random state differed: something is drawn without `generator`; pass it to both samplers")
    other = loss(torch.Generator().manual_seed(10))
    expect(a != other, "generators with other seeds gave the same loss: is `generator` passed to the samplers?")
    shared = torch.Generator().manual_seed(9)
    first, second = loss(shared), loss(shared)
    expect(first != second, "two calls with one generator gave the same loss: the samplers must draw from `generator` "
                            "itself, which advances with every draw, not from a copy of it or a new generator seeded "
                            "from it (every step of a run would draw the same positives and negatives)")


# ----------------------------------------------------------------------------- the edges of what training meets

def check_no_anchor_gives_zero(impl):
    """`--tc_positions masked` on a micro-batch where nothing is masked: no token is an anchor. The
    mean over zero anchors must be 0 (and its gradient 0), not 0 / 0 = nan, which would end the run."""
    h, e, _ = orthogonal_states()
    for positions, what in ((torch.zeros(4, 16, dtype=torch.bool), "`positions` all False (as `--tc_positions "
                             "masked` gives on a micro-batch where nothing was masked)"),
                            (None, "every sequence a single real token (attention_mask keeps one token per sequence)")):
        mask = None if positions is not None else padding_mask([1, 1, 1, 1], 16)
        h_ = h.clone().requires_grad_(True)
        loss = call(impl.tc_loss, h_, e, attention_mask=mask, num_negatives=5, positions=positions,
                    generator=torch.Generator().manual_seed(0))
        value = loss.item()
        expect(value == 0.0, f"with no anchor at all ({what}) your loss is {value}: a mean over zero anchors divides "
                             f"0 by 0{' (torch.stack of an empty list fails, .mean() of nothing is nan)' if value != value else ''}"
                             f"; return 0 there (divide the sum by the number of anchors clamped to >= 1)")
        expect(isinstance(loss, torch.Tensor) and loss.grad_fn is not None and loss.dtype == h_.dtype,
               f"with no anchor at all ({what}) your loss is 0 but a constant: no graph (loss.backward() fails: "
               f"'does not require grad'; a new tensor made with requires_grad=True reaches nothing), and "
               f"torch.tensor(0.0) sits on the CPU whatever device h is on. Make the "
               f"0 from the per-anchor losses, so that it stays on the graph and on h's device: their sum divided by "
               f"the number of anchors clamped to >= 1")
        loss.backward()
        expect(h_.grad is None or bool(torch.isfinite(h_.grad).all()),
               f"with no anchor at all ({what}) the loss is 0 but its gradient is not finite: divide by the "
               f"number of anchors clamped to >= 1, so that the gradient is 0 too")


def check_low_temperature_does_not_overflow(impl):
    """TaCL's tau = 0.01 with cosines near 1: the logits reach 100 and exp(100) is beyond float32
    (3.4e38). A softmax written as exp / sum(exp) overflows; logsumexp (or F.cross_entropy)
    subtracts the largest logit first."""
    K, tau = 10, 0.01
    e = 5 * torch.randn(4, 16, 8, generator=torch.Generator().manual_seed(1))
    collapsed = (e + torch.randn(8, generator=torch.Generator().manual_seed(2)), e)  # every g the same
    for (h, e), expected, what in ((collapsed, math.log(K + 1), "every cosine is 1"),
                                   (orthogonal_states()[:2], math.log1p(K * math.exp(-1 / tau)),
                                    "positives have cosine 1, negatives 0")):
        loss = call(impl.tc_loss, h, e, num_negatives=K, temperature=tau,
                    generator=torch.Generator().manual_seed(0)).item()
        expect(math.isfinite(loss) and abs(loss - expected) < 1e-3,
               f"at tau = {tau} (TaCL's temperature; TACO's is 0.07) where {what}, the loss must be {expected:.4f}; "
               f"yours is {loss}." + (" The logits reach 1 / tau = 100 and exp(100) overflows float32: do not "
                                      "write exp(s) / sum(exp(s)); use torch.logsumexp or F.cross_entropy (they "
                                      "subtract the largest logit first)" if not math.isfinite(loss) else
                                      describe(loss, expected, K, tau, 64, 3.0) or below_zero(loss)))


def check_low_temperature_positive_points_away(impl):
    """TaCL's tau = 0.01 where the positive points away: -log of a probability of e^-200 must come out of
    the log-softmax in one step. Global parts in a plane, a, b, c at 120 degrees: sequence 1 alternates a
    and b (every logit of its anchors -50, far below the batch's largest, 100), sequence 0 is c with two
    tokens -c (anchors whose positive has cosine -1 while their negatives agree), sequences 2 and 3 are c."""
    K, tau = 10, 0.01
    angle = torch.tensor([0.0, 2.0, 4.0]) * math.pi / 3
    a, b, c = (3.0 * torch.cat([torch.stack([angle.cos(), angle.sin()], 1), torch.zeros(3, 6)], 1)).unbind(0)
    g = c.repeat(4, 16, 1)
    g[0, [5, 11]] = -c
    g[1, 0::2], g[1, 1::2] = a, b
    e = 5 * torch.randn(4, 16, 8, generator=torch.Generator().manual_seed(8))
    mask = padding_mask([16] * 4, 16)
    loss, _, _, pos, neg = student_loss_and_draws(impl, e + g, e, mask, None, K, tau, grad=False)
    value, expected = loss.item(), eq34_by_loop(e + g, e, mask.bool(), None, pos, neg, tau)[0]
    how = ("-log(softmax(...)) (or the log of exp / sum) rounds the positive's probability, e^-200, to 0 in float32, "
           "and -log(0) is inf" if value == math.inf else
           "a max subtracted over the whole matrix, not each anchor's own row, leaves rows whose logits all lie far "
           "below it: their exp is 0 in float32 and the log of it -inf")
    expect(math.isfinite(value), f"at tau = {tau} (TaCL's) where some positives point away from their anchor "
                                 f"(cosine -1) while its negatives agree, the loss must be {expected:.3f}; yours is "
                                 f"{value}: {how}. Take the log-softmax of each row in one step: F.cross_entropy("
                                 f"logits, target) or torch.log_softmax(logits, dim=-1)[:, 0]")
    expect(abs(value - expected) < 1e-4 * max(1, expected),
           f"at tau = {tau} where some positives point away from their anchor (cosine -1), the loss must be "
           f"{expected:.4f}; yours is {value:.4f}: a probability of e^-200 lost its precision; take the log-softmax of "
           f"each row in one step (F.cross_entropy, or torch.log_softmax(logits, dim=-1))")


def check_zero_global_part(impl):
    """A token whose global part is exactly 0 (h = e: an untrained model's padding-free block can
    have them, and fp16 rounds small g to 0): its cosines are 0, as F.normalize's epsilon makes them.
    Dividing by |g| without an epsilon gives 0 / 0 = nan, in the loss or in its gradient."""
    h, e, mask, positions = loop_inputs()
    h[0, 2], h[3, :] = e[0, 2], e[3, :]  # one token, and a whole sequence, with g = 0 exactly
    loss, h_, e_, pos, neg = student_loss_and_draws(impl, h, e, mask, None, 3, 0.5, grad=True)
    value = loss.item()
    expect(math.isfinite(value), f"where some tokens' global part g = h - e is exactly 0 your loss is {value}: "
                                 f"g / |g| is 0 / 0 there. Normalise with an epsilon: F.normalize(g, dim=-1) (it "
                                 f"divides by max(|g|, 1e-12)), so that a cosine with g = 0 is 0")
    expected = eq34_by_loop(h, e, mask.bool(), None, pos, neg, 0.5)[0]
    expect(abs(value - expected) < 1e-4 * max(1, expected),
           f"where some tokens' global part g = h - e is exactly 0 your loss is {value:.5f}, but Eq. 3-4 with a cosine "
           f"of 0 for those tokens (as F.normalize gives) is {expected:.5f}" + below_zero(value))
    if loss.requires_grad:
        loss.backward()
        expect(all(x.grad is None or bool(torch.isfinite(x.grad).all()) for x in (h_, e_)),
               "where some tokens' global part g = h - e is exactly 0 your loss is finite but its gradient is not: "
               "|g| is differentiated at 0; normalise with F.normalize(g, dim=-1), whose epsilon keeps it finite")


# ----------------------------------------------------------------------------- Eq. 3-4 as a loop over anchors

@contextlib.contextmanager
def recorded_draws(fn, require=True):
    """While active, the samplers `fn` calls (by the names sample_positives / sample_negatives in
    its module) are recorded: {name: (what it returned, its arguments)}. The loop reference below
    then uses the very positives and negatives the student's loss drew, in whatever order.
    `require`: both must have been called (else a Mistake saying so)."""
    names, drawn, saved = fn.__globals__, {}, {}
    for name in ("sample_positives", "sample_negatives"):
        if name not in names:
            continue
        saved[name] = names[name]

        def record(*args, _f=names[name], _name=name, **kwargs):
            drawn[_name] = (_f(*args, **kwargs), args, kwargs)
            return drawn[_name][0]
        names[name] = record
    try:
        yield drawn
    finally:
        names.update(saved)
    expect(len(drawn) == 2 or not require,
           "tc_loss did not call sample_positives and sample_negatives by these names: the checks replay the "
           "positives and negatives your loss drew through them; call both, as the docstring's step 2 says")


def eq34_by_loop(h, e, real, positions, pos, neg, tau, variant=None):
    """Eq. 3-4 as the paper writes it, one anchor at a time, in float64 -> (loss, dL/dh, dL/de).

    pos (B, T), neg (B, T, K): the flat indices the student's loss drew. `variant` puts one known
    mistake in, so that a student's gradient can be matched to it (see GRADIENT_MISTAKES)."""
    B, T, H = h.shape
    h, e = h.double().requires_grad_(True), e.double().requires_grad_(True)
    g = (h - e.detach() if variant == "e detached" else h - e).reshape(B * T, H)  # Eq. 3
    targets = g if variant == "targets not detached" else g.detach()  # the positive and negatives: targets

    def cos(i, j):  # cos(g_i, g_j), the anchor i on the graph, j a (detached) target
        norm_i = g[i].norm().detach() if variant == "norm detached" else g[i].norm()
        return g[i] @ targets[j] / (norm_i * targets[j].norm()).clamp(min=1e-12)  # g = 0: cosine 0, as F.normalize

    terms = []
    for b in range(B):
        for t in range(T):
            i = b * T + t
            lone = real[b].sum() < 2  # no other token in the sequence: no positive, not an anchor
            if not real[b, t] or (lone and variant != "lone anchors") or (positions is not None and not positions[b, t]):
                continue
            positive = cos(i, int(pos[b, t]))
            negatives = torch.stack([cos(i, int(k)) for k in neg[b, t]])
            if variant == "positive off the graph":
                positive = positive.detach()
            if variant == "negatives off the graph":
                negatives = negatives.detach()
            logits = torch.cat([positive[None], negatives]) / tau
            terms.append((b, torch.logsumexp(logits, 0) - logits[0]))  # -log softmax at the positive (Eq. 4)
    if variant == "mean per sequence":
        per_seq = [torch.stack([x for c, x in terms if c == b]).mean() for b in sorted({b for b, _ in terms})]
        loss = torch.stack(per_seq).mean()
    else:
        loss = torch.stack([x for _, x in terms]).mean()
        if variant == "summed":
            loss = loss * len(terms)
    loss.backward()
    return loss.item(), h.grad.float(), torch.zeros_like(h.grad).float() if e.grad is None else e.grad.float()


# What a gradient that matches eq34_by_loop(..., variant) means, in the student's terms.
GRADIENT_MISTAKES = {
    "negatives off the graph": "no gradient flows through the negatives' cosines (they are detached as a whole, "
                               "or computed from a detached anchor): detach only the negatives' own vectors; the "
                               "anchor must be pushed away from them",
    "positive off the graph": "no gradient flows through the positive's cosine (it is detached as a whole, or "
                              "computed from a detached anchor): detach only the positive's own vector; the anchor "
                              "must be pulled towards it",
    "norm detached": "the anchor's norm |g| is computed under detach (or .data / .item()): normalising is part of "
                     "the cosine, and so is its gradient",
    "summed": "the loss is summed over anchors: take the mean",
    "targets not detached": "the positive and negatives are not detached: only the anchor receives gradient",
    "e detached": "e is detached (g = h - e.detach()?): in Eq. 3 g depends on e as much as on h",
}


def close(a, b, tol=1e-4):
    return a is not None and a.shape == b.shape and bool(((a - b).abs() <= tol * (1 + b.abs().max())).all())


def loop_inputs():
    """Small states where every term of Eq. 3-4 matters: 4 sequences (one left-padded, one with a
    single real token), K = 3, tau = 0.5, about half the real tokens anchors."""
    gen = torch.Generator().manual_seed(7)
    B, T, H = 4, 6, 5
    h, e = torch.randn(B, T, H, generator=gen), torch.randn(B, T, H, generator=gen)
    mask = padding_mask([6, 4, 1, 3], T, left=(1,))
    positions = torch.rand(B, T, generator=gen) < 0.6
    positions[2, 0] = True  # the lone token: a `positions` that picks it must not make it an anchor
    return h, e, mask, positions


def student_loss_and_draws(impl, h, e, mask, positions, K, tau, grad):
    h, e = h.clone().requires_grad_(grad), e.clone().requires_grad_(grad)
    with recorded_draws(impl.tc_loss) as drawn:
        loss = call(impl.tc_loss, h, e, mask, 3, K, tau, torch.Generator().manual_seed(0), positions)
    return loss, h, e, drawn["sample_positives"][0], drawn["sample_negatives"][0]


def check_passes_its_arguments_to_the_samplers(impl):
    h, e, mask, positions = loop_inputs()
    gen = torch.Generator().manual_seed(0)
    with recorded_draws(impl.tc_loss) as drawn:
        call(impl.tc_loss, h, e, mask, 3, 4, 0.5, gen, positions)
    for name, want, what in (("sample_positives", 3, "window"), ("sample_negatives", 4, "num_negatives")):
        _, args, kwargs = drawn[name]
        given = list(args) + list(kwargs.values())
        numbers = [x for x in given if isinstance(x, int) and not isinstance(x, bool)]
        expect(want in numbers, f"tc_loss was called with {what}={want} but called {name} with {numbers or 'none'}: "
                                f"pass `{what}` on")
        expect(any(x is gen for x in given), f"tc_loss did not pass its `generator` to {name}: draw every random "
                                             f"number from it")


def check_value_matches_eq34_token_by_token(impl):
    """On random states (left padding, a lone token, `positions`), with the positives and negatives
    the implementation drew (recorded), the loss equals Eq. 3-4 written as a loop over anchors."""
    h, e, mask, positions = loop_inputs()
    K, tau = 3, 0.5
    for where in (positions, None):
        loss, _, _, pos, neg = student_loss_and_draws(impl, h, e, mask, where, K, tau, grad=False)
        loss = loss.item()
        expected = eq34_by_loop(h, e, mask.bool(), where, pos, neg, tau)[0]
        if abs(loss - expected) < 1e-4 * max(1, expected):
            continue
        hint = next((f" Your value is what you get when {why}." for variant, why in (
            ("mean per sequence", "the loss is averaged per sequence, then over sequences: average over all anchors "
                                  "at once"),
            ("lone anchors", "a sequence with a single real token counts as an anchor: it has no positive (its "
                             "'positive' is padding or itself); anchors need >= 2 real tokens in their sequence"),
            ("summed", "the loss is summed over anchors: take the mean"))
            if abs(loss - eq34_by_loop(h, e, mask.bool(), where, pos, neg, tau, variant)[0]) < 1e-4 * max(1, expected)),
            "")
        if not hint and abs(loss - eq34_by_loop(h, e, mask.bool(), where, pos, neg, tau * tau)[0]) < 1e-4 * max(1, expected):
            hint = (f" Your value is Eq. 3-4 at tau = {tau * tau:g} = {tau}^2: the temperature is applied twice "
                    f"(cos / tau / tau); divide once")
        own = (torch.arange(h.shape[0])[:, None] * h.shape[1] + torch.arange(h.shape[1])).expand_as(pos)
        if not hint and abs(loss - eq34_by_loop(h, e, mask.bool(), where, own, neg, tau)[0]) < 1e-4 * max(1, expected):
            hint = (" Your value is what you get when each anchor is its own positive (cosine 1 with itself): "
                    "gather the positive with the index sample_positives drew, z[pos], not the anchor's own")
        if not hint and abs(loss - eq34_by_loop(h, e, mask.bool(), where, pos, neg, -tau)[0]) < 1e-4 * max(1, expected):
            hint = (" Your value is what you get when the similarities enter the softmax with a minus sign: the sign "
                    "is flipped; the loss must be low when the anchor is close to its positive")
        if not hint and abs(loss + expected) < 1e-4 * max(1, expected):
            hint = (" Your value is minus Eq. 3-4's: the loss is negated (a flipped sign); it is -log of the "
                    "positive's softmax probability, always >= 0")
        expect(False, f"on random states (sequence 1 padded on the left, sequence 2 with a single real token"
                      f"{', `positions` given' if where is not None else ''}) your loss is {loss:.5f}, but Eq. 3-4 "
                      f"written as a loop over anchors gives {expected:.5f} with the same positives and negatives."
                      + hint)


def check_gradient_matches_eq34_token_by_token(impl):
    """The gradients of the loss with respect to h and to e equal those of Eq. 3-4 written as a
    loop over anchors (float64), with the positives and negatives the implementation drew.
    The loss value can be right while the gradient flows wrongly (a detach in the wrong place)."""
    h, e, mask, positions = loop_inputs()
    K, tau = 3, 0.5
    loss, h, e, pos, neg = student_loss_and_draws(impl, h, e, mask, positions, K, tau, grad=True)
    expect(loss.requires_grad, "the loss carries no gradient: did you detach the anchors too, or call .item()?")
    value, want_h, want_e = eq34_by_loop(h.detach(), e.detach(), mask.bool(), positions, pos, neg, tau)
    expect(abs(loss.item() - value) < 1e-4 * max(1, value),
           f"this check compares gradients, but your loss value ({loss.item():.5f}) already differs from Eq. 3-4's "
           f"({value:.5f}): fix the value first (see the other checks)")
    loss.backward()
    expect(h.grad is not None and h.grad.abs().sum() > 0,
           "no gradient reached h: is h detached (or only used under torch.no_grad)? The anchor's g = h - e must "
           "stay on the graph")
    expect(e.grad is not None and e.grad.abs().sum() > 0,
           "no gradient reached e: is e detached (g = h - e.detach()), or not used (g = h)? In Eq. 3 g depends "
           "on e as much as on h: the gradient with respect to e is minus the one with respect to h")
    if close(h.grad, want_h) and close(e.grad, want_e):
        return
    for variant, why in GRADIENT_MISTAKES.items():
        _, wrong_h, wrong_e = eq34_by_loop(h.detach(), e.detach(), mask.bool(), positions, pos, neg, tau, variant)
        if close(h.grad, wrong_h) and close(e.grad, wrong_e):
            raise Mistake(f"the gradient of your loss is what you get when {why} (compared with Eq. 3-4 written as "
                          f"a loop over anchors, on the positives and negatives your loss drew)")
    which, got, want = ("h", h.grad, want_h) if not close(h.grad, want_h) else ("e", e.grad, want_e)
    b, t = divmod(int((got - want).abs().sum(-1).argmax()), h.shape[1])
    expect(False, f"the gradient of your loss with respect to {which} differs from that of Eq. 3-4 written as a "
                  f"loop over anchors (same positives and negatives), most at sequence {b}, token {t}: yours "
                  f"{[round(x, 4) for x in got[b, t].tolist()]}, Eq. 3-4 {[round(x, 4) for x in want[b, t].tolist()]}. "
                  f"Look for a .detach(), .data, .item() or torch.no_grad() on the anchor's side of the cosines")


def test_returns_a_scalar(impl):
    check_returns_a_scalar(impl)


def test_passes_its_arguments_to_the_samplers(impl):
    check_passes_its_arguments_to_the_samplers(impl)


def test_collapsed_gives_log_k_plus_1(impl):
    check_collapsed_gives_log_k_plus_1(impl)


def test_scale_invariant(impl):
    check_scale_invariant(impl)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_orthogonal_closed_form(impl, tau):
    check_orthogonal_closed_form(impl, tau)


def test_positions_restrict_the_anchors(impl):
    check_positions_restrict_the_anchors(impl)


def test_gradient_reaches_the_anchor_only(impl):
    check_gradient_reaches_the_anchor_only(impl)


def test_padding_never_used(impl):
    check_padding_never_used(impl)


def test_generator_makes_it_reproducible(impl):
    check_generator_makes_it_reproducible(impl)


def test_value_matches_eq34_token_by_token(impl):
    check_value_matches_eq34_token_by_token(impl)


def test_gradient_matches_eq34_token_by_token(impl):
    check_gradient_matches_eq34_token_by_token(impl)


def test_no_anchor_gives_zero(impl):
    check_no_anchor_gives_zero(impl)


def test_low_temperature_does_not_overflow(impl):
    check_low_temperature_does_not_overflow(impl)


def test_low_temperature_positive_points_away(impl):
    check_low_temperature_positive_points_away(impl)


def test_zero_global_part(impl):
    check_zero_global_part(impl)
