"""Exercise 3: the contextual score (the paper's appendix A.3), first by brute force over pairs,
then in closed form (page: ex3_contextual_score.md).

Check your solution:  python -m pytest exercises/test_ex3_contextual_score.py --student
Both functions return {"intra": ..., "inter": ..., "score": intra - inter} as Python floats.
h may be bfloat16 (a model run under autocast): compute in float64 (h.double()).
"""
import torch
import torch.nn.functional as F


def score_brute_force(h, real):
    """h: (B, T, H) last-layer states of one batch; real: (B, T) bool.

    intra: mean cosine over pairs of two *distinct* real tokens of the same sequence;
    inter: mean cosine over pairs of real tokens of *different* sequences.
    Write it as loops over pairs of tokens (slow, obviously right).
    """
    raise NotImplementedError


def score_closed_form(h, real):
    """The same numbers without any N x N matrix: for unit vectors z_1..z_n,
    sum over ordered pairs a != b of z_a . z_b  =  |z_1 + ... + z_n|^2 - n.
    Apply it to each sequence (intra) and to the whole batch (all pairs), then subtract.
    """
    raise NotImplementedError
