"""TACO pre-training: MLM + the token-alignment contrastive (TC) loss.

Fu et al., "Contextual Representation Learning beyond Masked Language Modeling", ACL 2022.

    python taco.py                                    # tiny model, offline toy corpus, CPU, minutes
    python taco.py --objective mlm --out runs/mlm     # the MLM baseline on the same data
    python taco.py --resume                           # continue the run in --out exactly

    # the paper's BERT-base on one GPU, on 8 GPUs, on 2 nodes of 8 GPUs
    python taco.py --size base --data wikipedia,bookcorpus --out runs/base
    torchrun --standalone --nproc_per_node=8 taco.py --size base --data wikipedia,bookcorpus --out runs/base
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --rdzv_backend=c10d \
        --rdzv_endpoint=HOST:29500 taco.py --size base --data wikipedia,bookcorpus --out runs/base \
        --device_batch_size 40   # 1,280 / 16 processes = 80 = 2 micro-steps of 40
    # (the same on the second node with --node_rank=1)

The global batch (--batch_size) is fixed by the command; gradient accumulation is derived
from it, the per-device batch and the world size, so every launch above optimises alike.
"""
import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from cli import float_range, int_range
from data import DataError, load_tokenizer, make_blocks, mask_tokens, retromae_batch, tokenize_corpus
from model import SIZES, BertConfig, BertForPreTraining, RetroMAEForPreTraining


class UsageError(ValueError):
    """A user mistake: reported as one line, exit code 2."""


# ----------------------------------------------------------------------------- the TC loss (the paper's Sec. 3)

def tc_loss(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
            generator=None, positions=None, fast=True, group=None):
    """TACO's token-alignment contrastive loss: the paper's Eq. 4, averaged over anchors.

    h: last-layer hidden states (B, T, H); e: embedding-layer output (B, T, H);
    attention_mask: (B, T), 1 = real token (None: all real, as in packed pre-training blocks);
    positions: optional (B, T) bool restricting the anchors (e.g. masked tokens only);
    fast: the cosines by `SampledCosines` (below) instead of the einsum; the same numbers;
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
        cols = torch.cat([pos[..., None], neg], -1).reshape(B * T, -1)  # (N, 1+K), the positive first
        cos = SampledCosines.apply(z, keys, cols) if fast else torch.einsum("nh,njh->nj", z, keys[cols])
        target = torch.zeros(B * T, dtype=torch.long, device=h.device)  # the positive is class 0
        loss = F.cross_entropy(cos / temperature, target, reduction="none")  # Eq. 4: InfoNCE, (N,)
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


def rand(generator, device, *shape):
    """Uniform [0, 1) numbers drawn on the generator's device, returned on `device`."""
    where = generator.device if generator is not None else device
    return torch.rand(*shape, generator=generator, device=where).to(device)


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
    """out[n, j] = a[n] . keys[cols[n, j]], with a gradient to `a` only: tc_loss's
    einsum("nh,njh->nj", a, keys[cols]) without its (N, 1+K, H) copy of keys (210 MB for
    BERT-small at 16 x 128, 3.4 GB at 64 x 256), which the einsum writes, reads back and keeps
    for the backward. The forward takes the cheaper of two routes (`similarity_route`), a chunk
    of anchors at a time; the backward, d/da[n] = sum_j grad[n, j] keys[cols[n, j]], is a
    weighted sum of rows of keys (embedding_bag). Equal to the einsum to float rounding
    (test_speed.py); keys must be detached.
    """

    @staticmethod
    def forward(ctx, a, keys, cols):
        if ctx.needs_input_grad[1]:
            raise ValueError("SampledCosines gives no gradient to keys: pass keys.detach()")
        ctx.save_for_backward(keys, cols)
        route, _ = similarity_route(len(a), len(keys), cols.shape[1], a.shape[1])
        if route == "product":  # every key, then pick: <= 1M cosines (4 MB) per chunk
            step = max(1, 2 ** 20 // len(keys))
            return torch.cat([(rows @ keys.T).gather(1, idx) for rows, idx in zip(a.split(step), cols.split(step))])
        step = max(1, GATHER_CHUNK // (cols.shape[1] * a.shape[1]))  # the sampled keys of a chunk: <= 1 MB
        return torch.cat([torch.bmm(keys[idx], rows[:, :, None])[:, :, 0]
                          for rows, idx in zip(a.split(step), cols.split(step))])

    @staticmethod
    def backward(ctx, grad):
        keys, cols = ctx.saved_tensors
        with torch.autocast(keys.device.type, enabled=False):  # backward runs under the caller's autocast
            return F.embedding_bag(cols, keys, per_sample_weights=grad.to(keys.dtype), mode="sum"), None, None


GATHER_CHUNK = 2 ** 18  # floats of sampled keys per chunk of the gather route (1 MB: stays in cache)
PRODUCT_SPEEDUP = 16  # a matrix product does this many times more multiply-adds per second than the gather


def similarity_route(n, m, j, h):
    """The forward route of SampledCosines for n anchors, m keys, j sampled keys per anchor and
    width h, and the multiply-adds of forward + backward. "product" (n x m matrix product, then
    pick) costs n m h but runs PRODUCT_SPEEDUP times faster per multiply-add than "gather" (n j h),
    so it wins while m <= PRODUCT_SPEEDUP * j; the backward (embedding_bag) is n j h either way."""
    if m <= PRODUCT_SPEEDUP * j:
        return "product", n * m * h + n * j * h
    return "gather", 2 * n * j * h


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

@torch.no_grad()
def contextual_score(model, batches, attention_masks=None):
    """The paper's contextual score (its appendix A.3) of last-layer states, by cosine.

    intra: mean cosine of two distinct tokens of the same sequence;
    inter: mean cosine of two tokens of different sequences of the same batch;
    score = intra - inter. With unit vectors z, the sum of cosines over all pairs of a set
    is |sum z|^2 - (number of tokens), so no N x N matrix is ever built.
    """
    encoder = getattr(model, "bert", model)
    was_training = encoder.training
    encoder.eval()
    intra_sum = intra_n = inter_sum = inter_n = 0.0
    for i, ids in enumerate(batches):
        mask = None if attention_masks is None else attention_masks[i]
        h, _ = encoder(ids, attention_mask=mask)
        real = torch.ones(ids.shape, dtype=torch.bool, device=ids.device) if mask is None else mask.bool()
        z = F.normalize(h.float(), dim=-1) * real[..., None]  # padding contributes nothing
        n = real.sum(1).double()  # (B,)
        per_seq = z.sum(1).double()  # (B, H)
        same = (per_seq.pow(2).sum(1) - n)  # all ordered pairs within each sequence, minus self
        total = per_seq.sum(0).pow(2).sum() - n.sum()
        intra_sum += same.sum().item()
        intra_n += (n * (n - 1)).sum().item()
        inter_sum += (total - same.sum()).item()
        inter_n += (n.sum() ** 2 - (n ** 2).sum()).item()
    encoder.train(was_training)
    intra, inter = intra_sum / max(intra_n, 1), inter_sum / max(inter_n, 1)
    return {"intra": intra, "inter": inter, "score": intra - inter}


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
             "skip_nonfinite", "compile", "plain_tc", "num_proc", "cache_dir", "device", "device_batch_size"}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a flag's default unless it is None/False (those helps say what happens)."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, False) else super()._get_help_string(action)


def get_args(argv=None):
    p = argparse.ArgumentParser(description="TACO / MLM pre-training of BERT.", formatter_class=HelpFormatter)
    # model and objective
    p.add_argument("--size", default="tiny", choices=list(SIZES), help="model size; also picks the training recipe")
    p.add_argument("--objective", default="taco", choices=["taco", "mlm", "retromae"],
                   help="taco = MLM + TC; mlm = the baseline; retromae = whole-word MLM + RetroMAE's decoder loss")
    p.add_argument("--tc_weight", type=float, default=1.0, help="lambda in loss = MLM + lambda * TC")
    p.add_argument("--tc_positions", default="all", choices=["all", "masked", "unmasked"],
                   help="anchors of the TC loss: every real token, or only masked / unmasked ones")
    p.add_argument("--window", type=int, default=5, help="W: positives lie within W//2 positions of the anchor "
                   "(an even W counts as W+1)")
    p.add_argument("--negatives", type=int, default=50, help="K: negatives per anchor, from other sequences")
    p.add_argument("--negatives_from", default="device", choices=["device", "global"],
                   help="draw negatives from this device's micro-batch, or from every rank's (all-gathered, "
                   "detached), as the official single-process multi-GPU runs did")
    p.add_argument("--temperature", type=float, default=0.07, help="tau of the InfoNCE softmax")
    p.add_argument("--plain_tc", action="store_true", help="compute the TC cosines by the plain einsum "
                   "(the same numbers, slower, more memory) instead of taco.SampledCosines")
    p.add_argument("--mlm_probability", type=float, default=None,
                   help="fraction of tokens masked (default 0.15; 0.3 for retromae, whole words)")
    p.add_argument("--predict_all", action="store_true", help="MLM+TP ablation: add a token-prediction loss, "
                   "the mean over the unmasked tokens, to MLM's mean over the masked ones")
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
    p.add_argument("--max_len", type=int, default=None, help="tokens per block (default: from --size)")
    p.add_argument("--cache_dir", default=None, help="where tokenised corpora are cached (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--num_proc", type=int, default=None,
                   help="tokenisation processes (default: one per 100 MB of text, at most one per core)")
    p.add_argument("--eval_blocks", type=int, default=64, help="blocks held out for evaluation")
    # optimisation
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: from --size)")
    p.add_argument("--warmup", type=int, default=None, help="linear warm-up steps (default: from --size)")
    p.add_argument("--batch_size", type=int, default=None, help="global batch in sequences (default: from --size)")
    p.add_argument("--device_batch_size", type=int, default=32, help="sequences per device per micro-step")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: from --size)")
    p.add_argument("--weight_decay", type=float, default=0.01, help="AdamW weight decay on matrices")
    p.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping")
    p.add_argument("--seed", type=int, default=0, help="seeds init, data order, masking and sampling")
    # system
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                   help="autocast precision (default: bf16 on capable CUDA, else fp32)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    # output
    p.add_argument("--out", default="runs/taco", help="run directory: config, metrics, checkpoints")
    p.add_argument("--save_every", type=int, default=200, help="checkpoint every N steps (and at the end)")
    p.add_argument("--eval_every", type=int, default=100, help="evaluate every N steps (and at the end)")
    p.add_argument("--log_every", type=int, default=10, help="write metrics.jsonl every N steps")
    p.add_argument("--keep_last", type=int, default=3, help="checkpoints kept in --out")
    p.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint in --out")
    p.add_argument("--force", action="store_true", help="overwrite a run in --out, or resume with changed settings")
    p.add_argument("--skip_nonfinite", action="store_true", help="skip steps with a non-finite loss instead of stopping")
    args = p.parse_args(argv)
    recipe = RECIPES[args.size]
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
    """Catch user mistakes before anything is written; returns the accumulation steps."""
    if not 8 <= args.max_len <= 512:
        raise UsageError(f"--max_len must be between 8 and 512 (BERT has 512 positions), not {args.max_len}")
    if args.objective == "taco":
        if args.window < 2:
            raise UsageError(f"--window is W, the width of the window centred on the anchor "
                             f"(W=5: up to 2 positions either side); it must be >= 2, not {args.window}")
        if args.negatives < 1:
            raise UsageError(f"--negatives must be >= 1, not {args.negatives}")
        if args.temperature <= 0:
            raise UsageError("--temperature must be > 0")
    for flag in ("steps", "batch_size", "device_batch_size", "save_every", "eval_every", "log_every", "keep_last"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be >= 1")
    if args.warmup < 0 or args.warmup > args.steps:
        raise UsageError(f"--warmup must be between 0 and --steps ({args.steps})")
    if not 0 < args.mlm_probability < 1:
        raise UsageError("--mlm_probability must be in (0, 1)")
    if args.objective == "retromae" and (args.predict_all or args.tc_positions != "all"):
        raise UsageError("--predict_all and --tc_positions are MLM/TACO ablations; retromae's decoder "
                         "already predicts every token and it has no TC loss")
    if args.batch_size % world_size:
        raise UsageError(f"--batch_size {args.batch_size} is not divisible by the {world_size} processes")
    per_rank = args.batch_size // world_size
    dbs = min(args.device_batch_size, per_rank)
    if per_rank % dbs:
        raise UsageError(f"the per-process batch {per_rank} is not a multiple of --device_batch_size {dbs}")
    pool = dbs * (world_size if args.negatives_from == "global" else 1)  # sequences negatives come from
    if args.objective == "taco" and pool < 2:
        raise UsageError("TACO draws negatives from other sequences of the device batch: "
                         "--device_batch_size must be >= 2")
    if args.objective == "taco" and args.negatives > (pool - 1) * args.max_len:
        raise UsageError(f"--negatives {args.negatives} exceeds the {(pool - 1) * args.max_len} tokens "
                         f"of the other sequences in a device batch; lower it or raise --device_batch_size")
    args.device_batch_size = dbs
    return per_rank // dbs


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

def _fsync_write(path, write):
    """Write through a temp file in the same directory, fsync, then rename: all or nothing."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


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
    _fsync_write(path, lambda f: torch.save(state, f))
    manifest = {"step": state["step"], "bytes": os.path.getsize(path), "sha256": _sha256(path)}
    _fsync_write(path[:-3] + ".json", lambda f: f.write(json.dumps(manifest).encode()))
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
        with open(path[:-3] + ".json") as f:
            manifest = json.load(f)
        if os.path.getsize(path) != manifest["bytes"]:
            return f"size {os.path.getsize(path)} != {manifest['bytes']} (truncated?)"
        if _sha256(path) != manifest["sha256"]:
            return "checksum mismatch (corrupted)"
    except (OSError, ValueError, KeyError) as err:
        return f"unreadable ({err.__class__.__name__}: {err})"
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
    if os.path.isfile(spec):
        return spec, False
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
    device_type = device_arg or ("cuda" if torch.cuda.is_available() else "cpu")
    if "RANK" not in os.environ:
        return 0, 0, 1, torch.device(device_type)
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


def all_ranks_max(value, device):
    """The maximum of a float over all ranks (e.g. a 'something went wrong' flag)."""
    t = torch.tensor(float(value), device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


# ----------------------------------------------------------------------------- training

def prepare_out(args, resuming, overwrite):
    """Refuse to clobber another run; on resume, refuse a changed configuration."""
    cfg_path = os.path.join(args.out, "config.json")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out} is a file; pass a directory")
    if resuming and os.path.exists(cfg_path):
        with open(cfg_path) as f:
            old = json.load(f)["args"]
        changed = sorted(k for k, v in vars(args).items() if k not in RESUMABLE and old.get(k) != v)
        if changed and not args.force:
            raise UsageError(f"--resume with settings that differ from the run in {args.out}: "
                             f"{', '.join(changed)}; pass --force to accept them")
    elif os.path.exists(cfg_path) or list_checkpoints(args.out):
        if not overwrite:
            raise UsageError(f"{args.out} already holds a run; pass --resume to continue it, "
                             f"--force to overwrite it, or another --out")
        for name in os.listdir(args.out):
            if name.startswith("ckpt_") or name in ("metrics.jsonl", "config.json"):
                os.remove(os.path.join(args.out, name))
    try:
        os.makedirs(args.out, exist_ok=True)
        probe = os.path.join(args.out, f".write_test{os.getpid()}")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as err:
        raise UsageError(f"cannot write to --out {args.out}: {err.strerror}") from err


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


def compute_loss(model, inputs, labels, anchors, args, generator, tp_labels=None):
    """loss = MLM + lambda * TC (the paper's Eq. 5) -> (loss, mlm, tc, tp) for logging.

    With tp_labels (--predict_all), the MLM+TP ablation adds a token-prediction loss, the mean
    over the unmasked tokens, to MLM's mean over the masked ones: loss = MLM + TP (+ lambda TC).
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
    return mlm + tp + args.tc_weight * tc, mlm, tc, tp


@torch.no_grad()
def evaluate(model, blocks, tok, args, device):
    """MLM loss / accuracy on held-out blocks (fixed masks) and the contextual score."""
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
    ctx = contextual_score(model, batches)
    model.train()
    return {"eval_mlm_loss": loss / n, "eval_mlm_acc": correct / n,
            "ctx_intra": ctx["intra"], "ctx_inter": ctx["inter"], "ctx_score": ctx["score"]}


def train(args):
    rank, local_rank, world, device = setup_distributed(args.device)
    master = rank == 0
    accum = check_args(args, world)
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
    tok = load_tokenizer(args.vocab, args.cache_dir)
    if args.init:
        if cfg.vocab_size != tok.vocab_size:
            raise UsageError(f"--init {args.init} has a vocabulary of {cfg.vocab_size} but --vocab {args.vocab} "
                             f"has {tok.vocab_size}: pass the init's vocab.txt (the default)")
        cfg.tie_word_embeddings = not args.untie_embeddings
    else:
        cfg = BertConfig.from_size(args.size, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id,
                                   tie_word_embeddings=not args.untie_embeddings)
    if master:  # rank 0 tokenises (and caches) first; the others then read the cache
        tokens = tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc)
    if world > 1:
        dist.barrier()
    if not master:
        tokens = tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc)
    blocks = make_blocks(tokens, args.max_len, tok.cls_id, tok.sep_id)  # cut per batch from the memmap
    n_eval = min(args.eval_blocks, len(blocks) // 10)
    train_blocks, eval_blocks = blocks.split(len(blocks) - n_eval)  # the tail is held out
    steps_per_epoch = len(train_blocks) // args.batch_size
    if steps_per_epoch == 0:
        raise UsageError(f"the corpus gives {len(train_blocks)} training blocks of {args.max_len} tokens, "
                         f"fewer than one batch of {args.batch_size}; lower --batch_size or add data")
    if master:
        prepare_out(args, resuming, overwrite=args.force or restarted)
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
    optimizer = configure_optimizer(raw, args.lr, args.weight_decay)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "fp16")
    start, skipped = 0, 0
    if resuming:
        ckpt = load_checkpoint(resume_from)
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

    metrics_path = os.path.join(args.out, "metrics.jsonl")
    if master:
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump({"args": vars(args), "model_config": asdict(cfg), "world_size": world,
                   "init": {"source": init_source, "sha256": _sha256(init_source) if os.path.isfile(init_source)
                            else None} if args.init else None,
                       "accumulation": accum, "dtype": dtype, "train_blocks": len(train_blocks),
                       "eval_blocks": n_eval, "parameters": sum(p.numel() for p in raw.parameters())},
                      f, indent=2)
        shutil.copyfile(tok.vocab_file, os.path.join(args.out, "vocab.txt"))
        if resuming and os.path.exists(metrics_path):  # drop lines logged after the checkpoint
            with open(metrics_path) as f:
                kept = [l for l in f if json.loads(l)["step"] <= start]
            with open(metrics_path, "w") as f:
                f.writelines(kept)
        print(f"{args.objective} | {args.size} ({sum(p.numel() for p in raw.parameters()) / 1e6:.1f}M params) | "
              f"{len(train_blocks)} blocks x {args.max_len} | batch {args.batch_size} = {world} x "
              f"{accum} x {args.device_batch_size} | {dtype} on {device.type}"
              + (f" | init {init_source}" if args.init else "")
              + (f" | resumed at step {start}" if resuming else ""))

    per_rank = args.batch_size // world
    crash_step = int(os.environ.get("TACO_TEST_CRASH_STEP", -1))  # fault-injection for tests only
    crash_rank = int(os.environ.get("TACO_TEST_CRASH_RANK", 1))
    bar = tqdm(range(start, args.steps), initial=start, total=args.steps, disable=not master,
               dynamic_ncols=True, desc="train")
    perm_epoch, perm, tokens_seen, t0 = -1, None, 0, time.time()
    last_ckpt, last_eval = resume_from, None
    for step in bar:
        if step == crash_step and rank == crash_rank and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            os._exit(13)
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
                loss, mlm, tc, tp = compute_loss(model, inputs, labels, anchors, args, dev_gen, tp_labels)
            scaler.scale(loss / accum).backward()
            sums += torch.stack([loss, mlm, tc, tp]).detach().float() / accum
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), args.clip)
        # fp16's scaler handles overflowing gradients itself; any other non-finite value is a fault.
        # One host sync per step for both checks.
        bad = not (torch.isfinite(sums).all() & (torch.isfinite(grad_norm) | (dtype == "fp16"))).item()
        if all_ranks_max(bad, device):
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
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(record) + "\n")
            if done % args.save_every == 0 or done == args.steps:
                last_ckpt = save_checkpoint(args.out, {
                    "model": raw.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(), "step": done, "skipped": skipped,
                    "model_config": asdict(cfg), "args": vars(args),
                    "data_position": {"epoch": done // steps_per_epoch, "batch": done % steps_per_epoch}},
                    args.keep_last)
    if master and last_eval:
        print(f"done: eval MLM loss {last_eval['eval_mlm_loss']:.3f}, acc {last_eval['eval_mlm_acc']:.3f}, "
              f"contextual score {last_eval['ctx_score']:.3f} (intra {last_eval['ctx_intra']:.3f}, "
              f"inter {last_eval['ctx_inter']:.3f}); run in {args.out}")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def main(argv=None):
    args = get_args(argv)
    try:
        train(args)
    except (UsageError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except FloatingPointError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
