"""Exercise 7, a correct student solution: requires_grad per parameter, the decoder a copy of the
current word embeddings (its own storage, trainable)."""
import torch.nn as nn


def freeze_embeddings(model):
    for name, p in model.named_parameters():
        if name.startswith("bert.embeddings."):
            p.requires_grad = False


def untie_embeddings(model):
    word = model.bert.embeddings.word
    decoder = nn.Embedding(word.num_embeddings, word.embedding_dim)
    decoder.weight.data.copy_(word.weight.data)  # same values, own storage
    model.mlm.decoder = decoder
    model.config.tie_word_embeddings = False
