"""Wrong TC losses, one typical bug each (test fixtures for the checks of exercise 1)."""
import torch
import torch.nn.functional as F

from taco import sample_negatives, sample_positives


def _tc_loss(h, e, attention_mask, window, num_negatives, temperature, generator, positions,
             use_g=True, normalise=True, detach=True, sign=1.0):
    """Eq. 3-4 written plainly; the keyword switches put one bug in."""
    B, T, H = h.shape
    real = torch.ones(B, T, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    pos = sample_positives(real, window, generator)
    neg = sample_negatives(real, num_negatives, generator)
    g = h - e if use_g else h
    z = F.normalize(g, dim=-1) if normalise else g
    z = z.reshape(B * T, H)
    targets = z.detach() if detach else z
    sims = torch.cat([(z * targets[pos.reshape(-1)]).sum(-1, keepdim=True),
                      torch.einsum("nh,nkh->nk", z, targets[neg.reshape(B * T, -1)])], dim=1)
    loss = F.cross_entropy(sign * sims / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    anchors = real & (real.sum(1, keepdim=True) >= 2)
    if positions is not None:
        anchors &= positions.bool()
    return loss[anchors.reshape(-1)].mean()


def no_detach(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: the positive and negatives are not detached, so they are pulled and pushed too."""
    return _tc_loss(h, e, attention_mask, window, num_negatives, temperature, generator, positions, detach=False)


def flipped_sign(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: the similarities enter the softmax with a minus sign (the anchor is pushed from its positive)."""
    return _tc_loss(h, e, attention_mask, window, num_negatives, temperature, generator, positions, sign=-1.0)


def uses_h(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: compares the hidden states h instead of the global parts g = h - e."""
    return _tc_loss(h, e, attention_mask, window, num_negatives, temperature, generator, positions, use_g=False)


def dot_product(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: dot products of g instead of cosines (g is not normalised)."""
    return _tc_loss(h, e, attention_mask, window, num_negatives, temperature, generator, positions, normalise=False)
