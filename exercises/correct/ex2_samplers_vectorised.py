"""Exercise 2, a correct student solution, vectorised: positives by a slot that skips 0, the
fallback by a random rank among the other real tokens; negatives as one index into the list of
all real tokens with the own sequence's block stepped over (the page's hints)."""
import torch


def sample_positives(real, window, generator=None):
    B, T = real.shape
    w = window // 2
    slot = (torch.rand(B, T, generator=generator) * (2 * w)).long()
    t = torch.arange(T)
    pos = t + slot - w + (slot >= w).long()
    inside = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    n = real.sum(1, keepdim=True)
    rank = (torch.rand(B, T, generator=generator) * (n - 1).clamp(min=1)).long()  # among the others
    rank = rank + (rank >= real.long().cumsum(1) - 1).long()  # skip the anchor's own rank
    order = torch.argsort((~real).long(), dim=1, stable=True)  # real positions first, in order
    other = order.gather(1, rank.clamp(max=T - 1))
    return torch.where(inside, pos, other) + T * torch.arange(B)[:, None]


def sample_negatives(real, num_negatives, generator=None):
    B, T = real.shape
    tokens = real.flatten().nonzero().flatten()
    n = real.sum(1).view(B, 1, 1)
    start = n.cumsum(0) - n
    k = (torch.rand(B, T, num_negatives, generator=generator) * (len(tokens) - n)).long()
    k = k + n * (k >= start).long()
    return tokens[k]
