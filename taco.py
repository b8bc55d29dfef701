"""TACO pre-training: MLM + the token-alignment contrastive (TC) loss.

Fu et al., "Contextual Representation Learning beyond Masked Language Modeling", ACL 2022.

    python taco.py                                    # tiny model, offline toy corpus, CPU, minutes
    python taco.py --objective mlm --out runs/mlm     # the MLM baseline on the same data
    python taco.py --resume                           # continue the run in --out exactly

    # the paper's BERT-base on one GPU, on 8 GPUs, on 2 nodes of 8 GPUs
    python taco.py --size base --data wikipedia,bookcorpus --out runs/base
    torchrun --standalone --nproc_per_node=8 taco.py --size base --data wikipedia,bookcorpus --out runs/base
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --rdzv_backend=c10d \
        --rdzv_endpoint=HOST:29500 taco.py --size base --data wikipedia,bookcorpus --out runs/base
    # (the same on the second node with --node_rank=1)

The global batch (--batch_size) is fixed by the command; gradient accumulation is derived
from it, the micro-batch and the world size, so every launch above takes the same optimizer steps.
"""
import argparse
import contextlib
import hashlib
import os
import signal
import sys
import time
import warnings
from dataclasses import asdict
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

import cli
from cli import UsageError, float_range, int_range
from data import load_tokenizer, make_blocks, mask_tokens, rand, retromae_batch, token_cache_path, tokenize_corpus
from model import SIZES, Bert, BertConfig, BertForPreTraining, RetroMAEForPreTraining


# ----------------------------------------------------------------------------- the TC loss (the paper's Sec. 3)

def tc_loss(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
            generator=None, positions=None, fast=True, group=None):
    """TACO's token-alignment contrastive loss: the paper's Eq. 4, averaged over anchors.

    h: last-layer hidden states (B, T, H); e: embedding-layer output (B, T, H);
    attention_mask: (B, T), 1 = real token (None: all real, as in packed pre-training blocks);
    positions: optional (B, T) bool restricting the anchors (e.g. masked tokens only);
    fast: the cosines by `SampledCosines` (below) instead of normalize + einsum; the same numbers;
    group: a torch.distributed group whose ranks pool their micro-batches for negatives (every
    rank must pass a generator in the same state); None: negatives from this micro-batch.
    """
    B, T, H = h.shape
    real = torch.ones(B, T, dtype=torch.bool, device=h.device) if attention_mask is None else attention_mask.bool()
    anchors = real & (real.sum(1, keepdim=True) >= 2)  # a lone token has no positive
    if positions is not None:
        anchors &= positions.bool()
    with torch.autocast(h.device.type, enabled=False):  # cosines and InfoNCE in fp32
        g = h.float() - e.float()  # Eq. 3: the global part of each token (out of place: h feeds the MLM head too)
        z = F.normalize(g, dim=-1).reshape(B * T, H)  # unit vectors: cos(g_i, g_j) = z_i . z_j
        # Positives and negatives are detached, as in the official code: targets the anchor
        # moves towards / away from, not representations to be moved themselves.
        keys, pool, mine = z.detach(), real, slice(0, B)  # (M, H), (B', T): what negatives come from
        if group is not None:  # --negatives_from global: every rank's micro-batch
            keys, pool, mine = gather_pool(keys, real, group)
        if pool.shape[0] < 2:
            raise UsageError("the TC loss needs >= 2 sequences per device batch for negatives; "
                             "raise --device_batch_size")
        pos = sample_positives(pool, window, generator)[mine]  # (B, T): j, near i in its sequence
        neg = sample_negatives(pool, num_negatives, generator)[mine]  # (B, T, K): k, in other sequences
        cols = torch.cat([pos[..., None], neg], -1).reshape(B * T, -1)  # (B*T, 1+K), the positive first
        if fast:  # the same cosines at linear cost, normalising g itself (below)
            cos = SampledCosines.apply(g.reshape(B * T, H), keys, cols)
        else:
            cos = torch.einsum("nh,njh->nj", z, keys[cols])  # z_i . z_j for each j in cols: (B*T, 1+K)
        target = torch.zeros(B * T, dtype=torch.long, device=h.device)  # the positive is class 0
        loss = F.cross_entropy(cos / temperature, target, reduction="none")  # Eq. 4: InfoNCE, (B*T,)
        weight = anchors.reshape(-1).float()  # the mean over anchors, by weights: no host sync on GPU
        return (loss * weight).sum() / weight.sum()


def sample_positives(real, window, generator=None):
    """For each token, the flat index (into B*T) of its positive: the token at an offset drawn
    uniformly from -(W//2)..-1, 1..W//2 (W = 5: -2, -1, 1, 2). A window centred on its anchor
    has odd width, so an even W counts as W + 1 (W = 10: up to 5 either side). Where the offset
    leaves the sequence (or lands on padding): a random other token of the sequence, as in the
    official sampler. real: (B, T) bool. Returns (B, T) long.
    """
    B, T = real.shape
    w = window // 2
    offsets = torch.cat([torch.arange(-w, 0), torch.arange(1, w + 1)]).to(real.device)  # (2w,)
    pos = torch.arange(T, device=real.device) + offsets[(rand(generator, real.device, B, T) * (2 * w)).long()]
    inside = (pos >= 0) & (pos < T) & real.gather(1, pos.clamp(0, T - 1))
    pos = torch.where(inside, pos, other_token(real, generator))
    return pos + T * torch.arange(B, device=real.device)[:, None]


def sample_negatives(real, num_negatives, generator=None):
    """For each token, K flat indices (into B*T) of tokens drawn uniformly, with replacement,
    from the *other* sequences: never the anchor's own sequence, never padding.
    real: (B, T) bool. Returns (B, T, K) long.
    """
    B, T = real.shape
    tokens = real.reshape(-1).nonzero().squeeze(1)  # the real tokens, sequence by sequence
    n = real.sum(1)[:, None, None]  # (B, 1, 1): tokens of each sequence
    start = n.cumsum(0) - n  # where each sequence's tokens begin in `tokens`
    k = (rand(generator, real.device, B, T, num_negatives) * (len(tokens) - n)).long()  # one of the others' tokens,
    k = k + n * (k >= start).long()  # counted with our own skipped
    return tokens[k.clamp(max=len(tokens) - 1)]


def other_token(real, generator=None):
    """For each token, the position of a uniformly random *other* real token of its sequence
    (B, T) long; meaningless where the sequence has < 2 real tokens."""
    B, T = real.shape
    n = real.sum(1, keepdim=True)
    k = (rand(generator, real.device, B, T) * (n - 1).clamp(min=1)).long()  # the k-th of the others,
    k = k + (k >= real.long().cumsum(1) - 1).long()  # counted with the token itself skipped
    real_first = torch.argsort((~real).long(), dim=1, stable=True)  # positions of real tokens, in order
    return real_first.gather(1, k.clamp(max=T - 1))


def gather_pool(keys, real, group):
    """--negatives_from global: the detached unit global parts (M, H) and real-token masks (B', T)
    of every rank's micro-batch, in rank order, and the rows of this rank's sequences among them.
    all_gather carries no gradient: no gradient crosses ranks."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = [[torch.empty_like(t) for _ in range(world)] for t in (keys, real.to(torch.uint8))]
    dist.all_gather(parts[0], keys.contiguous(), group=group)
    dist.all_gather(parts[1], real.to(torch.uint8).contiguous(), group=group)
    B = real.shape[0]
    return torch.cat(parts[0]), torch.cat(parts[1]).bool(), slice(rank * B, (rank + 1) * B)


# ----------------------------------------------------------------------------- the fast similarity (a drop-in)

class SampledCosines(torch.autograd.Function):
    """out[n, j] = cos(g[n], keys[cols[n, j]]) for unit-length keys, with a gradient to `g` only:
    tc_loss's F.normalize(g) and einsum("nh,njh->nj", z, keys[cols]) in one step, without the
    einsum's (N, 1+K, H) copy of keys (210 MB for BERT-small at 16 x 128, 3.4 GB at 64 x 256),
    which it writes, reads back and keeps for the backward.

    Forward: the dots g[n] . keys[cols[n, j]] by the cheaper of two routes (`similarity_route`):
    the sampled entries of g @ keys.T alone (a sampled dense-dense product,
    torch.sparse.sampled_addmm), or the whole product, a chunk of anchors at a time, then a pick;
    divided by |g[n]|. Backward: with z = g / |g|, u[n] = sum_j grad[n, j] keys[cols[n, j]] (an
    embedding_bag) and s[n] = z[n] . u[n] = sum_j grad[n, j] out[n, j],
        d/dg[n] = (u[n] - s[n] z[n]) / |g[n]|,
    two in-place passes over g where F.normalize's own backward takes about six. Equal to the
    plain form to float rounding (test_speed.py); keys must be detached.
    """

    @staticmethod
    def forward(ctx, g, keys, cols):
        if ctx.needs_input_grad[1]:
            raise ValueError("SampledCosines gives no gradient to keys: pass keys.detach()")
        inv = 1 / g.norm(dim=1).clamp_min(1e-12)  # 1 / |g[n]|; F.normalize's floor (its backward differs below it)
        n, j = cols.shape
        if similarity_route(n, len(keys), j, g.shape[1])[0] == "product":  # <= 1M dots (4 MB) per chunk
            step = max(1, 2 ** 20 // len(keys))
            dots = torch.cat([(rows @ keys.T).gather(1, idx) for rows, idx in zip(g.split(step), cols.split(step))])
        else:
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                pattern = torch.sparse_csr_tensor(torch.arange(0, n * j + 1, j, device=g.device), cols.reshape(-1),
                                                  g.new_zeros(n * j), size=(n, len(keys)), check_invariants=False)
                dots = torch.sparse.sampled_addmm(pattern, g, keys.T, beta=0.0).values().view(n, j)
        out = dots * inv[:, None]
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


PRODUCT_SPEEDUP = 16  # a matrix product does ~this many times more multiply-adds per second than sampled_addmm (CPU, measured)


def similarity_route(n, m, j, h):
    """The forward route of SampledCosines for n anchors, m keys, j sampled keys per anchor and
    width h, and the multiply-adds of forward + backward. "product" (n x m, then pick) costs
    n m h and "sampled" (sampled_addmm) n j h, but the product runs PRODUCT_SPEEDUP times faster
    per multiply-add, so it wins while m <= PRODUCT_SPEEDUP * j. The backward is n j h either way."""
    if m <= PRODUCT_SPEEDUP * j:
        return "product", n * m * h + n * j * h
    return "sampled", 2 * n * j * h


# ----------------------------------------------------------------------------- the TaCL loss

def tacl_loss(student_h, teacher_h, anchors, temperature=0.01):
    """TaCL's token-aware contrastive loss (Su et al., NAACL Findings 2022), averaged over anchors:

        L_TaCL = -1/|M| sum_{i in M} log( exp(cos(s_i, t_i)/tau) / sum_{j=1..T} exp(cos(s_i, t_j)/tau) )

    s = student states of the *masked* sequence, t = a frozen teacher's states of the *unmasked*
    one; M = the anchors (the MLM-selected positions). The positive of s_i is t_i, the teacher's
    state at the same position; the negatives are the teacher's states at every other position of
    the same sequence, never of another sequence.
    student_h, teacher_h: (B, T, H); anchors: (B, T) bool. Only student_h gets a gradient.
    """
    B, T, _ = student_h.shape
    with torch.autocast(student_h.device.type, enabled=False):  # tau = 0.01 puts logits at +-100: fp32
        s = F.normalize(student_h.float(), dim=-1)  # cosine = dot product of unit vectors
        t = F.normalize(teacher_h.float(), dim=-1).detach()  # the teacher is a target, not trained
        logits = s @ t.transpose(1, 2) / temperature  # (B, T, T): row i = s_i against every t_j
        target = torch.arange(T, device=s.device).repeat(B)  # the positive of row i is column i
        loss = F.cross_entropy(logits.reshape(B * T, T), target, reduction="none")  # (B*T,)
        # The mean over anchors, by weights rather than by selecting rows: no host sync on GPU.
        weight = anchors.reshape(-1).float()
        return (loss * weight).sum() / weight.sum()


def make_teacher(cfg, init_state, dropout, device):
    """TaCL's teacher: a frozen copy of the --init encoder. It lives outside the trained model, so
    it is in no optimizer, DDP wrapper or checkpoint; every rank builds it from the same --init,
    and a resumed run rebuilds it from there. dropout=True is the official code's behaviour (its
    teacher follows model.train(); yxuansu/TaCL#11)."""
    teacher = Bert(cfg).to(device)
    teacher.load_state_dict({k[5:]: v for k, v in init_state.items() if k.startswith("bert.")})
    return teacher.requires_grad_(False).train(dropout)


def tacl_teacher_loss(teacher, ids, student_h, anchors, temperature):
    """The teacher reads the unmasked ids (the student read the masked ones) -> tacl_loss."""
    with torch.no_grad():
        teacher_h, _ = teacher(ids)
    return tacl_loss(student_h, teacher_h, anchors, temperature)


# ----------------------------------------------------------------------------- RetroMAE's decoder loss

class DecoderInputs(NamedTuple):
    """RetroMAE's decoder batch: the unmasked ids, the (B, T, T) visibility, the labels."""
    ids: torch.Tensor
    visible: torch.Tensor
    labels: torch.Tensor

    def to(self, device, non_blocking=False):
        return DecoderInputs(*(t.to(device, non_blocking=non_blocking) for t in self))


def retromae_loss(model, inputs, labels, dec, decoder_weight=1.0):
    """RetroMAE (Xiao et al. 2022): L = L_enc + L_dec -> (loss, L_enc, L_dec).

    L_enc: MLM of the encoder on its whole-word-masked input (the encoding task);
    L_dec: the one-layer decoder rebuilds every non-special token of the unmasked text from
    the [CLS] state and the keys its row may see (enhanced decoding); both are mean
    cross-entropies of the shared MLM head. The decoder's logits are computed only at its labels.
    """
    enc_logits, dec_logits, _, _ = model(inputs, labels=labels, dec_ids=dec.ids, dec_visible=dec.visible,
                                         dec_labels=dec.labels)
    enc = F.cross_entropy(enc_logits.float(), labels[labels != -100])
    rebuild = F.cross_entropy(dec_logits.float(), dec.labels[dec.labels != -100])
    return enc + decoder_weight * rebuild, enc, rebuild


# ----------------------------------------------------------------------------- the contextual score

def document_segments(ids, sep_id):
    """(B, T) index of each token's document within its block. Packed blocks hold several
    documents, each ended by [SEP]; a [SEP] belongs to the document it ends, [CLS] to the first."""
    is_sep = (ids == sep_id).long()
    return is_sep.cumsum(1) - is_sep


def pair_sums(x, groups, real):
    """Sums of x_a . x_b over ordered pairs a != b of real tokens in the same group (intra) and
    in different groups (inter), with their counts. x: (B, T, H); groups, real: (B, T).
    The sum over all pairs of a set is |sum x|^2 - sum |x_a|^2: no N x N matrix is built."""
    x, g = x.double()[real], groups[real]  # (N, H), (N,)
    g = torch.unique(g, return_inverse=True)[1]  # group ids 0 .. G-1
    per_group = torch.zeros(int(g.max()) + 1 if len(g) else 0, x.size(1), dtype=x.dtype,
                            device=x.device).index_add_(0, g, x)  # (G, H)
    n = torch.bincount(g).double()  # (G,) tokens per group
    self_dot = x.pow(2).sum()
    intra = per_group.pow(2).sum() - self_dot
    inter = per_group.sum(0).pow(2).sum() - self_dot - intra
    return {"intra_sum": intra.item(), "intra_n": (n * (n - 1)).sum().item(),
            "inter_sum": inter.item(), "inter_n": (n.sum() ** 2 - n.pow(2).sum()).item()}


def context_groups(ids, sep_id=None):
    """(B, T) context of each token: its block, or (with sep_id) its document within its block."""
    B, T = ids.shape
    block = torch.arange(B, device=ids.device)[:, None].expand(B, T)
    return block if sep_id is None else block * T + document_segments(ids, sep_id)


@torch.no_grad()
def contextual_score(model, batches, attention_masks=None, sep_id=None):
    """The paper's contextual score (its appendix A.3) of last-layer states, by cosine.

    intra: mean cosine of two distinct tokens of the same context;
    inter: mean cosine of two tokens of different contexts of the same batch;
    score = intra - inter. The block form (keys intra, inter, score) takes a packed block as
    the context; with `sep_id` the document-bounded form is added (doc_intra, doc_inter,
    doc_score): a context is one document of a block, since a block often spans a document
    boundary ([SEP] inside the block) and then "same block" means two documents.
    """
    encoder = getattr(model, "bert", model)
    was_training = encoder.training
    encoder.eval()
    forms = {"": None} if sep_id is None else {"": None, "doc_": sep_id}
    sums = {f: {"intra_sum": 0.0, "intra_n": 0.0, "inter_sum": 0.0, "inter_n": 0.0} for f in forms}
    for i, ids in enumerate(batches):
        mask = None if attention_masks is None else attention_masks[i]
        h, _ = encoder(ids, attention_mask=mask)
        real = torch.ones(ids.shape, dtype=torch.bool, device=ids.device) if mask is None else mask.bool()
        z = F.normalize(h.float(), dim=-1)  # cosine = dot product of unit vectors
        for f, sep in forms.items():
            for k, v in pair_sums(z, context_groups(ids, sep), real).items():
                sums[f][k] += v
    encoder.train(was_training)
    out = {}
    for f, s in sums.items():
        intra, inter = s["intra_sum"] / max(s["intra_n"], 1), s["inter_sum"] / max(s["inter_n"], 1)
        out.update({f"{f}intra": intra, f"{f}inter": inter, f"{f}score": intra - inter})
    return out


# ----------------------------------------------------------------------------- recipes and flags

# --size -> training recipe. tiny/mini are ours, sized so the offline toy corpus trains in
# minutes on a laptop CPU; medium/large follow small/base. Where each value of small/base (and
# of the fixed settings) comes from; "scripts" = the authors' train_small.sh / train_base.sh
# (github.com/FUZHIYI/TACO), "HF default" = a Trainer default those scripts do not override:
#   steps 250k / 500k, warm-up 2,500 / 10,000    scripts (MAX_STEPS, WARMUP_STEPS)
#   lr 1e-4, linear warm-up and decay, seq 256    scripts; the paper's Sec. 4.1
#   batch 1,280                                   the paper's Sec. 4.1 (the scripts' defaults give
#                                                 256 per GPU x 4 accumulation x 2 GPUs = 2,048)
#   weight decay 0.01, masking 15%                scripts (we exempt biases and LayerNorm: HF does too)
#   AdamW betas (0.9, 0.999), eps 1e-8, clip 1.0  HF default (configure_optimizer, --clip)
#   K 50, W 5, tau 0.07, lambda 1                 scripts (NEG_K, POS_WINDOW_SIZE, TAU, SIM_WEIGHT)
RECIPES = {
    "tiny": dict(steps=600, warmup=60, batch_size=32, max_len=128, lr=1e-3),
    "mini": dict(steps=3000, warmup=300, batch_size=64, max_len=128, lr=5e-4),
    "small": dict(steps=250_000, warmup=2_500, batch_size=1280, max_len=256, lr=1e-4),
    "medium": dict(steps=250_000, warmup=2_500, batch_size=1280, max_len=256, lr=1e-4),
    "base": dict(steps=500_000, warmup=10_000, batch_size=1280, max_len=256, lr=1e-4),
    "large": dict(steps=500_000, warmup=10_000, batch_size=1280, max_len=256, lr=1e-4),
}

# The paper's corpora (Wikipedia + BookCorpus, bert-base-uncased vocab) for --size small and
# up; the sizes below train on the offline toy corpus by default.
PAPER_DATA, TOY_SIZES = "wikipedia,bookcorpus", ("tiny", "mini")

# Settings that may change between a run and its --resume without making it another run.
RESUMABLE = {"out", "resume", "force", "save_every", "eval_every", "log_every", "keep_last",
             "skip_nonfinite", "compile", "plain_tc", "threads", "num_proc", "cache_dir", "device", "device_batch_size"}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a flag's default unless it is None/False (those helps say what happens)."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, False) else super()._get_help_string(action)


def get_args(argv=None):
    p = cli.ArgumentParser(description="TACO / MLM pre-training of BERT.", formatter_class=HelpFormatter)
    # model and objective
    p.add_argument("--size", default="tiny", choices=list(SIZES), help="model size; also picks the training recipe")
    p.add_argument("--objective", default="taco", choices=["taco", "mlm", "tacl", "retromae"],
                   help="taco = MLM + TC; mlm = the baseline; tacl = MLM + TaCL (Su et al. 2022; needs --init); "
                   "retromae = whole-word MLM + RetroMAE's decoder loss (Xiao et al. 2022)")
    p.add_argument("--tc_weight", type=float_range(0), default=1.0, help="lambda in loss = MLM + lambda * TC (or TaCL)")
    p.add_argument("--tc_positions", default="all", choices=["all", "masked", "unmasked"],
                   help="anchors of the TC loss: every real token, or only masked / unmasked ones")
    p.add_argument("--window", type=int_range(2), default=5, help="W: positives lie within W//2 positions of the anchor "
                   "(an even W counts as W+1)")
    p.add_argument("--negatives", type=int_range(1), default=50, help="K: negatives per anchor, from other sequences")
    p.add_argument("--negatives_from", default="device", choices=["device", "global"],
                   help="draw negatives from this device's micro-batch, or from every rank's (all-gathered, "
                   "detached), as the official single-process multi-GPU runs did")
    p.add_argument("--temperature", type=float_range(0, lo_open=True), default=None, help="tau of the InfoNCE softmax "
                   "(default: 0.07 for taco, 0.01 for tacl)")
    p.add_argument("--plain_tc", action="store_true", help="compute the TC cosines by the plain einsum "
                   "(the same numbers, slower, more memory) instead of taco.SampledCosines")
    p.add_argument("--teacher_dropout", default="on", choices=["on", "off"],
                   help="tacl: dropout in the frozen teacher; on as in the official code (yxuansu/TaCL#11)")
    p.add_argument("--mlm_probability", type=float_range(0, 1, lo_open=True, hi_open=True), default=None,
                   help="fraction of tokens masked (default 0.15; 0.3 for retromae, whole words)")
    p.add_argument("--predict_all", action="store_true", help="MLM+TP ablation: add a token-prediction loss, "
                   "the mean over the other non-special tokens, to MLM's mean over the chosen ones")
    p.add_argument("--init", default=None, help="continue from trained weights: a run directory, checkpoint file or "
                   "Hugging Face directory (weights only: new optimizer and schedule; the model size is the init's)")
    # RetroMAE (--objective retromae)
    p.add_argument("--decoder_mlm_probability", type=float_range(0, 1, lo_open=True, hi_open=True), default=0.5,
                   help="retromae: fraction of tokens (whole words) each decoder row cannot see")
    p.add_argument("--decoder_pool", type=int_range(1, 512), default=256,
                   help="retromae: whole-word masks drawn per sequence; each decoder row picks one")
    p.add_argument("--decoder_weight", type=float_range(0), default=1.0, help="retromae: loss = L_enc + w * L_dec")
    p.add_argument("--freeze_embeddings", action="store_true",
                   help="keep the whole embedding layer (word, position, type, LayerNorm) at its init: "
                   "random, or with --init trained (the paper's Fig. 4)")
    p.add_argument("--untie_embeddings", action="store_true", help="separate MLM decoder matrix (Appendix B)")
    # data
    p.add_argument("--data", default=None, help="comma-separated: toy, wikipedia, bookcorpus, wikitext103, files or "
                   "folders (default: toy for --size tiny and mini, else the paper's wikipedia,bookcorpus)")
    p.add_argument("--vocab", default=None, help="vocab.txt, a folder with one, or a hub id (default: toy vocab "
                   "for --data toy, else bert-base-uncased)")
    p.add_argument("--max_len", type=int_range(8, 512), default=None, help="tokens per block (default: from --size)")
    p.add_argument("--cache_dir", default=None, help="where tokenised corpora are cached (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--num_proc", type=int_range(1), default=None,
                   help="tokenisation processes (default: one per 100 MB of text, at most one per core)")
    p.add_argument("--eval_blocks", type=int_range(0), default=64, help="blocks held out for evaluation")
    # optimisation
    p.add_argument("--steps", type=int_range(1), default=None, help="optimizer steps (default: from --size)")
    p.add_argument("--warmup", type=int_range(0), default=None, help="linear warm-up steps (default: from --size)")
    p.add_argument("--batch_size", type=int_range(1), default=None,
                   help="global batch in sequences (default: from --size)")
    p.add_argument("--device_batch_size", type=int_range(1), default=32,
                   help="at most this many sequences per device per micro-step (the largest divisor "
                        "of the per-process batch up to this)")
    p.add_argument("--lr", type=float_range(0, lo_open=True), default=None,
                   help="peak learning rate (default: from --size)")
    p.add_argument("--weight_decay", type=float_range(0), default=0.01, help="AdamW weight decay on matrices")
    p.add_argument("--clip", type=float_range(0, lo_open=True), default=1.0, help="gradient-norm clipping")
    p.add_argument("--seed", type=int_range(0, 2**32 - 1), default=0,
                   help="seeds init, data order, masking and sampling")
    # system
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                   help="autocast precision (default: bf16 on capable CUDA, else fp32)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    cli.add_threads_flag(p)
    # output
    p.add_argument("--out", default="runs/taco", help="run directory: config, metrics, checkpoints")
    p.add_argument("--save_every", type=int_range(1), default=200, help="checkpoint every N steps (and at the end)")
    p.add_argument("--eval_every", type=int_range(1), default=100, help="evaluate every N steps (and at the end)")
    p.add_argument("--log_every", type=int_range(1), default=10, help="write metrics.jsonl every N steps")
    p.add_argument("--keep_last", type=int_range(1), default=3, help="checkpoints kept in --out")
    p.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint in --out")
    p.add_argument("--force", action="store_true", help="overwrite a run in --out, or resume with changed settings")
    p.add_argument("--skip_nonfinite", action="store_true", help="skip steps with a non-finite loss instead of stopping")
    args = p.parse_args(argv)
    recipe = RECIPES[args.size]
    if args.temperature is None:
        args.temperature = 0.01 if args.objective == "tacl" else 0.07
    if args.mlm_probability is None:  # RetroMAE's encoder masks 30% (its arguments.py), whole words
        args.mlm_probability = 0.3 if args.objective == "retromae" else 0.15
    if args.warmup is None and args.steps is not None:  # keep the recipe's warm-up fraction
        args.warmup = round(recipe["warmup"] * args.steps / recipe["steps"])
    for k, v in recipe.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.data is None:
        args.data = "toy" if args.size in TOY_SIZES else PAPER_DATA
    if args.vocab is None:  # the init's own vocabulary, else the data's usual one
        args.vocab = (vocab_beside(args.init) if args.init else
                      "toy" if args.data == "toy" else "bert-base-uncased")
    return args


def check_args(args, world_size):
    """Catch mistakes that involve several flags (each flag's own range is checked by argparse)
    before anything is written; returns the accumulation steps."""
    check_tacl_args(args)
    if args.warmup > args.steps:
        raise UsageError(f"--warmup must be between 0 and --steps ({args.steps})")
    if args.objective == "retromae" and (args.predict_all or args.tc_positions != "all"):
        raise UsageError("--predict_all and --tc_positions are MLM/TACO ablations; retromae's decoder "
                         "already predicts every token and it has no TC loss")
    if args.batch_size % world_size:
        raise UsageError(f"--batch_size {args.batch_size} is not divisible by the {world_size} processes")
    per_rank = args.batch_size // world_size
    # the micro-batch: the largest divisor of the per-process batch up to --device_batch_size
    # (1,280 sequences on 16 processes: 80 each, in micro-batches of 20 under the default 32)
    dbs = max(d for d in range(1, min(args.device_batch_size, per_rank) + 1) if per_rank % d == 0)
    pool = dbs * (world_size if args.negatives_from == "global" else 1)  # sequences negatives come from
    if args.objective == "taco" and pool < 2:
        raise UsageError("TACO draws negatives from other sequences of the device batch: "
                         + ("--device_batch_size must be >= 2" if dbs == args.device_batch_size else
                            f"no divisor of the per-process batch {per_rank} between 2 and --device_batch_size "
                            f"{args.device_batch_size}; change --batch_size or the number of processes, or "
                            f"pass --negatives_from global"))
    if args.objective == "taco" and args.negatives > (pool - 1) * args.max_len:
        raise UsageError(f"--negatives {args.negatives} exceeds the {(pool - 1) * args.max_len} tokens "
                         f"of the {pool - 1} other sequences negatives come from; lower it or raise --device_batch_size")
    args.device_batch_size = dbs
    return per_rank // dbs


def check_tacl_args(args):
    """TaCL continues a trained model (its teacher is a frozen copy of it); TACO's sampling flags
    do not apply to it, nor the teacher's flag to the other objectives."""
    defaults = vars(get_args([]))
    given = lambda flag: getattr(args, flag) != defaults[flag]  # set to other than its default
    if args.objective != "tacl":
        if given("teacher_dropout"):
            raise UsageError("--teacher_dropout applies only to --objective tacl")
        return
    if not args.init:
        raise UsageError("--objective tacl continues a trained model and distils from a frozen copy of it: "
                         "pass --init RUN|ckpt|HF dir")
    refused = [f"--{flag}" for flag in ("window", "negatives", "negatives_from", "tc_positions", "predict_all",
                                        "plain_tc") if given(flag)]
    if refused:
        raise UsageError(f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not apply to --objective "
                         f"tacl (its anchors are the masked tokens, its negatives the other tokens of the sequence)")


def get_lr(step, lr, warmup, steps):
    """Linear warm-up from 0 to lr over `warmup` steps, then linear decay to 0 at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * max(0.0, (steps - step) / max(1, steps - warmup))


def configure_optimizer(model, lr, weight_decay):
    """AdamW with weight decay on matrices only (not on biases and LayerNorm); fused (one
    kernel for all tensors) on CPU too, where it is ~4x faster than the default loop."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=True)  # the official scripts' values


def step_seed(seed, step, rank):
    """Every step reseeds from (seed, step, rank): resuming needs no RNG state to be exact."""
    return hash((seed, step, rank)) & (2 ** 62 - 1)  # hashing ints is stable across runs


# ----------------------------------------------------------------------------- checkpoints

def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def save_checkpoint(out, state, keep_last):
    """ckpt_<step>.pt, then its manifest ckpt_<step>.json (step, bytes, sha256).

    A checkpoint counts only once its manifest exists, so a kill at any moment leaves either
    the previous set of valid checkpoints or the new one. Rotation keeps the newest keep_last.
    """
    path = os.path.join(out, f"ckpt_{state['step']:08d}.pt")
    cli.atomic_write(path, lambda f: torch.save(state, f))
    manifest = {"step": state["step"], "bytes": os.path.getsize(path), "sha256": _sha256(path)}
    cli.write_json(path[:-3] + ".json", manifest)
    for old in list_checkpoints(out)[keep_last:]:
        for p in (old, old[:-3] + ".json"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
    return path


def list_checkpoints(out):
    """Checkpoint files that have a manifest, newest first (not yet verified)."""
    if not os.path.isdir(out):
        return []
    names = sorted((n for n in os.listdir(out) if n.startswith("ckpt_") and n.endswith(".json")), reverse=True)
    return [os.path.join(out, n[:-5] + ".pt") for n in names]


def verify_checkpoint(path):
    """None if `path` matches its manifest, else the reason it does not."""
    try:
        manifest = cli.read_json(path[:-3] + ".json")
        cli.regular_file(path, "checkpoint")
        if os.path.getsize(path) != manifest.get("bytes"):
            return f"size {os.path.getsize(path)} != {manifest.get('bytes')} (truncated?)"
        if _sha256(path) != manifest.get("sha256"):
            return "checksum mismatch (corrupted)"
    except (OSError, UsageError) as err:
        return f"unreadable ({err})"
    return None


def latest_checkpoint(out):
    """The newest checkpoint in `out` that passes verification, or None."""
    for path in list_checkpoints(out):
        reason = verify_checkpoint(path)
        if reason is None:
            return path
        print(f"warning: skipping checkpoint {path}: {reason}", file=sys.stderr)
    return None


def load_checkpoint(path):
    """Load a checkpoint (tensors and plain types only: weights_only=True)."""
    if os.path.exists(path[:-3] + ".json") and (reason := verify_checkpoint(path)):
        raise UsageError(f"checkpoint {path} is invalid: {reason}")
    cli.regular_file(path, "checkpoint")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, not a traceback
        raise UsageError(f"cannot read checkpoint {path}: {err.__class__.__name__}") from err


def find_weights(spec):
    """-> (file or folder to load, is_hf) for a taco run directory (its newest valid
    checkpoint), a checkpoint file, or a Hugging Face directory (config.json + weights)."""
    if not os.path.exists(spec):
        raise UsageError(f"{spec} does not exist: pass a taco run directory, a checkpoint file "
                         f"or a Hugging Face model directory")
    if not os.path.isdir(spec):
        return cli.regular_file(spec, "checkpoint"), False
    source = latest_checkpoint(spec)
    if source is not None:
        return source, False
    if os.path.isfile(os.path.join(spec, "config.json")) and any(
            os.path.isfile(os.path.join(spec, w)) for w in ("model.safetensors", "pytorch_model.bin")):
        return spec, True
    raise UsageError(f"{spec} holds no valid taco checkpoint (ckpt_*.pt with its manifest) and is "
                     f"not a Hugging Face directory (config.json + model.safetensors)")


def vocab_beside(source):
    """The vocab.txt that goes with a checkpoint file or a model directory."""
    return os.path.join(source if os.path.isdir(source) else os.path.dirname(source), "vocab.txt")


def load_init(spec):
    """--init: the weights of a trained BertForPreTraining (encoder + MLM head) to continue
    from -> (config, state_dict, source). Weights only: optimizer, schedule and step start anew.
    A Hugging Face encoder without an MLM head gets a fresh head (with a note)."""
    source, is_hf = find_weights(spec)
    try:
        if is_hf:
            model = BertForPreTraining.from_pretrained(source)
            return model.config, model.state_dict(), source
        state = load_checkpoint(source)
        return BertConfig.from_dict(state["model_config"]), state["model"], source
    except UsageError:
        raise
    except Exception as err:  # a foreign file, missing keys, wrong shapes: which file, in one line
        raise UsageError(f"cannot load --init {spec}: {(str(err) or repr(err)).splitlines()[0]}") from err


# ----------------------------------------------------------------------------- distributed set-up

def setup_distributed(device_arg):
    """torchrun sets RANK / LOCAL_RANK / WORLD_SIZE; a plain `python taco.py` is rank 0 of 1."""
    device = cli.device(device_arg)  # one line if it cannot be used here
    device_type = device.type
    if "RANK" not in os.environ:
        return 0, 0, 1, device
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    # torchrun restarts workers against the same key-value store, which still holds the
    # dead workers' addresses; a prefix per attempt keeps the new ones from reading them.
    store, _, _ = next(dist.rendezvous("env://"))
    store = dist.PrefixStore(f"attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo",
                            store=store, rank=rank, world_size=world)
    return rank, local_rank, world, torch.device(device_type, local_rank if device_type == "cuda" else None)


def all_ranks_max(flags):
    """The elementwise maximum of a tensor of flags over all ranks, as floats (one host sync)."""
    if dist.is_initialized():
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return flags.tolist()


# ----------------------------------------------------------------------------- training

def prepare_out(args, ckpt, overwrite):
    """Refuse to clobber another run; on resume, refuse a changed configuration. The settings
    compared are the checkpoint's own (config.json is a copy for people to read)."""
    if ckpt is not None:
        old = ckpt.get("args", {})
        changed = sorted(k for k, v in vars(args).items() if k not in RESUMABLE and old.get(k) != v)
        if changed and not args.force:
            raise UsageError(f"--resume with settings that differ from the run in {args.out}: "
                             f"{', '.join(changed)}; pass --force to accept them")
    elif os.path.exists(os.path.join(args.out, "config.json")) or list_checkpoints(args.out):
        if not overwrite:
            raise UsageError(f"{args.out} already holds a run; pass --resume to continue it, "
                             f"--force to overwrite it, or another --out")
        for name in os.listdir(args.out):
            if name.startswith("ckpt_") or name in ("metrics.jsonl", "config.json"):
                os.remove(os.path.join(args.out, name))


def copy_vocab(src, out):
    """OUT/vocab.txt, written atomically; nothing to do when --vocab is that file already."""
    dst = os.path.join(out, "vocab.txt")
    if not (os.path.exists(dst) and os.path.samefile(src, dst)):
        with open(src, "rb") as f:
            data = f.read()
        cli.atomic_write(dst, lambda f: f.write(data))


def check_teacher_unchanged(out, source):
    """A resumed tacl run rebuilds its teacher from --init: refuse an init that changed since
    (e.g. --init RUN whose newest checkpoint is now another one)."""
    try:
        recorded = cli.read_json(os.path.join(out, "config.json")).get("init") or {}
    except (OSError, UsageError):  # no (readable) config.json: nothing recorded to compare with
        return
    if recorded.get("sha256") != (_sha256(source) if os.path.isfile(source) else None):
        raise UsageError(f"--init now gives {source}, not the {recorded.get('source')} this run's TaCL teacher "
                         f"was built from; resume with that one or pass --force")


def masked_batch(ids, tok, args, generator):
    """Dynamic masking of one micro-batch -> (inputs, labels, tp_labels, tc anchor positions or None).

    labels: the MLM targets (masked tokens; -100 elsewhere). tp_labels: with --predict_all (the
    MLM+TP ablation) the targets of the extra token-prediction loss, every other non-special
    token; else None. For retromae the last item is the decoder's batch (DecoderInputs).
    """
    if args.objective == "retromae":
        inputs, labels, visible, dec_labels = retromae_batch(ids, tok, args.mlm_probability, args.decoder_mlm_probability,
                                                             generator, args.decoder_pool)
        return inputs, labels, None, DecoderInputs(ids.long(), visible, dec_labels)
    inputs, labels = mask_tokens(ids, tok, args.mlm_probability, generator)
    masked = labels != -100
    tp_labels = None
    if args.predict_all:
        special = torch.isin(ids, torch.tensor(tok.special_ids))
        tp_labels = torch.where(special | masked, -100, ids)
    anchors = {"all": None, "masked": masked, "unmasked": ~masked}[args.tc_positions]
    return inputs, labels, tp_labels, anchors


def compute_loss(model, inputs, labels, anchors, args, generator, tp_labels=None, ids=None, teacher=None):
    """loss = MLM + lambda * TC (the paper's Eq. 5) -> (loss, mlm, tc, tp) for logging.
    tacl: MLM + lambda * TaCL, logged as tc; `teacher` reads the unmasked `ids`.

    With tp_labels (--predict_all), the MLM+TP ablation adds a token-prediction loss, the mean
    over the other non-special tokens, to MLM's mean over the chosen ones: loss = MLM + TP (+ lambda TC).
    retromae: (L_enc + L_dec, L_enc, L_dec, 0), `anchors` being its DecoderInputs.
    """
    if args.objective == "retromae":
        loss, enc, dec = retromae_loss(model, inputs, labels, anchors, args.decoder_weight)
        return loss, enc, dec, torch.zeros_like(loss)
    targets = labels if tp_labels is None else torch.where(labels != -100, labels, tp_labels)
    logits, h, e = model(inputs, labels=targets)  # logits only at rows with a target, in order
    ce = F.cross_entropy(logits.float(), targets[targets != -100], reduction="none")
    masked = (labels != -100)[targets != -100]  # which of those rows are MLM's
    mlm = ce[masked].mean()
    tp = ce[~masked].mean() if tp_labels is not None else torch.zeros_like(mlm)
    tc = torch.zeros_like(mlm)
    if args.objective == "taco":
        group = dist.group.WORLD if args.negatives_from == "global" and dist.is_initialized() else None
        tc = tc_loss(h, e, window=args.window, num_negatives=args.negatives, temperature=args.temperature,
                     generator=generator, positions=anchors, fast=not args.plain_tc, group=group)
    elif args.objective == "tacl":  # anchors: the MLM-selected positions
        tc = tacl_teacher_loss(teacher, ids, h, labels != -100, args.temperature)
    return mlm + tp + args.tc_weight * tc, mlm, tc, tp


@torch.no_grad()
def evaluate(model, blocks, tok, args, device):
    """MLM loss / accuracy on held-out blocks (fixed masks) and the contextual score in its
    block form (ctx_*) and document-bounded form (ctx_doc_*)."""
    model.eval()
    gen = torch.Generator().manual_seed(1234)
    batches = [torch.from_numpy(blocks[i:i + args.device_batch_size].astype(np.int64)).to(device)
               for i in range(0, len(blocks), args.device_batch_size)]
    loss = correct = n = 0.0
    for ids in batches:
        inputs, labels = mask_tokens(ids.cpu(), tok, args.mlm_probability, gen)
        logits, _, _ = model(inputs.to(device), labels=labels.to(device))
        target = labels[labels != -100].to(device)
        loss += F.cross_entropy(logits.float(), target, reduction="sum").item()
        correct += (logits.argmax(-1) == target).sum().item()
        n += len(target)
    ctx = contextual_score(model, batches, sep_id=tok.sep_id)
    model.train()
    return {"eval_mlm_loss": loss / n, "eval_mlm_acc": correct / n, **{f"ctx_{k}": v for k, v in ctx.items()}}


def train(args, cleanup):
    """Pre-train as `args` say. cleanup: an ExitStack that releases, on any exit, what the run
    holds (the lock on --out, the signal handlers, the process group)."""
    rank, local_rank, world, device = setup_distributed(args.device)
    threads, why = cli.set_threads(args.threads)
    if world > 1:
        cleanup.callback(dist.destroy_process_group)
    master = rank == 0
    asked = args.device_batch_size
    accum = check_args(args, world)
    if master and args.device_batch_size < min(asked, args.batch_size // world):
        print(f"warning: micro-batches of {args.device_batch_size} sequences, the largest divisor of the per-process "
              f"batch {args.batch_size // world} up to --device_batch_size {asked}"
              + ("; TACO's negatives come from them" if args.objective == "taco" else ""), file=sys.stderr)
    if master:  # one run per --out, taken before anything in it is read or written
        cleanup.enter_context(cli.RunLock(args.out))
    # torchrun --max_restarts relaunches crashed workers: they resume by themselves
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0
    resume_from = latest_checkpoint(args.out) if args.resume or restarted else None
    if args.resume and resume_from is None and not restarted:
        raise UsageError(f"--resume: no valid checkpoint in {args.out}")
    resuming = resume_from is not None
    if master and "toy" in args.data.split(",") and args.size not in TOY_SIZES:
        print(f"warning: --size {args.size} on the toy corpus (0.4M tokens) is a smoke test, not the paper's "
              f"run: that is the default --data {PAPER_DATA}", file=sys.stderr)
    if args.init:  # the init's architecture; its weights are loaded below unless resuming
        cfg, init_state, init_source = load_init(args.init)
    ckpt = load_checkpoint(resume_from) if resuming else None
    tok = load_tokenizer(args.vocab, args.cache_dir)
    if args.init:
        if cfg.vocab_size != tok.vocab_size:
            raise UsageError(f"--init {args.init} has a vocabulary of {cfg.vocab_size} but --vocab {args.vocab} "
                             f"has {tok.vocab_size}: pass the init's vocab.txt (the default)")
        cfg.tie_word_embeddings = not args.untie_embeddings
    else:
        cfg = BertConfig.from_size(args.size, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id,
                                   tie_word_embeddings=not args.untie_embeddings)
    if not master:  # rank 0 tokenises and caches (hours for the paper's corpora); the others wait
        cache = token_cache_path(args.data, tok, args.cache_dir)  # for its file, not in a collective
        while not cache.exists():  # that would time out (NCCL: 10 min); torchrun ends them if rank 0 fails
            time.sleep(2)
    tokens = tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc)
    blocks = make_blocks(tokens, args.max_len, tok.cls_id, tok.sep_id)  # cut per batch from the memmap
    n_eval = min(args.eval_blocks, len(blocks) // 10)
    train_blocks, eval_blocks = blocks.split(len(blocks) - n_eval)  # the tail is held out
    steps_per_epoch = len(train_blocks) // args.batch_size
    if steps_per_epoch == 0:
        raise UsageError(f"the corpus gives {len(train_blocks)} training blocks of {args.max_len} tokens, "
                         f"fewer than one batch of {args.batch_size}; lower --batch_size or add data")
    if master:
        prepare_out(args, ckpt, overwrite=args.force or restarted)
        if resuming and args.objective == "tacl" and not args.force:
            check_teacher_unchanged(args.out, init_source)
    if world > 1:
        dist.barrier()

    dtype = args.dtype or ("bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32")
    autocast = (contextlib.nullcontext() if dtype == "fp32" else
                torch.autocast(device.type, dtype=torch.bfloat16 if dtype == "bf16" else torch.float16))
    torch.manual_seed(args.seed)  # the same init on every rank
    raw = (RetroMAEForPreTraining if args.objective == "retromae" else BertForPreTraining)(cfg).to(device)
    if args.init and not resuming:
        if cfg.tie_word_embeddings:  # one shared matrix: the input embeddings (an untied init's decoder is dropped)
            init_state = {**init_state, "mlm.decoder.weight": init_state["bert.embeddings.word.weight"]}
        # RetroMAE's decoder continues if the init has one and is fresh (seeded) if not; dropped for other objectives
        missing, unexpected = raw.load_state_dict(init_state, strict=False)
        stray = [k for k in missing + unexpected if not k.startswith("decoder.")]
        if stray:
            raise UsageError(f"--init {args.init} does not fit the model: {', '.join(stray[:4])}")
    if args.freeze_embeddings:
        # Fig. 4: the whole embedding layer, so that e = LayerNorm(word + position + type) is a fixed
        # function of the token and its position; with tied weights the MLM decoder matrix is frozen too.
        raw.bert.embeddings.requires_grad_(False)
    teacher = (make_teacher(cfg, init_state, args.teacher_dropout == "on", device)
               if args.objective == "tacl" else None)
    optimizer = configure_optimizer(raw, args.lr, args.weight_decay)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "fp16")
    start, skipped = 0, 0
    if resuming:
        try:
            raw.load_state_dict(ckpt["model"])
        except RuntimeError as err:
            raise UsageError(f"{resume_from} holds another model ({ckpt['model_config']['hidden_size']} hidden, "
                             f"{ckpt['model_config']['num_hidden_layers']} layers) than --size {args.size}; "
                             f"resume with its settings or start a new --out") from err
        optimizer.load_state_dict(ckpt["optimizer"])
        scaler.load_state_dict(ckpt["scaler"])
        start, skipped = ckpt["step"], ckpt.get("skipped", 0)
    model = torch.compile(raw) if args.compile else raw
    if world > 1:
        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)

    if start >= args.steps:
        if master:
            print(f"{args.out} is already at step {start} (--steps {args.steps}): nothing to do")
        return
    metrics_path = os.path.join(args.out, "metrics.jsonl")
    if master:  # every file written whole (temp + rename): a kill at any moment leaves a resumable run
        logged = cli.read_jsonl(metrics_path) if resuming and os.path.exists(metrics_path) else []
        cli.write_json(os.path.join(args.out, "config.json"), {
            "args": vars(args), "model_config": asdict(cfg), "world_size": world, "accumulation": accum,
            "dtype": dtype, "train_blocks": len(train_blocks), "eval_blocks": n_eval,
            "parameters": sum(p.numel() for p in raw.parameters()),
            "init": {"source": init_source, "sha256": _sha256(init_source) if os.path.isfile(init_source) else None}
            if args.init else None})
        copy_vocab(tok.vocab_file, args.out)
        if resuming:  # drop lines logged after the checkpoint (and a line torn by a kill)
            cli.write_jsonl(metrics_path, [r for r in logged if r.get("step", 0) <= start])
        print(f"{args.objective} | {args.size} ({sum(p.numel() for p in raw.parameters()) / 1e6:.1f}M params) | "
              f"{len(train_blocks)} blocks x {args.max_len} | batch {args.batch_size} = {world} x "
              f"{accum} x {args.device_batch_size} | {dtype} on {device.type}"
              + (f" ({threads} thread{'s' * (threads > 1)}: {why})" if device.type == "cpu" else "")
              + (f" | init {init_source}" if args.init else "")
              + (f" | resumed at step {start}" if resuming else ""))

    per_rank = args.batch_size // world
    stop = cleanup.enter_context(cli.StopSignals())  # SIGINT / SIGTERM: save and stop at a step boundary
    bar = tqdm(range(start, args.steps), initial=start, total=args.steps, disable=not master,
               dynamic_ncols=True, desc="train")
    perm_epoch, perm, tokens_seen, t0 = -1, None, 0, time.time()
    last_ckpt, last_eval = resume_from, None
    for step in bar:
        epoch, i = divmod(step, steps_per_epoch)
        if epoch != perm_epoch:  # a fresh shuffle each epoch, the same on every rank
            # int32 (the same order as int64): 4 bytes a block, the one buffer that grows with the corpus
            perm = torch.randperm(len(train_blocks), generator=torch.Generator().manual_seed(args.seed + epoch),
                                  dtype=torch.int32)
            perm_epoch = epoch
        mine = perm[i * args.batch_size:(i + 1) * args.batch_size][rank * per_rank:(rank + 1) * per_rank]
        lr = get_lr(step, args.lr, args.warmup, args.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        torch.manual_seed(step_seed(args.seed, step, rank))  # dropout
        gen = torch.Generator().manual_seed(step_seed(args.seed + 1, step, rank))  # masking
        dev_gen = gen if device.type == "cpu" else torch.Generator(device).manual_seed(step_seed(args.seed + 2, step, rank))
        if args.negatives_from == "global":  # every rank draws the global micro-batch's sample, keeps its rows
            dev_gen = torch.Generator(device).manual_seed(step_seed(args.seed + 2, step, 0))
        sums = torch.zeros(4, device=device)  # loss, mlm, tc, tp
        for micro in range(accum):
            idx = np.sort(mine[micro * args.device_batch_size:(micro + 1) * args.device_batch_size].numpy())
            ids = torch.from_numpy(train_blocks[idx].astype(np.int64))
            inputs, labels, tp_labels, anchors = masked_batch(ids, tok, args, gen)
            inputs, labels = inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            tp_labels = None if tp_labels is None else tp_labels.to(device, non_blocking=True)
            anchors = None if anchors is None else anchors.to(device, non_blocking=True)
            if world > 1:  # all-reduce the gradients only on the last micro-step
                model.require_backward_grad_sync = micro == accum - 1
            with autocast:
                unmasked = ids.to(device, non_blocking=True) if teacher is not None else None  # TaCL's teacher reads it
                loss, mlm, tc, tp = compute_loss(model, inputs, labels, anchors, args, dev_gen, tp_labels,
                                                 unmasked, teacher)
            scaler.scale(loss / accum).backward()
            sums += torch.stack([loss, mlm, tc, tp]).detach().float() / accum
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), args.clip)
        # fp16's scaler handles overflowing gradients itself; any other non-finite value is a fault.
        # One host sync per step for both checks and for a stop signal, agreed by all ranks.
        ok = torch.isfinite(sums).all() & (torch.isfinite(grad_norm) | (dtype == "fp16"))
        flags = torch.stack([(~ok).float(), torch.full((), float(stop.signum), device=device)])
        bad, signum = all_ranks_max(flags)
        stopping = signum and step + 1 < args.steps
        if bad:
            optimizer.zero_grad(set_to_none=True)
            if not args.skip_nonfinite:
                raise FloatingPointError(f"non-finite loss or gradient at step {step}; last good checkpoint: "
                                         f"{last_ckpt or 'none'} (resume with --resume, maybe a lower --lr, "
                                         f"or pass --skip_nonfinite)")
            skipped += 1
        else:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        tokens_seen += args.batch_size * args.max_len
        done = step + 1
        if master:
            loss_v, mlm_v, tc_v, tp_v = sums.tolist()
            tok_s = tokens_seen / (time.time() - t0)
            bar.set_postfix(loss=f"{loss_v:.3f}", mlm=f"{mlm_v:.3f}", tc=f"{tc_v:.3f}", lr=f"{lr:.1e}",
                            tok_s=f"{tok_s:,.0f}")
            record = {}
            if done % args.log_every == 0 or done == args.steps:
                record = {"step": done, "loss": loss_v, "mlm": mlm_v, "tc": tc_v, "lr": lr,
                          "tokens_per_s": tok_s, "grad_norm": grad_norm.item(), "skipped": skipped}
                if args.predict_all:
                    record["tp"] = tp_v
            if n_eval and (done % args.eval_every == 0 or done == args.steps):
                last_eval = evaluate(raw, eval_blocks, tok, args, device)
                record = {"step": done, **record, **last_eval}
            if record:
                cli.append_jsonl(metrics_path, record)
            if done % args.save_every == 0 or done == args.steps or stopping:
                last_ckpt = save_checkpoint(args.out, {
                    "model": raw.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(), "step": done, "skipped": skipped,
                    "model_config": asdict(cfg), "args": vars(args),
                    "data_position": {"epoch": done // steps_per_epoch, "batch": done % steps_per_epoch}},
                    args.keep_last)
        if stopping:  # every rank stops after the same step, once rank 0 has saved it
            if world > 1:
                dist.barrier()
            name = signal.Signals(int(signum)).name
            raise cli.Interrupted(int(signum), f"stopped by {name} after step {done}: saved {last_ckpt}; "
                                  f"to continue, run the same command with --resume" if master else "")
    if master and last_eval:
        print(f"done: eval MLM loss {last_eval['eval_mlm_loss']:.3f}, acc {last_eval['eval_mlm_acc']:.3f}, "
              f"contextual score {last_eval['ctx_score']:.3f} (intra {last_eval['ctx_intra']:.3f}, "
              f"inter {last_eval['ctx_inter']:.3f}); run in {args.out}")
    if world > 1:
        dist.barrier()


def main(argv=None):
    """The command line; user mistakes end in one `error:` line (cli.errors, docs/robustness.md)."""
    with cli.errors(), contextlib.ExitStack() as cleanup:
        train(get_args(argv), cleanup)


if __name__ == "__main__":
    main()
