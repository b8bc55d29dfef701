"""Exercise 2, a correct student solution with loops and randint: positives mirrored at the edges
(an offset that falls off one side is taken on the other side, which is another real token of
the same sequence), negatives from a per-sequence pool; padding slots hold -1."""
import torch


def sample_positives(real, window, generator=None):
    B, T = real.shape
    w = window // 2
    out = torch.full((B, T), -1, dtype=torch.long)  # padding slots: never used
    for b in range(B):
        slots = real[b].nonzero().flatten().tolist()
        if len(slots) < 2:
            continue
        for t in slots:
            d = int(torch.randint(1, w + 1, (1,), generator=generator)) * (1 if torch.rand(1, generator=generator) < 0.5 else -1)
            for j in (t + d, t - d):  # the other side if it falls off the sequence
                if 0 <= j < T and real[b, j]:
                    break
            else:
                j = [s for s in slots if s != t][int(torch.randint(len(slots) - 1, (1,), generator=generator))]
            out[b, t] = b * T + j
    return out


def sample_negatives(real, num_negatives, generator=None):
    B, T = real.shape
    out = torch.full((B, T, num_negatives), -1, dtype=torch.long)
    for b in range(B):
        pool = torch.tensor([c * T + t for c in range(B) if c != b for t in range(T) if real[c, t]])
        picks = torch.randint(len(pool), (int(real[b].sum()), num_negatives), generator=generator)
        out[b, real[b]] = pool[picks]
    return out
