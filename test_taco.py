"""Tests for taco.py: the TC loss and its samplers against closed forms and a loop, MLM+TP,
the contextual score, and pre-training end to end (objectives, ablations, --init, flags)."""
import dataclasses
import functools
import itertools
import json
import math
import os
import re
import shlex
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bench
import model
import checkpoints
import runs
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

    def forward(self, inputs, labels):
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
    labels, tp_labels = batch.labels, batch.tp_labels
    masked = labels != -100
    special = torch.isin(ids, torch.tensor(tok.special_ids))
    assert torch.equal(labels[masked], ids[masked]) and not special[masked].any()
    assert torch.equal(tp_labels, torch.where(special | masked, -100, ids))  # every other non-special token
    loss, mlm, tc, tp = taco.compute_loss(KnownLosses(), batch, args, None)
    # by hand: the rows in (B, T) order; which of them are masked; each row's cross-entropy
    rows = [(b, t) for b in range(3) for t in range(20) if masked[b, t] or tp_labels[b, t] != -100]
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


def test_tiny_mlm_probability_trains_warns_and_evaluates(tmp_path, capsys, quick, run_taco):
    """End to end: every micro-batch empty (0.0001 x 8 x 30 tokens): a warning up front, a run
    that ends (no "non-finite loss"), an evaluation without MLM numbers (no ZeroDivisionError)."""
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "4", "--eval_every", "2", "--eval_blocks", "1", "--mlm_probability", "0.0001",
                             "--out", out]) == 0
    captured = capsys.readouterr()
    assert "warning: --mlm_probability 0.0001 chooses 0.02 tokens per micro-batch of 8 x 32 on average" in captured.err
    assert "done: no eval MLM (masking chose no held-out token), contextual score" in captured.out
    last = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][-1]
    assert last["mlm"] == 0 and "eval_mlm_loss" not in last and math.isfinite(last["ctx_score"])


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


# ----------------------------------------------------------------------------- pre-training end to end

def test_short_run_learns_and_writes_its_directory(tmp_path, quick, run_taco):
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "40", "--out", out]) == 0
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["args"]["objective"] == "taco" and config["model_config"]["hidden_size"] == 128
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    assert [l["step"] for l in lines][:3] == [2, 4, 6] and lines[-1]["step"] == 40
    first, last = lines[0], lines[-1]
    assert last["mlm"] < first["mlm"] - 0.5 and last["tc"] < first["tc"] - 0.5
    assert {"eval_mlm_loss", "eval_mlm_acc", "ctx_intra", "ctx_inter", "ctx_score", "tokens_per_s",
            "grad_norm", "lr"} <= last.keys()
    assert os.path.exists(os.path.join(out, "vocab.txt"))
    assert checkpoints.latest_checkpoint(out).endswith("ckpt_00000040.pt")


def test_objectives_and_ablations_run(tmp_path, quick, run_taco, final_weights):
    for extra in (["--objective", "mlm"], ["--tc_positions", "masked", "--predict_all"],
                  ["--freeze_embeddings", "--untie_embeddings", "--tc_positions", "unmasked"]):
        out = str(tmp_path / "_".join(extra))
        assert run_taco(quick + ["--steps", "4", "--out", out] + extra) == 0
        lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        if "--predict_all" in extra:  # MLM+TP logs both parts, and their sum with TC
            assert all(l["loss"] == pytest.approx(l["mlm"] + l["tp"] + l["tc"], rel=1e-5) for l in lines)
        assert ("tp" in lines[0]) == ("--predict_all" in extra)
    ckpt = final_weights(str(tmp_path / "--freeze_embeddings_--untie_embeddings_--tc_positions_unmasked"), 4)
    torch.manual_seed(0)  # frozen embeddings stay at their (seeded) initialisation
    fresh = BertForPreTraining(BertConfig(**json.load(open(os.path.join(
        str(tmp_path / "--freeze_embeddings_--untie_embeddings_--tc_positions_unmasked"), "config.json")))["model_config"]))
    assert torch.equal(ckpt["bert.embeddings.word.weight"], fresh.bert.embeddings.word.weight)
    assert not torch.equal(ckpt["mlm.decoder.weight"], ckpt["bert.embeddings.word.weight"])


def test_what_a_run_says(tmp_path, capsys, quick, run_taco):
    """The start line says what the run will cost. In a log (stderr not a terminal: no progress
    bar) a line every --log_every steps, a line at each evaluation with the contextual score, and
    once an estimate of the time left."""
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "24", "--out", out]) == 0
    captured = capsys.readouterr()
    assert "taco | tiny (" in captured.out and "| 24 steps x 8 x 32 tokens = 6.1k tokens (" in captured.out
    err = captured.err.splitlines()
    assert "train:" not in captured.err  # no bar
    progress = [l for l in err if l.startswith("step ") and "/24 | " in l]
    assert [l.split(" |")[0] for l in progress] == [f"step {s}/24" for s in range(2, 25, 2)]
    assert re.fullmatch(r"step 2/24 \| loss \S+ mlm \S+ tc \S+ \| lr \S+ \| \S+ tok/s \| .+ left", progress[0])
    evals = [l for l in err if re.match(r"step \d+: held-out MLM loss", l)]
    logged = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    scores = [f"contextual score {r['ctx_score']:.3f} (" for r in logged if "ctx_score" in r]
    assert [l.split(":")[0] for l in evals] == ["step 8", "step 16", "step 24"]
    assert all(score in line for score, line in zip(scores, evals, strict=True))
    estimate = [l for l in err if l.startswith("estimate: ")]
    assert len(estimate) == 1 and re.search(r"a step here \(from the first \d+ steps?\): the \d+ steps left take ~", estimate[0])


def test_a_slow_first_step_gives_the_estimate_from_its_micro_batches(tmp_path, capsys, monkeypatch, quick, run_taco):
    """A step of the paper's batch takes an hour on a CPU: the estimate comes within the first
    step, from its first micro-batches, once 30 s have passed (a clock read 20 s apart here)."""
    clock = itertools.count(0, 20)
    monkeypatch.setattr(runs, "time", SimpleNamespace(time=lambda: next(clock), sleep=time.sleep))
    assert run_taco(quick + ["--steps", "2", "--objective", "mlm", "--device_batch_size", "2", "--out",
                            str(tmp_path / "run")]) == 0
    estimates = [l for l in capsys.readouterr().err.splitlines() if l.startswith("estimate: ")]
    assert estimates == ["estimate: 2.7 min a step here (from the first 1 of a step's 4 micro-batches): the 2 steps "
                         "left take ~5.3 min"]


def test_each_objective_names_its_own_loss(tmp_path, capsys, monkeypatch, quick, run_taco):
    """The loss compute_loss returns third is TACO's TC, TaCL's or RetroMAE's decoder loss: the
    log lines and the bar name it (tc / tacl / dec; none for MLM). metrics.jsonl keeps the key
    "tc" and says which loss it holds ("tc_is")."""
    mlm = str(tmp_path / "mlm")
    for objective, name, extra in (("mlm", None, []), ("retromae", "dec", []), ("tacl", "tacl", ["--init", mlm])):
        out = str(tmp_path / f"{objective}_log")
        assert run_taco(quick + ["--steps", "4", "--objective", objective, "--out", mlm if objective == "mlm" else out]
                        + extra) == 0
        line = [l for l in capsys.readouterr().err.splitlines() if l.startswith("step 4/4 | ")][0]
        assert re.search(r"\| loss \S+ mlm \S+" + (f" {name} \\S+" if name else "") + r" \| lr", line), line
        logged = [json.loads(l) for l in open(os.path.join(out if name else mlm, "metrics.jsonl"))]
        assert {r["tc_is"] for r in logged} == {name} and all("tc" in r for r in logged)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as on a terminal: the bar
    assert run_taco(quick + ["--steps", "4", "--objective", "tacl", "--init", mlm, "--out", str(tmp_path / "bar")]) == 0
    bar = capsys.readouterr().err.split("\r")[-1]
    assert "train: 100%" in bar and "tacl=" in bar and "tc=" not in bar and "ctx=" in bar


def test_init_continues_from_trained_weights_with_a_fresh_optimizer(tmp_path, capsys, quick, run_taco, final_weights):
    """--init RUN|ckpt|HF dir: weights only. With --freeze_embeddings it is Fig. 4's second
    variant: the *trained* embedding layer stays exactly as the init left it."""
    first, cont = str(tmp_path / "first"), str(tmp_path / "cont")
    assert run_taco(quick + ["--steps", "4", "--out", first]) == 0
    trained = final_weights(first, 4)
    assert run_taco(quick + ["--steps", "2", "--out", cont, "--init", first, "--freeze_embeddings"]) == 0
    ckpt = torch.load(os.path.join(cont, "ckpt_00000002.pt"), weights_only=True)
    for k in ("word", "position", "token_type", "norm"):  # the whole embedding layer, frozen
        for name, v in trained.items():
            if name.startswith(f"bert.embeddings.{k}."):
                assert torch.equal(ckpt["model"][name], v), name
    moved = "bert.layers.0.mlp.fc.weight"
    assert not torch.equal(ckpt["model"][moved], trained[moved])  # the rest trains on
    assert max(s["step"].item() for s in ckpt["optimizer"]["state"].values()) == 2  # a new optimizer
    config = json.load(open(os.path.join(cont, "config.json")))
    assert config["init"]["source"].endswith("ckpt_00000004.pt") and len(config["init"]["sha256"]) == 64

    hf = str(tmp_path / "hf")  # a Hugging Face directory works the same way
    model = BertForPreTraining(BertConfig(**json.load(open(os.path.join(first, "config.json")))["model_config"]))
    model.load_state_dict(trained)
    model.save_pretrained(hf, vocab_file=os.path.join(first, "vocab.txt"))
    assert run_taco(quick + ["--steps", "2", "--out", str(tmp_path / "from_hf"), "--init", hf,
                            "--freeze_embeddings"]) == 0
    from_hf = final_weights(str(tmp_path / "from_hf"), 2)
    assert torch.equal(from_hf["bert.embeddings.word.weight"], trained["bert.embeddings.word.weight"])

    capsys.readouterr()
    assert run_taco(quick + ["--out", str(tmp_path / "x"), "--init", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bigger = tmp_path / "vocab.txt"
    bigger.write_text(open(os.path.join(first, "vocab.txt")).read() + "extra\n")
    assert run_taco(quick + ["--out", str(tmp_path / "y"), "--init", first, "--vocab", str(bigger)]) == 2
    err = capsys.readouterr().err
    assert "has a vocabulary of" in err and "Traceback" not in err and not (tmp_path / "y").exists()


BAD_TACO_ARGS = [
    (["--size", "huge"], "invalid choice"),
    (["--objective", "bert"], "invalid choice"),
    # every numeric flag has a range (cli.int_range / float_range); NaN and inf never pass
    (["--max_len", "1024"], "argument --max_len: 1024 is not in [8, 512]"),
    (["--negatives", "0"], "argument --negatives: 0 is not in [1, inf)"),
    (["--lr", "-1"], "argument --lr: -1 is not in (0, inf)"),
    (["--lr", "nan"], "argument --lr: nan is not in"),
    (["--clip", "-1"], "argument --clip: -1 is not in (0, inf)"),
    (["--eval_blocks", "-1"], "argument --eval_blocks: -1 is not in [0, inf)"),
    (["--tc_weight", "nan"], "argument --tc_weight: nan is not in [0, inf)"),
    (["--temperature", "inf"], "argument --temperature: inf is not in (0, inf)"),
    (["--mlm_probability", "1"], "argument --mlm_probability: 1 is not in (0, 1)"),
    (["--steps", "1.5"], "argument --steps: expected an integer, got '1.5'"),
    (["--seed", "-1"], "argument --seed: -1 is not in [0, 4294967295]"),
    (["--keep_last", "0"], "argument --keep_last: 0 is not in [1, inf)"),
    (["--window", "1"], "argument --window: 1 is not in [2, inf)"),
    (["--device", "gpu"], "--device gpu: expected cpu, cuda or cuda:N"),
    (["--device", "mps"], "only cpu and cuda"),
    *([(["--device", "cuda"], "sees no CUDA device")] if not torch.cuda.is_available() else []),
    (["--negatives", "500"], "exceeds the 224 tokens"),
    (["--device_batch_size", "1"], "--device_batch_size must be >= 2"),
    (["--device_batch_size", "0"], "argument --device_batch_size: 0 is not in [1, inf)"),
    (["--batch_size", "7", "--device_batch_size", "6"], "no divisor of the per-process batch 7 between 2"),
    (["--data", "/nonexistent/corpus.txt", "--vocab", "toy"], "nonexistent"),
    (["--vocab", "/nonexistent/vocab.txt"], "nonexistent"),
    (["--warmup", "100"], "--warmup must be between 0 and --steps"),
    (["--unknown_flag"], "unrecognized arguments"),
]


@pytest.mark.parametrize("batch,world,asked,micro", [
    (1280, 16, 32, 20), (1280, 8, 32, 32), (1280, 64, 32, 20), (1280, 32, 32, 20), (1280, 16, 40, 40),
    (12, 1, 8, 6), (8, 1, 32, 8), (30, 2, 4, 3), (1280, 1, 1000, 640),
])
def test_device_batch_is_the_largest_divisor_up_to_the_flag(batch, world, asked, micro):
    """Any world size works without the flag: the micro-batch rounds down to a divisor of the
    per-process batch, so the global batch is what the command says."""
    args = taco.get_args(["--batch_size", str(batch), "--device_batch_size", str(asked)])
    accum = taco.check_args(args, world)
    assert args.device_batch_size == micro and world * accum * micro == batch


def test_a_rounded_down_micro_batch_is_announced(tmp_path, capsys, quick, run_taco):
    assert run_taco(quick + ["--out", str(tmp_path / "run"), "--batch_size", "12", "--device_batch_size", "8"]) == 0
    out, err = capsys.readouterr()
    assert ("warning: micro-batches of 6 sequences, the largest divisor of the per-process batch 12 up to "
            "--device_batch_size 8; TACO's negatives come from them") in err
    assert "batch 12 = 1 x 2 x 6" in out


@pytest.mark.parametrize("extra,message", BAD_TACO_ARGS)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, message, quick, run_taco):
    out = tmp_path / "run"
    assert run_taco(quick + ["--out", str(out)] + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert not out.exists()  # nothing half-written


def test_bad_files_are_one_line_and_exit_2(tmp_path, capsys, quick, run_taco):
    empty, binary, vocab = tmp_path / "empty.txt", tmp_path / "binary.txt", tmp_path / "vocab.txt"
    empty.write_text("")
    binary.write_bytes(b"\x00\x01\x02" * 1000)
    vocab.write_text("hello\nworld\n")
    for extra, message in [(["--data", str(empty), "--vocab", "toy"], "empty"),
                           (["--data", str(binary), "--vocab", "toy"], "binary"),
                           (["--vocab", str(vocab)], "[PAD]")]:
        assert run_taco(quick + ["--out", str(tmp_path / "run")] + extra) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "run").exists()
    run = str(tmp_path / "sized")
    assert run_taco(quick + ["--steps", "4", "--out", run]) == 0
    assert run_taco(quick + ["--steps", "4", "--out", run, "--resume", "--force", "--size", "mini"]) == 2
    assert "holds another model" in capsys.readouterr().err


def test_paths_that_are_not_regular_files(tmp_path, capsys, quick, run_taco):
    """FIFOs (a read would block forever), symlink loops, folders: one line each, no hang."""
    os.mkfifo(tmp_path / "fifo.txt")
    os.symlink(tmp_path / "loop.txt", tmp_path / "loop.txt")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("some text\n")
    os.mkfifo(tmp_path / "folder" / "b.txt")
    for extra, message in [(["--data", str(tmp_path / "fifo.txt")], "is not a regular file"),
                           (["--data", str(tmp_path / "loop.txt")], "Too many levels of symbolic links"),
                           (["--data", str(tmp_path / "folder")], "b.txt is not a regular file"),
                           (["--vocab", str(tmp_path / "fifo.txt")], "vocab file"),
                           (["--vocab", str(tmp_path / "loop.txt")], "cannot be read")]:
        assert run_taco(quick + ["--out", str(tmp_path / "run"), "--vocab", "toy"] + extra) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
        assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- continuing a real model

@functools.lru_cache(maxsize=8)  # the init's are computed once
def sentence_vectors(spec, texts):
    """Unit mean-pooled last-layer states of `texts` (64 tokens at most) under the model `spec`."""
    import analyze
    encoder, tok, _, _ = analyze.load_encoder(spec)
    ids = [[tok.cls_id] + tok.encode(t)[:62] + [tok.sep_id] for t in texts]
    batch = torch.tensor([x + [tok.pad_id] * (64 - len(x)) for x in ids])
    mask = batch != tok.pad_id
    with torch.no_grad():
        h, _ = encoder(batch, attention_mask=mask)
    return F.normalize((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True), dim=-1)


def drift(before, after):
    """(lowest cosine of a text's vector before and after, mean cosine of two texts' vectors after
    minus before): a collapse (every token alike) drives the first down and the second up."""
    off = ~torch.eye(len(before), dtype=torch.bool)
    return (before * after).sum(1).min().item(), ((after @ after.T)[off].mean() - (before @ before.T)[off].mean()).item()


def test_init_picks_a_recipe_that_fits_the_init(tmp_path, minilm, quick, run_taco, capsys):
    """A trained model (a Hugging Face one here) continues with the "continue" recipe, a toy run
    with its own; --size still wins; a far higher --lr is warned of; an init whose vocabulary is
    not the toy corpus's needs --data."""
    args = taco.get_args(["--init", minilm, "--data", "x.txt"])
    assert (args.recipe, args.lr, args.warmup, args.steps, args.batch_size) == ("continue", 2e-5, 100, 1000, 32)
    assert "Hugging Face model" in args.recipe_why
    assert taco.get_args(["--init", minilm, "--data", "x.txt", "--steps", "100"]).warmup == 10  # the recipe's 10%
    warnings = []
    taco.check_args(taco.get_args(["--init", minilm, "--data", "x.txt", "--lr", "1e-3"]), 1, warnings.append)
    assert len(warnings) == 1 and "50x the continue recipe" in warnings[0] and "collapse" in warnings[0]
    taco.check_args(taco.get_args(["--init", minilm, "--data", "x.txt", "--lr", "1e-4"]), 1, warnings.append)
    assert len(warnings) == 1  # the official recipes' 1e-4 is no mistake
    sized = taco.get_args(["--init", minilm, "--data", "x.txt", "--size", "small"])
    assert (sized.recipe, sized.lr) == ("small", 1e-4)
    assert run_taco(quick + ["--init", minilm, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "pass --data" in err and err.count("\n") == 1 and not (tmp_path / "x").exists()
    toy = str(tmp_path / "toy")
    assert run_taco(quick + ["--steps", "1", "--out", toy]) == 0
    args = taco.get_args(["--init", toy])  # a toy run continues on the toy corpus with its own recipe
    assert (args.recipe, args.data, args.lr, args.steps) == ("tiny", "toy", 1e-3, 600)


@pytest.mark.parametrize("objective", ["mlm", "taco", "tacl", "retromae"])
def test_continuing_a_real_model_with_the_defaults_keeps_it(objective, tmp_path, minilm, real_text, run_taco,
                                                           capsys, final_weights):
    """The journey that destroyed MiniLM under the toy recipe (lr 1e-3; retrieval nDCG@10 0.732 ->
    0.015): each objective on real text with the defaults. A few steps, and a cheap proxy of
    destruction: held-out texts' sentence vectors (a toy lr moves them in two steps: next test).
    Its [CLS] pooler, which no objective trains, comes out as it went in."""
    text, held_out = real_text
    out = str(tmp_path / objective)
    assert run_taco(["--init", minilm, "--data", text, "--objective", objective, "--steps", "2", "--batch_size", "4",
                     "--max_len", "64", "--eval_blocks", "2", "--threads", "1", "--out", out]) == 0
    assert "| recipe continue (--init is a Hugging Face model: lr 2e-05)" in capsys.readouterr().out
    lowest, spread = drift(sentence_vectors(minilm, held_out), sentence_vectors(out, held_out))
    assert lowest > 0.99 and abs(spread) < 0.02
    pooler = model.read_weights(minilm)["pooler.dense.weight"]
    assert torch.equal(final_weights(out, 2)["pooler.weight"], pooler)


def test_a_toy_lr_collapses_a_real_model_and_is_warned_of(tmp_path, minilm, real_text, run_taco, capsys):
    """The proxy above sees the damage the issue measured: two steps at lr 1e-3."""
    text, held_out = real_text
    out = str(tmp_path / "toy_lr")
    assert run_taco(["--init", minilm, "--data", text, "--objective", "mlm", "--steps", "2", "--batch_size", "4",
                     "--max_len", "64", "--eval_blocks", "2", "--lr", "1e-3", "--threads", "1", "--out", out]) == 0
    assert "warning: --lr 0.001 is 50x the continue recipe's 2e-05" in capsys.readouterr().err
    lowest, spread = drift(sentence_vectors(minilm, held_out), sentence_vectors(out, held_out))
    assert lowest < 0.9 and spread > 0.2  # seen: 0.40 and +0.52


# ----------------------------------------------------------------------------- precisions, torch.compile, the documented commands

THREE_STEPS = ["--steps", "3", "--batch_size", "8", "--max_len", "32", "--negatives", "8", "--save_every", "3",
               "--eval_every", "3", "--eval_blocks", "8", "--log_every", "1"]


def train(out, cache_dir, *extra):
    """taco.main in-process, three steps -> (metrics lines, final checkpoint)."""
    taco.main(THREE_STEPS + ["--cache_dir", cache_dir, "--out", str(out), *extra])
    lines = [json.loads(l) for l in open(out / "metrics.jsonl")]
    return lines, torch.load(out / "ckpt_00000003.pt", weights_only=True)


def test_every_dtype_and_compile_train_and_agree_with_fp32(tmp_path, cache_dir, monkeypatch):
    """Dropout off (set from outside), so that the runs differ only in precision: on CPU the
    fp32 attention dropout draws its masks in another way than SDPA's under autocast.
    --compile runs with the aot_eager backend: Dynamo captures the model and AOTAutograd its
    backward (where a model that does not compile fails) in seconds; Inductor's code generation
    is the slow opt-in test below. Checkpoints of a compiled run hold the plain keys."""
    real = BertConfig.from_size
    monkeypatch.setattr(BertConfig, "from_size", lambda *a, **k: dataclasses.replace(
        real(*a, **k), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    runs = {d: train(tmp_path / d, cache_dir, "--dtype", d) for d in ("fp32", "bf16", "fp16")}
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    runs["compiled"] = train(tmp_path / "compiled", cache_dir, "--compile")
    fp32 = runs["fp32"][0]
    for run, tolerance in (("bf16", 5e-3), ("fp16", 1e-3), ("compiled", 1e-4)):  # seen: 3e-4, 6e-5, 0
        lines, ckpt = runs[run]
        for a, b in zip(fp32, lines):
            for key in ("loss", "mlm", "tc", "eval_mlm_loss"):
                if key in a:
                    assert b[key] == pytest.approx(a[key], abs=tolerance), (run, key, a["step"])
        assert all(v.dtype == torch.float32 for v in ckpt["model"].values())  # fp32 master weights
    for dtype in ("bf16", "fp16"):
        assert json.load(open(tmp_path / dtype / "config.json"))["dtype"] == dtype
    assert runs["fp16"][1]["scaler"]["scale"] == 2.0 ** 16  # GradScaler on, no overflow seen
    assert runs["fp32"][1]["scaler"] == {} and runs["bf16"][1]["scaler"] == {}  # off
    BertForPreTraining(BertConfig(**runs["compiled"][1]["model_config"])).load_state_dict(
        runs["compiled"][1]["model"])  # no "_orig_mod." prefixes


def test_fp16_overflow_is_skipped_by_the_grad_scaler(tmp_path, cache_dir, monkeypatch):
    """A scale so large that the first backward overflows: GradScaler skips that step and backs
    off (the non-finite guard leaves it to the scaler), and training goes on."""
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(
        torch.amp.GradScaler, init_scale=2.0 ** 100, backoff_factor=2.0 ** -92))
    lines, ckpt = train(tmp_path / "fp16", cache_dir, "--dtype", "fp16")
    assert ckpt["scaler"]["scale"] == 2.0 ** 8  # backed off once
    assert [l["skipped"] for l in lines] == [0, 0, 0] and all(l["grad_norm"] < 1e3 for l in lines[1:])
    assert not math.isfinite(lines[0]["grad_norm"])  # the overflowing step


@pytest.mark.skipif("TACO_SLOW" not in os.environ, reason="~2 min of Inductor compilation: TACO_SLOW=1")
def test_compile_with_inductor(tmp_path, cache_dir):
    eager, _ = train(tmp_path / "eager", cache_dir)
    compiled, _ = train(tmp_path / "compiled", cache_dir, "--compile")
    for a, b in zip(eager, compiled):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-3)


def documented_commands():
    """(script, argv, world size) of every `taco.py` / `bench.py` command in README's code
    blocks and in the scripts' docstrings; backslash continuations joined, comments cut."""
    here = os.path.dirname(os.path.abspath(__file__))
    texts = [open(os.path.join(here, "README.md")).read(), taco.__doc__, bench.__doc__]
    commands = []
    for text in texts:
        for line in text.replace("\\\n", " ").splitlines():
            if not line.strip().startswith(("python ", "torchrun ")):
                continue
            words = shlex.split(line.split(" #")[0].replace("$obj", "taco"))  # README's loop over objectives
            for script in ("taco.py", "bench.py"):
                if script in words:
                    launcher = dict(w.lstrip("-").split("=", 1) for w in words[:words.index(script)] if "=" in w)
                    world = int(launcher.get("nproc_per_node", 1)) * int(launcher.get("nnodes", 1))
                    commands.append((script, words[words.index(script) + 1:], world))
    return commands


def test_documented_gpu_commands_parse(tmp_path):
    """The commands README and the docstrings promise (1 GPU, 8 GPUs, 2 nodes, bench) are
    accepted by the argument parsers and taco's checks, with their world size. An `--init
    path/to/...` stands for a Hugging Face folder (its recipe depends on what it holds)."""
    hf, vocab = str(tmp_path / "hf"), tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(27)]) + "\n")
    BertForPreTraining(BertConfig.from_size("tiny", vocab_size=32)).save_pretrained(hf, vocab_file=str(vocab))
    commands = [(s, [hf if a.startswith("path/to/") else a for a in argv], w) for s, argv, w in documented_commands()]
    assert sum(s == "taco.py" and w == 8 for s, _, w in commands) >= 2  # torchrun lines found
    assert sum(s == "taco.py" and w == 16 for s, _, w in commands) >= 1
    assert any(s == "bench.py" and "bf16" in argv for s, argv, _ in commands)
    for script, argv, world in commands:
        if script == "taco.py":
            taco.check_args(taco.get_args(argv), world)
        else:
            bench.get_args(argv)


# ----------------------------------------------------------------------------- the layout

def project_imports():
    """{module: set of project modules it imports}, read from the source files at the root."""
    import ast
    names = {f[:-3] for f in os.listdir(HERE) if f.endswith(".py") and not f.startswith(("test_", "conftest"))}
    graph = {}
    for name in names:
        tree = ast.parse(open(os.path.join(HERE, name + ".py")).read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.split(".")[0])
        graph[name] = found & names - {name}
    return graph


def test_imports_run_one_way():
    """No import cycle among the modules, and the modules below taco.py never import it."""
    graph = project_imports()
    state = {}

    def visit(node, path):
        assert state.get(node) != "open", f"import cycle: {' -> '.join(path + [node])}"
        if state.get(node) is None:
            state[node] = "open"
            for nxt in graph[node]:
                visit(nxt, path + [node])
            state[node] = "done"
    for node in graph:
        visit(node, [])
    for low in ("model", "tokenizer", "toy", "data", "cli", "runs", "fast"):
        assert "taco" not in graph[low], low


def test_scripts_take_only_the_method_from_taco():
    """What other files use of taco.py is defined there (the method, its recipes and flags), never
    something taco.py itself imports (the run's engineering lives in runs.py and cli.py)."""
    import ast
    import glob
    own = {"__doc__"} | {n.name if not isinstance(n, ast.Assign) else n.targets[0].id
           for n in ast.parse(open(os.path.join(HERE, "taco.py")).read()).body
           if isinstance(n, (ast.FunctionDef, ast.ClassDef)) or isinstance(n, ast.Assign) and hasattr(n.targets[0], "id")}
    files = [f for f in glob.glob(os.path.join(HERE, "*.py")) + glob.glob(os.path.join(HERE, "exercises", "**", "*.py"),
                                                                          recursive=True) if not f.endswith("taco.py")]
    for path in files:
        for node in ast.walk(ast.parse(open(path).read())):
            used = (node.names if isinstance(node, ast.ImportFrom) and node.module == "taco" else
                    [node] if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "taco"
                    else [])
            for item in used:
                name = getattr(item, "name", None) or item.attr
                assert name in own, f"{os.path.relpath(path, HERE)} takes {name} from taco.py"
