"""Exercise 7, reference: what taco.py's --freeze_embeddings and --untie_embeddings do."""
import torch.nn as nn

from model import init_weights


def freeze_embeddings(model):
    model.bert.embeddings.requires_grad_(False)  # as taco.py --freeze_embeddings


def untie_embeddings(model):
    cfg = model.config
    model.mlm.decoder = nn.Embedding(cfg.vocab_size, cfg.hidden_size)  # as model.MLMHead when untied
    init_weights(model.mlm.decoder, cfg.initializer_range)
    cfg.tie_word_embeddings = False
