"""Wrong contextual scores, one typical bug each (test fixtures for the checks of exercise 3)."""
import torch.nn.functional as F


def with_self_pairs(h, real):
    """Bug: intra is |sum z|^2 / n^2, i.e. each token is also paired with itself."""
    z = F.normalize(h.double(), dim=-1) * real[..., None]
    n = real.sum(1).double()
    per_seq = z.sum(1)
    same = per_seq.pow(2).sum(1)
    total = per_seq.sum(0).pow(2).sum()
    intra = (same.sum() / (n ** 2).sum()).item()
    inter = ((total - same.sum()) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def padding_counted(h, real):
    """Bug: the real-token mask is ignored, so padding vectors enter every mean."""
    z = F.normalize(h.double(), dim=-1)
    B, T, _ = z.shape
    per_seq = z.sum(1)
    same = per_seq.pow(2).sum(1) - T
    total = per_seq.sum(0).pow(2).sum() - B * T
    intra = (same.sum() / (B * T * (T - 1))).item()
    inter = ((total - same.sum()) / ((B * T) ** 2 - B * T * T)).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}
