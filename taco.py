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
import contextlib
from collections import Counter
from typing import NamedTuple

from engine import checkpoints, cli, runs  # first, before torch loads (engine/__init__.py)
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from data import Batches, load_tokenizer, make_blocks, mask_tokens, rand, retromae_batch
from engine.fast import SampledCosines, speed_up
from engine.flags import apply_recipe, get_args
from model import Bert, BertConfig, BertForPreTraining, RetroMAEForPreTraining


# ----------------------------------------------------------------------------- the TC loss (the paper's Sec. 3)

def tc_loss(h, e, attention_mask=None, window=5, num_negatives=50, temperature=0.07,
            generator=None, positions=None, fast=False, group=None):
    """TACO's token-alignment contrastive loss: the paper's Eq. 4, averaged over anchors.

    h: last-layer hidden states (B, T, H); e: embedding-layer output (B, T, H);
    attention_mask: (B, T), 1 = real token (None: all real, as in packed pre-training blocks);
    positions: optional (B, T) bool restricting the anchors (e.g. masked tokens only);
    fast: the cosines by engine/fast.py's SampledCosines instead of normalize + einsum: the same numbers, at
    linear cost (the training loop's default; --plain_tc or --plain turn it off);
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
            keys, pool, mine = runs.gather_pool(keys, real, group)
        if pool.shape[0] < 2:
            raise cli.UsageError("the TC loss needs >= 2 sequences per device batch for negatives; "
                                 "raise --device_batch_size")
        pos = sample_positives(pool, window, generator)[mine]  # (B, T): j, near i in its sequence
        neg = sample_negatives(pool, num_negatives, generator)[mine]  # (B, T, K): k, in other sequences
        cols = torch.cat([pos[..., None], neg], -1).reshape(B * T, -1)  # (B*T, 1+K), the positive first
        if fast:  # the same cosines at linear cost, normalising g itself (engine/fast.py)
            cos = SampledCosines.apply(g.reshape(B * T, H), keys, cols)
        else:
            cos = torch.einsum("nh,njh->nj", z, keys[cols])  # z_i . z_j for each j in cols: (B*T, 1+K)
        target = torch.zeros(B * T, dtype=torch.long, device=h.device)  # the positive is class 0
        loss = F.cross_entropy(cos / temperature, target, reduction="none")  # Eq. 4: InfoNCE, (B*T,)
        weight = anchors.reshape(-1).float()  # the mean over anchors, by weights: no host sync on GPU
        return (loss * weight).sum() / weight.sum().clamp(min=1)  # no anchor (none masked): 0


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
    # the real tokens, sequence by sequence, first (then padding): a sort, where nonzero() would make a GPU wait
    tokens = torch.argsort((~real).reshape(-1).long(), stable=True)
    n = real.sum(1)[:, None, None]  # (B, 1, 1): tokens of each sequence
    total, start = n.sum(), n.cumsum(0) - n  # all real tokens; where each sequence's begin in `tokens`
    k = (rand(generator, real.device, B, T, num_negatives) * (total - n)).long()  # one of the others' tokens,
    k = k + n * (k >= start).long()  # counted with our own skipped
    return tokens[torch.minimum(k, total - 1)]


def other_token(real, generator=None):
    """For each token, the position of a uniformly random *other* real token of its sequence
    (B, T) long; meaningless where the sequence has < 2 real tokens."""
    B, T = real.shape
    n = real.sum(1, keepdim=True)
    k = (rand(generator, real.device, B, T) * (n - 1).clamp(min=1)).long()  # the k-th of the others,
    k = k + (k >= real.long().cumsum(1) - 1).long()  # counted with the token itself skipped
    real_first = torch.argsort((~real).long(), dim=1, stable=True)  # positions of real tokens, in order
    return real_first.gather(1, k.clamp(max=T - 1))


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
        weight = anchors.reshape(-1).float()  # the mean over anchors, by weights: no host sync on GPU
        return (loss * weight).sum() / weight.sum().clamp(min=1)  # no anchor (nothing masked): 0


def make_teacher(cfg, init_state, dropout, device):
    """TaCL's teacher: a frozen copy of the --init encoder, outside the trained model (in no optimizer, DDP wrapper
    or checkpoint); every rank, and a resumed run, builds it from --init. dropout=True is the official code's
    behaviour (its teacher follows model.train(); yxuansu/TaCL#11)."""
    teacher = Bert(cfg).to(device)
    teacher.load_state_dict({k[5:]: v for k, v in init_state.items() if k.startswith("bert.")})
    return teacher.requires_grad_(False).train(dropout)


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
    enc = mean_cross_entropy(enc_logits.float(), labels[labels != -100])
    rebuild = mean_cross_entropy(dec_logits.float(), dec.labels[dec.labels != -100])
    return enc + decoder_weight * rebuild, enc, rebuild


def mean_cross_entropy(logits, targets):
    """The mean cross-entropy over the chosen rows; 0 (in the graph) when masking chose none: normal, not a NaN."""
    return F.cross_entropy(logits, targets) if len(targets) else logits.sum() * 0.0


# ----------------------------------------------------------------------------- the contextual score

def document_segments(ids, sep_id):
    """(B, T) index of each token's document within its block. Packed blocks hold several
    documents, each ended by [SEP]; a [SEP] belongs to the document it ends, [CLS] to the first."""
    is_sep = (ids == sep_id).long()
    return is_sep.cumsum(1) - is_sep


def pair_sums(x, groups, real, dtype=torch.float64):
    """Sums of x_a . x_b over ordered pairs a != b of real tokens in the same group (intra) and
    in different groups (inter), with their counts. x: (B, T, H); groups, real: (B, T).
    The sum over all pairs of a set is |sum x|^2 - sum |x_a|^2: no N x N matrix is built.
    dtype: of the sums; fp32 is as good for unit vectors (to ~1e-7, test_taco.py) and fast on a GPU."""
    x, g = x.to(dtype)[real], groups[real]  # (N, H), (N,)
    names, g = torch.unique(g, return_inverse=True)  # g: group ids 0 .. G-1
    per_group = x.new_zeros(len(names), x.size(1)).index_add_(0, g, x)  # (G, H)
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
    sums = {f: Counter() for f in forms}  # pair_sums' sums and counts, added up over the batches
    for i, ids in enumerate(batches):
        mask = None if attention_masks is None else attention_masks[i]
        h, _ = encoder(ids, attention_mask=mask)
        real = torch.ones(ids.shape, dtype=torch.bool, device=ids.device) if mask is None else mask.bool()
        z = F.normalize(h.float(), dim=-1)  # cosine = dot product of unit vectors
        dtype = torch.float64 if z.is_cpu else torch.float32  # float64 is slow on most GPUs
        for f, sep in forms.items():
            sums[f].update(pair_sums(z, context_groups(ids, sep), real, dtype))
    encoder.train(was_training)
    out = {}
    for f, s in sums.items():
        intra, inter = s["intra_sum"] / max(s["intra_n"], 1), s["inter_sum"] / max(s["inter_n"], 1)
        out.update({f"{f}intra": intra, f"{f}inter": inter, f"{f}score": intra - inter})
    return out


# ----------------------------------------------------------------------------- optimizer and schedule

def configure_optimizer(model, lr, weight_decay):
    """AdamW with weight decay on matrices only (not on biases and LayerNorm); fused (one
    kernel for all tensors) on CPU too, where it is ~4x faster than the default loop."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=True)  # the official scripts' values


def get_lr(step, lr, warmup, steps):
    """Linear warm-up to lr over `warmup` steps (step 0 gets lr / warmup), then linear decay to 0 at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * max(0.0, (steps - step) / max(1, steps - warmup))


# ----------------------------------------------------------------------------- one training step

class MaskedBatch(NamedTuple):
    """One micro-batch as the losses read it; None where an objective needs none."""
    inputs: torch.Tensor  # the masked ids
    labels: torch.Tensor  # MLM's targets: the original id where masked, -100 elsewhere
    targets: torch.Tensor = None  # --predict_all (MLM+TP): every non-special token's id, -100 elsewhere
    tc_positions: torch.Tensor = None  # the tokens TC's anchors are restricted to (--tc_positions; None: all)
    unmasked: torch.Tensor = None  # the ids before masking (TaCL's teacher reads them)
    decoder: DecoderInputs = None  # RetroMAE's decoder batch
    rows: torch.Tensor = None  # the flat positions with a target, found on the host: see predicted_rows

    def to(self, device):
        return MaskedBatch(*(None if t is None else t.to(device, non_blocking=True) for t in self))


def masked_batch(ids, tok, args, generator):
    """Dynamic masking of one micro-batch (B, T) -> MaskedBatch (retromae: whole-word masking
    and the decoder's batch)."""
    if args.objective == "retromae":
        inputs, labels, visible, dec_labels = retromae_batch(ids, tok, args.mlm_probability, args.decoder_mlm_probability,
                                                             generator, args.decoder_pool)
        return MaskedBatch(inputs, labels, decoder=DecoderInputs(ids.long(), visible, dec_labels))
    inputs, labels = mask_tokens(ids, tok, args.mlm_probability, generator)
    masked = labels != -100
    targets = None
    if args.predict_all:  # MLM's and TP's targets: every non-special token
        targets = torch.where(torch.isin(ids, torch.tensor(tok.special_ids)), -100, ids)
    positions = {"all": None, "masked": masked, "unmasked": ~masked}[args.tc_positions]
    return MaskedBatch(inputs, labels, targets, positions, unmasked=ids if args.objective == "tacl" else None,
                       rows=predicted_rows(labels if targets is None else targets))


def predicted_rows(labels):
    """The flat positions (into B*T) whose token is predicted (labels != -100), in order. Found on the
    host where the masks are made, they select the rows on a GPU by index: boolean-mask indexing
    (h[labels != -100]) would make the GPU wait for the host's nonzero()."""
    return (labels != -100).reshape(-1).nonzero().squeeze(1)


def compute_loss(model, batch, args, generator, teacher=None):
    """loss = MLM + lambda * TC (the paper's Eq. 5) -> (loss, mlm, tc, tp) for logging.
    generator: TC's sampling of positives and negatives. tacl: MLM + lambda * TaCL, logged as tc;
    `teacher` reads the unmasked ids. retromae: (L_enc + L_dec, L_enc, L_dec, 0).

    With batch.targets (--predict_all), the MLM+TP ablation adds a token-prediction loss, the mean
    over the other non-special tokens, to MLM's mean over the chosen ones: loss = MLM + TP (+ lambda TC).
    """
    labels = batch.labels
    if args.objective == "retromae":
        loss, enc, dec = retromae_loss(model, batch.inputs, labels, batch.decoder, args.decoder_weight)
        return loss, enc, dec, torch.zeros_like(loss)
    targets = labels if batch.targets is None else batch.targets
    rows = predicted_rows(targets) if batch.rows is None else batch.rows
    logits, h, e = model(batch.inputs, labels=targets, rows=rows)  # logits only at those rows (found by index)
    ce = F.cross_entropy(logits.float(), targets.reshape(-1)[rows], reduction="none")
    # the means over the chosen rows; 0 (still in the graph) for a micro-batch where masking chose none
    mlm, tp = (ce.mean() if len(ce) else ce.sum()), torch.zeros((), device=ce.device)
    if batch.targets is not None:  # which rows are MLM's, which TP's: means by weights, no host sync
        masked = (labels != -100).reshape(-1)[rows].float()
        mlm, tp = ((ce * w).sum() / w.sum().clamp(min=1) for w in (masked, 1 - masked))
    tc = torch.zeros_like(mlm)
    if args.objective == "taco":
        group = dist.group.WORLD if args.negatives_from == "global" and dist.is_initialized() else None
        tc = tc_loss(h, e, window=args.window, num_negatives=args.negatives, temperature=args.temperature,
                     generator=generator, positions=batch.tc_positions, fast=not (args.plain_tc or args.plain), group=group)
    elif args.objective == "tacl":  # the teacher reads the unmasked ids; anchors: the MLM-selected positions
        with torch.no_grad():
            teacher_h, _ = teacher(batch.unmasked)
        tc = tacl_loss(h, teacher_h, labels != -100, args.temperature)
    return mlm + tp + args.tc_weight * tc, mlm, tc, tp


EVAL_BATCH = 32  # held-out blocks per batch: the contextual score compares blocks of one batch, whatever the micro-batch


@torch.no_grad()
def evaluate(model, blocks, tok, args, device, autocast=contextlib.nullcontext()):
    """MLM loss / accuracy on held-out blocks (fixed masks) and the contextual score in its
    block form (ctx_*) and document-bounded form (ctx_doc_*), under the run's `autocast`
    (the losses and cosines themselves in fp32), in batches of EVAL_BATCH blocks."""
    model.eval()
    gen = torch.Generator().manual_seed(1234)
    batches = [torch.from_numpy(blocks[i:i + EVAL_BATCH].astype(np.int64)) for i in range(0, len(blocks), EVAL_BATCH)]
    loss = correct = n = 0.0
    with autocast:
        for ids in batches:
            inputs, labels = mask_tokens(ids, tok, args.mlm_probability, gen)
            logits, _, _ = model(inputs.to(device), rows=predicted_rows(labels).to(device))
            target = labels[labels != -100].to(device)
            loss += F.cross_entropy(logits.float(), target, reduction="sum").item()
            correct += (logits.argmax(-1) == target).sum().item()
            n += len(target)
        ctx = contextual_score(model, [ids.to(device) for ids in batches], sep_id=tok.sep_id)
    model.train()
    mlm = {"eval_mlm_loss": loss / n, "eval_mlm_acc": correct / n} if n else {}  # none chosen: no MLM numbers
    return {**mlm, **{f"ctx_{k}": v for k, v in ctx.items()}}


# ----------------------------------------------------------------------------- the model

def model_config(args, tok, init=None):
    """The architecture: --size's, or the --init model's (whose vocabulary --vocab must match)."""
    if init is None:
        return BertConfig.from_size(args.size, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id,
                                    tie_word_embeddings=not args.untie_embeddings)
    cfg = init.config
    if cfg.vocab_size != tok.vocab_size:
        raise cli.UsageError(f"--init {args.init} has a vocabulary of {cfg.vocab_size} but --vocab {args.vocab} "
                             f"has {tok.vocab_size}: pass the init's vocab.txt (the default)")
    cfg.tie_word_embeddings = not args.untie_embeddings
    return cfg


def make_model(args, cfg, init_state=None):
    """BertForPreTraining (RetroMAE's adds the decoder), fresh or with --init's weights."""
    model = (RetroMAEForPreTraining if args.objective == "retromae" else BertForPreTraining)(cfg)
    if init_state is not None:
        checkpoints.load_weights(model, init_state, args.init)
    if args.freeze_embeddings:
        # Fig. 4: the whole embedding layer, so that e = LayerNorm(word + position + type) is a fixed
        # function of the token and its position; with tied weights the MLM decoder matrix is frozen too.
        model.bert.embeddings.requires_grad_(False)
    return model


# ----------------------------------------------------------------------------- training

def train(args):
    """Pre-train as `args` say. The loop is the method: data -> mask -> forward -> loss -> backward -> step; `run`
    (runs.Run) is the run's engineering, one call per moment. (1) args.device_batch_size is the micro-batch
    check_args chose: the largest divisor of the per-rank batch up to the flag. (2) DDP orders its gradient buckets
    after the first backward it sees: one before the first step makes a resumed run sum its gradients as an unbroken
    one does (exact resume; its own gradients are dropped)."""
    init = checkpoints.load_init(args.init) if args.init else None  # the weights to continue from
    apply_recipe(args, init)  # with --init and neither --size nor --data: the recipe that fits the init
    with runs.Run(args) as run:  # ranks, threads, checks across flags, --out's lock, the checkpoint to resume
        tok = run.first("load --vocab", lambda: load_tokenizer(args.vocab, args.cache_dir))  # rank 0 asks the hub first
        cfg = model_config(args, tok, init)
        blocks = make_blocks(run.tokens(tok), args.max_len, tok.cls_id, tok.sep_id)  # --data, tokenised once and cached
        train_blocks, eval_blocks = blocks.split(len(blocks) - min(args.eval_blocks, len(blocks) // 10))  # tail held out
        batches = Batches(train_blocks, args.batch_size, args.device_batch_size, args.seed, run.rank, run.world)  # (1)

        torch.manual_seed(args.seed)  # the same init on every rank
        raw = make_model(args, cfg, init.state if init and not run.resuming else None).to(run.device)
        teacher = make_teacher(cfg, init.state, args.teacher_dropout == "on", run.device) if args.objective == "tacl" else None
        for module in filter(None, (raw, teacher) if not args.plain else ()):
            speed_up(module)  # engine/fast.py's CPU dropout and attention: the same computation, faster
        optimizer = configure_optimizer(raw, args.lr, args.weight_decay)
        scaler = torch.amp.GradScaler(run.device.type, enabled=run.dtype == "fp16")  # fp16 only: scaled gradients
        start = run.begin(raw, optimizer, scaler, tok, batches, eval_blocks, init)  # refuse to clobber; resume; config.json
        if init and not start and run.master:  # the init's own held-out scores, which the end line compares with
            run.init_eval = evaluate(raw, eval_blocks, tok, args, run.device, run.autocast)
        model = torch.compile(raw) if args.compile else raw
        if run.world > 1:  # DDP: every rank's gradients averaged in the backward, in buckets a first backward orders (2)
            model = DDP(model, device_ids=[run.device.index] if run.device.type == "cuda" else None)
            first = masked_batch(batches.at(start)[0], tok, args, torch.Generator()).to(run.device)
            runs.settle_buckets(model, lambda: compute_loss(model, first, args, run.reseed(start)[1], teacher)[0],
                                run.autocast)

        for step in run.steps(start):  # a progress bar; a stop signal saves and stops at a step boundary
            lr = get_lr(step, args.lr, args.warmup, args.steps)  # linear warm-up, then linear decay
            for group in optimizer.param_groups:
                group["lr"] = lr
            masking, sampling = run.reseed(step)  # the step's random numbers (dropout's too), from (seed, step, rank)
            micro_batches = batches.at(step)  # this rank's share of the step's batch (gradient accumulation)
            losses = torch.zeros(4, device=run.device)  # loss, mlm, tc, tp: means over the micro-batches
            for i, ids in enumerate(micro_batches):
                batch = masked_batch(ids, tok, args, masking).to(run.device)
                # DDP: all-reduce the gradients only in the last micro-step's backward (set before the forward)
                model.require_backward_grad_sync = i == len(micro_batches) - 1
                with run.autocast:  # bf16 / fp16 forward passes (--dtype); fp32: no autocast
                    loss, mlm, tc, tp = compute_loss(model, batch, args, sampling, teacher)
                scaler.scale(loss / len(micro_batches)).backward()
                losses += torch.stack([loss, mlm, tc, tp]).detach().float() / len(micro_batches)
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), args.clip)
            if run.agree(step, losses, grad_norm):  # finite on every rank? else stop (or skip: --skip_nonfinite)
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad(set_to_none=True)
            evals = evaluate(raw, eval_blocks, tok, args, run.device, run.autocast) if run.eval_due(step + 1) else {}
            run.log(step + 1, losses, lr, grad_norm, evals)  # the bar and metrics.jsonl, every --log_every steps
            run.save(step + 1, raw, optimizer, scaler)  # every --save_every steps, at the end, on a stop signal
            run.stop_if_signalled(step + 1)
        run.end()


def main(argv=None):
    """The command line; user mistakes end in one `error:` line (cli.errors, docs/robustness.md)."""
    with cli.errors():
        train(get_args(argv))


if __name__ == "__main__":
    main()
