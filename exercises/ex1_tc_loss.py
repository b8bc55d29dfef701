"""Exercise 1: the token-alignment contrastive (TC) loss, the paper's Eq. 4 over g of Eq. 3 (page: ex1_tc_loss.md).

Check your solution:  python -m pytest exercises/test_ex1_tc_loss.py --student
"""
import torch
import torch.nn.functional as F

from taco import sample_negatives, sample_positives  # given; after exercise 2, your own:
# from exercises.ex2_samplers import sample_negatives, sample_positives


def tc_loss(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
            generator=None, positions=None):
    """The TC loss averaged over anchors.

    h: last-layer hidden states (B, T, H); e: embedding-layer output (B, T, H);
    attention_mask: (B, T), 1 = real token, 0 = padding (None: every token is real);
    positions: optional (B, T) bool, the only tokens that are anchors (None: every real token);
    generator: a torch.Generator; pass it to both samplers (positives first, then negatives).

    1. g = h - e, the global part of each token (out of place); normalise it.
    2. positives: sample_positives(real, window, generator) -> (B, T) flat indices into B*T;
       negatives: sample_negatives(real, num_negatives, generator) -> (B, T, K).
       (Call them by these names: the checks record what they return, then recompute Eq. 3-4
       and its gradients token by token with your positives and negatives.)
    3. cosine of each anchor with its positive and its K negatives; the positive and the
       negatives are targets: detach them, only the anchor receives gradient.
    4. logits = cosines / temperature, positive first; cross-entropy with target 0 (Eq. 4).
    5. the mean over anchors: real tokens (in `positions`, if given) of sequences with >= 2 real tokens.
       With no anchor at all (`--tc_positions masked` on a micro-batch where nothing is masked) return 0, not nan.
    The edges training meets: tau as low as 0.01 (TaCL's: logits up to 100, beyond exp's float32 range) and
    tokens whose g is exactly 0 (normalise with an epsilon, as F.normalize does).
    Returns a 0-dim tensor that carries the gradient.
    """
    raise NotImplementedError
