"""Fast paths equal their plain versions; bench.py runs. python -m pytest -q test_speed.py"""
import pytest
import torch
import torch.nn.functional as F

import bench
from model import BertConfig, BertForPreTraining, dropout
from taco import SampledCosines, configure_optimizer, similarity_route, tc_loss


def states(B, T, H, seed=0):
    torch.manual_seed(seed)
    return torch.randn(B, T, H, requires_grad=True), torch.randn(B, T, H, requires_grad=True)


def loss_and_grads(fast, h, e, mask, positions, window, K, tau, seed, dtype=None):
    h.grad = e.grad = None
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        loss = tc_loss(h, e, attention_mask=mask, window=window, num_negatives=K, temperature=tau,
                       generator=torch.Generator().manual_seed(seed), positions=positions, fast=fast)
    loss.backward()  # outside autocast, as in taco.train
    return loss.detach(), h.grad.clone(), e.grad.clone()


@pytest.mark.parametrize("case", ["dense", "padding", "positions", "padding+positions", "many chunks", "K=1 W=3",
                                  "sampled route", "sampled route, padding+positions"])
def test_tc_loss_equals_plain_form(case):
    """fast=True and fast=False: same generator seed -> same sampled positives and negatives ->
    same loss and gradients, by either route of SampledCosines."""
    B, T, H, K, W, tau = 5, 24, 32, 20, 5, 0.07
    if case == "many chunks":  # 2^20 // (B*T) anchors per chunk of the product route: several chunks
        B, T, H, K = 8, 140, 8, 70
        assert similarity_route(B * T, B * T, 1 + K, H)[0] == "product" and (B * T) ** 2 > 2 ** 20
    if case == "K=1 W=3":
        K, W, tau = 1, 3, 0.5
    if case.startswith("sampled route"):  # more keys than PRODUCT_SPEEDUP * (1 + K)
        B, T, K = 5, 80, 4
        assert similarity_route(B * T, B * T, 1 + K, H)[0] == "sampled"
    h, e = states(B, T, H)
    mask = positions = None
    if "padding" in case:
        mask = torch.ones(B, T, dtype=torch.long)
        for b, n in enumerate([T, 3, 11, 1, 17]):  # one sequence with a single token: no anchor
            mask[b, n:] = 0
    if "positions" in case:
        positions = torch.rand(B, T, generator=torch.Generator().manual_seed(1)) < 0.3
    for seed in range(3):
        fast = loss_and_grads(True, h, e, mask, positions, W, K, tau, seed)
        plain = loss_and_grads(False, h, e, mask, positions, W, K, tau, seed)
        for f, p in zip(fast, plain):
            torch.testing.assert_close(f, p, rtol=1e-5, atol=1e-5)
        assert fast[1].abs().sum() > 0


@pytest.mark.parametrize("B, T, K", [(4, 16, 10), (5, 80, 4)])  # the product route, the sampled route
def test_tc_loss_equals_plain_form_under_autocast(B, T, K):
    h, e = states(B, T, 32)
    fast = loss_and_grads(True, h, e, None, None, 5, K, 0.07, 0, torch.bfloat16)
    plain = loss_and_grads(False, h, e, None, None, 5, K, 0.07, 0, torch.bfloat16)
    assert fast[0].dtype == torch.float32
    for f, p in zip(fast, plain):
        torch.testing.assert_close(f, p, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu"] + ["cuda"] * torch.cuda.is_available())
@pytest.mark.parametrize("keys", [12, 300])  # the product route, the sampled route
def test_sampled_cosines_gradcheck(keys, device):
    torch.manual_seed(0)
    a = torch.randn(7, 5, dtype=torch.double, device=device, requires_grad=True)
    z = torch.randn(keys, 5, dtype=torch.double, device=device)
    cols = torch.randint(0, keys, (7, 4), device=device)
    cols[0] = cols[0, 0]  # the same row drawn several times
    assert similarity_route(7, keys, 4, 5)[0] == ("product" if keys == 12 else "sampled")
    z = F.normalize(z, dim=-1)  # unit keys, as tc_loss passes them
    assert torch.autograd.gradcheck(lambda a: SampledCosines.apply(a, z, cols), (a,))

    def plain(a):  # tc_loss's plain form: normalise, then the einsum
        return torch.einsum("nh,njh->nj", F.normalize(a, dim=-1), z[cols])

    torch.testing.assert_close(SampledCosines.apply(a, z, cols), plain(a))
    grad = torch.randn(7, 4, dtype=torch.double, device=device)
    fast_grad, = torch.autograd.grad(SampledCosines.apply(a, z, cols), a, grad)
    torch.testing.assert_close(fast_grad, torch.autograd.grad(plain(a), a, grad)[0])
    with pytest.raises(ValueError, match="detach"):  # it would silently drop z's gradient
        SampledCosines.apply(a, z.clone().requires_grad_(), cols)


@pytest.mark.parametrize("p", [0.1, 0.5, 1 / 3])
def test_dropout_is_berts_dropout(p):
    """F.dropout's contract with p on a 2^-16 grid: P(zero) = p' = round(p * 2^16) / 2^16, the
    rest scaled by 1 / (1 - p') (so the expectation is exact), gradient alike."""
    x = torch.rand(1000, 1000) + 1.0  # never 0, so every zero was dropped
    x.requires_grad_(True)
    torch.manual_seed(0)
    y = dropout(x, p, True)
    kept = y != 0
    p16 = round(p * 2 ** 16) / 2 ** 16
    assert abs(p16 - p) <= 2 ** -17
    assert abs(kept.float().mean().item() - (1 - p16)) < 5 * (p16 * (1 - p16) / x.numel()) ** 0.5
    torch.testing.assert_close(y[kept], x[kept] / (1 - p16))
    assert abs((y / x).mean().item() - 1) < 5 * (p16 / (1 - p16) / x.numel()) ** 0.5  # unbiased
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - p16))
    torch.manual_seed(0)
    assert torch.equal(dropout(x, p, True), y)  # reproducible from the seed, as exact resume needs
    assert dropout(x, p, False) is x and dropout(x, 0.0, True) is x
    assert torch.equal(dropout(x, 1e-9, True), x)  # below the grid: F.dropout, which keeps all here


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
        for model, opt in zip(models, (fused, plain)):
            logits = model(ids, labels=labels)[0]
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


@pytest.mark.parametrize("padding", [False, True])
def test_cpu_attention_path_equals_sdpa(padding, monkeypatch):
    """The written-out attention used for CPU training gives SDPA's values and gradients."""
    cfg = BertConfig.from_size("tiny", vocab_size=97, hidden_dropout_prob=0.0, attention_probs_dropout_prob=1e-12)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg)  # a dropout that keeps everything: train and eval agree
    ids = torch.randint(5, 97, (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    if padding:
        mask[1, 7:] = 0
        mask[2, 1:] = 0

    def run(train):
        model.train(train)
        model.zero_grad()
        h, _ = model.bert(ids, mask if padding else None)
        (h * torch.linspace(-1, 1, h.numel()).view_as(h)).sum().backward()
        return h.detach(), [p.grad.clone() for p in model.bert.layers.parameters()]
    h_sdpa, g_sdpa = run(False)

    def no_sdpa(*a, **k):
        raise AssertionError("SDPA used in CPU training")
    monkeypatch.setattr(F, "scaled_dot_product_attention", no_sdpa)
    h_fast, g_fast = run(True)
    torch.testing.assert_close(h_fast, h_sdpa, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_fast, g_sdpa):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_bench_prints_table_and_machine_readable_lines(capsys):
    pytest.importorskip("transformers")
    bench.main(["--size", "tiny", "--batch_size", "2", "--max_len", "16", "--steps", "1", "--warmup", "0",
                "--threads", "1", "--device", "cpu"])
    out = capsys.readouterr().out.strip().splitlines()
    rows = [line for line in out if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["variant"] + bench.VARIANTS
    assert all(float(r.split("|")[5].replace(",", "")) > 0 for r in rows[1:])  # peak MB measured
    # 2 x 16 tokens, K = 50, H = 128: the product route; forward 32 x 32 x 128 + backward 32 x 51 x 128
    flops = next(l for l in out if l.startswith("TC similarities per step"))
    assert f"taco {2 * (32 * 32 + 32 * 51) * 128 / 1e9:.3g} GFLOP by the product route" in flops
    name, value = out[-2].split(": ")
    assert name == "speedup_vs_hf" and float(value) > 0
    name, value = out[-1].split(": ")
    assert name == "tc_overhead" and float(value) > 0


def test_bench_profile_keeps_the_machine_readable_lines_last(capsys):
    bench.main(["--size", "tiny", "--batch_size", "2", "--max_len", "16", "--steps", "1", "--warmup", "0",
                "--threads", "1", "--device", "cpu", "--variants", "taco-mlm,taco-tc", "--no-memory", "--profile"])
    out = capsys.readouterr().out
    assert "where the time of one taco-tc step goes" in out and "aten::mm" in out and "Self CPU" in out
    assert out.strip().splitlines()[-2].startswith("speedup_vs_hf: nan")  # no hf variant asked for
    assert float(out.strip().splitlines()[-1].split(": ")[1]) > 0
