"""Wrong maskings, one typical bug each (test fixtures for the checks of exercise 4)."""
import torch


def _mask(input_ids, tokenizer, p, generator, keep_specials=True, split=(0.8, 0.9)):
    ids = input_ids.clone()
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids))
    chosen = torch.rand(ids.shape, generator=generator) < p
    if keep_specials:
        chosen &= ~special
    action = torch.rand(ids.shape, generator=generator)
    n_special = len(tokenizer.special_ids)
    random_ids = torch.randint(n_special, tokenizer.vocab_size, ids.shape, generator=generator)  # specials come first
    labels = torch.where(chosen, ids, -100)
    inputs = torch.where(chosen & (action < split[0]), tokenizer.mask_id, ids)
    inputs = torch.where(chosen & (action >= split[0]) & (action < split[1]), random_ids, inputs)
    return inputs, labels


def all_to_mask(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: every chosen token becomes [MASK] (no 10% random, no 10% kept)."""
    return _mask(input_ids, tokenizer, mlm_probability, generator, split=(1.0, 1.0))


def specials_too(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: [CLS], [SEP] and [PAD] can be chosen for prediction."""
    return _mask(input_ids, tokenizer, mlm_probability, generator, keep_specials=False)
