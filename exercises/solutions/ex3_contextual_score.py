"""Exercise 3, reference: pairs by brute force, and the repository's contextual_score for the closed form."""
import torch
import torch.nn.functional as F

from taco import contextual_score


def score_brute_force(h, real):
    B, T, _ = h.shape
    z = F.normalize(h.double(), dim=-1)
    sums = {"intra": 0.0, "inter": 0.0}
    counts = {"intra": 0, "inter": 0}
    for b in range(B):
        for t in range(T):
            for c in range(B):
                for s in range(T):
                    if real[b, t] and real[c, s] and (b, t) != (c, s):
                        kind = "intra" if b == c else "inter"
                        sums[kind] += float(z[b, t] @ z[c, s])
                        counts[kind] += 1
    intra, inter = sums["intra"] / counts["intra"], sums["inter"] / counts["inter"]
    return {"intra": intra, "inter": inter, "score": intra - inter}


class _States(torch.nn.Module):
    """A stand-in encoder whose last-layer states are h, whatever the ids."""

    def __init__(self, h):
        super().__init__()
        self.h = h

    def forward(self, ids, attention_mask=None):
        return self.h, None


def score_closed_form(h, real):
    ids = torch.zeros(real.shape, dtype=torch.long)
    return contextual_score(_States(h), [ids], [real.long()])
