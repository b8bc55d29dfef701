"""Checks of exercise 4 (dynamic MLM masking), by statistics over ~100k tokens. Tolerances are
6 standard deviations of each proportion: a correct solution fails with probability < 1e-8."""
import math
from types import SimpleNamespace

import pytest
import torch

from exercises._check import call, expect

EXERCISE = "ex4_masking"
TOK = SimpleNamespace(vocab_size=60, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, special_ids=[0, 1, 2, 3, 4])
NORMAL = 60 - 5


def batch(B=200, T=512, seed=0):
    """[CLS] words [SEP] [PAD]...: lengths vary, so padding is plentiful."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (B, T), generator=gen)
    lengths = torch.randint(T // 2, T + 1, (B, 1), generator=gen)
    t = torch.arange(T)[None, :]
    ids[:, 0] = TOK.cls_id
    ids = torch.where(t == lengths - 1, TOK.sep_id, ids)
    return torch.where(t >= lengths, TOK.pad_id, ids)


def near(p_hat, p, n):
    return abs(p_hat - p) <= 6 * math.sqrt(p * (1 - p) / n) + 1e-9


def masked(impl, p=0.15, seed=0):
    ids = batch()
    before = ids.clone()
    inputs, labels = call(impl.mask_tokens, ids, TOK, p, torch.Generator().manual_seed(seed))
    expect(torch.equal(ids, before), "input_ids was modified in place: return new tensors")
    expect(inputs.shape == ids.shape and labels.shape == ids.shape,
           f"inputs and labels must have the shape of input_ids {tuple(ids.shape)}, got {tuple(inputs.shape)}, "
           f"{tuple(labels.shape)}")
    return ids, inputs, labels


def check_labels_and_untouched_tokens(impl):
    ids, inputs, labels = masked(impl)
    chosen = labels != -100
    expect(bool((labels[chosen] == ids[chosen]).all()), "where a label is set it must be the original token id")
    expect(bool((inputs[~chosen] == ids[~chosen]).all()),
           "a token that is not chosen (label -100) was changed in inputs: only chosen tokens may change")
    special = torch.isin(ids, torch.tensor(TOK.special_ids))
    n = int((chosen & special).sum())
    expect(n == 0, f"{n} special tokens ([CLS], [SEP] or [PAD]) were chosen for prediction: never choose them")


def check_chosen_fraction(impl, p=0.15):
    ids, _, labels = masked(impl, p)
    normal = ~torch.isin(ids, torch.tensor(TOK.special_ids))
    n = int(normal.sum())
    rate = (labels[normal] != -100).double().mean().item()
    expect(near(rate, p, n), f"with mlm_probability={p}, {100 * rate:.1f}% of the {n} non-special tokens were chosen; "
                             f"expected {100 * p:.0f}%" + (" (is mlm_probability used?)" if abs(rate - 0.15) < 0.01 else ""))


def check_80_10_10(impl):
    ids, inputs, labels = masked(impl)
    chosen = labels != -100
    n = int(chosen.sum())
    became_mask = (inputs[chosen] == TOK.mask_id).double().mean().item()
    kept = (inputs[chosen] == ids[chosen]).double().mean().item()
    other = 1 - became_mask - kept
    # a random replacement may happen to draw the original token (1 in 55); either convention is fine
    ok = near(became_mask, 0.8, n) and near(kept, 0.1, n) and near(other, 0.1, n)
    expect(ok, f"of the tokens chosen for prediction {100 * became_mask:.1f}% became [MASK], {100 * other:.1f}% a "
               f"random token and {100 * kept:.1f}% stayed the same: BERT uses 80% / 10% / 10%")


def check_random_replacements(impl):
    ids, inputs, labels = masked(impl)
    replaced = (labels != -100) & (inputs != TOK.mask_id) & (inputs != ids)
    new = inputs[replaced]
    bad = sorted(set(new[torch.isin(new, torch.tensor(TOK.special_ids))].tolist()))
    expect(not bad, f"a random replacement was a special token (ids {bad}; specials are {TOK.special_ids}): "
                    f"draw replacements from the non-special tokens only")
    counts = torch.bincount(new, minlength=60)[5:].double()
    expected = counts.sum() / NORMAL
    stat = ((counts - expected) ** 2 / expected).sum().item()
    expect(stat < NORMAL - 1 + 8 * math.sqrt(2 * (NORMAL - 1)),
           f"random replacements are not uniform over the {NORMAL} non-special tokens (least drawn "
           f"{int(counts.min())}, most {int(counts.max())} times)")


def check_dynamic(impl):
    """Another generator state, another mask: BERT re-masks each time a block is seen."""
    ids = batch(B=8, T=64)
    a = call(impl.mask_tokens, ids, TOK, 0.15, torch.Generator().manual_seed(1))
    b = call(impl.mask_tokens, ids, TOK, 0.15, torch.Generator().manual_seed(1))
    c = call(impl.mask_tokens, ids, TOK, 0.15, torch.Generator().manual_seed(2))
    expect(all(torch.equal(x, y) for x, y in zip(a, b)),
           "two calls with generators seeded alike gave different masks: draw every random number from `generator`")
    expect(not torch.equal(a[1], c[1]), "generators with other seeds chose the same tokens: is `generator` used?")


def test_labels_and_untouched_tokens(impl):
    check_labels_and_untouched_tokens(impl)


@pytest.mark.parametrize("p", [0.15, 0.3])
def test_chosen_fraction(impl, p):
    check_chosen_fraction(impl, p)


def test_80_10_10(impl):
    check_80_10_10(impl)


def test_random_replacements(impl):
    check_random_replacements(impl)


def test_dynamic(impl):
    check_dynamic(impl)
