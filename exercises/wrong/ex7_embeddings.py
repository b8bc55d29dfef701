"""Wrong freezing and untying, one typical bug each (test fixtures for the checks of exercise 7)."""
import torch.nn as nn


def freeze_word_only(model):
    """Bug: only the word embeddings are frozen; positions, token types and the LayerNorm still train."""
    model.bert.embeddings.word.weight.requires_grad_(False)


def untie_sharing_storage(model):
    """Bug: Embedding.from_pretrained wraps the *same* tensor: two parameters, one storage."""
    model.mlm.decoder = nn.Embedding.from_pretrained(model.bert.embeddings.word.weight.data, freeze=False)
    model.config.tie_word_embeddings = False


# ----------------------------------------------------------------------------- written as students write them
import torch  # noqa: E402


def freeze_by_zeroing_gradients(model):
    """Bug: a hook that zeroes the embeddings' gradients: AdamW's weight decay still moves them."""
    for p in model.bert.embeddings.parameters():
        p.register_hook(lambda grad: torch.zeros_like(grad))  # BUG


def freeze_too_much(model):
    """Bug: the embeddings and, 'because the decoder is tied to them', the whole MLM head's extras."""
    model.bert.embeddings.requires_grad_(False)
    model.mlm.bias.requires_grad_(False)  # BUG: the output bias is not an embedding
    model.mlm.norm.requires_grad_(False)  # BUG


def freeze_in_eval_mode(model):
    """Bug: eval() switches dropout off; it freezes nothing."""
    model.bert.embeddings.eval()  # BUG


def freeze_without_layernorm(model):
    """Bug: the three embedding tables, not the embedding LayerNorm."""
    for table in (model.bert.embeddings.word, model.bert.embeddings.position, model.bert.embeddings.token_type):
        table.weight.requires_grad_(False)  # BUG: model.bert.embeddings.norm still trains


def untie_by_new_parameter(model):
    """Bug: a fresh Parameter assigned to decoder.weight: with tied weights the decoder IS the input
    embedding module, so this re-initialises the input embeddings and the two stay tied."""
    cfg = model.config
    model.mlm.decoder.weight = nn.Parameter(torch.randn(cfg.vocab_size, cfg.hidden_size) * cfg.initializer_range)  # BUG
    cfg.tie_word_embeddings = False


def untie_without_config(model):
    """Bug: a correct new decoder, but the config still says tied: a saved run reloads tied."""
    cfg = model.config
    model.mlm.decoder = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
    nn.init.normal_(model.mlm.decoder.weight, std=cfg.initializer_range)  # BUG: cfg.tie_word_embeddings not set


def untie_zero_init(model):
    """Bug: the new decoder starts at zeros: every word has the same logit at first."""
    cfg = model.config
    model.mlm.decoder = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
    nn.init.zeros_(model.mlm.decoder.weight)  # BUG
    cfg.tie_word_embeddings = False


def untie_frozen_copy(model):
    """Bug: a copy made with Embedding.from_pretrained, which freezes it by default."""
    model.mlm.decoder = nn.Embedding.from_pretrained(model.bert.embeddings.word.weight.detach().clone())  # BUG: freeze=True
    model.config.tie_word_embeddings = False


def untie_default_init(model):
    """Bug: nn.Embedding's own init, N(0, 1), fifty times model.py's std."""
    cfg = model.config
    model.mlm.decoder = nn.Embedding(cfg.vocab_size, cfg.hidden_size)  # BUG: not re-initialised
    cfg.tie_word_embeddings = False
