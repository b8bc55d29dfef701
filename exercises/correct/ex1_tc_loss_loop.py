"""Exercise 1, a correct student solution: Eq. 3-4 as a loop over anchors, F.cosine_similarity,
the log-softmax written out."""
import torch
import torch.nn.functional as F

from taco import sample_negatives, sample_positives


def tc_loss(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    B, T, H = h.shape
    real = torch.ones(B, T, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    pos = sample_positives(real, window, generator)
    neg = sample_negatives(real, num_negatives, generator)
    g = (h - e).reshape(B * T, H)
    terms = []
    for b in range(B):
        if real[b].sum() < 2:
            continue
        for t in range(T):
            if not real[b, t] or (positions is not None and not positions[b, t]):
                continue
            anchor = g[b * T + t]
            others = g[torch.cat([pos[b, t].reshape(1), neg[b, t]])].detach()  # positive first, then the K negatives
            logits = F.cosine_similarity(anchor[None, :], others, dim=-1) / temperature
            terms.append(torch.logsumexp(logits, 0) - logits[0])
    if not terms:  # no anchor (e.g. nothing masked under --tc_positions masked): 0, not nan
        return (h - e).sum() * 0.0
    return torch.stack(terms).mean()
