"""Is this machine ready for the exercises? Checks the Python version and the packages, builds the
offline toy corpus, runs a short miniature pre-training (one thread), draws a picture, and runs
one check; then prints "ready" and how long a full miniature run should take here.

    pip install -r exercises/requirements.txt
    python exercises/smoke.py
"""
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NEEDED = {"torch": "torch", "numpy": "numpy", "tqdm": "tqdm", "datasets": "datasets", "pytest": "pytest",
          "matplotlib": "matplotlib"}


def fail(what):
    print(f"not ready: {what}", file=sys.stderr)
    sys.exit(1)


def main():
    t0 = time.time()
    if sys.version_info < (3, 10):
        fail(f"Python {sys.version.split()[0]}; the exercises need Python 3.10 or newer")
    missing = [pip for module, pip in NEEDED.items() if importlib.util.find_spec(module) is None]
    if missing:
        fail(f"missing {', '.join(missing)}: pip install -r exercises/requirements.txt (from {ROOT})")
    import torch
    print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} cores")

    from data import load_tokenizer
    from engine.corpus import tokenize_corpus
    tok = load_tokenizer("toy")
    tokens = tokenize_corpus("toy", tok)
    print(f"toy corpus: {len(tokens):,} tokens, vocabulary of {tok.vocab_size} (cached for the next runs)")

    from exercises.miniature import pretrain
    with tempfile.TemporaryDirectory() as tmp:
        steps = 30
        c0, w0 = time.process_time(), time.time()
        run_dir, r = pretrain(tmp, steps=steps)
        cpu, wall = time.process_time() - c0, time.time() - w0
        print(f"a {steps}-step miniature pre-training: {wall:.1f} s ({cpu:.1f} CPU-s, one thread); contextual score "
              f"{r['ctx_score']:.3f}, held-out MLM loss {r['eval_mlm_loss']:.3f}")
        from tools import pictures
        out = os.path.join(tmp, "curves.png")
        with contextlib.redirect_stdout(io.StringIO()):
            pictures.curves([run_dir], out)
        if os.path.getsize(out) < 1000:
            fail("matplotlib wrote an empty picture")
        print("matplotlib draws (pictures.py curves)")

    from exercises import ex1_tc_loss
    from exercises._check import Mistake
    from exercises.test_ex1_tc_loss import check_returns_a_scalar
    try:
        check_returns_a_scalar(ex1_tc_loss)
        print("exercise 1's checks run (your tc_loss passes the first one)")
    except Mistake as err:
        print(f"exercise 1's checks run (they say: {str(err)[:90]}...)")
    estimate = wall * 300 / steps * 0.5  # start-up and the evaluation at the end weigh less in a longer run
    print(f"ready ({time.time() - t0:.0f} s). A full miniature run (300 steps) should take roughly {estimate / 60:.1f} "
          f"min here; exercise 5 has 6 of them (side by side on free cores).")


if __name__ == "__main__":
    main()
