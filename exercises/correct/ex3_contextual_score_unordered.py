"""Exercise 3, a correct student solution: unordered pairs (each counted once, the same means),
the closed form one sequence at a time with a Python loop."""
import torch
import torch.nn.functional as F


def score_brute_force(h, real):
    B, T, _ = h.shape
    z = F.normalize(h.double(), dim=-1)
    idx = [(b, t) for b in range(B) for t in range(T) if bool(real[b, t])]
    s = {True: 0.0, False: 0.0}
    k = {True: 0, False: 0}
    for a in range(len(idx)):
        for c in range(a + 1, len(idx)):
            same = idx[a][0] == idx[c][0]
            s[same] += torch.dot(z[idx[a]], z[idx[c]]).item()
            k[same] += 1
    return {"intra": s[True] / k[True], "inter": s[False] / k[False], "score": s[True] / k[True] - s[False] / k[False]}


def score_closed_form(h, real):
    total_vec, intra_sum, intra_pairs, n_all = 0, 0.0, 0, 0
    for b in range(h.shape[0]):
        zb = F.normalize(h[b][real[b]].double(), dim=-1)  # this sequence's real tokens only
        n = zb.shape[0]
        v = zb.sum(0)
        intra_sum += (v @ v).item() - n
        intra_pairs += n * (n - 1)
        total_vec = total_vec + v
        n_all += n
    all_sum = (total_vec @ total_vec).item() - n_all
    inter = (all_sum - intra_sum) / (n_all * (n_all - 1) - intra_pairs)
    intra = intra_sum / intra_pairs
    return {"intra": intra, "inter": inter, "score": intra - inter}
