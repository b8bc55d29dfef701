"""Speed equivalents of the plain code, each tested equal to the form it replaces (test_fast.py): `SampledCosines`,
tc_loss's F.normalize + einsum at linear cost; `Dropout` and `attention`, CPU dropout without the serial Bernoulli
sampler, put into a model by `speed_up` (elsewhere they call the plain op). The training loops switch them on;
`--plain` and `--plain_tc` keep them off."""
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- the TC cosines

class SampledCosines(torch.autograd.Function):
    """out[n, j] = cos(g[n], keys[cols[n, j]]) for unit-length, detached keys, with a gradient to g: tc_loss's
    F.normalize(g) and einsum("nh,njh->nj", z, keys[cols]) in one step, without the einsum's (N, 1+K, H) copy of keys
    (210 MB for BERT-small at 16 x 128, 3.4 GB at 64 x 256).

    Forward: the dots g[n] . keys[cols[n, j]] by `similarity_route`'s route, divided by |g[n]|. Backward: with
    z = g / |g|, u[n] = sum_j grad[n, j] keys[cols[n, j]] (an embedding_bag) and s[n] = z[n] . u[n] = sum_j grad[n, j]
    out[n, j], d/dg[n] = (u[n] - s[n] z[n]) / |g[n]|: two in-place passes over g where F.normalize's backward takes
    about six."""

    @staticmethod
    def forward(ctx, g, keys, cols):
        if ctx.needs_input_grad[1]:
            raise ValueError("SampledCosines gives no gradient to keys: pass keys.detach()")
        inv = 1 / g.norm(dim=1).clamp_min(1e-12)  # 1 / |g[n]|; F.normalize's floor (its backward differs below it)
        route = similarity_route(len(g), len(keys), cols.shape[1], g.shape[1])[0]
        out = sampled_dots(route, g, keys, cols) * inv[:, None]
        ctx.save_for_backward(g, keys, cols, inv, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        g, keys, cols, inv, out = ctx.saved_tensors
        with torch.autocast(keys.device.type, enabled=False):  # backward runs under the caller's autocast
            grad = grad.to(keys.dtype)
            u = F.embedding_bag(cols, keys, per_sample_weights=grad, mode="sum")
            s = (grad * out).sum(1) * inv  # s[n] / |g[n]|: then s[n] z[n] = this * g[n]
            return u.addcmul_(g, s[:, None], value=-1).mul_(inv[:, None]), None, None


def sampled_dots(route, g, keys, cols):
    """(n, j): g[n] . keys[cols[n, j]] by `route`: "product", the whole g @ keys.T a chunk of anchors at a time (<= 1M
    dots a chunk), then a pick; or "sampled", only those entries (torch.sparse.sampled_addmm): the same, to rounding."""
    n, j = cols.shape
    if route == "product":
        step = max(1, 2 ** 20 // len(keys))
        return torch.cat([(rows @ keys.T).gather(1, idx) for rows, idx in zip(g.split(step), cols.split(step))])
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        pattern = torch.sparse_csr_tensor(torch.arange(0, n * j + 1, j, device=g.device), cols.reshape(-1),
                                          g.new_zeros(n * j), size=(n, len(keys)), check_invariants=False)
        return torch.sparse.sampled_addmm(pattern, g, keys.T, beta=0.0).values().view(n, j)


PRODUCT_SPEEDUP = 16  # on the CPU a matrix product does ~16x more multiply-adds per second than sampled_addmm


def similarity_route(n, m, j, h):
    """(route, multiply-adds of forward + backward) of SampledCosines for n anchors, m keys, j sampled keys per anchor,
    width h: "product" costs n m h, "sampled" n j h, but the product runs PRODUCT_SPEEDUP times faster per
    multiply-add (measured on a CPU; the same rule on every device), so it wins while m <= PRODUCT_SPEEDUP * j."""
    if m <= PRODUCT_SPEEDUP * j:
        return "product", n * m * h + n * j * h
    return "sampled", 2 * n * j * h


# ----------------------------------------------------------------------------- CPU dropout and attention

def dropout(x, p, training):
    """BERT's dropout: zero each element with probability p, scale the others by 1 / (1 - p).

    On CPU F.dropout's serial Bernoulli sampler takes ~10% of a BERT-small step; here one 64-bit draw gives four
    16-bit integers, each compared with p * 2^16: P(zero) is p rounded to a multiple of 2^-16 (0.1 -> 0.1000061), the
    kept elements scaled by the exact inverse of the keep rate, so E[output] = x. About 3x faster (2M elements, 2
    threads). On GPU F.dropout is one fused kernel: kept."""
    drop = round(p * 2 ** 16)  # drop the 16-bit values below this threshold
    if not (training and 0 < drop < 2 ** 16 and x.device.type == "cpu"):
        return F.dropout(x, p, training)
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2 ** 63, None)  # uniform 64-bit
    keep = bits.view(torch.int16)[:n].view(x.shape) >= drop - 2 ** 15  # P(keep) = 1 - drop / 2^16
    return x * keep.to(x.dtype).mul_(2 ** 16 / (2 ** 16 - drop))


class Dropout(nn.Dropout):
    def forward(self, x):
        return dropout(x, self.p, self.training)


def attention(q, k, v, attn_mask=None, dropout_p=0.0):
    """F.scaled_dot_product_attention (attn_mask True = may attend), its steps written out for CPU fp32
    training with dropout, where SDPA's fallback adds scaling and masking passes and the serial sampler."""
    if not (dropout_p > 0 and q.is_cpu and q.dtype == torch.float32):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    att = (q * q.size(-1) ** -0.5) @ k.transpose(-2, -1)  # (B, nh, T, T)
    if attn_mask is not None:  # padding keys get the lowest score, not -inf: never NaN
        att = att.masked_fill(~attn_mask, torch.finfo(att.dtype).min)
    return dropout(att.softmax(-1), dropout_p, True) @ v  # (B, nh, T, hs)


def speed_up(model):
    """`model` (changed in place, weights untouched) with every nn.Dropout a `Dropout` and every
    attention (model.SelfAttention: a module with an `attend`) computing its core by `attention`."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p))
        if hasattr(module, "attend"):
            module.attend = attention
    return model
