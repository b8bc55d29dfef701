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


# ----------------------------------------------------------------------------- written as students write them
# Each is a whole tc_loss with one plausible mistake (marked "# BUG"). Most give the right *value* on
# some inputs; the checks must still name the mistake.

def _anchors(real, positions):
    anchors = real & (real.sum(1, keepdim=True) >= 2)
    return anchors if positions is None else anchors & positions.bool()


def _real(h, attention_mask):
    B, T, _ = h.shape
    return torch.ones(B, T, dtype=torch.bool) if attention_mask is None else attention_mask.bool()


def negatives_off_the_graph(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                            positions=None):
    """Bug: the negatives' cosines are detached as a whole: the anchor is never pushed away from them."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cos_pos = (z * z[pos.reshape(-1)].detach()).sum(-1, keepdim=True)
    cos_neg = torch.einsum("nh,nkh->nk", z, z[neg.reshape(B * T, -1)]).detach()  # BUG
    loss = F.cross_entropy(torch.cat([cos_pos, cos_neg], 1) / temperature, torch.zeros(B * T, dtype=torch.long),
                           reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def positive_off_the_graph(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                           positions=None):
    """Bug: the positive's cosine is computed under no_grad: the anchor is never pulled towards it."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    with torch.no_grad():  # BUG: meant to detach the positive, detaches its cosine
        cos_pos = (z * z[pos.reshape(-1)]).sum(-1, keepdim=True)
    cos_neg = torch.einsum("nh,nkh->nk", z, z.detach()[neg.reshape(B * T, -1)])
    loss = F.cross_entropy(torch.cat([cos_pos, cos_neg], 1) / temperature, torch.zeros(B * T, dtype=torch.long),
                           reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def norm_detached(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                  positions=None):
    """Bug: g is divided by a detached norm (to 'save memory'): the value is right, the gradient is not."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    g = (h - e).reshape(B * T, H)
    z = g / g.norm(dim=-1, keepdim=True).detach()  # BUG
    keys = z.detach()
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, keys[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def e_detached(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: g = h - e.detach(), 'e is only the input': the embeddings get no gradient from TC."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e.detach(), dim=-1).reshape(B * T, H)  # BUG
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def h_detached(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: g = h.detach() - e: TC trains only the embeddings, never the encoder."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h.detach() - e, dim=-1).reshape(B * T, H)  # BUG
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def in_place_g(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: h -= e to save memory: the caller's h (which the MLM head reads) is changed."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    h -= e  # BUG
    z = F.normalize(h, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def summed(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None, positions=None):
    """Bug: the sum over anchors (Eq. 4's 1/N forgotten)."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].sum()  # BUG


def temperature_multiplies(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                           positions=None):
    """Bug: logits = cosines * tau."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos * temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")  # BUG
    return loss[_anchors(real, positions).reshape(-1)].mean()


def temperature_ignored(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                        positions=None):
    """Bug: the paper's tau = 0.07 written in, the argument ignored."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / 0.07, torch.zeros(B * T, dtype=torch.long), reduction="none")  # BUG
    return loss[_anchors(real, positions).reshape(-1)].mean()


def positive_last(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                  positions=None):
    """Bug: the negatives first and the positive last, but the target still 0 (a negative)."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([neg.reshape(B * T, -1), pos.reshape(-1, 1)], 1)  # BUG: target below is still 0
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def padding_anchors(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                    positions=None):
    """Bug: the mask goes to the samplers, but the mean is over every token, padding included."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    anchors = torch.ones(B * T, dtype=torch.bool) if positions is None else positions.reshape(-1).bool()  # BUG
    return loss[anchors].mean()


def positions_replace_the_mask(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                               positions=None):
    """Bug: when `positions` is given it replaces the real-token mask instead of narrowing it."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    anchors = _anchors(real, None) if positions is None else positions.bool()  # BUG
    return loss[anchors.reshape(-1)].mean()


def positions_ignored(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                      positions=None):
    """Bug: `positions` is accepted and never used."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, None).reshape(-1)].mean()  # BUG


def lone_tokens_are_anchors(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                            positions=None):
    """Bug: every real token is an anchor, also the only token of a sequence (which has no positive)."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    anchors = real if positions is None else real & positions.bool()  # BUG: no ">= 2 real tokens"
    return loss[anchors.reshape(-1)].mean()


def mean_per_sequence(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                      positions=None):
    """Bug: the mean over each sequence's anchors, then over sequences (short sequences weigh more)."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none").reshape(B, T)
    anchors = _anchors(real, positions).float()
    per_seq = (loss * anchors).sum(1) / anchors.sum(1).clamp(min=1)  # BUG
    return per_seq[anchors.sum(1) > 0].mean()


def normalised_over_tokens(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                           positions=None):
    """Bug: F.normalize(g, dim=1) on (B, T, H): the norm runs over the tokens, not the hidden dimension."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=1).reshape(B * T, H)  # BUG
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def window_not_passed(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                      positions=None):
    """Bug: the paper's W = 5 written into the sampler call, the argument ignored."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, 5, generator), sample_negatives(real, num_negatives, generator)  # BUG
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def generator_not_passed(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                         positions=None):
    """Bug: the samplers draw from PyTorch's global random state, not from `generator`."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window), sample_negatives(real, num_negatives)  # BUG
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def softmax_over_anchors(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                         positions=None):
    """Bug: log_softmax over the wrong dimension (over anchors instead of over the 1 + K candidates)."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    anchors = _anchors(real, positions).reshape(-1)
    logp = torch.log_softmax(cos[anchors] / temperature, dim=0)  # BUG: dim=1
    return -logp[:, 0].mean()


def temperature_on_the_positive_only(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
                                     generator=None, positions=None):
    """Bug: the positive's cosine is divided by tau, the negatives' are not."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cos_pos = (z * z.detach()[pos.reshape(-1)]).sum(-1, keepdim=True) / temperature
    cos_neg = torch.einsum("nh,nkh->nk", z, z.detach()[neg.reshape(B * T, -1)])  # BUG: not divided by tau
    loss = F.cross_entropy(torch.cat([cos_pos, cos_neg], 1), torch.zeros(B * T, dtype=torch.long), reduction="none")
    return loss[_anchors(real, positions).reshape(-1)].mean()


def positive_not_in_the_denominator(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
                                    generator=None, positions=None):
    """Bug: -log(e^{s+} / sum_k e^{s_k}): the denominator sums the negatives only."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    s_pos = (z * z.detach()[pos.reshape(-1)]).sum(-1) / temperature
    s_neg = torch.einsum("nh,nkh->nk", z, z.detach()[neg.reshape(B * T, -1)]) / temperature
    loss = torch.logsumexp(s_neg, dim=1) - s_pos  # BUG: the positive belongs in the logsumexp
    return loss[_anchors(real, positions).reshape(-1)].mean()


# ---- the edges of what training meets: no anchor, a low temperature, g = 0; and a loss off by its form

def _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions):
    """The parts the wrong solutions below share, written right: -> (per-token cosines (B*T, 1+K), anchors (B*T,))."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    return torch.einsum("nh,njh->nj", z, z.detach()[cols]), _anchors(real, positions).reshape(-1)


def nan_without_anchors(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                        positions=None):
    """Bug: the mean over anchors as loss[anchors].mean(): nan when no token is an anchor (--tc_positions masked
    on a micro-batch where nothing is masked)."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    loss = F.cross_entropy(cos / temperature, torch.zeros(len(cos), dtype=torch.long), reduction="none")
    return loss[anchors].mean()  # BUG: 0 / 0 with no anchor


def softmax_without_the_max(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                            positions=None):
    """Bug: InfoNCE written as -log(exp(s+) / sum exp(s)): exp(1 / 0.01) overflows float32 at TaCL's tau."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    logits = (cos / temperature).exp()  # BUG: the largest logit is not subtracted first
    loss = -torch.log(logits[:, 0] / logits.sum(1))
    return (loss * anchors).sum() / anchors.sum().clamp(min=1)


def normalised_without_epsilon(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
                               generator=None, positions=None):
    """Bug: g / g.norm(): 0 / 0 = nan where g = h - e is exactly 0."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    g = h - e
    z = (g / g.norm(dim=-1, keepdim=True)).reshape(B * T, H)  # BUG: no epsilon
    cols = torch.cat([pos.reshape(-1, 1), neg.reshape(B * T, -1)], 1)
    cos = torch.einsum("nh,njh->nj", z, z.detach()[cols])
    loss = F.cross_entropy(cos / temperature, torch.zeros(B * T, dtype=torch.long), reduction="none")
    anchors = _anchors(real, positions).reshape(-1)
    return (loss * anchors).sum() / anchors.sum().clamp(min=1)


def temperature_twice(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                      positions=None):
    """Bug: the cosines divided by tau, and the logits by tau again."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    logits = cos / temperature
    loss = F.cross_entropy(logits / temperature, torch.zeros(len(cos), dtype=torch.long), reduction="none")  # BUG
    return (loss * anchors).sum() / anchors.sum().clamp(min=1)


def loss_negated(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                 positions=None):
    """Bug: the log-softmax of the positive, not its negative: the loss is <= 0 and training pushes the wrong way."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    logp = torch.log_softmax(cos / temperature, dim=1)[:, 0]  # BUG: minus sign missing
    return (logp * anchors).sum() / anchors.sum().clamp(min=1)


def anchor_is_its_own_positive(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
                               generator=None, positions=None):
    """Bug: the positive's cosine is the anchor with itself (z * z), not with z[pos]."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)
    cos_pos = (z * z.detach()).sum(-1, keepdim=True)  # BUG: z.detach()[pos.reshape(-1)]
    cos_neg = torch.einsum("nh,nkh->nk", z, z.detach()[neg.reshape(B * T, -1)])
    loss = F.cross_entropy(torch.cat([cos_pos, cos_neg], 1) / temperature, torch.zeros(B * T, dtype=torch.long),
                           reduction="none")
    anchors = _anchors(real, positions).reshape(-1)
    return (loss * anchors).sum() / anchors.sum().clamp(min=1)


def log_of_softmax(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                   positions=None):
    """Bug: -log(softmax(...))[:, 0]: the softmax is stable, but a positive's probability of e^-200 (tau = 0.01, the
    positive pointing away) is 0 in float32, and -log(0) is inf."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    loss = -torch.log(torch.softmax(cos / temperature, dim=1)[:, 0])  # BUG: torch.log_softmax in one step
    return (loss * anchors).sum() / anchors.sum().clamp(min=1)


def max_over_the_whole_matrix(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                              positions=None):
    """Bug: the log-sum-exp written out with the largest logit of the whole matrix subtracted, not each row's: a row
    whose logits all lie far below it underflows to exp = 0."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    logits = cos / temperature
    logits = logits - logits.max()  # BUG: logits.max(dim=1, keepdim=True).values
    loss = logits.exp().sum(1).log() - logits[:, 0]
    return (loss * anchors).sum() / anchors.sum().clamp(min=1)


def zero_without_a_graph(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                         positions=None):
    """Bug: no anchor handled by returning torch.tensor(0.0): a constant with no graph, on the CPU whatever h's device."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    if not anchors.any():
        return torch.tensor(0.0)  # BUG
    loss = F.cross_entropy(cos / temperature, torch.zeros(len(cos), dtype=torch.long), reduction="none")
    return loss[anchors].mean()


def per_token_losses(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                     positions=None):
    """Not finished: steps 1-4 done, the per-token losses returned without step 5's mean over anchors."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    return F.cross_entropy(cos / temperature, torch.zeros(len(cos), dtype=torch.long), reduction="none")  # BUG


def stops_after_the_samplers(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                             positions=None):
    """Not finished: steps 1-2 written, the stub's raise still at the end."""
    B, T, H = h.shape
    real = _real(h, attention_mask)
    z = F.normalize(h - e, dim=-1).reshape(B * T, H)  # noqa: F841
    pos, neg = sample_positives(real, window, generator), sample_negatives(real, num_negatives, generator)  # noqa: F841
    raise NotImplementedError  # BUG: steps 3-5 to go


def zero_as_a_new_leaf(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07, generator=None,
                       positions=None):
    """Bug: no anchor handled by a new tensor that requires grad: backward runs, but nothing reaches the model, and
    the zero sits on the CPU whatever h's device."""
    cos, anchors = _right_loss_but(h, e, attention_mask, window, num_negatives, temperature, generator, positions)
    if not anchors.any():
        return torch.tensor(0.0, requires_grad=True)  # BUG
    loss = F.cross_entropy(cos / temperature, torch.zeros(len(cos), dtype=torch.long), reduction="none")
    return loss[anchors].mean()
