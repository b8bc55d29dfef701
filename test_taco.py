"""The method's own tests: the TC loss and its samplers against closed forms and a loop from the
paper, MLM+TP, compute_loss, the contextual score against brute force, the optimizer and the
schedule. Pre-training end to end (objectives, flags, --init, precisions) is tests/test_train.py's."""
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine import runs
import taco
from model import BertConfig, BertForPreTraining
from taco import configure_optimizer, contextual_score, get_lr, sample_negatives, sample_positives, tc_loss

HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- the TC loss

def orthogonal_states(B, T, H=16, scale=3.0):
    """h: every token of sequence b points along axis b; e = 0; so g is unit along axis b."""
    h = torch.zeros(B, T, H)
    for b in range(B):
        h[b, :, b] = scale
    return h, torch.zeros(B, T, H)


def test_tc_closed_form_orthogonal_sequences():
    K, tau = 7, 0.5  # a tau that keeps the value well above float32 rounding
    h, e = orthogonal_states(4, 10)
    loss = tc_loss(h, e, window=5, num_negatives=K, temperature=tau, generator=torch.Generator().manual_seed(0))
    assert loss.item() == pytest.approx(math.log(1 + K * math.exp(-1 / tau)), rel=1e-4)


def test_tc_closed_form_all_equal():
    h = torch.randn(1, 1, 8).expand(3, 6, 8).clone()
    loss = tc_loss(h, torch.zeros_like(h), num_negatives=50, generator=torch.Generator().manual_seed(0))
    assert loss.item() == pytest.approx(math.log(51), rel=1e-5)


def test_tc_never_samples_padding():
    """Padding points away from every real state: sampling it would change the value."""
    K, tau = 5, 0.5
    B, T, H = 4, 12, 8
    h, e = orthogonal_states(B, T, H)
    mask = torch.ones(B, T, dtype=torch.long)
    for b, n in enumerate([12, 3, 7, 2]):
        mask[b, n:] = 0
        h[b, n:] = -torch.ones(H)  # cosine -1/sqrt(8)·… with every real state: never 0 or 1
    for seed in range(5):
        loss = tc_loss(h, e, attention_mask=mask, window=5, num_negatives=K, temperature=tau,
                       generator=torch.Generator().manual_seed(seed))
        assert loss.item() == pytest.approx(math.log(1 + K * math.exp(-1 / tau)), rel=1e-4)


def test_tc_gradient_only_through_anchors():
    h = torch.randn(3, 8, 16, requires_grad=True)
    e = torch.randn(3, 8, 16)
    anchors = torch.zeros(3, 8, dtype=torch.bool)
    anchors[1, 4] = True
    tc_loss(h, e, None, num_negatives=10, generator=torch.Generator().manual_seed(0), positions=anchors).backward()
    nonzero = h.grad.abs().sum(-1) > 0
    assert nonzero.sum() == 1 and nonzero[1, 4]


def naive_tc(h, e, mask, pos, neg, tau, anchors):
    """Per-token loop over the same sampled indices."""
    B, T, H = h.shape
    g = (h - e).reshape(B * T, H)
    losses = []
    for b in range(B):
        for t in range(T):
            if not anchors[b, t]:
                continue
            a = g[b * T + t]
            sims = [F.cosine_similarity(a, g[pos[b, t]], dim=0)]
            sims += [F.cosine_similarity(a, g[j], dim=0) for j in neg[b, t]]
            logits = torch.stack(sims) / tau
            losses.append(-torch.log_softmax(logits, 0)[0])
    return torch.stack(losses).mean()


@pytest.mark.parametrize("positions", [None, "masked"])
def test_tc_matches_naive_loop(positions):
    torch.manual_seed(0)
    B, T, H, K, tau = 4, 9, 12, 6, 0.07
    h, e = torch.randn(B, T, H), torch.randn(B, T, H)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[2, 5:] = 0
    mask[3, 1:] = 0  # a lone token: it has no positive, so it is no anchor
    chosen = torch.rand(B, T) < 0.5 if positions else None
    loss = tc_loss(h, e, attention_mask=mask, window=5, num_negatives=K, temperature=tau,
                   generator=torch.Generator().manual_seed(3), positions=chosen)
    gen = torch.Generator().manual_seed(3)
    real = mask.bool()
    pos, neg = sample_positives(real, 5, gen), sample_negatives(real, K, gen)
    anchors = real & (real.sum(1, keepdim=True) >= 2)
    if chosen is not None:
        anchors &= chosen
    ref = naive_tc(h, e, mask, pos, neg, tau, anchors)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)


def test_samplers_respect_window_sequence_and_padding():
    B, T, W = 6, 20, 5
    gen = torch.Generator().manual_seed(0)
    real = torch.ones(B, T, dtype=torch.bool)
    for b, n in enumerate([20, 2, 3, 11, 17, 6]):
        real[b, n:] = False
    for _ in range(20):
        pos = sample_positives(real, W, gen)
        neg = sample_negatives(real, 30, gen)
        row, col = pos // T, pos % T
        t = torch.arange(T).expand(B, T)
        b = torch.arange(B)[:, None].expand(B, T)
        ok = real & (real.sum(1, keepdim=True) >= 2)
        assert (row[ok] == b[ok]).all()  # same sequence
        assert (col[ok] != t[ok]).all()  # never itself
        assert real[row[ok], col[ok]].all()  # never padding
        in_window = (col - t).abs() <= W // 2
        # tokens whose whole window is real must get an in-window positive
        full = ok.clone()
        for d in range(-(W // 2), W // 2 + 1):
            shifted = torch.zeros_like(real)
            lo, hi = max(0, -d), min(T, T - d)
            shifted[:, lo:hi] = real[:, lo + d:hi + d]
            full &= shifted
        assert in_window[full].all()
        nrow, ncol = neg // T, neg % T
        assert (nrow != b[..., None]).all()  # never the anchor's own sequence
        assert real[nrow, ncol].all()  # never padding
    # every offset of the window is drawn
    offsets = torch.cat([(sample_positives(real[:1], W, gen) % T - torch.arange(T))[0, 2:-2] for _ in range(50)])
    assert set(offsets.tolist()) == {-2, -1, 1, 2}


@pytest.mark.parametrize("W, reach", [(5, 2), (10, 5), (11, 5), (50, 25)])
def test_positive_offsets_are_uniform_over_the_window(W, reach):
    """Away from the edges, the positive's offset is uniform over -reach..-1, 1..reach, with
    reach = W // 2: an even W counts as W + 1. Chi-square test against the uniform distribution."""
    T = 2 * reach + 1  # the middle token's window fits exactly
    real = torch.ones(20_000, T, dtype=torch.bool)
    pos = sample_positives(real, W, torch.Generator().manual_seed(0))
    offsets = pos[:, reach] % T - reach
    want = [d for d in range(-reach, reach + 1) if d != 0]
    counts = torch.stack([(offsets == d).sum() for d in want]).double()
    assert counts.sum() == len(offsets)  # nothing outside the window
    expected = len(offsets) / len(want)
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    dof = len(want) - 1
    assert chi2 < dof + 5 * math.sqrt(2 * dof)  # ~5 sigma above the chi-square mean


GLOBAL = dict(world=2, B=2, T=10, H=16, K=7, tau=0.5, seed=5)  # a tau that keeps the closed form above rounding


def global_batch(orthogonal):
    """The global micro-batch (world * B sequences) that the ranks split between them."""
    n, T, H = GLOBAL["world"] * GLOBAL["B"], GLOBAL["T"], GLOBAL["H"]
    if orthogonal:
        return orthogonal_states(n, T, H)
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, T, H, generator=gen), torch.randn(n, T, H, generator=gen)


def global_negatives_worker(rank, port, out):
    """One rank of --negatives_from global: its loss and gradient, and the pool it gathered."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=GLOBAL["world"])
    mine = slice(rank * GLOBAL["B"], (rank + 1) * GLOBAL["B"])
    result = {}
    for orthogonal in (False, True):
        h, e = global_batch(orthogonal)
        h = h[mine].clone().requires_grad_(True)
        loss = tc_loss(h, e[mine], num_negatives=GLOBAL["K"], temperature=GLOBAL["tau"],
                       generator=torch.Generator().manual_seed(GLOBAL["seed"]), group=dist.group.WORLD)
        loss.backward()
        result[orthogonal] = (loss.detach(), h.grad)
    z = F.normalize(h.detach() - e[mine], dim=-1).reshape(-1, GLOBAL["H"])
    keys, pool, rows = runs.gather_pool(z, torch.ones(GLOBAL["B"], GLOBAL["T"], dtype=torch.bool), dist.group.WORLD)
    torch.save({"result": result, "keys": keys, "pool": pool, "rows": (rows.start, rows.stop)},
               os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


def test_global_negatives_equal_one_process_holding_both_micro_batches(tmp_path):
    """--negatives_from global on 2 gloo processes: the pool is both ranks' detached global
    parts in rank order; the anchor's own sequence stays excluded (orthogonal sequences: the
    closed form); and each rank's loss and gradient are those of one process holding both
    micro-batches with the same draws, its anchors restricted to that rank's sequences."""
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(global_negatives_worker, args=(port, str(tmp_path)), nprocs=GLOBAL["world"])
    B, T, K, tau = GLOBAL["B"], GLOBAL["T"], GLOBAL["K"], GLOBAL["tau"]
    for rank in range(GLOBAL["world"]):
        got = torch.load(os.path.join(tmp_path, f"rank{rank}.pt"), weights_only=True)
        h, e = global_batch(orthogonal=True)
        torch.testing.assert_close(got["keys"], F.normalize(h - e, dim=-1).reshape(-1, GLOBAL["H"]))  # the pool
        assert got["pool"].all() and got["rows"] == (rank * B, (rank + 1) * B)
        loss, _ = got["result"][True]
        assert loss.item() == pytest.approx(math.log(1 + K * math.exp(-1 / tau)), rel=1e-4)  # exclusion
        h, e = global_batch(orthogonal=False)
        h.requires_grad_(True)
        anchors = torch.zeros(len(h), T, dtype=torch.bool)
        anchors[rank * B:(rank + 1) * B] = True
        one = tc_loss(h, e, num_negatives=K, temperature=tau, generator=torch.Generator().manual_seed(GLOBAL["seed"]),
                      positions=anchors)
        one.backward()
        loss, grad = got["result"][False]
        torch.testing.assert_close(loss, one.detach())
        torch.testing.assert_close(grad, h.grad[rank * B:(rank + 1) * B])
        assert h.grad[anchors.logical_not()].abs().sum() == 0  # the other rank's sequences: no gradient


def test_tc_refuses_a_single_sequence():
    h = torch.randn(1, 8, 4)
    with pytest.raises(ValueError, match="device_batch_size"):
        tc_loss(h, torch.zeros_like(h))


def test_tc_in_fp32_under_autocast():
    h = torch.randn(3, 8, 16).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = tc_loss(h, torch.zeros_like(h), num_negatives=5, generator=torch.Generator().manual_seed(0))
    assert loss.dtype == torch.float32


# ----------------------------------------------------------------------------- MLM+TP (--predict_all)

class KnownLosses(torch.nn.Module):
    """A stand-in model whose r-th predicted row has logit x_r = r / 10 at its target and 0
    elsewhere, so its cross-entropy is log(V - 1 + exp(x_r)) - x_r."""

    V = 40

    def forward(self, inputs, labels, rows=None):  # rows: the same positions as flat indices (taco.predicted_rows)
        targets = labels[labels != -100]
        logits = torch.zeros(len(targets), self.V)
        logits[torch.arange(len(targets)), targets] = torch.arange(len(targets)) / 10
        h = torch.zeros(*inputs.shape, 8)
        return logits, h, h


def test_mlm_plus_tp_is_two_means_added():
    """--predict_all: loss = MLM (mean over the masked tokens) + TP (mean over the other
    non-special tokens), not one mean over both (which gives the 15% masked ~1/7 of the weight)."""
    tok = SimpleNamespace(vocab_size=KnownLosses.V, special_ids=[0, 1, 2, 3], mask_id=3)
    ids = torch.randint(4, KnownLosses.V, (3, 20), generator=torch.Generator().manual_seed(0))
    ids[:, 0], ids[:, -1], ids[2, 15:] = 1, 2, 0  # [CLS] ... [SEP], padding
    args = SimpleNamespace(mlm_probability=0.3, predict_all=True, tc_positions="all", objective="mlm", tc_weight=1.0)
    batch = taco.masked_batch(ids, tok, args, torch.Generator().manual_seed(1))
    labels, targets = batch.labels, batch.targets
    masked = labels != -100
    special = torch.isin(ids, torch.tensor(tok.special_ids))
    assert torch.equal(labels[masked], ids[masked]) and not special[masked].any()
    assert torch.equal(targets, torch.where(special, -100, ids))  # MLM's masked tokens and TP's other ones
    loss, mlm, tc, tp = taco.compute_loss(KnownLosses(), batch, args, None)
    # by hand: the rows in (B, T) order; which of them are masked; each row's cross-entropy
    rows = [(b, t) for b in range(3) for t in range(20) if targets[b, t] != -100]
    ce = [math.log(KnownLosses.V - 1 + math.exp(r / 10)) - r / 10 for r in range(len(rows))]
    want_mlm = np.mean([c for c, (b, t) in zip(ce, rows) if masked[b, t]])
    want_tp = np.mean([c for c, (b, t) in zip(ce, rows) if not masked[b, t]])
    assert mlm.item() == pytest.approx(want_mlm, rel=1e-5) and tp.item() == pytest.approx(want_tp, rel=1e-5)
    assert loss.item() == pytest.approx(want_mlm + want_tp, rel=1e-5) and tc.item() == 0
    assert abs(loss.item() - np.mean(ce)) > 1  # far from the single pooled mean


def test_a_micro_batch_with_nothing_chosen_is_no_nan():
    """Tiny --mlm_probability on a small micro-batch: masking may choose nothing. MLM (and TP,
    TC on the masked positions, TaCL) is then 0 for it, with a finite gradient; never a NaN."""
    tok = SimpleNamespace(vocab_size=KnownLosses.V, special_ids=[0, 1, 2, 3], mask_id=3)
    ids = torch.randint(4, KnownLosses.V, (3, 20), generator=torch.Generator().manual_seed(0))
    for objective, extra in [("mlm", {}), ("mlm", {"predict_all": True}), ("taco", {"tc_positions": "masked"})]:
        args = SimpleNamespace(**{"mlm_probability": 1e-9, "predict_all": False, "tc_positions": "all",
                                  "objective": objective, "tc_weight": 1.0, "window": 5, "negatives": 4,
                                  "temperature": 0.07, "negatives_from": "device", "plain_tc": False, "plain": False,
                                  **extra})
        batch = taco.masked_batch(ids, tok, args, torch.Generator().manual_seed(1))
        assert (batch.labels == -100).all()
        loss, mlm, tc, tp = taco.compute_loss(KnownLosses(), batch, args, torch.Generator().manual_seed(2))
        assert mlm.item() == 0 and all(math.isfinite(x.item()) for x in (loss, tc, tp))
    h = torch.randn(2, 6, 8, requires_grad=True)
    for loss in (taco.tc_loss(h, h.detach() * 0, positions=torch.zeros(2, 6, dtype=torch.bool)),
                 taco.tacl_loss(h, h.detach(), torch.zeros(2, 6, dtype=torch.bool))):
        loss.backward()
        assert loss.item() == 0 and torch.isfinite(h.grad).all()


# ----------------------------------------------------------------------------- contextual score

class FixedStates(torch.nn.Module):
    """A stand-in encoder returning prescribed last-layer states."""

    def __init__(self, states):
        super().__init__()
        self.states = states

    def forward(self, ids, attention_mask=None):
        return self.states[ids[:, 0]], None


def brute_force_score(h, mask):
    z = F.normalize(h, dim=-1)
    B, T, _ = h.shape
    intra, inter = [], []
    for b in range(B):
        for t in range(T):
            for c in range(B):
                for s in range(T):
                    if not (mask[b, t] and mask[c, s]) or (b, t) == (c, s):
                        continue
                    (intra if b == c else inter).append(float(z[b, t] @ z[c, s]))
    return np.mean(intra), np.mean(inter)


def test_contextual_score_known_values():
    h, _ = orthogonal_states(3, 5)  # identical within a sequence, orthogonal across
    ids = torch.arange(3)[:, None].expand(3, 5)
    score = contextual_score(FixedStates(h), [ids])
    assert score["intra"] == pytest.approx(1.0) and score["inter"] == pytest.approx(0.0)
    assert score["score"] == pytest.approx(1.0)


def test_contextual_score_matches_brute_force():
    torch.manual_seed(0)
    h = torch.randn(4, 6, 5)
    mask = torch.ones(4, 6, dtype=torch.long)
    mask[2, 3:] = 0
    ids = torch.arange(4)[:, None].expand(4, 6)
    score = contextual_score(FixedStates(h), [ids], attention_masks=[mask])
    intra, inter = brute_force_score(h, mask)
    assert score["intra"] == pytest.approx(intra, abs=1e-6)
    assert score["inter"] == pytest.approx(inter, abs=1e-6)


# ----------------------------------------------------------------------------- the optimizer and the schedule

def test_lr_schedule():
    lrs = [get_lr(s, 1.0, 10, 110) for s in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0) and lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.5) and 0 < lrs[-1] < 0.02
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10]))


def test_fused_adamw_equals_plain_adamw():
    """configure_optimizer's fused AdamW (one kernel for all tensors, also on CPU) takes the
    steps of the textbook for-loop AdamW, weight-decay groups included."""
    torch.manual_seed(0)
    cfg = BertConfig.from_size("tiny", vocab_size=97, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    models = [BertForPreTraining(cfg) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    start = models[0].bert.embeddings.word.weight.detach().clone()
    fused = configure_optimizer(models[0], lr=1e-2, weight_decay=0.1)
    assert fused.defaults["fused"]
    groups = [{"params": [p for p in models[1].parameters() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in models[1].parameters() if p.dim() < 2], "weight_decay": 0.0}]
    plain = torch.optim.AdamW(groups, lr=1e-2, eps=1e-8, foreach=False, fused=False)
    ids = torch.randint(5, 97, (4, 16))
    labels = torch.where(torch.rand(4, 16) < 0.3, ids, -100)
    for _ in range(3):
        for net, opt in zip(models, (fused, plain)):
            logits = net(ids, labels=labels)[0]
            F.cross_entropy(logits, labels[labels != -100]).backward()
            opt.step()
            opt.zero_grad()
    assert fused.defaults["eps"] == 1e-8  # the official scripts' (Hugging Face's default)
    H = cfg.hidden_size
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters()):
        if name.endswith("attn.qkv.bias"):
            # The key bias adds one constant to a whole row of attention scores, which softmax
            # ignores: its true gradient is 0, so AdamW (eps 1e-8) turns float rounding into
            # steps there, different in each optimizer. Compared: the query and value biases.
            a, b = torch.cat([a[:H], a[2 * H:]]), torch.cat([b[:H], b[2 * H:]])
        # Update order differs by float rounding, amplified where |grad| ~ eps: 1e-3 of a step.
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert (models[0].bert.embeddings.word.weight - start).abs().max() > 1e-3  # the steps moved it


# ----------------------------------------------------------------------------- host syncs (issue 30)

@pytest.mark.parametrize("device_batch_size", [8, 2])
def test_at_most_two_host_syncs_per_optimizer_step(tmp_path, device_batch_size):
    """A default TACO step (batch 8 in 1 or 4 micro-batches) makes no operation that would make a GPU
    wait for the host in the method (masking, model, losses, backward, optimizer: 10 per micro-batch
    before issue 30), counted on the CPU by tests/host_syncs.py's HostSyncs; the loop's own checks (runs.py: the
    finite() agreement, the log) at most 2 per step. Logging and evaluation are kept out of the steps."""
    from tests.host_syncs import HostSyncs
    steps = 3
    with HostSyncs() as syncs:
        taco.main(["--steps", str(steps), "--batch_size", "8", "--device_batch_size", str(device_batch_size),
                   "--max_len", "64", "--log_every", "100", "--eval_blocks", "0", "--save_every", "100",
                   "--out", str(tmp_path / "run"), "--threads", "1"])
    loop = sum(n for where, n in syncs.counts.items() if where.startswith("engine/runs.py"))
    method = {where: n for where, n in syncs.counts.items() if not where.startswith("engine/runs.py")}
    print(f"\nhost syncs in {steps} steps of {8 // device_batch_size} micro-batches: method {method}, loop {loop}")
    assert method == {}, f"operations that make a GPU wait for the host: {method}"
    assert loop <= 2 * steps


def test_host_syncs_are_counted(tmp_path):
    """HostSyncs sees what it is meant to: nonzero, item, boolean-mask indexing and its backward."""
    from tests.host_syncs import HostSyncs
    x = torch.randn(6, requires_grad=True)
    with HostSyncs(host_side=()) as syncs:
        x[x > 0].sum().backward()
        (x > 0).nonzero()
        x.sum().item()
        x[torch.tensor([0, 2])].sum()  # an index tensor: no sync
    ops = sorted(w.split("(")[1].rstrip(")") for w in syncs.counts.elements())
    assert ops == ["_local_scalar_dense", "index", "index_put, backward", "nonzero"], syncs.counts


def test_contextual_score_in_fp32_equals_float64():
    """On a GPU the pair sums accumulate in fp32 (normalised vectors): equal to the float64 sums."""
    torch.manual_seed(0)
    z = F.normalize(torch.randn(32, 128, 64) + 2.0, dim=-1)  # similar vectors: the sums cancel most
    groups, real = taco.context_groups(torch.zeros(32, 128, dtype=torch.long)), torch.ones(32, 128, dtype=torch.bool)
    exact, fp32 = taco.pair_sums(z.double(), groups, real), taco.pair_sums(z, groups, real, torch.float32)
    for k in ("intra", "inter"):
        assert fp32[f"{k}_sum"] / fp32[f"{k}_n"] == pytest.approx(exact[f"{k}_sum"] / exact[f"{k}_n"], abs=1e-6)


def test_evaluation_does_not_depend_on_the_micro_batch(tmp_path):
    """The held-out numbers and the contextual score are the same for --device_batch_size 1 and 8
    (issue 29: with 1, inter compared nothing across blocks and the score read 0.321)."""
    from data import load_tokenizer
    tok = load_tokenizer("toy", tmp_path)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_size("tiny", vocab_size=tok.vocab_size))
    blocks = np.random.default_rng(0).integers(5, tok.vocab_size, (40, 32)).astype(np.uint16)
    blocks[:, 0], blocks[:, 16], blocks[:, -1] = tok.cls_id, tok.sep_id, tok.sep_id
    results = [taco.evaluate(model, blocks, tok, SimpleNamespace(device_batch_size=dbs, mlm_probability=0.15),
                             torch.device("cpu")) for dbs in (1, 8)]
    assert results[0] == pytest.approx(results[1], abs=1e-6) and results[0]["ctx_inter"] != 0.0
