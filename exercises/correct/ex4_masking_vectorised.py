"""Exercise 4, a correct student solution, vectorised: one draw to choose, one for the action,
an index into the list of non-special ids for the replacement."""
import torch


def mask_tokens(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    input_ids = input_ids.long()  # any integer dtype in, int64 out
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = (torch.rand(input_ids.shape, generator=generator) < mlm_probability) & ~special
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    action = torch.rand(input_ids.shape, generator=generator)
    allowed = torch.ones(tokenizer.vocab_size, dtype=torch.bool)
    allowed[tokenizer.special_ids] = False
    normal = allowed.nonzero().flatten()
    replacement = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    inputs = input_ids.clone()
    inputs[chosen & (action < 0.8)] = tokenizer.mask_id
    swap = chosen & (action >= 0.8) & (action < 0.9)
    inputs[swap] = replacement[swap]
    return inputs, labels
