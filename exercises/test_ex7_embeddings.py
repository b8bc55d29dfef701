"""Checks of exercise 7 (freezing and untying the embeddings) on a one-layer BERT, one AdamW step."""
import torch
import torch.nn.functional as F

from exercises._check import call, expect
from model import BertConfig, BertForPreTraining
from taco import configure_optimizer

EXERCISE = "ex7_embeddings"


def small_model(seed=0):
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=16,
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def mlm_loss(model, ids):
    """MLM loss with every position masked and predicted (ids only from 10..19: words 20..39 never occur)."""
    labels = ids.clone()
    logits, _, _ = model(torch.full_like(ids, 4), labels=labels)
    return F.cross_entropy(logits, labels.flatten())


def batch():
    return torch.randint(10, 20, (4, 12), generator=torch.Generator().manual_seed(1))


def one_step(model, weight_decay=0.1):
    """One AdamW step (taco's optimizer groups, with weight decay) -> the names of the parameters that changed."""
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = configure_optimizer(model, 1e-2, weight_decay)
    mlm_loss(model, batch()).backward()
    opt.step()
    return {k for k, v in model.named_parameters() if not torch.equal(v.detach(), before[k])}


def check_freeze(impl):
    model = small_model()
    call(impl.freeze_embeddings, model)
    changed = one_step(model)
    moved = sorted(k for k in changed if k.startswith("bert.embeddings."))
    params = dict(model.named_parameters())
    by_decay = [k for k in moved if params[k].grad is not None and not params[k].grad.any()]  # zero gradient, moved
    expect(not moved, f"after freeze_embeddings and one training step (AdamW, weight decay 0.1), {', '.join(moved)} "
                      f"changed: freeze the whole embedding layer (word, position, token-type embeddings and its "
                      f"LayerNorm)" + (f". {', '.join(by_decay)} had a zero gradient and moved all the same: a zeroed "
                                       f"gradient (a hook) is not enough, AdamW's weight decay moves every parameter "
                                       f"it holds; set requires_grad to False" if by_decay else ""))
    should_move = one_step(small_model()) - {k for k in changed if k.startswith("bert.embeddings.")}
    should_move = {k for k in should_move if not k.startswith("bert.embeddings.") and k != "mlm.decoder.weight"}
    stopped = sorted(should_move - changed)
    expect(not stopped, f"after freeze_embeddings, {', '.join(stopped)} did not change in a training step: only the "
                        f"embedding layer (model.bert.embeddings) stays at its init; the encoder and the MLM head "
                        f"(its dense layer, LayerNorm and output bias) still train")


def check_untie(impl):
    model = small_model()
    word_before = model.bert.embeddings.word.weight
    values_before = word_before.detach().clone()
    call(impl.untie_embeddings, model)
    word = model.bert.embeddings.word.weight  # read again: the input embeddings after the call
    dec = model.mlm.decoder.weight
    expect(word is word_before and torch.equal(word.detach(), values_before),
           "untie_embeddings changed the *input* word embeddings (model.bert.embeddings.word.weight is "
           + ("another tensor now" if word is not word_before else "re-initialised") + "): with tied weights "
           "model.mlm.decoder IS model.bert.embeddings.word, so assigning model.mlm.decoder.weight replaces the input "
           "embeddings too. Give the MLM head a new module: model.mlm.decoder = nn.Embedding(...)")
    expect(dec is not word, "after untie_embeddings the decoder's weight is still the word-embedding matrix itself")
    expect(dec.shape == word.shape, f"the decoder must map hidden size 16 to the 40 words: weight shape {tuple(word.shape)}, "
                                    f"got {tuple(dec.shape)}")
    expect(dec.data_ptr() != word.data_ptr(), "the decoder shares memory with the input embeddings (two parameters, "
                                              "one storage): give it its own matrix, a fresh one or a copy (.clone())")
    expect(model.config.tie_word_embeddings is False, "set model.config.tie_word_embeddings = False, so that a saved "
                                                      "checkpoint is rebuilt untied")
    std = dec.detach().std().item()
    expect(0.5 * model.config.initializer_range < std < 2 * model.config.initializer_range,
           f"the new decoder's weights have std {std:.4f}; initialise them like every weight, N(0, "
           f"{model.config.initializer_range})")
    mlm_loss(model, batch()).backward()
    absent = word.grad[20:].abs().sum().item() if word.grad is not None else 0.0
    expect(absent == 0, "after untying, the MLM loss still reaches the input embeddings of words that are not in the "
                        "batch: their only way in was the shared decoder, so it is still shared")
    expect(dec.grad is not None and dec.grad[20:].abs().sum() > 0, "the new decoder receives no gradient: is it the "
                                                                     "one the MLM head uses, and trainable (requires_grad; "
                                                                     "nn.Embedding.from_pretrained freezes by default)?")


def test_freeze(impl):
    check_freeze(impl)


def test_untie(impl):
    check_untie(impl)


def test_measurement_runs(tmp_path):
    """The given measurement script, two steps of one variant (its numbers are the page's business)."""
    from exercises import ex7_embeddings
    results = ex7_embeddings.main(["--variants", "taco_untied", "--steps", "2", "--ft_pairs", "0", "--out", str(tmp_path)])
    assert set(results) == {"taco_untied"}
    r = results["taco_untied"]
    assert -1 <= r["ctx"] <= 1 and r["eval_mlm_loss"] > 0 and -1 <= r["wordsim"] <= 1
