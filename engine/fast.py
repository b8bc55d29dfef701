"""Speed equivalents of the plain code, kept apart from it and each tested equal to the form it replaces
(test_fast.py): `SampledCosines`, tc_loss's F.normalize + einsum at linear cost; `Dropout` and `attention`,
CPU dropout without the serial Bernoulli sampler, put into a model by `speed_up` (off the CPU, or without
dropout, they hand over to the plain op). The training loops switch them on (`--plain`, `--plain_tc` keep
them off). `HostSyncs` counts the operations that would make a GPU wait for the host.
"""
import collections
import os
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


# ----------------------------------------------------------------------------- the TC cosines

class SampledCosines(torch.autograd.Function):
    """out[n, j] = cos(g[n], keys[cols[n, j]]) for unit-length, detached keys, with a gradient to g:
    tc_loss's F.normalize(g) and einsum("nh,njh->nj", z, keys[cols]) in one step, without the einsum's
    (N, 1+K, H) copy of keys (210 MB for BERT-small at 16 x 128, 3.4 GB at 64 x 256).

    Forward: the dots g[n] . keys[cols[n, j]] by the cheaper route (`sampled_dots`; chosen on the CPU
    by `similarity_route`, on a GPU by `measured_route`), divided by |g[n]|. Backward: with z = g / |g|,
    u[n] = sum_j grad[n, j] keys[cols[n, j]] (an embedding_bag) and s[n] = z[n] . u[n] = sum_j grad[n, j]
    out[n, j], d/dg[n] = (u[n] - s[n] z[n]) / |g[n]|: two in-place passes over g where F.normalize's own
    backward takes about six.
    """

    @staticmethod
    def forward(ctx, g, keys, cols):
        if ctx.needs_input_grad[1]:
            raise ValueError("SampledCosines gives no gradient to keys: pass keys.detach()")
        inv = 1 / g.norm(dim=1).clamp_min(1e-12)  # 1 / |g[n]|; F.normalize's floor (its backward differs below it)
        route = (similarity_route(len(g), len(keys), cols.shape[1], g.shape[1])[0] if g.is_cpu
                 else measured_route(g, keys, cols))
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
    """(n, j): g[n] . keys[cols[n, j]] by `route`: "product", the whole g @ keys.T a chunk of anchors
    at a time (<= 1M dots per chunk), then a pick; or "sampled", only the sampled entries
    (torch.sparse.sampled_addmm). The same numbers, to float rounding."""
    n, j = cols.shape
    if route == "product":
        step = max(1, 2 ** 20 // len(keys))
        return torch.cat([(rows @ keys.T).gather(1, idx) for rows, idx in zip(g.split(step), cols.split(step))])
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        pattern = torch.sparse_csr_tensor(torch.arange(0, n * j + 1, j, device=g.device), cols.reshape(-1),
                                          g.new_zeros(n * j), size=(n, len(keys)), check_invariants=False)
        return torch.sparse.sampled_addmm(pattern, g, keys.T, beta=0.0).values().view(n, j)


ROUTES = {}  # (device, dtype, n, j, m, h) -> the route measured faster there


def measured_route(g, keys, cols, repeats=3):
    """The faster route for these shapes on g's device, timed once at their first use (a warm-up and
    `repeats` calls each, a few milliseconds), then looked up: a GPU's ratio of the two is not the CPU's."""
    key = (str(g.device), g.dtype, *cols.shape, *keys.shape)
    if key not in ROUTES:
        sync = getattr(torch, g.device.type).synchronize if not g.is_cpu else lambda: None
        times = {}
        for route in ("product", "sampled"):
            sampled_dots(route, g, keys, cols)  # warm-up: kernels chosen, memory allocated
            sync()
            t0 = time.perf_counter()
            for _ in range(repeats):
                sampled_dots(route, g, keys, cols)
            sync()
            times[route] = time.perf_counter() - t0
        ROUTES[key] = min(times, key=times.get)
    return ROUTES[key]


PRODUCT_SPEEDUP = 16  # on the CPU a matrix product does ~this many times more multiply-adds per second than sampled_addmm


def similarity_route(n, m, j, h):
    """(route, multiply-adds of forward + backward) of SampledCosines on the CPU for n anchors, m keys,
    j sampled keys per anchor, width h: "product" costs n m h, "sampled" n j h, but the product runs
    PRODUCT_SPEEDUP times faster per multiply-add, so it wins while m <= PRODUCT_SPEEDUP * j."""
    if m <= PRODUCT_SPEEDUP * j:
        return "product", n * m * h + n * j * h
    return "sampled", 2 * n * j * h


# ----------------------------------------------------------------------------- CPU dropout and attention

def dropout(x, p, training):
    """BERT's dropout: zero each element with probability p, scale the others by 1 / (1 - p).

    On CPU F.dropout's serial Bernoulli sampler takes ~10% of a BERT-small step; here one 64-bit draw
    gives four 16-bit integers, each compared with p * 2^16: P(zero) is p rounded to a multiple of 2^-16
    (0.1 -> 0.1000061), the kept elements scaled by the exact inverse of the keep rate, so E[output] = x.
    About 3x faster (2M elements, 2 threads). On GPU F.dropout is one fused kernel: kept.
    """
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


# ----------------------------------------------------------------------------- host syncs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the repository's files
ENV = os.path.join(sys.prefix, "")  # an environment's files, even one in the repository (.venv/)
SYNCING = {"nonzero", "_local_scalar_dense", "is_nonzero", "masked_select", "masked_scatter", "unique_dim",
           "_unique", "_unique2", "unique_consecutive", "bincount", "equal"}  # the output's size or value is the host's
BOOL_INDEXED = {"index", "index_put", "index_put_", "_index_put_impl_"}  # a boolean index is a nonzero


class HostSyncs(TorchDispatchMode):
    """Counts the operations that make a GPU wait for the host (nonzero, item, boolean-mask indexing
    forward and backward, unique, ...): `counts` maps "file:function (op)", the innermost frame in the
    repository ("backward" for autograd's), to a number. CPU tensors count too (a CPU run stands in for
    a GPU one), except under the functions named in `host_side`, which run on the host by design
    (taco.py's masked_batch: the batch is masked on the CPU, then moved)."""

    def __init__(self, host_side=("masked_batch",)):
        super().__init__()
        self.counts, self.host_side = collections.Counter(), set(host_side)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs, name = kwargs or {}, func.overloadpacket.__name__
        to_host = (name == "_to_copy" and not args[0].is_cpu and str(kwargs.get("device")) == "cpu"
                   or name == "copy_" and args[0].is_cpu and not args[1].is_cpu)  # .tolist(), .cpu() of a GPU tensor
        bool_index = name in BOOL_INDEXED and any(isinstance(t, torch.Tensor) and t.dtype == torch.bool
                                                  for t in (args[1] if len(args) > 1 else ()))
        unsized = name == "repeat_interleave" and kwargs.get("output_size") is None
        if name in SYNCING or to_host or bool_index or unsized:
            on_gpu = any(isinstance(a, torch.Tensor) and not a.is_cpu for a in args)
            if label := where(name, () if on_gpu else self.host_side):
                self.counts[label] += 1
        return func(*args, **kwargs)


def where(name, host_side=()):
    """"file:function (op)" of the innermost frame in the repository outside this file; None under a
    function named in host_side."""
    frame, backward, label = sys._getframe(2), False, None
    while frame is not None:
        path = frame.f_code.co_filename
        backward |= f"torch{os.sep}autograd" in path
        if frame.f_code.co_name in host_side:
            return None
        if label is None and path.startswith(ROOT) and not path.startswith(ENV) and path != __file__:
            label = f"{os.path.relpath(path, ROOT)}:{frame.f_code.co_name} ({name}{', backward' * backward})"
        frame = frame.f_back
    return label or f"elsewhere ({name})"
