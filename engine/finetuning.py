"""finetune.py's engineering: its flags and the recipes that fill in their defaults by what the model is,
its output files (the best classifier, predictions) and the one table over models and seeds."""
import contextlib
import os

import numpy as np

from engine import checkpoints, cli, folders
from engine.cli import float_range, int_range
from engine.tasks import GLUE, METRICS, TASKS, FinetuneError, Task
from model import SIZES


def say(line):
    """print, flushed (a log follows the run); output that goes nowhere (`| head -1`) costs no result (cli.errors)."""
    print(line, flush=True)


# ----------------------------------------------------------------------------- recipes

# Fine-tuning defaults by what the model is (each flag overrides its value). small / base: the authors' scripts
# (FUZHIYI/TACO finetune_small.sh, finetune_base.sh: batch 32, max length 128, the Hugging Face Trainer's weight
# decay 0, linear decay, clip 1.0) by width: small's below hidden 768 (BERT-small, MiniLM), base's from it; their
# 100 warm-up steps at most 10% of the training (warmup_steps). toy: ours, for taco's toy runs (tiny, mini).
FT_RECIPES = {
    "toy": dict(lr=5e-4, epochs=3, warmup=0.1, weight_decay=0.01),
    "small": dict(lr=5e-5, epochs=4, warmup=None, weight_decay=0.0),
    "base": dict(lr=3e-5, epochs=6, warmup=None, weight_decay=0.0),
}


def warmup_steps(warmup, total):
    """--warmup -> steps of linear warm-up out of `total`: a fraction (< 1) of them, a number of steps, or None:
    10% of them, at most the authors' 100 (on a task of 200 examples, 28 steps, 100 would never peak)."""
    if warmup is None:
        return min(round(0.1 * total), 100)
    return round(warmup * total) if warmup < 1 else int(warmup)


def choose_ft_recipe(config, origin=None):
    """-> (FT_RECIPES key, why). origin: the taco recipe that pre-trained the model (checkpoints.trained_with),
    "huggingface", or None (not known: a model of a toy size's shape is taken for a toy run)."""
    shape = (config.num_hidden_layers, config.hidden_size, config.num_attention_heads)
    if origin in ("tiny", "mini") or (origin is None and shape in (SIZES["tiny"], SIZES["mini"])):
        return "toy", f"a taco toy run ({origin or 'by its shape'})"
    key = "small" if config.hidden_size < 768 else "base"
    what = "a Hugging Face model" if origin == "huggingface" else f"a model pre-trained by the {origin} recipe"
    return key, f"{what}, hidden {config.hidden_size}: the paper's {key} recipe"


def ft_recipe(config, origin=None):
    return FT_RECIPES[choose_ft_recipe(config, origin)[0]]


def check_fit(tok, max_len, config, model):
    """The vocabulary and the example length fit the model (a foreign or edited vocab.txt fails here)."""
    if tok.vocab_size != config.vocab_size or not 4 <= max_len <= config.max_position_embeddings:
        raise FinetuneError(f"--model {model}: {tok.vocab_size} tokens in {os.path.basename(tok.vocab_file)} and "
                            f"max_len {max_len}, but the model was pre-trained with {config.vocab_size} tokens and "
                            f"{config.max_position_embeddings} positions")


# ----------------------------------------------------------------------------- files of the outputs

def write_tsv(path, header, rows):  # predictions, written whole
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    checkpoints.write_bytes(path, ("\n".join([header, *rows]) + "\n").encode())


def save_best(model, task, record, tok, args):
    """OUT/best/TASK: the classifier with the best dev main score of the runs into OUT, in Hugging Face format
    (transformers loads it, labels by name), with what --predict needs (saved_task). Written whole."""
    path, best = os.path.join(args.out, "best", task.name), -np.inf
    with contextlib.suppress(OSError, cli.UsageError, KeyError):
        best = checkpoints.read_json(os.path.join(path, "config.json"))["taco_task"]["dev"]["main"]
    if best >= record["metrics"]["main"]:
        return
    labels = {} if task.labels is None else {"id2label": dict(enumerate(task.labels)),
                                             "label2id": {n: i for i, n in enumerate(task.labels)}}
    about = dict(name=task.name, text=task.text, labels=task.labels, metrics=task.metrics, dev=record["metrics"],
                 **{k: record[k] for k in ("model", "max_len", "lr", "batch_size", "epochs", "seed")})
    with folders.replacing(path, "finetune.py", True, {"--model": args.model}) as tmp:
        model.save_pretrained(tmp, vocab_file=tok.vocab_file, do_lower_case=tok.do_lower_case,
                              finetuning_task=task.name, taco_task=about, **labels)


def saved_task(folder):
    """The task (and max_len) a classifier saved by save_best was trained on, from its config.json."""
    path = os.path.join(folder, "config.json")
    about = checkpoints.read_json(path).get("taco_task") if os.path.isfile(path) else None
    if not about:
        raise FinetuneError(f"--predict needs --model a classifier that finetune.py saved (OUT/best/TASK); "
                            f"{folder} is not one")
    labels = about["labels"] and tuple(about["labels"])  # None: a regression
    return Task(about["name"], tuple(about["text"]), labels, ()), about["max_len"]


# ----------------------------------------------------------------------------- summary

CONFIG = ("model", "max_len", "warmup", "lr", "batch_size", "epochs")  # a run's settings but its seed


def summarize(records):
    """Per model, then per task (as they came): the configuration with the best mean dev main score, its seeds'
    mean, median and sample std, and the task's chance level. Models are never mixed."""
    runs = {}  # (model, task) -> configuration -> seed -> record; a rerun of a configuration and seed replaces it
    for r in records:
        runs.setdefault((r["model"], r["task"]), {}).setdefault(tuple(r[k] for k in CONFIG), {})[r["seed"]] = r
    models = {model: {"tasks": {}} for model, _ in runs}
    for (model, name), configs in runs.items():
        best = list(max(configs.values(), key=lambda c: np.mean([r["metrics"]["main"] for r in c.values()])).values())
        values = {m: [r["metrics"][m] for r in best] for m in best[0]["metrics"]}
        models[model]["tasks"][name] = {
            "config": {k: best[0][k] for k in CONFIG}, "seeds": sorted(r["seed"] for r in best),
            "chance": best[0].get("chance"), "metrics": {m: {"mean": float(np.mean(v)), "median": float(np.median(v)),
                                                             "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0}
                                                         for m, v in values.items()}}
    return {"split": "dev", "models": models}


def format_table(summary):
    """One table: a row per task and model (its best configuration), then the task's chance level (tasks.chance); dev
    scores x100, `mean ± std (median)` over seeds. Then each model's mean main score over its GLUE tasks if several."""
    tasks = {}  # task -> [(model, its summary)]
    for model, m in summary["models"].items():
        for name, s in m["tasks"].items():
            tasks.setdefault(name, []).append((model, s))
    cols = list(dict.fromkeys(c for runs in tasks.values() for _, s in runs for c in ("main", *s["metrics"])))
    cell = lambda s, n: "" if s is None else f"{100 * s['mean']:.1f}" + (
        f" ± {100 * s['std']:.1f} ({100 * s['median']:.1f})" if n > 1 else "")
    rows = [["task (dev)", "model", "seeds", "lr/batch/epochs", *cols]]
    for name, runs in tasks.items():
        for model, s in runs:
            n = len(s["seeds"])
            rows.append([name, model, f"{n} seed{'s' * (n > 1)}", "{lr:g}/{batch_size}/{epochs}".format(**s["config"]),
                         *(cell(s["metrics"].get(c), n) for c in cols)])
        if chance := runs[0][1]["chance"]:
            rows.append([name, "chance (always one label)", "", "",
                         *(cell({"mean": chance[c]} if c in chance else None, 1) for c in cols)])
    widths = [max(map(len, column)) for column in zip(*rows)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for model, m in summary["models"].items():
        if len(glue := [n for n in m["tasks"] if n in [TASKS[k].name for k in GLUE]]) > 1:
            lines.append(f"GLUE average of {model} over {len(glue)} of the {len(GLUE)} GLUE tasks ({', '.join(glue)}): "
                         f"{100 * np.mean([m['tasks'][n]['metrics']['main']['mean'] for n in glue]):.1f}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line

def get_args(argv=None):
    p = cli.ArgumentParser(description="Fine-tune BERT on GLUE or a task of your own: dev scores over seeds and a "
                           "grid (docs/finetune.md).", formatter_class=cli.HelpFormatter)
    add, seed = p.add_argument, int_range(0, 2**32 - 1)
    # task and data
    add("--task", "--tasks", default="toy", help=f"comma-separated: {', '.join(TASKS)} (or SST-2), all (GLUE's 8), "
        "or a folder of train.tsv, dev.tsv and labels.txt (none: a regression)")
    add("--text_columns", type=cli.list_of(str), help="a folder task's text, or a pair of columns; default: all but "
        "the label and an id")
    add("--label_column", default="label", help="a folder task's label column")
    add("--metrics", type=cli.list_of(str), help=f"a folder task's score, their mean: {', '.join(METRICS)}; default: "
        "acc, or pearson,spearman")
    add("--data_dir", help="GLUE's TSVs (or .csv/.jsonl of the hub's columns) instead of the hub: a task's folder, or "
        "a folder of them named as GLUE's (CoLA/, ...)")
    add("--cache_dir", help="cache of hub datasets and the toy corpus")
    add("--max_len", type=int_range(4, 512), help="tokens per example; default: 128 (--predict: the classifier's)")
    add("--model", default="runs/taco", help="taco run (its newest checkpoint), checkpoint file or Hugging Face BERT "
        "folder; with --predict, OUT/best/TASK")
    # optimisation: a plural flag is a grid of comma-separated values; a default None is the recipe's (FT_RECIPES)
    add("--lr", type=float_range(0, lo_open=True), help="peak learning rate (toy 5e-4, small 5e-5, base 3e-5)")
    add("--lrs", type=cli.list_of(float_range(0, lo_open=True)), help="grid: 1e-5,2e-5,3e-5")
    add("--batch_size", type=int_range(1), default=32, help="global batch size")
    add("--batch_sizes", type=cli.list_of(int_range(1)), help="grid: 16,32")
    add("--epochs", type=int_range(1), help="training epochs (toy 3, small 4, base 6)")
    add("--epochs_list", type=cli.list_of(int_range(1)), help="grid: 4,6")
    add("--seed", type=seed, default=1, help="seed of the head, data order and dropout")
    add("--seeds", type=cli.list_of(seed), help="seeds: 1,2,3,4,5")
    add("--warmup", type=float_range(0), help="warm-up: a fraction of the steps if < 1, else steps (toy 0.1, else 10%% "
        "of them, at most 100)")
    add("--weight_decay", type=float_range(0), help="AdamW's, on matrices (toy 0.01, else 0)")
    add("--eval_batch_size", type=int_range(1), default=128, help="batch size of dev and test predictions")
    # system
    add("--device", help="cpu or cuda; default: cuda if available")
    add("--dtype", choices=["fp32", "bf16", "fp16"], help="default: bf16 on capable CUDA")
    cli.add_threads_flag(p)
    add("--plain", action="store_true", help="PyTorch's own dropout and attention, not engine/fast.py's")
    # output
    add("--out", help="default runs/finetune: results.jsonl, summary.json, best/TASK (the best classifier), "
        "predictions/")
    add("--predict_test", action="store_true", help="GLUE server files of each task's best run")
    add("--predict", help="label each line (or row) of this file with --model OUT/best/TASK")
    add("--force", action="store_true", help="--predict: replace an earlier prediction file")
    args = p.parse_args(argv)
    if bad := next((m for m in args.metrics or () if m not in METRICS), None):
        p.error(f"argument --metrics: unknown metric {bad!r}; choose from {', '.join(METRICS)}")
    return args
