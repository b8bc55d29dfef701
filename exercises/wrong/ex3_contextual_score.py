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


# ----------------------------------------------------------------------------- written as students write them
import torch  # noqa: E402


def _unit(h, real):
    return F.normalize(h.double(), dim=-1) * real[..., None]


def mean_of_sequence_means(h, real):
    """Bug: intra is the mean over sequences of each sequence's mean (sequences with no pair skipped)."""
    z, n = _unit(h, real), real.sum(1).double()
    per_seq = z.sum(1)
    pairs = per_seq.pow(2).sum(1) - n
    ok = n >= 2
    intra = (pairs[ok] / (n * (n - 1))[ok]).mean().item()  # BUG
    total = per_seq.sum(0).pow(2).sum() - n.sum()
    inter = ((total - pairs.sum()) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def inter_includes_intra(h, real):
    """Bug: inter is the mean over every pair of distinct tokens, those of one sequence included."""
    z, n = _unit(h, real), real.sum(1).double()
    per_seq = z.sum(1)
    pairs = per_seq.pow(2).sum(1) - n
    intra = (pairs.sum() / (n * (n - 1)).sum()).item()
    N = n.sum()
    inter = ((per_seq.sum(0).pow(2).sum() - N) / (N * (N - 1))).item()  # BUG: all pairs
    return {"intra": intra, "inter": inter, "score": intra - inter}


def score_reversed(h, real):
    """Bug: score = inter - intra."""
    z, n = _unit(h, real), real.sum(1).double()
    per_seq = z.sum(1)
    pairs = per_seq.pow(2).sum(1) - n
    intra = (pairs.sum() / (n * (n - 1)).sum()).item()
    inter = ((per_seq.sum(0).pow(2).sum() - n.sum() - pairs.sum()) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": inter - intra}  # BUG


def dot_products(h, real):
    """Bug: the states are not normalised: dot products, not cosines."""
    z, n = h.double() * real[..., None], real.sum(1).double()  # BUG: no normalize
    per_seq = z.sum(1)
    self_dots = z.pow(2).sum(-1)
    pairs = per_seq.pow(2).sum(1) - self_dots.sum(1)
    intra = (pairs.sum() / (n * (n - 1)).sum()).item()
    inter = ((per_seq.sum(0).pow(2).sum() - self_dots.sum() - pairs.sum()) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def padding_zeroed_but_counted(h, real):
    """Bug: padding vectors are zeroed (they add nothing to the sums) but still counted in n."""
    z = _unit(h, real)
    B, T, _ = z.shape
    n = torch.full((B,), float(T), dtype=torch.double)  # BUG: T, not real.sum(1)
    per_seq = z.sum(1)
    pairs = per_seq.pow(2).sum(1) - real.sum(1).double()
    intra = (pairs.sum() / (n * (n - 1)).sum()).item()
    inter = ((per_seq.sum(0).pow(2).sum() - real.sum() - pairs.sum()) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def right_padding_assumed(h, real):
    """Bug: sequence b's real tokens are taken as its first n_b positions."""
    B, T, _ = h.shape
    n = real.sum(1)
    first = (torch.arange(T)[None, :] < n[:, None])  # BUG: ignores where the real tokens are
    return _closed_form(h, first)


def _closed_form(h, real):
    z, n = _unit(h, real), real.sum(1).double()
    per_seq = z.sum(1)
    pairs = per_seq.pow(2).sum(1) - n
    intra = (pairs.sum() / (n * (n - 1)).sum()).item()
    inter = ((per_seq.sum(0).pow(2).sum() - n.sum() - pairs.sum()) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def brute_force_skips_same_position(h, real):
    """Bug (brute force): pairs are skipped when t == s, so tokens at the same position of
    different sequences never form an inter pair."""
    B, T, _ = h.shape
    z = F.normalize(h.double(), dim=-1)
    sums, counts = {"intra": 0.0, "inter": 0.0}, {"intra": 0, "inter": 0}
    for b in range(B):
        for t in range(T):
            for c in range(B):
                for s in range(T):
                    if real[b, t] and real[c, s] and t != s:  # BUG: (b, t) != (c, s)
                        kind = "intra" if b == c else "inter"
                        sums[kind] += float(z[b, t] @ z[c, s])
                        counts[kind] += 1
    intra, inter = sums["intra"] / counts["intra"], sums["inter"] / counts["inter"]
    return {"intra": intra, "inter": inter, "score": intra - inter}


def nan_for_a_lone_token(h, real):
    """Bug: each sequence's mean of pairs, weighted by its pairs, but 0 / 0 for a sequence of one token."""
    z, n = _unit(h, real), real.sum(1).double()
    per_seq = z.sum(1)
    pairs = per_seq.pow(2).sum(1) - n
    means = pairs / (n * (n - 1))  # BUG: nan where n = 1
    intra = ((means * n * (n - 1)).sum() / (n * (n - 1)).sum()).item()
    inter = ((per_seq.sum(0).pow(2).sum() - n.sum() - pairs.sum()) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def returns_tensors(h, real):
    """Bug: the right numbers as 0-dim tensors, not the Python floats the stub asks for."""
    z = F.normalize(h.double(), dim=-1) * real[..., None]
    n = real.sum(1).double()
    per_seq = z.sum(1)
    intra_sum = (per_seq.pow(2).sum(1) - n).sum()
    all_sum = per_seq.sum(0).pow(2).sum() - n.sum()
    intra = intra_sum / (n * (n - 1)).sum()
    inter = (all_sum - intra_sum) / (n.sum() ** 2 - n.sum() - (n * (n - 1)).sum())
    return {"intra": intra, "inter": inter, "score": intra - inter}  # BUG: no .item()


def closed_form_in_the_input_dtype(h, real):
    """Bug: the closed form in h's own dtype: fine in float32, 3 digits in bfloat16."""
    z = F.normalize(h, dim=-1) * real[..., None]  # BUG: h.double()
    n = real.sum(1).to(h.dtype)
    per_seq = z.sum(1)
    intra_sum = (per_seq.pow(2).sum(1) - n).sum()
    all_sum = per_seq.sum(0).pow(2).sum() - n.sum()
    intra = (intra_sum / (n * (n - 1)).sum()).item()
    inter = ((all_sum - intra_sum) / (n.sum() ** 2 - n.sum() - (n * (n - 1)).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def minus_n_missing(h, real):
    """Bug: |sum z|^2 without the - n: each sequence's n self-pairs (cosine 1) stay in intra."""
    z, n = _unit(h, real), real.sum(1).double()
    per_seq = z.sum(1)
    intra_sum = per_seq.pow(2).sum(1).sum()  # BUG: - n.sum()
    all_sum = per_seq.sum(0).pow(2).sum()  # (the - N cancels in inter)
    intra = (intra_sum / (n * (n - 1)).sum()).item()
    inter = ((all_sum - intra_sum) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def normalised_over_tokens(h, real):
    """Bug: F.normalize(h, dim=1) on (B, T, H): each hidden unit normalised over the tokens, not each token."""
    z = F.normalize(h.double(), dim=1) * real[..., None]  # BUG: dim=-1
    n = real.sum(1).double()
    per_seq = z.sum(1)
    pairs = (per_seq.pow(2).sum(1) - n).sum()
    intra = (pairs / (n * (n - 1)).sum()).item()
    inter = ((per_seq.sum(0).pow(2).sum() - n.sum() - pairs) / (n.sum() ** 2 - (n ** 2).sum())).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}


def unordered_pair_counts(h, real):
    """Bug: the sums over ordered pairs (|sum z|^2 - n) divided by the number of unordered pairs n(n-1)/2."""
    z, n = _unit(h, real), real.sum(1).double()
    per_seq = z.sum(1)
    pairs = (per_seq.pow(2).sum(1) - n).sum()
    N = n.sum()
    intra_pairs = (n * (n - 1) / 2).sum()  # BUG: n * (n - 1)
    inter_pairs = N * (N - 1) / 2 - intra_pairs
    intra = (pairs / intra_pairs).item()
    inter = ((per_seq.sum(0).pow(2).sum() - N - pairs) / inter_pairs).item()
    return {"intra": intra, "inter": inter, "score": intra - inter}
