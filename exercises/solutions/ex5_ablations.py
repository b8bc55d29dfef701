"""Exercise 5, reference: the directions the pages' claims state (exercises/measure.py checks them
over 3 seeds; see answers/results/ex5_ablations.md)."""
PREDICTIONS = {
    "W=15": {"ctx": "higher", "wordsim": "same", "why": "positives up to 7 tokens away often lie in another document "
             "of the same 64-token block, so TC pulls a whole block together: blocks become tighter clusters"},
    "K=4": {"ctx": "lower", "wordsim": "same", "why": "fewer negatives push the other sequences away less, so "
            "'inter' stays higher"},
    "tau=0.5": {"ctx": "lower", "wordsim": "same", "why": "a soft softmax barely separates the positive from the "
                "negatives: the gradient is small and spread evenly, TC's effect disappears"},
    "lambda=0.1": {"ctx": "lower", "wordsim": "same", "why": "TC's pull is ten times weaker, yet far from absent"},
    "lambda=0 (MLM)": {"ctx": "lower", "wordsim": "same", "why": "without TC only MLM shapes the states, and its "
                       "contextual score opens late (exercise 6)"},
}
