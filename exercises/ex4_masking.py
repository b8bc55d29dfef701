"""Exercise 4: BERT's dynamic masking, 15% of tokens chosen, then 80/10/10 (page: ex4_masking.md).

Check your solution:  python -m pytest exercises/test_ex4_masking.py --student
"""
import torch


def mask_tokens(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """input_ids: (B, T) integer tensor (any integer dtype); tokenizer has .special_ids (list), .mask_id,
    .vocab_size.

    Each non-special token is chosen with probability mlm_probability, independently (one draw per
    token). Of the chosen ones: 80% become [MASK], 10% a random non-special token (taco's choice, as
    TaCL's: BERT and Hugging Face draw the random 10% from the whole vocabulary), 10% stay as they are.
    Returns new int64 tensors (inputs, labels): labels = the original id where chosen, else -100.
    Never modify input_ids; draw every random number from `generator`.
    """
    raise NotImplementedError
