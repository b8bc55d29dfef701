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


# ----------------------------------------------------------------------------- written as students write them

def _choose(ids, special, p, generator):
    return (torch.rand(ids.shape, generator=generator) < p) & ~special


def replacements_after_the_first_five(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: random replacements from randint(5, vocab_size): assumes the specials are ids 0-4."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, mlm_probability, generator)
    action = torch.rand(input_ids.shape, generator=generator)
    random_ids = torch.randint(5, tokenizer.vocab_size, input_ids.shape, generator=generator)  # BUG
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def replacement_range_one_short(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: an index into the non-special ids with randint(0, len - 1): the last id is never drawn."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, mlm_probability, generator)
    action = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(0, len(normal) - 1, input_ids.shape, generator=generator)]  # BUG
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def replacement_from_the_batch(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: the random replacement is a random non-special token *of the batch* (follows word frequencies)."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, mlm_probability, generator)
    action = torch.rand(input_ids.shape, generator=generator)
    pool = input_ids[~special]
    random_ids = pool[torch.randint(len(pool), input_ids.shape, generator=generator)]  # BUG
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def specials_by_id_below_five(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: 'special' = id < 5, as in taco's own vocabulary."""
    special = input_ids < 5  # BUG
    chosen = _choose(input_ids, special, mlm_probability, generator)
    action = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def mask_id_written_in(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: [MASK] written as id 4 instead of tokenizer.mask_id."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, mlm_probability, generator)
    action = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), 4, input_ids)  # BUG
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def probability_written_in(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: BERT's 15 % written in, the argument ignored."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, 0.15, generator)  # BUG
    action = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def second_draw_misread(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: mask if a < 0.8; otherwise random if a *new* draw b < 0.1 (so 2 % random, 18 % kept)."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, mlm_probability, generator)
    a = torch.rand(input_ids.shape, generator=generator)
    b = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    inputs = torch.where(chosen & (a < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (a >= 0.8) & (b < 0.1), random_ids, inputs)  # BUG: b < 0.5 would be right
    return inputs, torch.where(chosen, input_ids, -100)


def labels_only_where_masked(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: labels only for the tokens that became [MASK] (random and kept ones are not predicted)."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, mlm_probability, generator)
    action = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    masked = chosen & (action < 0.8)
    inputs = torch.where(masked, tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(masked, input_ids, -100)  # BUG


def masks_in_place(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: writes the masks into input_ids itself and returns it."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = _choose(input_ids, special, mlm_probability, generator)
    labels = torch.where(chosen, input_ids, -100)
    action = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    input_ids[chosen & (action < 0.8)] = tokenizer.mask_id  # BUG
    rnd = chosen & (action >= 0.8) & (action < 0.9)
    input_ids[rnd] = random_ids[rnd]
    return input_ids, labels


def global_random_state(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: torch.rand without the generator: every call masks differently."""
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids))
    chosen = (torch.rand(input_ids.shape) < mlm_probability) & ~special  # BUG
    action = torch.rand(input_ids.shape)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def only_padding_protected(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: only [PAD] is kept out; [CLS] and [SEP] can be chosen."""
    special = input_ids == tokenizer.pad_id  # BUG
    chosen = _choose(input_ids, special, mlm_probability, generator)
    action = torch.rand(input_ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random_ids = normal[torch.randint(len(normal), input_ids.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, -100)


def same_positions_in_every_sequence(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: one draw per position, shape (T,), shared by every sequence: the fraction is right, the
    masks of the batch are the same."""
    B, T = input_ids.shape
    ids = input_ids.long()
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids))
    chosen = (torch.rand(T, generator=generator) < mlm_probability)[None, :] & ~special  # BUG: (T,), not (B, T)
    action = torch.rand(B, T, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random = normal[torch.randint(len(normal), (B, T), generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random, inputs)
    return inputs, torch.where(chosen, ids, -100)


def keeps_the_input_dtype(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: builds on input_ids as given: int32 in, int32 labels out (F.cross_entropy refuses them)."""
    B, T = input_ids.shape
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids, dtype=input_ids.dtype))
    chosen = (torch.rand(B, T, generator=generator) < mlm_probability) & ~special
    action = torch.rand(B, T, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random = normal[torch.randint(len(normal), (B, T), generator=generator)].to(input_ids.dtype)
    inputs = torch.where(chosen & (action < 0.8), torch.tensor(tokenizer.mask_id, dtype=input_ids.dtype), input_ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random, inputs)
    return inputs, torch.where(chosen, input_ids, torch.tensor(-100, dtype=input_ids.dtype))  # BUG: not .long()


def generator_copied(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: the draws from a copy of `generator` ("not to disturb the caller's"): every call masks the same
    positions, so a whole run trains on one static mask per block."""
    gen = torch.Generator()
    gen.set_state(generator.get_state())  # BUG: draw from generator itself
    ids = input_ids.long()
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids))
    chosen = (torch.rand(ids.shape, generator=gen) < mlm_probability) & ~special
    action = torch.rand(ids.shape, generator=gen)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random = normal[torch.randint(len(normal), ids.shape, generator=gen)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random, inputs)
    return inputs, torch.where(chosen, ids, -100)


def replacements_up_to_the_batch_max(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: random replacements among the non-special ids up to the batch's largest id, not the whole vocabulary."""
    ids = input_ids.long()
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids))
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_probability) & ~special
    action = torch.rand(ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(int(ids.max()) + 1) if i not in tokenizer.special_ids])  # BUG: vocab_size
    random = normal[torch.randint(len(normal), ids.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random, inputs)
    return inputs, torch.where(chosen, ids, -100)


def fixed_count_per_sequence(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: exactly round(p * n) of each sequence's n words chosen (at random places): 15 % on long sequences,
    never a 3-word sequence, 25 % of a 4-word one."""
    ids = input_ids.long()
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids))
    key = torch.rand(ids.shape, generator=generator).masked_fill(special, 2.0)  # words first, in random order
    rank = key.argsort(1).argsort(1)
    k = (mlm_probability * (~special).sum(1, keepdim=True)).round()  # BUG: one draw per token
    chosen = rank < k
    action = torch.rand(ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    random = normal[torch.randint(len(normal), ids.shape, generator=generator)]
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random, inputs)
    return inputs, torch.where(chosen, ids, -100)


def replacement_index_rounded(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """Bug: the index into the non-special ids rounded, round(u * (n - 1)): the first and last id at half the rate."""
    ids = input_ids.long()
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids))
    chosen = (torch.rand(ids.shape, generator=generator) < mlm_probability) & ~special
    action = torch.rand(ids.shape, generator=generator)
    normal = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids])
    index = (torch.rand(ids.shape, generator=generator) * (len(normal) - 1)).round().long()  # BUG
    inputs = torch.where(chosen & (action < 0.8), tokenizer.mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), normal[index], inputs)
    return inputs, torch.where(chosen, ids, -100)
