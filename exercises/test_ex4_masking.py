"""Checks of exercise 4 (dynamic MLM masking), by statistics over ~100k tokens. Tolerances are
6 standard deviations of each proportion: a correct solution fails with probability < 1e-8."""
import math
from types import SimpleNamespace

import pytest
import torch

from exercises._check import call, expect

EXERCISE = "ex4_masking"
# Two tokenizers: specials first (as taco's), and specials scattered through the id range, [MASK]
# not 4, the last id special: a solution that assumes "ids 0-4 are special" shows on the second.
TOK = SimpleNamespace(vocab_size=60, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, special_ids=[0, 1, 2, 3, 4],
                      name="the tokenizer with special ids 0-4")
SCATTERED = SimpleNamespace(vocab_size=60, pad_id=13, unk_id=27, cls_id=41, sep_id=59, mask_id=6,
                            special_ids=[6, 13, 27, 41, 59],
                            name="a tokenizer whose special ids are 6, 13, 27, 41, 59 ([MASK] = 6, not 0-4)")
TOKENIZERS = (TOK, SCATTERED)


def normal_ids(tok):
    return torch.tensor([i for i in range(tok.vocab_size) if i not in tok.special_ids])


def batch(tok=TOK, B=200, T=512, seed=0):
    """[CLS] words [SEP] [PAD]...: lengths vary, so padding is plentiful. The words follow a Zipf
    law over the non-special ids (frequent and rare words, as in text): a replacement drawn from
    the batch's own tokens is then not uniform over the vocabulary."""
    gen = torch.Generator().manual_seed(seed)
    words = normal_ids(tok)
    zipf = 1 / torch.arange(1, len(words) + 1, dtype=torch.double)
    ids = words[torch.multinomial(zipf, B * T, replacement=True, generator=gen)].reshape(B, T)
    lengths = torch.randint(T // 2, T + 1, (B, 1), generator=gen)
    t = torch.arange(T)[None, :]
    ids[:, 0] = tok.cls_id
    ids = torch.where(t == lengths - 1, tok.sep_id, ids)
    return torch.where(t >= lengths, tok.pad_id, ids)


def near(p_hat, p, n):
    return abs(p_hat - p) <= 6 * math.sqrt(p * (1 - p) / n) + 1e-9


def masked(impl, p=0.15, seed=0, tok=TOK):
    ids = batch(tok)
    out = call(impl.mask_tokens, ids, tok, p, torch.Generator().manual_seed(seed))
    expect(isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, torch.Tensor) for x in out),
           f"mask_tokens must return a pair of tensors (inputs, labels); got {type(out).__name__}"
           + (f" of {len(out)}" if isinstance(out, (tuple, list)) else ""))
    inputs, labels = out
    expect(inputs.shape == ids.shape and labels.shape == ids.shape,
           f"inputs and labels must have the shape of input_ids {tuple(ids.shape)}, got {tuple(inputs.shape)}, "
           f"{tuple(labels.shape)}")
    return ids, inputs, labels


def check_returns_int64(impl):
    """The data loader may hand over any integer dtype; the embedding and the cross-entropy need int64."""
    ids = batch(B=8, T=64).int()  # int32 input_ids
    inputs, labels = call(impl.mask_tokens, ids, TOK, 0.15, torch.Generator().manual_seed(0))
    expect(inputs.dtype == torch.int64 and labels.dtype == torch.int64,
           f"given int32 input_ids, mask_tokens returned inputs of {inputs.dtype} and labels of {labels.dtype}: "
           f"return int64 tensors (F.cross_entropy needs int64 labels): start from input_ids.long()")


def check_chosen_independently_in_each_sequence(impl):
    """Each token is chosen by its own draw: two sequences agree at a position only by chance (p^2)."""
    ids, _, labels = masked(impl)
    chosen, normal = labels != -100, ~torch.isin(ids, torch.tensor(TOK.special_ids))
    both = normal[1:] & normal[:-1]  # positions where two neighbouring sequences both hold words
    n = int(both.sum())
    rate = (chosen[1:] & chosen[:-1])[both].double().mean().item()
    expect(near(rate, 0.15 ** 2, n),
           f"two sequences chose the same position in {100 * rate:.1f}% of the positions where both hold words; "
           f"independent draws do so in {100 * 0.15 ** 2:.2f}% (p^2): draw one random number per token, shape "
           f"(B, T), not one per position shared by the batch")


def check_labels_and_untouched_tokens(impl):
    for tok in TOKENIZERS:
        ids, inputs, labels = masked(impl, tok=tok)
        chosen = labels != -100
        expect(bool((labels[chosen] == ids[chosen]).all()), "where a label is set it must be the original token id")
        changed = ~chosen & (inputs != ids)
        expect(not bool(changed.any()),
               "a token that is not chosen (label -100) was changed in inputs: only chosen tokens may change (a "
               "chosen token keeps its label whether it became [MASK], a random token or stayed the same)"
               + (": labels must be set for every chosen token, also those replaced by a random token (yours were "
                  "not)" if not bool((inputs[changed] == tok.mask_id).any()) else ""))
        special = torch.isin(ids, torch.tensor(tok.special_ids))
        n = int((chosen & special).sum())
        expect(n == 0, f"with {tok.name}, {n} special tokens ([CLS], [SEP] or [PAD]) were chosen for prediction: "
                       f"never choose them (find them with tokenizer.special_ids)")


def check_chosen_per_token(impl):
    """Short sequences ([CLS] + 3 or 4 words + [SEP]): each word chosen by its own draw, so a 3-word
    sequence has a word chosen 1 - 0.85^3 = 39% of the time, and the count per sequence varies."""
    p, B, T = 0.15, 4000, 8
    gen = torch.Generator().manual_seed(5)
    words = normal_ids(TOK)[torch.randint(len(normal_ids(TOK)), (B, T), generator=gen)]
    n = torch.where(torch.arange(B) < B // 2, 3, 4)[:, None]  # words per sequence
    t = torch.arange(T)[None, :]
    ids = torch.where(t == 0, TOK.cls_id, torch.where(t <= n, words, torch.where(t == n + 1, TOK.sep_id, TOK.pad_id)))
    _, labels = call(impl.mask_tokens, ids, TOK, p, torch.Generator().manual_seed(0))
    count = (labels != -100).sum(1)
    for words_in in (3, 4):
        mine = count[n[:, 0] == words_in]
        rate = mine.double().mean().item() / words_in
        most = torch.bincount(mine).max().item() / len(mine)  # binomial(4, 0.15): at most 52% share one count
        expect(most < 0.8 and near(rate, p, len(mine) * words_in),
               f"in {len(mine)} sequences of {words_in} words, {100 * rate:.1f}% of the words were chosen and "
               f"{100 * most:.0f}% of the sequences had the same number chosen: choose each token by its own draw "
               f"(torch.rand(B, T) < p), not a fixed count per sequence such as round(p * n), which never masks a "
               f"3-word sequence (round(0.45) = 0) and masks a 4-word one at 25%")


def check_chosen_fraction(impl, p=0.15):
    ids, _, labels = masked(impl, p)
    normal = ~torch.isin(ids, torch.tensor(TOK.special_ids))
    n = int(normal.sum())
    rate = (labels[normal] != -100).double().mean().item()
    expect(near(rate, p, n), f"with mlm_probability={p}, {100 * rate:.1f}% of the {n} non-special tokens were chosen; "
                             f"expected {100 * p:.0f}%"
                             + (" (is mlm_probability used?)" if p != 0.15 and abs(rate - 0.15) < 0.01 else "")
                             + (" (labels must be set for every chosen token: also those replaced by a random token "
                                "or kept)" if abs(rate - 0.8 * p) < 0.01 else ""))


def check_80_10_10(impl):
    for tok in TOKENIZERS:
        ids, inputs, labels = masked(impl, tok=tok)
        chosen = labels != -100
        n = int(chosen.sum())
        became_mask = (inputs[chosen] == tok.mask_id).double().mean().item()
        kept = (inputs[chosen] == ids[chosen]).double().mean().item()
        other = 1 - became_mask - kept
        # a random replacement may happen to draw the original token; either convention is fine
        ok = near(became_mask, 0.8, n) and near(kept, 0.1, n) and near(other, 0.1, n)
        expect(ok, f"with {tok.name}: of the tokens chosen for prediction {100 * became_mask:.1f}% became [MASK], "
                   f"{100 * other:.1f}% a random token and {100 * kept:.1f}% stayed the same: BERT uses 80% / 10% / 10%"
                   + (" (is tokenizer.mask_id used?)" if became_mask < 0.01 else ""))


def check_random_replacements(impl):
    """Random replacements: never a special token, every non-special id drawn, uniformly. Half the
    tokens are chosen here (p = 0.5) for enough replacements to see a single id missing."""
    for tok in TOKENIZERS:
        ids, inputs, labels = masked(impl, p=0.5, tok=tok)
        replaced = (labels != -100) & (inputs != tok.mask_id) & (inputs != ids)
        new = inputs[replaced]
        bad = sorted(set(new[torch.isin(new, torch.tensor(tok.special_ids))].tolist()))
        expect(not bad, f"with {tok.name}, a random replacement was a special token (ids {bad}): draw "
                        f"replacements from the non-special ids only (tokenizer.special_ids says which)")
        words = normal_ids(tok)
        counts = torch.bincount(new, minlength=tok.vocab_size)[words].double()
        expect(counts.sum() > 0, "no chosen token was replaced by a random token: 10 % of them should be")
        never = words[counts == 0].tolist()
        never = never if len(never) <= 6 else never[:5] + ["..."]
        expect(not never, f"with {tok.name}, the non-special id(s) {never} were never a random replacement in "
                          f"{int(counts.sum())} replacements (each was expected about {int(counts.sum()) // len(words)} "
                          f"times): is your range of ids one short (randint's upper bound is exclusive)?")
        # a replacement that happens to equal the original is not seen as one: expected count of id v
        # is proportional to 1 - (share of v among the chosen originals)
        share = torch.bincount(ids[labels != -100], minlength=tok.vocab_size)[words].double()
        expected = (1 - share / share.sum())
        expected = expected / expected.sum() * counts.sum()
        stat = ((counts - expected) ** 2 / expected).sum().item()
        df = len(words) - 1
        from_batch = int(counts.argmax()) == int(share.argmax())
        expect(stat < df + 8 * math.sqrt(2 * df),
               f"with {tok.name}, random replacements are not uniform over the {len(words)} non-special ids (least "
               f"drawn {int(counts.min())}, most {int(counts.max())} times)"
               + (f": the most drawn, id {int(words[share.argmax()])}, is the batch's most frequent word; draw an "
                  f"id uniformly from the vocabulary, not a token of the batch" if from_batch else ""))


def check_replacements_cover_the_vocabulary(impl):
    """A batch that holds only the lower ids (as a real batch holds few of 30,522): random replacements
    still reach every non-special id, the first and last of the list too. Every token chosen (p = 1)."""
    gen = torch.Generator().manual_seed(7)
    top = 29  # the batch's words: ids 5..29; the vocabulary's run to 59
    ids = torch.randint(5, top + 1, (600, 256), generator=gen)
    ids[:, 0], ids[:, -1] = TOK.cls_id, TOK.sep_id
    inputs, labels = call(impl.mask_tokens, ids, TOK, 1.0, torch.Generator().manual_seed(0))
    replaced = (labels != -100) & (inputs != TOK.mask_id) & (inputs != ids)
    words = normal_ids(TOK)
    counts = torch.bincount(inputs[replaced], minlength=TOK.vocab_size)[words].double()
    expect(bool((counts[words > top] > 0).any()),
           f"the random replacements never went above id {top}, the largest id in the batch, in {int(counts.sum())} "
           f"replacements: draw them from the whole vocabulary's non-special ids (tokenizer.vocab_size, "
           f"tokenizer.special_ids), not up to the batch's largest id")
    expected = counts[1:-1].mean().item()
    expect(not bool((counts[[0, -1]] < 0.7 * expected).all()),
           f"the first and last non-special ids, {int(words[0])} and {int(words[-1])}, were random replacements "
           f"{int(counts[0])} and {int(counts[-1])} times, about half of the others' {expected:.0f}: rounding a "
           f"uniform number to an index, round(u * (n - 1)), gives the two ends of the range half the chance; floor "
           f"it (.long(), .floor()) or draw with torch.randint")


def check_dynamic(impl):
    """Another generator state, another mask: BERT re-masks each time a block is seen. The draws come
    from `generator` alone (the same mask whatever PyTorch's global random state), and two calls with
    one generator mask differently (it advances: dynamic masking)."""
    ids = batch(B=8, T=64)

    def mask(generator, global_seed=0):
        return call(impl.mask_tokens, ids, TOK, 0.15, generator, global_seed=global_seed)
    a, b = mask(torch.Generator().manual_seed(1)), mask(torch.Generator().manual_seed(1), global_seed=1)
    expect(all(torch.equal(x, y) for x, y in zip(a, b)),
           "two calls with generators seeded alike gave different masks when PyTorch's global random state differed: "
           "something is drawn without `generator`; draw every random number from `generator`")
    c = mask(torch.Generator().manual_seed(2))
    expect(not torch.equal(a[1], c[1]), "generators with other seeds chose the same tokens: is `generator` used?")
    shared = torch.Generator().manual_seed(1)
    expect(not torch.equal(mask(shared)[1], mask(shared)[1]),
           "two calls with one generator chose the same tokens: draw from `generator` itself, which advances with "
           "every draw, not from a copy of it or a new generator seeded from it; as written every batch of a run "
           "gets the same masked positions (static masking, what BERT's dynamic masking avoids)")


def test_labels_and_untouched_tokens(impl):
    check_labels_and_untouched_tokens(impl)


def test_chosen_independently_in_each_sequence(impl):
    check_chosen_independently_in_each_sequence(impl)


def test_chosen_per_token(impl):
    check_chosen_per_token(impl)


@pytest.mark.parametrize("p", [0.15, 0.3])
def test_chosen_fraction(impl, p):
    check_chosen_fraction(impl, p)


def test_80_10_10(impl):
    check_80_10_10(impl)


def test_random_replacements(impl):
    check_random_replacements(impl)


def test_replacements_cover_the_vocabulary(impl):
    check_replacements_cover_the_vocabulary(impl)


def test_dynamic(impl):
    check_dynamic(impl)


def test_returns_int64(impl):
    check_returns_int64(impl)
