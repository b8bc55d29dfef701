"""The checks reject typical wrong solutions, each with a sentence that names the mistake.

Every wrong solution lives in exercises/wrong/ with its bug in its docstring; this file runs the
same checks a student's stub faces on it and asserts the message. Always runs on these fixtures,
with or without --student.
"""
import types

import pytest

from exercises import test_ex1_tc_loss as ex1
from exercises import test_ex2_samplers as ex2
from exercises import test_ex3_contextual_score as ex3
from exercises import test_ex4_masking as ex4
from exercises import test_ex7_embeddings as ex7
from exercises._check import Mistake
from exercises.wrong import ex1_tc_loss as wrong1
from exercises.wrong import ex2_samplers as wrong2
from exercises.wrong import ex3_contextual_score as wrong3
from exercises.wrong import ex4_masking as wrong4
from exercises.wrong import ex7_embeddings as wrong7


@pytest.mark.parametrize("fn, check, message", [
    (wrong1.no_detach, ex1.check_gradient_reaches_the_anchor_only, "the positive is not detached: the gradient reached"),
    (wrong1.flipped_sign, ex1.check_orthogonal_closed_form, "the sign is flipped"),
    (wrong1.uses_h, ex1.check_collapsed_gives_log_k_plus_1, r"Do you use g = h - e \(not h\)"),
    (wrong1.dot_product, ex1.check_scale_invariant, "normalise g"),
    (wrong1.dot_product, ex1.check_orthogonal_closed_form, "dot products of g, not cosines"),
])
def test_ex1_rejects(fn, check, message):
    with pytest.raises(Mistake, match=message):
        check(types.SimpleNamespace(tc_loss=fn))


@pytest.mark.parametrize("name, fn, check, message", [
    ("sample_positives", wrong2.window_too_wide, ex2.check_window_offsets_uniform,
     r"the window reaches 3 positions away; W=5 allows 2 \(W//2 either side\)"),
    ("sample_negatives", wrong2.negatives_from_own_sequence_too, ex2.check_negatives_from_other_sequences_never_padding,
     "come from sequence 0 itself; negatives come from the \\*other\\* sequences"),
    ("sample_negatives", wrong2.negatives_uniform_over_sequences, ex2.check_negatives_uniform_over_tokens,
     "draw uniformly over tokens, not over sequences"),
])
def test_ex2_rejects(name, fn, check, message):
    with pytest.raises(Mistake, match=message):
        check(types.SimpleNamespace(**{name: fn}))


@pytest.mark.parametrize("fn, message", [
    (wrong3.with_self_pairs, "Your intra includes each token paired with itself"),
    (wrong3.padding_counted, "Padding is counted: use only real tokens"),
])
def test_ex3_rejects(fn, message):
    with pytest.raises(Mistake, match=message):
        ex3.check_matches_the_pairs(types.SimpleNamespace(score_closed_form=fn), "score_closed_form")


@pytest.mark.parametrize("fn, check, message", [
    (wrong4.all_to_mask, ex4.check_80_10_10, r"100.0% became \[MASK\], 0.0% a random token and 0.0% stayed the same: "
                                             r"BERT uses 80% / 10% / 10%"),
    (wrong4.specials_too, ex4.check_labels_and_untouched_tokens, r"special tokens \(\[CLS\], \[SEP\] or \[PAD\]\) "
                                                                  r"were chosen for prediction"),
])
def test_ex4_rejects(fn, check, message):
    with pytest.raises(Mistake, match=message):
        check(types.SimpleNamespace(mask_tokens=fn))


@pytest.mark.parametrize("name, fn, check, message", [
    ("freeze_embeddings", wrong7.freeze_word_only, ex7.check_freeze,
     "bert.embeddings.norm.bias, bert.embeddings.norm.weight, bert.embeddings.position.weight, "
     "bert.embeddings.token_type.weight changed: freeze the whole embedding layer"),
    ("untie_embeddings", wrong7.untie_sharing_storage, ex7.check_untie, "the decoder shares memory with the input embeddings"),
])
def test_ex7_rejects(name, fn, check, message):
    with pytest.raises(Mistake, match=message):
        check(types.SimpleNamespace(**{name: fn}))
