"""Checks of exercise 2 (the samplers), by properties and distributions: a correct sampler
passes whatever order it draws its random numbers in. The statistical checks use thresholds
a correct sampler exceeds with probability below 1e-6 (fixed seeds: no flaky runs)."""
import math

import pytest
import torch

from exercises._check import call, expect

EXERCISE = "ex2_samplers"


def padded(lengths, T):
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]


def chi2_ok(counts, expected):
    """Pearson's chi-square below mean + 8 standard deviations of its null distribution."""
    counts, expected = counts.double(), expected.double()
    stat = ((counts - expected) ** 2 / expected).sum().item()
    df = len(counts) - 1
    return stat < df + 8 * math.sqrt(2 * df), stat


def check_shapes(impl):
    real = padded([12, 9, 5], 12)
    pos = call(impl.sample_positives, real, 5, torch.Generator().manual_seed(0))
    neg = call(impl.sample_negatives, real, 7, torch.Generator().manual_seed(0))
    for name, x, shape in (("sample_positives", pos, (3, 12)), ("sample_negatives", neg, (3, 12, 7))):
        expect(isinstance(x, torch.Tensor) and tuple(x.shape) == shape,
               f"{name} must return a tensor of shape {shape} (B, T{', K' if len(shape) == 3 else ''}); "
               f"got {getattr(x, 'shape', type(x).__name__)}")
        expect(not x.is_floating_point() and x.dtype != torch.bool, f"{name} must return integer indices, got {x.dtype}")
        expect(bool(((x >= 0) & (x < 36)).all()),
               f"{name} returned an index outside 0..B*T-1 = 0..35: indices are flat, b * T + t")


def check_positive_is_another_real_token_of_the_sequence(impl):
    lengths, T = [16, 11, 6, 2], 16
    real = padded(lengths, T)
    for seed in range(5):
        pos = call(impl.sample_positives, real, 5, torch.Generator().manual_seed(seed))
        for b, n in enumerate(lengths):
            for t in range(n):
                p = int(pos[b, t])
                where = f"the positive of token {t} of sequence {b} is flat index {p} (sequence {p // T}, token {p % T})"
                expect(p // T == b, f"{where}: another sequence; positives come from the anchor's own sequence")
                expect(p % T < n, f"{where}: padding (sequence {b} has {n} real tokens); positives are real tokens")
                expect(p != b * T + t, f"{where}: the anchor itself; a positive is another token")


def check_window_offsets_uniform(impl, window=5):
    """Tokens away from the edges: offsets uniform over +-1..+-W//2, in one call."""
    B, T, w = 64, 64, window // 2
    real = torch.ones(B, T, dtype=torch.bool)
    pos = call(impl.sample_positives, real, window, torch.Generator().manual_seed(1))
    t = torch.arange(T)
    offset = (pos - (torch.arange(B)[:, None] * T + t))[:, w:T - w].flatten()  # inner anchors only
    values, counts = offset.unique(return_counts=True)
    usual = int(values[counts >= 0.005 * len(offset)].abs().max())  # ignores a rare far fallback
    expect(usual <= w, f"the window reaches {usual} positions away; W={window} allows {w} (W//2 either side)")
    beyond = int((offset.abs() > w).sum())
    expect(beyond == 0, f"{beyond} tokens away from the edges got a positive outside the window (up to "
                        f"{int(offset.abs().max())} positions away); W={window} allows {w}")
    expect(bool((offset != 0).all()), "a positive is the anchor itself (offset 0); offsets are +-1..+-W//2")
    slots = [d for d in range(-w, w + 1) if d != 0]
    counts = torch.stack([(offset == d).sum() for d in slots])
    ok, stat = chi2_ok(counts, torch.full((len(slots),), len(offset) / len(slots)))
    expect(ok, f"with W={window} the offsets {slots} should be equally likely; one call gave counts "
               f"{counts.tolist()} (chi-square {stat:.0f})" + (": is offset +1 or -1 missing?" if counts.min() == 0 else ""))


def check_negatives_from_other_sequences_never_padding(impl):
    lengths, T = [16, 11, 6, 3], 16
    real = padded(lengths, T)
    neg = call(impl.sample_negatives, real, 40, torch.Generator().manual_seed(2))
    for b, n in enumerate(lengths):
        src = neg[b, :n]
        own = int((src // T == b).sum())
        expect(own == 0, f"{own} negatives of sequence {b} come from sequence {b} itself; negatives come from the "
                         f"*other* sequences of the batch")
        pad = int((~real.flatten()[src]).sum())
        expect(pad == 0, f"{pad} negatives of sequence {b} are padding; draw only real tokens")


def check_negatives_uniform_over_tokens(impl):
    """Sequences of very different lengths: tokens (not sequences) are equally likely."""
    lengths, T, K = [32, 16, 8, 4], 32, 500
    real = padded(lengths, T)
    neg = call(impl.sample_negatives, real, K, torch.Generator().manual_seed(3))
    b = 3  # anchors of the shortest sequence: its negatives come from 56 tokens of 3 sequences
    draws = neg[b, :lengths[b]].flatten()
    others = [c for c in range(len(lengths)) if c != b]
    n_other = sum(lengths[c] for c in others)
    share = {c: (draws // T == c).double().mean().item() for c in others}
    for c in others:
        want = lengths[c] / n_other
        expect(abs(share[c] - want) < 0.05,
               f"negatives of sequence {b} come from sequence {c} in {100 * share[c]:.0f}% of draws, expected "
               f"{100 * want:.0f}% (it holds {lengths[c]} of the {n_other} real tokens of the other sequences): "
               f"draw uniformly over tokens, not over sequences")
    tokens = torch.cat([c * T + torch.arange(lengths[c]) for c in others])
    counts = torch.stack([(draws == i).sum() for i in tokens])
    ok, stat = chi2_ok(counts, torch.full((len(tokens),), len(draws) / len(tokens)))
    expect(ok, f"negatives are not uniform over the other sequences' real tokens (chi-square {stat:.0f} over "
               f"{len(tokens)} tokens; least drawn {int(counts.min())}, most {int(counts.max())} times)")


def check_generator_makes_it_reproducible(impl):
    real = padded([12, 9, 5], 12)
    for name, arg in (("sample_positives", 5), ("sample_negatives", 7)):
        fn = getattr(impl, name)
        a, b = (call(fn, real, arg, torch.Generator().manual_seed(4)) for _ in range(2))
        expect(torch.equal(a, b), f"{name}: two calls with generators seeded alike gave different indices; "
                                  f"draw every random number from `generator`")
        c = call(fn, real, arg, torch.Generator().manual_seed(5))
        expect(not torch.equal(a, c), f"{name}: generators with other seeds gave the same indices; is `generator` used?")


def test_shapes(impl):
    check_shapes(impl)


def test_positive_is_another_real_token_of_the_sequence(impl):
    check_positive_is_another_real_token_of_the_sequence(impl)


@pytest.mark.parametrize("window", [3, 5, 7])
def test_window_offsets_uniform(impl, window):
    check_window_offsets_uniform(impl, window)


def test_negatives_from_other_sequences_never_padding(impl):
    check_negatives_from_other_sequences_never_padding(impl)


def test_negatives_uniform_over_tokens(impl):
    check_negatives_uniform_over_tokens(impl)


def test_generator_makes_it_reproducible(impl):
    check_generator_makes_it_reproducible(impl)
