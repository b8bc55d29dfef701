"""Exercise 2: the samplers of the TC loss, positives in a window and negatives from other
sequences (page: ex2_samplers.md).

Check your solution:  python -m pytest exercises/test_ex2_samplers.py --student
Indices are *flat*: token t of sequence b is b * T + t, so that a (B*T, H) matrix can be indexed.
Draw every random number from `generator` (torch.rand(..., generator=generator)).
"""
import torch


def sample_positives(real, window, generator=None):
    """One positive per token: another real token of the same sequence, at an offset drawn
    uniformly from -(W//2), ..., -1, 1, ..., W//2 (W = window; mind the brackets: -5//2 is -3 in
    Python). An even W counts as W + 1, as in taco.py: W = 10 reaches 5 positions either side. Where
    that offset leaves the sequence or lands on padding, any real token of the same sequence other
    than the anchor will do.

    real: (B, T) bool, True = real token. Returns (B, T) long flat indices. At padding slots, and
    for a sequence with fewer than 2 real tokens, return anything (e.g. -1): it is never used.
    """
    raise NotImplementedError


def sample_negatives(real, num_negatives, generator=None):
    """K negatives per token: real tokens of the *other* sequences of the batch, drawn uniformly
    over those tokens, with replacement. Never padding, never the anchor's own sequence.

    real: (B, T) bool. Returns (B, T, K) long flat indices; at padding slots anything (never used).
    """
    raise NotImplementedError
