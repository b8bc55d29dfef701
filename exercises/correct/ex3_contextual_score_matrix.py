"""Exercise 3, a correct student solution: brute force with itertools over ordered pairs, the
closed form with one-hot sequence sums (torch.einsum) in float64."""
import itertools

import torch
import torch.nn.functional as F


def score_brute_force(h, real):
    B, T, _ = h.shape
    z = F.normalize(h.double(), dim=-1)
    tokens = [(b, t) for b in range(B) for t in range(T) if real[b, t]]
    intra, inter = [], []
    for (b, t), (c, s) in itertools.permutations(tokens, 2):
        (intra if b == c else inter).append(float(z[b, t] @ z[c, s]))
    i, o = sum(intra) / len(intra), sum(inter) / len(inter)
    return {"intra": i, "inter": o, "score": i - o}


def score_closed_form(h, real):
    z = F.normalize(h.double(), dim=-1) * real[..., None].double()
    n = real.double().sum(1)
    seq_sums = torch.einsum("bth->bh", z)
    intra_sum = (seq_sums.pow(2).sum(-1) - n).sum()
    all_sum = seq_sums.sum(0).pow(2).sum() - n.sum()
    intra_pairs = (n * (n - 1)).sum()
    inter_pairs = n.sum() ** 2 - n.sum() - intra_pairs
    i = (intra_sum / intra_pairs).item()
    o = ((all_sum - intra_sum) / inter_pairs).item()
    return {"intra": i, "inter": o, "score": i - o}
