"""Wrong freezing and untying, one typical bug each (test fixtures for the checks of exercise 7)."""
import torch.nn as nn


def freeze_word_only(model):
    """Bug: only the word embeddings are frozen; positions, token types and the LayerNorm still train."""
    model.bert.embeddings.word.weight.requires_grad_(False)


def untie_sharing_storage(model):
    """Bug: Embedding.from_pretrained wraps the *same* tensor: two parameters, one storage."""
    model.mlm.decoder = nn.Embedding.from_pretrained(model.bert.embeddings.word.weight.data, freeze=False)
    model.config.tie_word_embeddings = False
