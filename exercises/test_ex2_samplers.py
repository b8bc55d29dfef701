"""Checks of exercise 2 (the samplers), by properties and distributions: a correct sampler
passes whatever order it draws its random numbers in. The statistical checks use thresholds
a correct sampler exceeds with probability below 1e-6 (fixed seeds: no flaky runs).

The batches have padding on the right of some sequences and on the LEFT of others, and a
sequence with a single real token (never an anchor, still a negative for the others). What a
sampler returns at padding slots (and for a lone token's positive) is never used: any value passes."""
import math

import pytest
import torch

from exercises._check import call, expect

EXERCISE = "ex2_samplers"


def padded(lengths, T, left=()):
    """(B, T) bool, True = real: sequence b has lengths[b] real tokens, at its end if b is in `left`."""
    t = torch.arange(T)[None, :]
    n = torch.tensor(lengths)[:, None]
    is_left = torch.tensor([b in left for b in range(len(lengths))])[:, None]
    return torch.where(is_left, t >= T - n, t < n)


def chi2_ok(counts, expected):
    """Pearson's chi-square below mean + 8 standard deviations of its null distribution."""
    counts, expected = counts.double(), expected.double()
    stat = ((counts - expected) ** 2 / expected).sum().item()
    df = len(counts) - 1
    return stat < df + 8 * math.sqrt(2 * df), stat


def where(p, T):
    return f"flat index {p} (sequence {p // T}, token {p % T})"


def check_shapes(impl):
    real = padded([12, 9, 5], 12, left=(1,))
    pos = call(impl.sample_positives, real, 5, torch.Generator().manual_seed(0))
    neg = call(impl.sample_negatives, real, 7, torch.Generator().manual_seed(0))
    one = call(impl.sample_negatives, real, 1, torch.Generator().manual_seed(0))  # K = 1: still (B, T, K)
    for name, x, shape in (("sample_positives", pos, (3, 12)), ("sample_negatives", neg, (3, 12, 7)),
                           ("sample_negatives", one, (3, 12, 1))):
        expect(isinstance(x, torch.Tensor) and tuple(x.shape) == shape,
               f"{name} must return a tensor of shape {shape} (B, T{', K' if len(shape) == 3 else ''}); "
               f"got {getattr(x, 'shape', type(x).__name__)}")
        expect(not x.is_floating_point() and x.dtype != torch.bool, f"{name} must return integer indices, got {x.dtype}")
        used = x[real]  # what padding slots hold is never used: any value there is fine
        expect(bool(((used >= 0) & (used < 36)).all()),
               f"{name} returned an index outside 0..B*T-1 = 0..35 for a real token: indices are flat, b * T + t "
               f"(padding slots may hold anything)")


def check_positive_is_another_real_token_of_the_sequence(impl):
    lengths, T, left = [16, 11, 6, 2, 1], 16, (1, 3)
    real = padded(lengths, T, left)
    for seed in range(5):
        pos = call(impl.sample_positives, real, 5, torch.Generator().manual_seed(seed))
        for b, n in enumerate(lengths):
            if n < 2:  # a lone token has no positive: anything goes
                continue
            for t in real[b].nonzero().flatten().tolist():
                p = int(pos[b, t])
                what = f"the positive of token {t} of sequence {b} is {where(p, T)}"
                side = "left" if b in left else "right"
                expect(p // T == b, f"{what}: another sequence; positives come from the anchor's own sequence"
                       + (" (indices are flat: b * T + t; did you forget the b * T?)" if p // T == 0 else ""))
                expect(bool(real[b, p % T]), f"{what}: padding (sequence {b} has {n} real tokens, padded on the "
                                             f"{side}); positives are real tokens: check where the offset lands, "
                                             f"and pick the fallback among the real tokens")
                expect(p != b * T + t, f"{what}: the anchor itself; a positive is another token (offset 0 is not "
                                       f"allowed, also not at the sequence's edges)")


def check_window_offsets_uniform(impl, window=5):
    """Tokens away from the edges: offsets uniform over +-1..+-W//2, in one call (an even W counts as
    W + 1, as in taco.py: W = 10 reaches 5 either side)."""
    B, T, w = 64, 64, window // 2
    real = torch.ones(B, T, dtype=torch.bool)
    pos = call(impl.sample_positives, real, window, torch.Generator().manual_seed(1))
    t = torch.arange(T)
    inner = (pos - (torch.arange(B)[:, None] * T + t))[:, w:T - w]  # inner anchors only, (B, T - 2w)
    offset = inner.flatten()
    values, counts = offset.unique(return_counts=True)
    usual = int(values[counts >= 0.005 * len(offset)].abs().max())  # ignores a rare far fallback
    expect(usual <= w, f"the window reaches {usual} positions away; W={window} allows {w} (W//2 either side)")
    beyond = int((offset.abs() > w).sum())
    expect(beyond == 0, f"{beyond} tokens away from the edges got a positive outside the window (up to "
                        f"{int(offset.abs().max())} positions away); W={window} allows {w}")
    expect(bool((offset != 0).all()), "a positive is the anchor itself (offset 0); offsets are +-1..+-W//2")
    slots = [d for d in range(-w, w + 1) if d != 0]
    counts = torch.stack([(offset == d).sum() for d in slots])
    missing = [d for d, c in zip(slots, counts.tolist()) if c == 0]
    expect(not (window % 2 == 0 and missing == [-w, w]),
           f"W={window} is even: taco.py counts an even window as W + 1, so positives reach W//2 = {w} positions "
           f"either side ({slots}); yours never reach {w} ((W - 1) // 2 = {(window - 1) // 2}?)")
    expect(not missing, f"with W={window} the offsets {slots} should be equally likely, but {missing} never "
                        f"occurred (counts {counts.tolist()}): draw on both sides of the anchor, from 1 to W//2")
    expect(not bool((inner == inner[:, :1]).all()), "every token of a sequence got the same offset: draw one "
                                                    "offset per token, not one per sequence")
    agree = (inner == inner[:1]).double().mean().item()  # same offset as sequence 0 at the same position: 1 / (2w)
    expect(agree < 1 / (2 * w) + 0.1, f"{100 * agree:.0f}% of the tokens got the same offset as the token at the same "
                                      f"position of sequence 0 (independent draws agree {100 / (2 * w):.0f}% of the "
                                      f"time): draw one offset per token of every sequence, shape (B, T), not one "
                                      f"per position shared by the batch")
    ends, middle = counts[[0, -1]].double(), counts[1:-1].double()
    expect(w < 2 or not bool((ends < 0.75 * middle.mean()).all()),
           f"with W={window} the offsets {slots} should be equally likely, but the outermost, -{w} and {w}, came about "
           f"half as often as the others (counts {counts.tolist()}): round() gives the two ends of a range half the "
           f"chance; floor the uniform number instead (.long(), .floor()) or draw with torch.randint")
    ok, stat = chi2_ok(counts, torch.full((len(slots),), len(offset) / len(slots)))
    expect(ok, f"with W={window} the offsets {slots} should be equally likely; one call gave counts "
               f"{counts.tolist()} (chi-square {stat:.0f})")


def check_negatives_from_other_sequences_never_padding(impl):
    """Every negative of every real anchor, over three seeds: from another sequence, a real token."""
    lengths, T, left = [16, 11, 6, 3, 1], 16, (1, 3)
    real = padded(lengths, T, left)
    for seed in range(3):
        neg = call(impl.sample_negatives, real, 40, torch.Generator().manual_seed(seed))
        for b, n in enumerate(lengths):
            src = neg[b][real[b]].flatten()  # the negatives of sequence b's real tokens
            expect(bool(((src >= 0) & (src < len(lengths) * T)).all()),
                   f"a negative of sequence {b} is outside 0..{len(lengths) * T - 1}: indices are flat, b * T + t")
            own = int((src // T == b).sum())
            expect(own == 0, f"{own} of the {len(src)} negatives of sequence {b} come from sequence {b} itself; "
                             f"negatives come from the *other* sequences of the batch (even one such draw is a bug: "
                             f"look at how your own sequence's tokens are skipped)")
            pad = src[~real.flatten()[src]].tolist()
            expect(not pad, f"{len(pad)} negatives of sequence {b} are padding (e.g. {where(pad[0], T) if pad else ''}; "
                            f"sequences {list(left)} are padded on the left); draw only real tokens")


def check_negatives_uniform_over_tokens(impl):
    """Sequences of very different lengths (one of a single token, one padded on the left): every
    real token of the other sequences is equally likely, and each anchor draws its own K."""
    lengths, T, K, left = [32, 16, 8, 4, 1], 32, 500, (1,)
    real = padded(lengths, T, left)
    neg = call(impl.sample_negatives, real, K, torch.Generator().manual_seed(3))
    b = 3  # anchors of a short sequence: their negatives come from 57 tokens of 4 sequences
    mine = neg[b][real[b]]  # (4, K)
    draws = mine.flatten()
    others = [c for c in range(len(lengths)) if c != b]
    n_other = sum(lengths[c] for c in others)
    sources = sorted(set((draws // T).tolist()))
    expect(len(sources) > 1 or sources[0] not in others,
           f"every negative of sequence {b} comes from sequence {sources[0]}"
           + (" (the next one)" if sources[0] == (b + 1) % len(lengths) else "")
           + f": negatives come from all the other sequences of the batch ({others}), each real token of them "
             f"equally likely")
    expect(not bool((mine == mine[:1]).all()), f"every token of sequence {b} drew the same {K} negatives: draw "
                                               f"them independently for each anchor")
    expect(not bool((mine == mine[:, :1]).all()), f"each anchor's {K} negatives are one token repeated {K} times: "
                                                  f"draw K independent negatives per anchor, shape (B, T, K), not one "
                                                  f"draw expanded or repeated K times")
    tokens = torch.cat([c * T + real[c].nonzero().flatten() for c in others])
    counts = torch.stack([(draws == i).sum() for i in tokens])
    never = tokens[counts == 0].tolist()  # each is expected ~35 times: never drawn means never drawable
    expect(not never, f"{len(never)} real token(s) of the other sequences were never drawn in {len(draws)} draws "
                      f"(e.g. {where(never[0], T) if never else ''}; each was expected about "
                      f"{len(draws) // len(tokens)} times): is your range one short, or a sequence left out?"
                      + (" (a sequence with one real token is no anchor, but its token is a negative like any other)"
                         if any(lengths[p // T] == 1 for p in never) else ""))
    share = {c: (draws // T == c).double().mean().item() for c in others}
    for c in others:
        want = lengths[c] / n_other
        expect(abs(share[c] - want) < 0.05 and (share[c] > 0) == (want > 0),
               f"negatives of sequence {b} come from sequence {c} in {100 * share[c]:.1f}% of draws, expected "
               f"{100 * want:.1f}% (it holds {lengths[c]} of the {n_other} real tokens of the other sequences): "
               f"draw uniformly over tokens, not over sequences" + (" (a sequence with one real token is no anchor, "
                                                                    "but its token is a negative like any other)"
                                                                    if lengths[c] == 1 else ""))
    ok, stat = chi2_ok(counts, torch.full((len(tokens),), len(draws) / len(tokens)))
    expect(ok, f"negatives are not uniform over the other sequences' real tokens (chi-square {stat:.0f} over "
               f"{len(tokens)} tokens; least drawn {int(counts.min())}, most {int(counts.max())} times)")


def check_pool_ends_drawn_like_the_rest(impl):
    """Small pools drawn from thousands of times: every real token of the other sequences at the same
    rate, the first and last of the pool too (rounding a uniform number to an index halves the ends)."""
    lengths, T, K = [3, 2, 4, 1, 3], 4, 3000
    real = padded(lengths, T, left=(1, 4))
    neg = call(impl.sample_negatives, real, K, torch.Generator().manual_seed(6))
    for b, n in enumerate(lengths):
        if n < 2:  # a lone token is no anchor: its negatives are never used
            continue
        draws = neg[b][real[b]].flatten()
        tokens = torch.cat([c * T + real[c].nonzero().flatten() for c in range(len(lengths)) if c != b])
        counts = torch.bincount(draws.clamp(min=0), minlength=len(lengths) * T)[tokens]
        expected = len(draws) / len(tokens)
        few = counts < 0.7 * expected
        low, seen = tokens[few].tolist(), ", ".join(str(int(c)) for c in counts[few])
        expect(not low, f"the negatives of sequence {b} drew {', '.join(where(p, T) for p in low)} about half as "
                        f"often as the other tokens of the pool ({seen} times in {len(draws)} draws, expected "
                        f"{expected:.0f}): rounding a uniform number "
                        f"to an index, round(u * (n - 1)), gives the two ends of the range half the chance; floor it "
                        f"(.long(), .floor()) or draw with torch.randint")


def check_generator_makes_it_reproducible(impl):
    """Every random number from `generator`: seeded alike, the same draws whatever PyTorch's global
    random state; other seeds, others; two calls with one generator, others (it advances). The batch is
    short and padded so that most positives need the fallback, whose draws must come from `generator` too."""
    real = padded([3, 4, 5, 6, 3, 4], 8, left=(1, 4))
    for name, arg in (("sample_positives", 7), ("sample_negatives", 7)):
        fn = getattr(impl, name)

        def draw(generator, global_seed=0):
            return call(fn, real, arg, generator, global_seed=global_seed)[real]  # padding slots: anything goes
        a, b = draw(torch.Generator().manual_seed(4)), draw(torch.Generator().manual_seed(4), global_seed=1)
        expect(torch.equal(a, b), f"{name}: two calls with generators seeded alike gave different indices when "
                                  f"PyTorch's global random state differed: something is drawn without `generator` "
                                  f"(torch.rand(..., generator=generator) for every random number"
                                  + (", the fallback's too)" if name == "sample_positives" else ")"))
        c = draw(torch.Generator().manual_seed(5))
        expect(not torch.equal(a, c), f"{name}: generators with other seeds gave the same indices; is `generator` used?")
        shared = torch.Generator().manual_seed(4)
        expect(not torch.equal(draw(shared), draw(shared)),
               f"{name}: two calls with one generator gave the same indices: draw from `generator` itself, which "
               f"advances with every draw, not from a copy of it or a new generator seeded from it (every step of "
               f"a run would get the same {'positives' if name == 'sample_positives' else 'negatives'})")


def test_shapes(impl):
    check_shapes(impl)


def test_positive_is_another_real_token_of_the_sequence(impl):
    check_positive_is_another_real_token_of_the_sequence(impl)


@pytest.mark.parametrize("window", [3, 5, 10])
def test_window_offsets_uniform(impl, window):
    check_window_offsets_uniform(impl, window)


def test_negatives_from_other_sequences_never_padding(impl):
    check_negatives_from_other_sequences_never_padding(impl)


def test_negatives_uniform_over_tokens(impl):
    check_negatives_uniform_over_tokens(impl)


def test_pool_ends_drawn_like_the_rest(impl):
    check_pool_ends_drawn_like_the_rest(impl)


def test_generator_makes_it_reproducible(impl):
    check_generator_makes_it_reproducible(impl)
