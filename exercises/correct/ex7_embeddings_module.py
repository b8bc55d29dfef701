"""Exercise 7, a correct student solution: the module frozen at once, the decoder a fresh
nn.Embedding initialised with nn.init.normal_."""
import torch.nn as nn


def freeze_embeddings(model):
    for p in model.bert.embeddings.parameters():
        p.requires_grad_(False)


def untie_embeddings(model):
    cfg = model.config
    model.mlm.decoder = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
    nn.init.normal_(model.mlm.decoder.weight, mean=0.0, std=cfg.initializer_range)
    cfg.tie_word_embeddings = False
