"""Tests for fast.py: each speed equivalent equals the plain form it replaces; and the host-sync counter of
the tests (tests/host_syncs.py)."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from engine import fast
from engine.fast import SampledCosines, dropout, similarity_route
from model import BertConfig, BertForPreTraining
from taco import tc_loss
from tests import host_syncs



def states(B, T, H, seed=0):
    torch.manual_seed(seed)
    return torch.randn(B, T, H, requires_grad=True), torch.randn(B, T, H, requires_grad=True)


def loss_and_grads(fast_path, h, e, mask, positions, window, K, tau, seed, dtype=None):
    h.grad = e.grad = None
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        loss = tc_loss(h, e, attention_mask=mask, window=window, num_negatives=K, temperature=tau,
                       generator=torch.Generator().manual_seed(seed), positions=positions, fast=fast_path)
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


@pytest.mark.parametrize("padding", [False, True])
def test_cpu_attention_path_equals_sdpa(padding, monkeypatch):
    """The written-out attention used for CPU training gives SDPA's values and gradients."""
    cfg = BertConfig.from_size("tiny", vocab_size=97, hidden_dropout_prob=0.0, attention_probs_dropout_prob=1e-12)
    torch.manual_seed(0)
    model = fast.speed_up(BertForPreTraining(cfg))  # a dropout that keeps everything: train and eval agree
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


def test_speed_up_swaps_in_the_equivalents_and_keeps_the_weights():
    """fast.speed_up: every nn.Dropout becomes fast.Dropout, every SelfAttention attends by
    fast.attention; the state dict and the eval-mode outputs are those of the plain model."""
    cfg = BertConfig.from_size("tiny", vocab_size=97)
    torch.manual_seed(0)
    plain = BertForPreTraining(cfg).eval()
    torch.manual_seed(0)
    model = fast.speed_up(BertForPreTraining(cfg)).eval()
    assert plain.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), model.state_dict().values()))
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(type(m) is fast.Dropout for m in dropouts)
    assert all(m.attend is fast.attention for m in model.modules() if hasattr(m, "attend"))
    assert not any(type(m) is fast.Dropout for m in plain.modules())  # the plain model is untouched
    ids = torch.randint(5, 97, (2, 12))
    torch.testing.assert_close(model(ids)[0], plain(ids)[0])


def test_every_device_takes_the_route_of_the_fixed_rule(monkeypatch):
    """SampledCosines takes similarity_route's route on any device (no timing on a GPU); both routes
    give the same dots."""
    g, keys = torch.randn(40, 8), F.normalize(torch.randn(30, 8), dim=-1)
    cols = torch.randint(30, (40, 5))
    assert torch.allclose(fast.sampled_dots("product", g, keys, cols), fast.sampled_dots("sampled", g, keys, cols),
                          atol=1e-5)
    real, taken = fast.sampled_dots, []
    monkeypatch.setattr(fast, "sampled_dots", lambda route, *args: taken.append(route) or real(route, *args))
    for m, route in ((30, "product"), (300, "sampled")):  # PRODUCT_SPEEDUP * 5 = 80 keys: the edge
        keys = F.normalize(torch.randn(m, 8), dim=-1)
        fast.SampledCosines.apply(g, keys, torch.randint(m, (40, 5)))
        assert taken[-1] == route == similarity_route(40, m, 5, 8)[0]


def test_host_syncs_name_the_repository_not_an_environment_inside_it(monkeypatch):
    """With the environment inside the repository's folder (a .venv/, or a sibling folder whose name
    starts like it), a sync is still put on the repository's line, never on torch's."""
    monkeypatch.setattr(host_syncs, "ROOT", os.path.join(os.path.commonpath([sys.prefix, os.path.abspath(__file__)]), ""))
    x = torch.randn(6, requires_grad=True)
    with host_syncs.HostSyncs(host_side=()) as syncs:
        x[x > 0].sum().backward()
        (x > 0).nonzero()
    labels = sorted(syncs.counts)
    assert [label.split(" (")[1] for label in labels] == ["index)", "index_put, backward)", "nonzero)"], labels
    assert all(label.startswith(os.path.relpath(__file__, host_syncs.ROOT)) for label in labels), labels
