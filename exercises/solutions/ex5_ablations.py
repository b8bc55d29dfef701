"""Exercise 5, reference: the directions the measurement in ex5_ablations.md found (3 seeds)."""
PREDICTIONS = {
    "W=15": {"ctx": "same", "wordsim": "same", "why": "farther positives are still in the same document most of the time"},
    "K=4": {"ctx": "lower", "wordsim": "same", "why": "fewer negatives push other contexts away less"},
    "tau=0.5": {"ctx": "lower", "wordsim": "lower", "why": "a soft softmax rewards separation weakly"},
    "lambda=0.1": {"ctx": "lower", "wordsim": "lower", "why": "TC's pull is ten times weaker"},
    "lambda=0 (MLM)": {"ctx": "lower", "wordsim": "lower", "why": "without TC only MLM shapes the states"},
}
