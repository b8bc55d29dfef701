"""The checks reject plausible wrong solutions, each with a sentence that names the mistake, and
accept the correct ones written in other styles.

Every wrong solution lives in exercises/wrong/ with its bug in its docstring (and a "# BUG" mark);
REJECTED below says which check must reject it and with which words. Every function there must
be listed (test_every_fixture_is_listed). Runs on these fixtures with or without --student.
"""
import functools
import inspect
import re
import types

import pytest

import taco
from exercises import test_ex1_tc_loss as ex1
from exercises import test_ex2_samplers as ex2
from exercises import test_ex3_contextual_score as ex3
from exercises import test_ex4_masking as ex4
from exercises import test_ex6_mlm_vs_taco as ex6
from exercises import test_ex7_embeddings as ex7
from exercises._check import Mistake
from exercises.solutions import ex6_mlm_vs_taco as ref6
from exercises.solutions import ex7_embeddings as ref7
from exercises.wrong import ex1_tc_loss as wrong1
from exercises.wrong import ex2_samplers as wrong2
from exercises.wrong import ex3_contextual_score as wrong3
from exercises.wrong import ex4_masking as wrong4
from exercises.wrong import ex6_mlm_vs_taco as wrong6
from exercises.wrong import ex7_embeddings as wrong7

WRONG = {1: wrong1, 2: wrong2, 3: wrong3, 4: wrong4, 6: wrong6, 7: wrong7}


def as_student_module(exercise, name):
    """A stand-in for a student's exN_*.py holding the wrong function `name` (the other function
    of the exercise, if any, is the reference)."""
    fn = getattr(WRONG[exercise], name)
    if exercise == 1:
        return types.SimpleNamespace(tc_loss=fn)
    if exercise == 2:
        if name.startswith(("positives", "window")):
            return types.SimpleNamespace(sample_positives=fn, sample_negatives=taco.sample_negatives)
        return types.SimpleNamespace(sample_positives=taco.sample_positives, sample_negatives=fn)
    if exercise == 3:
        return types.SimpleNamespace(score_closed_form=fn, score_brute_force=fn)
    if exercise == 4:
        return types.SimpleNamespace(mask_tokens=fn)
    if exercise == 6:
        if name.startswith("first"):
            return types.SimpleNamespace(first_step_reaching=fn, speedup=ref6.speedup)
        return types.SimpleNamespace(first_step_reaching=ref6.first_step_reaching, speedup=fn)
    if name.startswith("freeze"):
        return types.SimpleNamespace(freeze_embeddings=fn, untie_embeddings=ref7.untie_embeddings)
    return types.SimpleNamespace(freeze_embeddings=ref7.freeze_embeddings, untie_embeddings=fn)


# (exercise, wrong function, the check that rejects it (with its extra arguments), words of its sentence)
REJECTED = [
    # --- exercise 1: the TC loss (for each wrong solution the first row is its first failure, what --student prints)
    (1, "per_token_losses", ex1.check_returns_a_scalar, (), "one number per token: each anchor's loss (step 4)? Step 5"),
    (1, "stops_after_the_samplers", ex1.check_returns_a_scalar, (), "after calling sample_negatives and "
     "sample_positives (steps 1-2 run): go on with step 3"),
    (1, "h_detached", ex1.check_returns_a_scalar, (), "the loss carries no gradient"),
    (1, "h_detached", ex1.check_gradient_matches_eq34_token_by_token, (), "no gradient reached h"),
    (1, "window_not_passed", ex1.check_passes_its_arguments_to_the_samplers, (),
     "called with window=3 but called sample_positives with [5]: pass `window` on"),
    (1, "generator_not_passed", ex1.check_passes_its_arguments_to_the_samplers, (), "did not pass its `generator`"),
    (1, "generator_not_passed", ex1.check_generator_makes_it_reproducible, (), "pass it to both samplers"),
    (1, "in_place_g", ex1.check_returns_a_scalar, (), "changed one of its inputs in place"),
    (1, "in_place_g", ex1.check_passes_its_arguments_to_the_samplers, (), "changed its argument `h` in place"),
    (1, "uses_h", ex1.check_collapsed_gives_log_k_plus_1, (), "Do you use g = h - e (not h)"),
    (1, "summed", ex1.check_collapsed_gives_log_k_plus_1, (), "64 times too large, the number of anchors"),
    (1, "summed", ex1.check_orthogonal_closed_form, (), "the loss is summed over the 64 anchors: take the mean"),
    (1, "softmax_over_anchors", ex1.check_collapsed_gives_log_k_plus_1, (), "is the softmax taken over the anchors (dim=0)"),
    (1, "temperature_on_the_positive_only", ex1.check_collapsed_gives_log_k_plus_1, (), "divide every logit by tau"),
    (1, "positive_not_in_the_denominator", ex1.check_collapsed_gives_log_k_plus_1, (),
     "the positive is missing from the softmax's denominator"),
    (1, "positive_not_in_the_denominator", ex1.check_orthogonal_closed_form, (),
     "the positive is missing from the softmax's denominator"),
    (1, "loss_negated", ex1.check_collapsed_gives_log_k_plus_1, (), "the loss is negated (a flipped sign"),
    (1, "loss_negated", ex1.check_orthogonal_closed_form, (), "the whole loss is negated"),
    (1, "loss_negated", ex1.check_value_matches_eq34_token_by_token, (), "the loss is negated (a flipped sign)"),
    (1, "loss_negated", ex1.check_low_temperature_does_not_overflow, (), "the whole loss is negated"),
    (1, "dot_product", ex1.check_scale_invariant, (), "normalise each g over its hidden dimension"),
    (1, "dot_product", ex1.check_orthogonal_closed_form, (), "dot products of g, not cosines"),
    (1, "normalised_over_tokens", ex1.check_scale_invariant, (), "over its hidden dimension (dim=-1)"),
    (1, "normalised_over_tokens", ex1.check_gradient_reaches_the_anchor_only, (), "normalised over the tokens (dim=1)"),
    (1, "flipped_sign", ex1.check_orthogonal_closed_form, (), "the sign is flipped"),
    (1, "flipped_sign", ex1.check_value_matches_eq34_token_by_token, (), "the sign is flipped"),
    (1, "temperature_multiplies", ex1.check_orthogonal_closed_form, (0.5,), "the temperature multiplies the cosines"),
    (1, "temperature_ignored", ex1.check_orthogonal_closed_form, (), "tau is always 0.07: use the `temperature` argument"),
    (1, "positive_last", ex1.check_orthogonal_closed_form, (), "the target of the cross-entropy is not the positive"),
    (1, "temperature_twice", ex1.check_orthogonal_closed_form, (0.5,), "the temperature is applied twice"),
    (1, "temperature_twice", ex1.check_value_matches_eq34_token_by_token, (), "the temperature is applied twice"),
    (1, "positions_ignored", ex1.check_positions_restrict_the_anchors, (), "is `positions` ignored?"),
    (1, "anchor_is_its_own_positive", ex1.check_positions_restrict_the_anchors, (), "is each anchor its own positive"),
    (1, "anchor_is_its_own_positive", ex1.check_value_matches_eq34_token_by_token, (), "each anchor is its own positive"),
    (1, "no_detach", ex1.check_gradient_reaches_the_anchor_only, (), "the positive is not detached: the gradient reached"),
    (1, "no_detach", ex1.check_gradient_matches_eq34_token_by_token, (), "the positive and negatives are not detached"),
    (1, "padding_anchors", ex1.check_padding_never_used, (), "padding leaked into the loss"),
    (1, "positions_replace_the_mask", ex1.check_padding_never_used, (), "padding leaked into the loss with `positions` all True"),
    (1, "lone_tokens_are_anchors", ex1.check_padding_never_used, (), "a sequence with a single real token counts as an anchor"),
    (1, "lone_tokens_are_anchors", ex1.check_value_matches_eq34_token_by_token, (),
     "a sequence with a single real token counts as an anchor"),
    (1, "mean_per_sequence", ex1.check_value_matches_eq34_token_by_token, (), "averaged per sequence, then over sequences"),
    (1, "negatives_off_the_graph", ex1.check_gradient_matches_eq34_token_by_token, (),
     "no gradient flows through the negatives' cosines"),
    (1, "positive_off_the_graph", ex1.check_gradient_matches_eq34_token_by_token, (),
     "no gradient flows through the positive's cosine"),
    (1, "norm_detached", ex1.check_gradient_matches_eq34_token_by_token, (), "the anchor's norm |g| is computed under detach"),
    (1, "e_detached", ex1.check_gradient_matches_eq34_token_by_token, (), "no gradient reached e: is e detached"),
    (1, "nan_without_anchors", ex1.check_no_anchor_gives_zero, (), "a mean over zero anchors divides 0 by 0"),
    (1, "zero_without_a_graph", ex1.check_no_anchor_gives_zero, (), "your loss is 0 but a constant: no graph"),
    (1, "zero_as_a_new_leaf", ex1.check_no_anchor_gives_zero, (), "your loss is 0 but a constant: no graph"),
    (1, "softmax_without_the_max", ex1.check_low_temperature_does_not_overflow, (), "exp(100) overflows float32"),
    (1, "log_of_softmax", ex1.check_low_temperature_positive_points_away, (), "-log(softmax(...)) (or the log of exp / "
     "sum) rounds the positive's probability, e^-200, to 0"),
    (1, "max_over_the_whole_matrix", ex1.check_low_temperature_positive_points_away, (),
     "a max subtracted over the whole matrix, not each anchor's own row"),
    (1, "normalised_without_epsilon", ex1.check_zero_global_part, (), "g / |g| is 0 / 0 there"),
    # --- exercise 2: the samplers
    (2, "window_too_wide", ex2.check_window_offsets_uniform, (3,), "the window reaches 2 positions away; W=3 allows 1 (W//2 either side)"),
    (2, "window_too_wide", ex2.check_window_offsets_uniform, (), "the window reaches 3 positions away; W=5 allows 2 (W//2 either side)"),
    (2, "negatives_from_own_sequence_too", ex2.check_negatives_from_other_sequences_never_padding, (),
     "come from sequence 0 itself; negatives come from the *other* sequences"),
    (2, "negatives_uniform_over_sequences", ex2.check_negatives_uniform_over_tokens, (), "draw uniformly over tokens, not over sequences"),
    (2, "positives_fallback_assumes_right_padding", ex2.check_positive_is_another_real_token_of_the_sequence, (),
     "padding (sequence 1 has 11 real tokens, padded on the left)"),
    (2, "positives_clamped_into_the_sequence", ex2.check_positive_is_another_real_token_of_the_sequence, (),
     "the anchor itself; a positive is another token"),
    (2, "positives_offset_zero_possible", ex2.check_positive_is_another_real_token_of_the_sequence, (),
     "the anchor itself; a positive is another token (offset 0 is not allowed"),
    (2, "positives_offset_zero_possible", ex2.check_window_offsets_uniform, (), "a positive is the anchor itself (offset 0)"),
    (2, "positives_land_on_padding", ex2.check_positive_is_another_real_token_of_the_sequence, (), "padded on the right); positives are real tokens"),
    (2, "positives_wrap_around", ex2.check_positive_is_another_real_token_of_the_sequence, (), "padding (sequence 1"),
    (2, "positives_one_side_only", ex2.check_window_offsets_uniform, (3,), "but [-1] never occurred"),
    (2, "positives_one_side_only", ex2.check_window_offsets_uniform, (), "but [-2, -1] never occurred"),
    (2, "positives_without_flat_offset", ex2.check_positive_is_another_real_token_of_the_sequence, (),
     "indices are flat: b * T + t; did you forget the b * T?"),
    (2, "positives_one_offset_per_sequence", ex2.check_window_offsets_uniform, (), "draw one offset per token, not one per sequence"),
    (2, "positives_fallback_may_be_the_anchor", ex2.check_positive_is_another_real_token_of_the_sequence, (),
     "the anchor itself; a positive is another token"),
    (2, "negatives_skip_off_by_one", ex2.check_negatives_from_other_sequences_never_padding, (),
     "come from sequence 0 itself"),
    (2, "negatives_pool_assumes_right_padding", ex2.check_negatives_from_other_sequences_never_padding, (),
     "are padded on the left); draw only real tokens"),
    (2, "negatives_skip_lone_sequences", ex2.check_negatives_uniform_over_tokens, (),
     "its token is a negative like any other"),
    (2, "negatives_range_one_short", ex2.check_negatives_uniform_over_tokens, (), "is your range one short"),
    (2, "negatives_global_random_state", ex2.check_generator_makes_it_reproducible, (),
     "PyTorch's global random state differed: something is drawn without `generator`"),
    (2, "negatives_include_padding", ex2.check_negatives_from_other_sequences_never_padding, (), "draw only real tokens"),
    (2, "negatives_shared_by_the_sequence", ex2.check_negatives_uniform_over_tokens, (), "draw them independently for each anchor"),
    (2, "negatives_squeezed", ex2.check_shapes, (), "must return a tensor of shape (3, 12, 1)"),
    (2, "negatives_from_the_next_sequence", ex2.check_negatives_uniform_over_tokens, (),
     "every negative of sequence 3 comes from sequence 4 (the next one)"),
    (2, "positives_same_offsets_in_every_sequence", ex2.check_window_offsets_uniform, (),
     "not one per position shared by the batch"),
    (2, "positives_window_minus_one_halved", ex2.check_window_offsets_uniform, (10,), "W=10 is even"),
    (2, "positives_offset_rounded", ex2.check_window_offsets_uniform, (), "round() gives the two ends"),
    (2, "positives_fallback_from_the_global_state", ex2.check_generator_makes_it_reproducible, (),
     "PyTorch's global random state differed"),
    (2, "negatives_rounded_index", ex2.check_pool_ends_drawn_like_the_rest, (), "about half as often"),
    (2, "negatives_one_draw_repeated", ex2.check_negatives_uniform_over_tokens, (), "one token repeated"),
    (2, "negatives_from_a_copied_generator", ex2.check_generator_makes_it_reproducible, (),
     "two calls with one generator gave the same indices"),
    # --- exercise 3: the contextual score
    (3, "with_self_pairs", ex3.check_matches_the_pairs, ("score_closed_form",), "Your intra includes each token paired with itself"),
    (3, "padding_counted", ex3.check_matches_the_pairs, ("score_closed_form",), "Padding is counted: use only real tokens"),
    (3, "mean_of_sequence_means", ex3.check_matches_the_pairs, ("score_closed_form",), "Your intra is the mean of each sequence's mean"),
    (3, "inter_includes_intra", ex3.check_matches_the_pairs, ("score_closed_form",), "Your inter is the mean over all pairs"),
    (3, "score_reversed", ex3.check_known_values, ("score_closed_form",), "The score is intra - inter, not inter - intra"),
    (3, "dot_products", ex3.check_known_values, ("score_closed_form",), "Cosines, not dot products"),
    (3, "padding_zeroed_but_counted", ex3.check_matches_the_pairs, ("score_closed_form",), "Your pair counts include the padding"),
    (3, "right_padding_assumed", ex3.check_matches_the_pairs, ("score_closed_form",), "sequence 1 is padded on the left"),
    (3, "brute_force_skips_same_position", ex3.check_matches_the_pairs, ("score_brute_force",),
     "every pair of real tokens of two different sequences counts"),
    (3, "returns_tensors", ex3.check_returns_python_floats, ("score_closed_form",), "must return Python floats"),
    (3, "closed_form_in_the_input_dtype", ex3.check_closed_form_in_bfloat16, (), "compute it in float64"),
    (3, "nan_for_a_lone_token", ex3.check_matches_the_pairs, ("score_closed_form",), "must not divide by zero"),
    (3, "minus_n_missing", ex3.check_known_values, ("score_brute_force",), "Your intra keeps the n self-pairs"),
    (3, "normalised_over_tokens", ex3.check_known_values, ("score_brute_force",), "normalised over the tokens (dim=1)"),
    (3, "unordered_pair_counts", ex3.check_known_values, ("score_brute_force",), "you count unordered pairs"),
    # --- exercise 4: masking
    (4, "all_to_mask", ex4.check_80_10_10, (), "100.0% became [MASK], 0.0% a random token and 0.0% stayed the same: BERT uses 80% / 10% / 10%"),
    (4, "specials_too", ex4.check_labels_and_untouched_tokens, (), "special tokens ([CLS], [SEP] or [PAD]) were chosen for prediction"),
    (4, "replacements_after_the_first_five", ex4.check_random_replacements, (), "a random replacement was a special token (ids [13, 27, 41, 59])"),
    (4, "replacement_range_one_short", ex4.check_random_replacements, (), "is your range of ids one short"),
    (4, "replacement_from_the_batch", ex4.check_random_replacements, (), "not a token of the batch"),
    (4, "specials_by_id_below_five", ex4.check_labels_and_untouched_tokens, (), "special ids are 6, 13, 27, 41, 59"),
    (4, "mask_id_written_in", ex4.check_80_10_10, (), "is tokenizer.mask_id used?"),
    (4, "probability_written_in", ex4.check_chosen_fraction, (0.3,), "is mlm_probability used?"),
    (4, "second_draw_misread", ex4.check_80_10_10, (), "2.4% a random token and 17.7% stayed the same"),
    (4, "labels_only_where_masked", ex4.check_labels_and_untouched_tokens, (),
     "labels must be set for every chosen token, also those replaced by a random token"),
    (4, "labels_only_where_masked", ex4.check_chosen_fraction, (), "labels must be set for every chosen token"),
    (4, "masks_in_place", ex4.check_80_10_10, (), "changed its argument `input_ids` in place"),
    (4, "global_random_state", ex4.check_dynamic, (), "PyTorch's global random state differed: something is drawn "
     "without `generator`"),
    (4, "only_padding_protected", ex4.check_labels_and_untouched_tokens, (), "60 special tokens"),
    (4, "same_positions_in_every_sequence", ex4.check_chosen_independently_in_each_sequence, (),
     "not one per position shared by the batch"),
    (4, "keeps_the_input_dtype", ex4.check_returns_int64, (), "return int64 tensors"),
    (4, "generator_copied", ex4.check_dynamic, (), "static masking"),
    (4, "replacements_up_to_the_batch_max", ex4.check_replacements_cover_the_vocabulary, (),
     "never went above id 29, the largest id in the batch"),
    (4, "fixed_count_per_sequence", ex4.check_chosen_per_token, (), "not a fixed count per sequence"),
    (4, "replacement_index_rounded", ex4.check_replacements_cover_the_vocabulary, (), "about half of the others'"),
    # --- exercise 6: speed-ups
    (6, "speedup_integer_division", ex6.check_speedup, (), "do not round or use integer division"),
    (6, "speedup_rounded", ex6.check_speedup, (), "do not round or use integer division"),
    (6, "speedup_baseline_last_step", ex6.check_speedup, (), "the first step reaching its final value, 200, not its last step"),
    (6, "speedup_inverted", ex6.check_speedup, (), "speed-up 400 / 100 = 4; got 0.25"),
    (6, "speedup_zero_if_never", ex6.check_speedup, (), "(None, not 0 or inf); got 0"),
    (6, "speedup_infinite_if_never", ex6.check_speedup, (), "(None, not 0 or inf); got inf"),
    (6, "speedup_best_not_final", ex6.check_speedup, (), "the baseline's *final* value, 0.25 (not its best, 0.4)"),
    (6, "speedup_ignores_direction", ex6.check_speedup, (), "for a loss, MLM reaches its final 4.0 at step 400"),
    (6, "first_strictly_above", ex6.check_first_step_reaching, (), "(equal counts)); got 400"),
    (6, "first_ignores_direction", ex6.check_first_step_reaching, (), "(a loss: lower is better) reaching 4.3); got 100"),
    (6, "first_returns_index", ex6.check_first_step_reaching, (), "should be 200 (the first step where a rising curve reaches 0.3 (equal counts)); got 1"),
    (6, "first_last_crossing", ex6.check_first_step_reaching, (), "even if the curve falls below it later); got 150"),
    (6, "speedup_none_not_tested", ex6.check_speedup, (), "test for None before dividing"),
    (6, "speedup_returns_text", ex6.check_speedup, (), "return the ratio as a number (or None), not text"),
    (6, "speedup_of_pairs", ex6.check_speedup, (), "failed in your code with TypeError"),
    (6, "speedup_target_from_the_other_curve", ex6.check_speedup, (), "Your code's target is another number: the "
     "final value of `other`"),
    # --- exercise 7: embeddings
    (7, "freeze_word_only", ex7.check_freeze, (), "bert.embeddings.norm.bias, bert.embeddings.norm.weight, "
     "bert.embeddings.position.weight, bert.embeddings.token_type.weight changed: freeze the whole embedding layer"),
    (7, "untie_sharing_storage", ex7.check_untie, (), "the decoder shares memory with the input embeddings"),
    (7, "freeze_by_zeroing_gradients", ex7.check_freeze, (), "a zeroed gradient (a hook) is not enough, AdamW's weight decay"),
    (7, "freeze_too_much", ex7.check_freeze, (), "mlm.bias, mlm.norm.bias, mlm.norm.weight did not change"),
    (7, "freeze_in_eval_mode", ex7.check_freeze, (), "bert.embeddings.word.weight changed: freeze the whole embedding layer"),
    (7, "freeze_without_layernorm", ex7.check_freeze, (), "bert.embeddings.norm.bias, bert.embeddings.norm.weight changed"),
    (7, "untie_by_new_parameter", ex7.check_untie, (), "untie_embeddings changed the *input* word embeddings"),
    (7, "untie_without_config", ex7.check_untie, (), "set model.config.tie_word_embeddings = False"),
    (7, "untie_zero_init", ex7.check_untie, (), "the new decoder's weights have std 0.0000"),
    (7, "untie_frozen_copy", ex7.check_untie, (), "nn.Embedding.from_pretrained freezes by default"),
    (7, "untie_default_init", ex7.check_untie, (), "initialise them like every weight, N(0, 0.02)"),
]


def ordered_checks(module):
    """The checks of a test module in the order pytest runs them on a student's stub: each
    test_X(impl, ...) calls check_X with its parametrized values."""
    checks = []
    for name, test in vars(module).items():
        if name.startswith("test_") and "impl" in inspect.signature(test).parameters:
            check = getattr(module, "check_" + name[len("test_"):])
            marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
            checks += [(check, (value,)) for value in marks[0].args[1]] if marks else [(check, ())]
    return checks


CHECKS = {1: ex1, 2: ex2, 3: ex3, 4: ex4, 6: ex6, 7: ex7}


@functools.lru_cache(maxsize=None)
def first_message(exercise, name):
    """What `pytest --student` prints as the wrong solution's first failure (None if all pass)."""
    for check, args in ordered_checks(CHECKS[exercise]):
        said = message(exercise, name, check, args)
        if said is not None:
            return said
    return None


@functools.lru_cache(maxsize=None)
def message(exercise, name, check, args):
    """What `check` says about the wrong solution (None if it passes it)."""
    try:
        check(as_student_module(exercise, name), *args)
    except Mistake as err:
        return " ".join(str(err).split())
    except Exception as err:  # the student's own code failed: the summary names the error
        return f"{type(err).__name__}: {' '.join(str(err).split())}"
    return None


@pytest.mark.parametrize("exercise, name, check, args, sentence", REJECTED,
                         ids=[f"ex{e}-{n}-{c.__name__[6:]}" for e, n, c, _, _ in REJECTED])
def test_rejected_with_its_sentence(exercise, name, check, args, sentence):
    said = message(exercise, name, check, args)
    assert said is not None, f"{check.__name__} accepted the wrong solution {name}"
    assert sentence in said, said


@pytest.mark.parametrize("exercise, name", sorted({(e, n) for e, n, *_ in REJECTED}), ids=lambda x: str(x))
def test_first_failure_is_the_first_sentence_listed(exercise, name):
    """`pytest --student` prints a wrong solution's first failure: it is the sentence REJECTED lists first."""
    words = next(w for e, n, _, _, w in REJECTED if (e, n) == (exercise, name))
    said = first_message(exercise, name)
    assert said is not None and words in said, said


def fixtures():
    return [(e, n) for e, module in WRONG.items() for n, f in vars(module).items()
            if inspect.isfunction(f) and not n.startswith("_") and f.__module__ == module.__name__]


def test_every_fixture_is_listed():
    listed = {(e, n) for e, n, *_ in REJECTED}
    assert not set(fixtures()) - listed, f"wrong solutions without a check in REJECTED: {set(fixtures()) - listed}"
    assert len(fixtures()) >= 60


def test_every_exercise_has_two_correct_variants():
    import os
    folder = os.path.join(os.path.dirname(__file__), "correct")
    for exercise in ("ex1_tc_loss", "ex2_samplers", "ex3_contextual_score", "ex4_masking", "ex6_mlm_vs_taco",
                     "ex7_embeddings"):
        assert len([f for f in os.listdir(folder) if f.startswith(exercise + "_")]) >= 2, exercise


def test_teachers_note_quotes_only_sentences_the_checks_give():
    """TEACHERS.md's list of common mistakes quotes the checks' messages: each quote must be one of
    the sentences above (the fixtures prove those are given)."""
    import os
    with open(os.path.join(os.path.dirname(__file__), "TEACHERS.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Common mistakes", 1)[1].split("\n## ", 1)[0]
    quotes = re.findall(r'"([^"]+)"', " ".join(section.split()))
    assert quotes
    said = [message(e, n, c, a) or "" for e, n, c, a, _ in REJECTED]
    pattern = {q: re.compile(".*".join(re.escape(part.strip()) for part in q.split("[...]"))) for q in quotes}
    missing = [q for q in quotes if not any(pattern[q].search(m) for m in said)]
    assert not missing, f"TEACHERS.md quotes messages that no wrong solution gets: {missing}"
