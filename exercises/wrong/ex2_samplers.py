"""Wrong samplers, one typical bug each (test fixtures for the checks of exercise 2)."""
import torch


def _positives(real, window, generator, reach):
    """Offsets uniform over +-1..+-reach; outside the sequence or on padding, the first real
    other token of the sequence (a simple, valid fallback)."""
    B, T = real.shape
    t = torch.arange(T)
    slot = torch.randint(0, 2 * reach, (B, T), generator=generator)
    pos = t + slot - reach + (slot >= reach).long()
    inside = (pos >= 0) & (pos < T)
    inside &= real.gather(1, pos.clamp(0, T - 1))
    pos = torch.where(inside, pos, torch.where(t == 0, 1, 0))
    return pos + T * torch.arange(B)[:, None]


def window_too_wide(real, window, generator=None):
    """Bug: offsets up to W//2 + 1 (the window counted as W positions either side, off by one)."""
    return _positives(real, window, generator, window // 2 + 1)


def _negatives(real, num_negatives, generator, own_too=False, per_sequence=False):
    B, T = real.shape
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        seqs = [c for c in range(B) if c != b or own_too]
        if per_sequence:  # a sequence uniformly, then a token of it
            pick = torch.randint(0, len(seqs), (T, num_negatives), generator=generator)
            flat = torch.empty_like(pick)
            for i, c in enumerate(seqs):
                n = int(real[c].sum())
                flat = torch.where(pick == i, c * T + torch.randint(0, n, pick.shape, generator=generator), flat)
        else:
            pool = torch.cat([c * T + real[c].nonzero().flatten() for c in seqs])
            flat = pool[torch.randint(0, len(pool), (T, num_negatives), generator=generator)]
        out[b] = flat
    return out


def negatives_from_own_sequence_too(real, num_negatives, generator=None):
    """Bug: negatives drawn from every real token of the batch, the anchor's own sequence included."""
    return _negatives(real, num_negatives, generator, own_too=True)


def negatives_uniform_over_sequences(real, num_negatives, generator=None):
    """Bug: a sequence first, then a token of it: tokens of short sequences are drawn too often."""
    return _negatives(real, num_negatives, generator, per_sequence=True)
