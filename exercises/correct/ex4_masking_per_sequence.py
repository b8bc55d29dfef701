"""Exercise 4, a correct student solution with a loop over sequences, the action drawn only for
the chosen tokens (10 % / 10 % by a second draw given "not [MASK]"), and a random replacement
that is never the original token (the other convention BERT-style code uses)."""
import torch


def mask_tokens(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    input_ids = input_ids.long()  # any integer dtype in, int64 out
    inputs, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    special = set(tokenizer.special_ids)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in special])
    is_special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    for b in range(input_ids.shape[0]):
        pick = (torch.rand(input_ids.shape[1], generator=generator) < mlm_probability) & ~is_special[b]
        where = pick.nonzero().flatten()
        labels[b, where] = input_ids[b, where]
        u = torch.rand(len(where), generator=generator)
        v = torch.rand(len(where), generator=generator)
        to_mask = u < 0.8
        to_random = ~to_mask & (v < 0.5)  # half of the remaining 20 %
        inputs[b, where[to_mask]] = tokenizer.mask_id
        for t in where[to_random].tolist():
            others = normal[normal != input_ids[b, t]]
            inputs[b, t] = others[int(torch.randint(len(others), (1,), generator=generator))]
    return inputs, labels
