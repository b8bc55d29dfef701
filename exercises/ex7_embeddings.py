"""Exercise 7: what the embedding layer does for MLM and for TACO: frozen embeddings (the paper's
Fig. 4) and untied input / output embeddings (its Appendix B) (page: ex7_embeddings.md).

1. Write freeze_embeddings and untie_embeddings below; check them:
       python -m pytest exercises/test_ex7_embeddings.py --student
2. Predict, then measure (6 miniature pre-trainings with taco.py's own flags, see the page for the time):
       python exercises/ex7_embeddings.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import engine  # noqa: E402  (first, before torch loads: idle CPU threads sleep; engine/__init__.py)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def freeze_embeddings(model):
    """Keep the whole embedding layer of a BertForPreTraining at its initialisation (Fig. 4):
    word, position and token-type embeddings and the embedding LayerNorm. Everything else trains."""
    raise NotImplementedError


def untie_embeddings(model):
    """Give the MLM head of a BertForPreTraining its own output matrix (Appendix B): after this,
    the decoder no longer shares its weight with the input word embeddings. Initialise it as
    model.py initialises weights (normal, std = model.config.initializer_range) and set
    model.config.tie_word_embeddings = False."""
    raise NotImplementedError


# ----------------------------------------------------------------------------- the measurement (given)

VARIANTS = {  # name -> taco.py flags (the objective is taco unless given)
    "mlm": ["--objective", "mlm"],
    "taco": [],
    "mlm_frozen": ["--objective", "mlm", "--freeze_embeddings"],
    "taco_frozen": ["--freeze_embeddings"],
    "mlm_untied": ["--objective", "mlm", "--untie_embeddings"],
    "taco_untied": ["--untie_embeddings"],
}


def main(argv=None):
    from engine import cli
    from engine import checkpoints
    from exercises.miniature import choose, driver_args, finetune_score, pretrain_all, wordsim
    p = driver_args("Exercise 7: frozen and untied embeddings, MLM vs TACO.")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    args = p.parse_args(argv)
    results = {}
    with cli.errors():
        if args.json:  # checked before the runs, not after them
            cli.output_path(args.json, "--json", folder=False)
        names = choose(args.variants, VARIANTS, "variant")
        done = pretrain_all(args.out, [(VARIANTS[name], args.seed) for name in names], args.steps, args.jobs)
        print("| variant | ctx score | held-out MLM loss | wordsim ρ | fine-tuned | pre-training s |\n|---|---|---|---|---|---|")
        for name, (run_dir, r) in zip(names, done):
            ft = finetune_score(run_dir, train_pairs=args.ft_pairs) if args.ft_pairs else None
            results[name] = {"ctx": r["ctx_score"], "eval_mlm_loss": r["eval_mlm_loss"], "wordsim": wordsim(run_dir),
                             "finetuned": ft, "wall_s": r["wall_s"], "cpu_s": r.get("cpu_s"), "run": run_dir}
            x = results[name]
            print(f"| {name} | {x['ctx']:.3f} | {x['eval_mlm_loss']:.3f} | {x['wordsim']:.3f} | "
                  f"{'–' if ft is None else f'{100 * ft:.1f}'} | {x['wall_s']:.0f} |", flush=True)
        if args.json:
            checkpoints.write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
