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
    first = real.long().argmax(1, keepdim=True)  # the first real token; the second one for the first
    pos = torch.where(inside, pos, torch.where(t == first, first + 1, first))
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
                where = real[c].nonzero().flatten()  # sequence c's real positions
                flat = torch.where(pick == i, c * T + where[torch.randint(0, n, pick.shape, generator=generator)], flat)
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


# ----------------------------------------------------------------------------- written as students write them
# Each is a whole sampler with one plausible mistake (marked "# BUG").

def _offsets(B, T, w, generator):
    """Offsets uniform over -w..-1, 1..w (correct), one per token."""
    slot = (torch.rand(B, T, generator=generator) * 2 * w).long()
    return slot - w + (slot >= w).long()


def positives_fallback_assumes_right_padding(real, window, generator=None):
    """Bug: at an edge or on padding, fall back to token 1 (or 0): fine for right padding, padding on the left."""
    B, T = real.shape
    t = torch.arange(T)
    pos = t + _offsets(B, T, window // 2, generator)
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    pos = torch.where(ok, pos, torch.where(t == 1, 0, 1))  # BUG: assumes tokens 0 and 1 are real
    return pos + T * torch.arange(B)[:, None]


def positives_clamped_into_the_sequence(real, window, generator=None):
    """Bug: an offset that leaves the sequence is clamped to its first / last real token, which
    can be the anchor itself."""
    B, T = real.shape
    first = real.long().argmax(1, keepdim=True)
    last = T - 1 - real.flip(1).long().argmax(1, keepdim=True)
    pos = torch.arange(T) + _offsets(B, T, window // 2, generator)
    pos = torch.maximum(torch.minimum(pos, last), first)  # BUG: clamping onto the anchor at the edges
    return pos + T * torch.arange(B)[:, None]


def positives_offset_zero_possible(real, window, generator=None):
    """Bug: offsets drawn from -w..w-1 with randint, 0 not skipped (and +w never drawn)."""
    B, T = real.shape
    w = window // 2
    d = torch.randint(-w, w, (B, T), generator=generator)  # BUG
    pos = torch.arange(T) + d
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    other = torch.where(real[:, :1], 0, real.long().argmax(1, keepdim=True))
    pos = torch.where(ok, pos, other)
    return pos + T * torch.arange(B)[:, None]


def positives_land_on_padding(real, window, generator=None):
    """Bug: only the sequence's bounds are checked; an offset onto padding is kept."""
    B, T = real.shape
    t = torch.arange(T)
    pos = t + _offsets(B, T, window // 2, generator)
    pos = torch.where((pos >= 0) & (pos < T), pos, t - (pos - t))  # mirror at the bounds; BUG: padding not checked
    return pos + T * torch.arange(B)[:, None]


def positives_wrap_around(real, window, generator=None):
    """Bug: (t + d) % T: off the end of the block wraps to its start, which may be padding."""
    B, T = real.shape
    pos = (torch.arange(T) + _offsets(B, T, window // 2, generator)) % T  # BUG
    return pos + T * torch.arange(B)[:, None]


def positives_one_side_only(real, window, generator=None):
    """Bug: offsets 1..w only (a forward window), mirrored at the end of the sequence."""
    B, T = real.shape
    n = real.sum(1, keepdim=True)
    first = real.long().argmax(1, keepdim=True)
    d = torch.randint(1, window // 2 + 1, (B, T), generator=generator)  # BUG: never negative
    pos = torch.arange(T) + d
    pos = torch.where(pos < first + n, pos, torch.arange(T) - d)
    pos = torch.where(real.gather(1, pos.clamp(0, T - 1)) & (pos >= 0), pos, first)
    pos = torch.where(pos == torch.arange(T), first + 1, pos)
    return pos + T * torch.arange(B)[:, None]


def positives_without_flat_offset(real, window, generator=None):
    """Bug: positions within the sequence are returned, not flat indices b * T + t."""
    B, T = real.shape
    t = torch.arange(T)
    pos = t + _offsets(B, T, window // 2, generator)
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    first = real.long().argmax(1, keepdim=True)
    return torch.where(ok, pos, torch.where(t == first, first + 1, first))  # BUG: no + b * T


def positives_one_offset_per_sequence(real, window, generator=None):
    """Bug: one offset drawn per sequence and shared by all its tokens."""
    B, T = real.shape
    t = torch.arange(T)
    pos = t + _offsets(B, 1, window // 2, generator)  # BUG: (B, 1)
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    first = real.long().argmax(1, keepdim=True)
    pos = torch.where(ok, pos, torch.where(t == first, first + 1, first))
    return pos + T * torch.arange(B)[:, None]


def negatives_skip_off_by_one(real, num_negatives, generator=None):
    """Bug: the reference's skip with > instead of >=: when the draw lands exactly where the own
    sequence starts, the own sequence's first token comes out (a rare event, about 1 draw in N)."""
    B, T = real.shape
    tokens = real.reshape(-1).nonzero().squeeze(1)
    n = real.sum(1)[:, None, None]
    start = n.cumsum(0) - n
    k = (torch.rand(B, T, num_negatives, generator=generator) * (len(tokens) - n)).long()
    k = k + n * (k > start).long()  # BUG: >= start
    return tokens[k.clamp(max=len(tokens) - 1)]


def negatives_pool_assumes_right_padding(real, num_negatives, generator=None):
    """Bug: the other sequences' tokens are taken as positions 0..n-1 (right padding assumed)."""
    B, T = real.shape
    n = real.sum(1)
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        pool = torch.cat([c * T + torch.arange(int(n[c])) for c in range(B) if c != b])  # BUG
        out[b] = pool[torch.randint(len(pool), (T, num_negatives), generator=generator)]
    return out


def negatives_skip_lone_sequences(real, num_negatives, generator=None):
    """Bug: sequences with fewer than 2 real tokens are left out of the pool ('they are no anchors')."""
    B, T = real.shape
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        pool = torch.cat([c * T + real[c].nonzero().flatten() for c in range(B)
                          if c != b and real[c].sum() >= 2])  # BUG
        out[b] = pool[torch.randint(len(pool), (T, num_negatives), generator=generator)]
    return out


def negatives_range_one_short(real, num_negatives, generator=None):
    """Bug: randint(0, len(pool) - 1): randint's upper bound is already exclusive, the last token is never drawn."""
    B, T = real.shape
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        pool = torch.cat([c * T + real[c].nonzero().flatten() for c in range(B) if c != b])
        out[b] = pool[torch.randint(0, len(pool) - 1, (T, num_negatives), generator=generator)]  # BUG
    return out


def negatives_global_random_state(real, num_negatives, generator=None):
    """Bug: torch.randint without the generator: runs cannot be reproduced."""
    B, T = real.shape
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        pool = torch.cat([c * T + real[c].nonzero().flatten() for c in range(B) if c != b])
        out[b] = pool[torch.randint(len(pool), (T, num_negatives))]  # BUG: no generator
    return out


def negatives_include_padding(real, num_negatives, generator=None):
    """Bug: every slot of the other sequences, padding included."""
    B, T = real.shape
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        pool = torch.cat([c * T + torch.arange(T) for c in range(B) if c != b])  # BUG
        out[b] = pool[torch.randint(len(pool), (T, num_negatives), generator=generator)]
    return out


def negatives_shared_by_the_sequence(real, num_negatives, generator=None):
    """Bug: K negatives drawn once per sequence and given to all its tokens."""
    B, T = real.shape
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        pool = torch.cat([c * T + real[c].nonzero().flatten() for c in range(B) if c != b])
        out[b] = pool[torch.randint(len(pool), (num_negatives,), generator=generator)]  # BUG: broadcast over T
    return out


def positives_fallback_may_be_the_anchor(real, window, generator=None):
    """Bug: the fallback is any real token of the sequence, the anchor itself included."""
    B, T = real.shape
    t = torch.arange(T)
    pos = t + _offsets(B, T, window // 2, generator)
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    n = real.sum(1, keepdim=True)
    rank = (torch.rand(B, T, generator=generator) * n).long()  # BUG: one of all n, not of the n - 1 others
    order = torch.argsort((~real).long(), dim=1, stable=True)
    pos = torch.where(ok, pos, order.gather(1, rank.clamp(max=T - 1)))
    return pos + T * torch.arange(B)[:, None]


def negatives_from_the_next_sequence(real, num_negatives, generator=None):
    """Bug: the negatives of sequence b come from sequence b + 1 only (wrapping around)."""
    B, T = real.shape
    out = torch.empty(B, T, num_negatives, dtype=torch.long)
    for b in range(B):
        c = (b + 1) % B  # BUG: one other sequence, not all of them
        pool = c * T + real[c].nonzero().flatten()
        out[b] = pool[torch.randint(len(pool), (T, num_negatives), generator=generator)]
    return out


def positives_same_offsets_in_every_sequence(real, window, generator=None):
    """Bug: one offset per position, shape (T,), shared by every sequence of the batch."""
    B, T = real.shape
    t = torch.arange(T)
    pos = t + _offsets(1, T, window // 2, generator)  # BUG: (1, T), broadcast over B
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1).expand(B, T))
    first = real.long().argmax(1, keepdim=True)
    pos = torch.where(ok, pos, torch.where(t == first, first + 1, first))
    return pos + T * torch.arange(B)[:, None]


def negatives_squeezed(real, num_negatives, generator=None):
    """Bug: .squeeze() on the result: with K = 1 the last dimension is gone, (B, T) instead of (B, T, 1)."""
    B, T = real.shape
    tokens = real.reshape(-1).nonzero().squeeze(1)
    n = real.sum(1)[:, None, None]
    start = n.cumsum(0) - n
    k = (torch.rand(B, T, num_negatives, generator=generator) * (len(tokens) - n)).long()
    k = k + n * (k >= start).long()
    return tokens[k.clamp(max=len(tokens) - 1)].squeeze()  # BUG: squeeze() drops K = 1


def positives_window_minus_one_halved(real, window, generator=None):
    """Bug: w = (W - 1) // 2, right for an odd W; taco.py counts an even W as W + 1 (W = 10: 5 either side, not 4)."""
    return _positives(real, window, generator, (window - 1) // 2)  # BUG: window // 2


def positives_offset_rounded(real, window, generator=None):
    """Bug: the offset's slot rounded, round(u * (2w - 1)): the outermost offsets -w and w at half the rate."""
    B, T = real.shape
    w = window // 2
    slot = (torch.rand(B, T, generator=generator) * (2 * w - 1)).round().long()  # BUG: floor of u * 2w
    t = torch.arange(T)
    pos = t + slot - w + (slot >= w).long()
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    first = real.long().argmax(1, keepdim=True)
    pos = torch.where(ok, pos, torch.where(t == first, first + 1, first))
    return pos + T * torch.arange(B)[:, None]


def positives_fallback_from_the_global_state(real, window, generator=None):
    """Bug: the offsets from `generator`, the fallback's random other token from PyTorch's global state
    (torch.randint without generator=): which runs reproduce depends on how often the fallback is needed."""
    B, T = real.shape
    t = torch.arange(T)
    pos = t + _offsets(B, T, window // 2, generator)
    ok = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    n = real.sum(1, keepdim=True)
    rank = torch.randint(0, 1 << 30, (B, T)) % (n - 1).clamp(min=1)  # BUG: no generator
    rank = rank + (rank >= real.long().cumsum(1) - 1).long()
    order = torch.argsort((~real).long(), dim=1, stable=True)
    pos = torch.where(ok, pos, order.gather(1, rank.clamp(max=T - 1)))
    return pos + T * torch.arange(B)[:, None]


def negatives_rounded_index(real, num_negatives, generator=None):
    """Bug: the index into the pool rounded, round(u * (N - n - 1)): the pool's first and last token at half the rate."""
    B, T = real.shape
    tokens = real.reshape(-1).nonzero().squeeze(1)
    n = real.sum(1)[:, None, None]
    start = n.cumsum(0) - n
    k = (torch.rand(B, T, num_negatives, generator=generator) * (len(tokens) - n - 1)).round().long()  # BUG
    k = k + n * (k >= start).long()
    return tokens[k.clamp(max=len(tokens) - 1)]


def negatives_one_draw_repeated(real, num_negatives, generator=None):
    """Bug: one negative drawn per anchor and repeated K times (expand), not K independent draws."""
    B, T = real.shape
    tokens = real.reshape(-1).nonzero().squeeze(1)
    n = real.sum(1)[:, None, None]
    start = n.cumsum(0) - n
    k = (torch.rand(B, T, 1, generator=generator) * (len(tokens) - n)).long()  # BUG: (B, T, K)
    k = k + n * (k >= start).long()
    return tokens[k.clamp(max=len(tokens) - 1)].expand(B, T, num_negatives)


def negatives_from_a_copied_generator(real, num_negatives, generator=None):
    """Bug: the draws from a copy of `generator` ("so as not to disturb it"): the same negatives on every call."""
    gen = torch.Generator()
    gen.set_state(generator.get_state())  # BUG: draw from generator itself
    B, T = real.shape
    tokens = real.reshape(-1).nonzero().squeeze(1)
    n = real.sum(1)[:, None, None]
    start = n.cumsum(0) - n
    k = (torch.rand(B, T, num_negatives, generator=gen) * (len(tokens) - n)).long()
    k = k + n * (k >= start).long()
    return tokens[k.clamp(max=len(tokens) - 1)]
