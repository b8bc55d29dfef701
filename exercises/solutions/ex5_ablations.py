"""Exercise 5, reference: the directions measured in ex5_ablations.md (3 seeds) where they were
measured, otherwise the expected ones (marked)."""
PREDICTIONS = {
    "W=15": {"ctx": "same", "wordsim": "same", "why": "measured: +0.13 in one seed, +0.01 in two; far positives "
             "often lie across a document boundary in a 64-token block"},
    "K=4": {"ctx": "lower", "wordsim": "same", "why": "measured: -0.08 in every seed; fewer negatives push other "
            "sequences away less, so 'inter' stays high"},
    "tau=0.5": {"ctx": "lower", "wordsim": "same", "why": "expected (not measured): a soft softmax rewards "
                "separating the positive from the negatives weakly"},
    "lambda=0.1": {"ctx": "lower", "wordsim": "same", "why": "expected (not measured): TC's pull is ten times weaker"},
    "lambda=0 (MLM)": {"ctx": "lower", "wordsim": "same", "why": "expected (not measured): without TC only MLM "
                       "shapes the states, and its contextual score opens late (exercise 6)"},
}
