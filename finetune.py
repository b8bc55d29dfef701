"""Fine-tune a pre-trained BERT (TACO or MLM) on GLUE; report dev scores over seeds.

    python finetune.py                                     # after python taco.py: toy task, offline
    python finetune.py --task rte --model runs/taco        # one GLUE task, data from the hub
    python finetune.py --task mnli --data_dir glue_data/MNLI   # ... from the original GLUE TSV files
    # a hyper-parameter grid with five seeds per configuration
    python finetune.py --task rte --lrs 1e-5,2e-5,3e-5,5e-5 --batch_sizes 16,32 \
        --epochs_list 4,6 --seeds 1,2,3,4,5
    # all eight tasks, plus GLUE server files in runs/finetune/predictions/
    python finetune.py --tasks all --predict_test          # or --data_dir glue_data (CoLA/, SST-2/, ...)
    torchrun --standalone --nproc_per_node=8 finetune.py --task mnli   # several GPUs

Each run (task x configuration x seed) evaluates on dev after every epoch. Its score is
its last epoch's: the number of epochs is a grid hyper-parameter, so also picking the best
epoch would select on dev twice (the best epoch is recorded for reference). Every task
has one main score, used to pick the configuration and for the GLUE average: CoLA MCC;
SST-2, QNLI, RTE accuracy; MNLI matched accuracy; MRPC and QQP the mean of F1 and
accuracy, STS-B the mean of Pearson and Spearman (as on the GLUE leaderboard); the toy
task the mean of accuracy and F1. Results: OUT/results.jsonl (one line per run, appended),
OUT/summary.json and a printed table (best configuration per task; mean, std, median over seeds).
"""
import argparse
import contextlib
import csv
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import cli  # before torch: cli sets how idle CPU threads wait
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

import fast
import runs
from cli import UsageError, float_range, int_range
from data import load_tokenizer
from model import BertConfig, BertForSequenceClassification, load_hf_state_dict, read_weights
from runs import find_weights, load_checkpoint, setup_distributed, vocab_beside
from taco import configure_optimizer, get_lr
from toy import toy_corpus


class FinetuneError(cli.UsageError):
    """A user mistake (missing file, unknown task, ...): reported as one line, exit code 2."""


# ----------------------------------------------------------------------------- tasks

@dataclass(frozen=True)
class Task:
    name: str              # GLUE's: the data folder and the prediction file
    hub: str | None        # config of nyu-mll/glue on the hub
    text: tuple            # text columns on the hub and in CSV / JSON files (label: "label")
    tsv: tuple             # text columns, then the label column, of the original GLUE TSV
    labels: tuple | None   # label names in the hub's order; None = regression
    metrics: tuple         # their mean on the first dev set is the task's main score
    evals: tuple = (("", "dev", "test"),)  # (metric suffix, dev split, test split)
    no_header: tuple = ()  # column names of train / dev files that have no header row


BINARY, NLI = ("0", "1"), ("entailment", "not_entailment")
TASKS = {  # WNLI is left out, as in the paper
    "cola": Task("CoLA", "cola", ("sentence",), ("sentence", "label"), BINARY, ("mcc",),
                 no_header=("source", "label", "original_label", "sentence")),
    "sst2": Task("SST-2", "sst2", ("sentence",), ("sentence", "label"), BINARY, ("acc",)),
    "mrpc": Task("MRPC", "mrpc", ("sentence1", "sentence2"), ("#1 String", "#2 String", "Quality"),
                 BINARY, ("f1", "acc")),
    "stsb": Task("STS-B", "stsb", ("sentence1", "sentence2"), ("sentence1", "sentence2", "score"),
                 None, ("pearson", "spearman")),
    "qqp": Task("QQP", "qqp", ("question1", "question2"), ("question1", "question2", "is_duplicate"),
                BINARY, ("f1", "acc")),
    "mnli": Task("MNLI", "mnli", ("premise", "hypothesis"), ("sentence1", "sentence2", "gold_label"),
                 ("entailment", "neutral", "contradiction"), ("acc",),
                 evals=(("m", "dev_matched", "test_matched"), ("mm", "dev_mismatched", "test_mismatched"))),
    "qnli": Task("QNLI", "qnli", ("question", "sentence"), ("question", "sentence", "label"), NLI, ("acc",)),
    "rte": Task("RTE", "rte", ("sentence1", "sentence2"), ("sentence1", "sentence2", "label"), NLI, ("acc",)),
    # the toy corpus's task: do two sentences share a topic? (GLUE TSV layout, 0/1 labels)
    "toy": Task("toy", None, ("sentence1", "sentence2"), ("sentence1", "sentence2", "label"),
                BINARY, ("acc", "f1")),
}
GLUE = [t for t in TASKS if t != "toy"]

# ----------------------------------------------------------------------------- metrics
# Degenerate inputs (one class, constant predictions) score 0 rather than NaN.

def accuracy(preds, labels):
    preds, labels = np.asarray(preds), np.asarray(labels)
    return float((preds == labels).mean()) if len(labels) else 0.0


def f1_score(preds, labels):
    """F1 of the positive class 1."""
    preds, labels = np.asarray(preds) == 1, np.asarray(labels) == 1
    tp, fp, fn = (preds & labels).sum(), (preds & ~labels).sum(), (~preds & labels).sum()
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def matthews_corrcoef(preds, labels):
    """Matthews correlation, multi-class form (Gorodkin 2004): binary MCC for two classes."""
    preds, labels = np.asarray(preds, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    k = int(max(preds.max(initial=0), labels.max(initial=0))) + 1
    C = np.bincount(labels * k + preds, minlength=k * k).reshape(k, k).astype(np.float64)
    t, p, c, s = C.sum(1), C.sum(0), np.trace(C), C.sum()
    den = math.sqrt((s * s - p @ p) * (s * s - t @ t))
    return float((c * s - t @ p) / den) if den else 0.0


def pearson(x, y):
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:  # a constant has no correlation
        return 0.0
    x, y = x - x.mean(), y - y.mean()
    return float((x @ y) / math.sqrt((x @ x) * (y @ y)))


def _ranks(x):
    """1-based ranks; tied values share the average of their ranks."""
    x = np.asarray(x, dtype=np.float64)
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(1, len(x) + 1)
    _, group = np.unique(x, return_inverse=True)
    return (np.bincount(group, ranks) / np.bincount(group))[group]


def spearman(x, y):
    return pearson(_ranks(x), _ranks(y))


METRICS = {"acc": accuracy, "f1": f1_score, "mcc": matthews_corrcoef,
           "pearson": pearson, "spearman": spearman}

# ----------------------------------------------------------------------------- data

def read_table(path, names=()):
    """Columns {name: [values]} of a TSV (headerless when `names` are given), CSV or JSON(L) file."""
    with open(cli.regular_file(path), encoding="utf-8-sig", newline="") as f:  # -sig: MRPC's files open with a BOM
        if path.endswith(".tsv"):  # GLUE quotes nothing: a '"' is text (csv.QUOTE_NONE)
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
            header = list(names) or (rows.pop(0) if rows else [])
            # a tab at the end of every line (some exports) is not a column
            rows = [r[:-1] if len(r) == len(header) + 1 and r[-1] == "" else r for r in rows]
            good = [r for r in rows if len(r) == len(header)]
            if rows and not good:
                raise FinetuneError(f"no row of {path} has the {len(header)} tab-separated fields of its "
                                    f"header ({', '.join(header)}); its first row has {len(rows[0])}")
            if len(good) < len(rows):  # a few lines of GLUE's QQP train.tsv lack fields
                print(f"warning: skipped {len(rows) - len(good)} malformed rows of {path}", file=sys.stderr)
            return {h: [r[i] for r in good] for i, h in enumerate(header)}
        if path.endswith(".csv"):
            rows = list(csv.DictReader(f))
        else:
            text = f.read()
            try:
                rows = json.loads(text)  # a JSON array ...
            except json.JSONDecodeError:  # ... or JSON lines
                rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            rows = [rows] if isinstance(rows, dict) else rows
            if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                raise FinetuneError(f"{path}: expected JSON objects (one per example), one per line or in an array")
        return {k: [r.get(k) for r in rows] for k in (rows[0] if rows else {})}


def load_split(task, split, data_dir=None, cache_dir=None):
    """One split: {"a": texts, "b": texts or None, "labels": array or None (test), "index": ids}."""
    if data_dir is None:
        from datasets import load_dataset  # a slow import, needed only for the hub
        where = f"nyu-mll/glue {task.hub} {split.replace('dev', 'validation')}"
        try:
            cols = load_dataset("nyu-mll/glue", task.hub, split=split.replace("dev", "validation"),
                                cache_dir=cache_dir).to_dict()
        except Exception as err:  # offline, no such split, ...: one line, not a traceback
            raise FinetuneError(f"cannot load {where} from the hub ({err.__class__.__name__}); "
                                f"offline, pass --data_dir with the GLUE files") from err
    else:
        where = next((w for ext in (".tsv", ".csv", ".jsonl", ".json")
                      if os.path.lexists(w := os.path.join(data_dir, split + ext))), None)
        if where is None:
            raise FinetuneError(f"{data_dir} has no {split}.tsv (nor .csv/.jsonl/.json); point --data_dir "
                                f"at the folder of {task.name}'s GLUE files")
        try:
            cols = read_table(where, task.no_header if split in ("train", "dev") else ())
        except cli.UsageError:
            raise
        except (ValueError, UnicodeDecodeError) as err:
            raise FinetuneError(f"cannot parse {where}: {err}") from err
    n = len(next(iter(cols.values()), []))
    if n == 0:
        raise FinetuneError(f"{where} is empty; {task.name} needs examples in every split")
    # GLUE's TSV names first, then the hub's (which CSV / JSON files use too)
    names = next((c for c in ((task.tsv[:-1], task.tsv[-1]), (task.text, "label"))
                  if set(c[0]) <= set(cols)), None)
    if names is None:
        raise FinetuneError(f"{where} lacks the text columns {', '.join(task.tsv[:-1])} "
                            f"(or {', '.join(task.text)}); it has {', '.join(cols)}")
    text, label = names
    index = next((cols[c] for c in ("index", "idx", "id") if c in cols), range(n))
    out = {"a": [str(s) for s in cols[text[0]]], "index": list(index), "labels": None,
           "b": [str(s) for s in cols[text[1]]] if len(text) > 1 else None}
    if not split.startswith("test"):  # test labels are hidden (the hub's are -1)
        if label not in cols:
            raise FinetuneError(f"{where} has no label column {label!r}; it has {', '.join(cols)}")
        out["labels"] = np.array([to_label(task, v, f"{where} row {i + 1}") for i, v in enumerate(cols[label])])
    return out


def to_label(task, value, where):
    """The training target: a class number (from a label name or number), or a float."""
    try:
        if task.labels is None:
            return float(value)
        y = int({name: i for i, name in enumerate(task.labels)}.get(str(value), value))
        if 0 <= y < len(task.labels):
            return y
    except (TypeError, ValueError):
        pass
    kind = "a number" if task.labels is None else "one of " + ", ".join(task.labels)
    raise FinetuneError(f"{where}: label {value!r} is not {kind}")


def encode(tok, split, max_len, quiet=True):
    """Adds the ids of [CLS] a [SEP] (b [SEP]) and the length of segment A to a split."""
    ids, first = [], []
    for i in tqdm(range(len(split["a"])), desc="tokenize", disable=quiet, leave=False):
        a = tok.encode(split["a"][i])
        b = tok.encode(split["b"][i]) if split["b"] is not None else None
        room = max_len - (2 if b is None else 3)
        while len(a) + len(b or ()) > room:  # longest first: trim the longer side a token at a time
            (a if b is None or len(a) > len(b) else b).pop()
        ids.append(np.array([tok.cls_id, *a, tok.sep_id] + ([*b, tok.sep_id] if b is not None else []), dtype=np.int32))
        first.append(len(a) + 2)
    return {**split, "ids": ids, "first": np.array(first)}


def collate(split, idx, pad_id, device):
    """A batch padded to its own longest example: (input_ids, attention_mask, token_type_ids)."""
    seqs = [split["ids"][i] for i in idx]
    x = np.full((len(seqs), max(map(len, seqs))), pad_id, dtype=np.int64)
    mask, types = np.zeros_like(x), np.zeros_like(x)
    for r, (s, n) in enumerate(zip(seqs, split["first"][idx])):
        x[r, :len(s)], mask[r, :len(s)], types[r, n:len(s)] = s, 1, 1  # segment B: b and its [SEP]
    return tuple(torch.from_numpy(t).to(device) for t in (x, mask, types))


# ----------------------------------------------------------------------------- model

def load_pretrained(spec):
    """-> (config, encoder weights under our names, vocab.txt path, the file or folder used).

    `spec`: a taco run directory (its newest valid checkpoint), a checkpoint file, or a
    Hugging Face directory (config.json + weights + vocab.txt). The task head is always new.
    """
    try:
        source, is_hf = find_weights(spec)
    except UsageError as err:
        raise FinetuneError(f"--model {err}") from err
    try:
        if is_hf:
            config = BertConfig.from_dict(runs.read_json(os.path.join(spec, "config.json")))
            model = BertForSequenceClassification(config)
            fresh = load_hf_state_dict(model, {k: v for k, v in read_weights(spec).items()
                                               if not k.startswith("classifier.")})
            weights = {k: v for k, v in model.state_dict().items() if k not in fresh}
        else:  # taco: the encoder is the "bert." part of BertForPreTraining; no pooler
            state = load_checkpoint(source)
            config = BertConfig.from_dict(state["model_config"])
            weights = {k: v for k, v in state["model"].items() if k.startswith("bert.")}
        missing, unexpected = BertForSequenceClassification(config).load_state_dict(weights, strict=False)
    except Exception as err:  # a foreign file, missing keys, wrong shapes: which file, in one line
        raise FinetuneError(f"cannot load --model {spec}: {(str(err) or repr(err)).splitlines()[0]}") from err
    if unexpected or any(not k.startswith(("pooler.", "classifier.")) for k in missing):
        raise FinetuneError(f"{source} does not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    vocab = vocab_beside(source)
    if not os.path.isfile(vocab):
        raise FinetuneError(f"{vocab} is missing; copy there the vocab.txt the model was pre-trained with")
    return config, weights, vocab, source


# ----------------------------------------------------------------------------- recipes

# Fine-tuning defaults by model width (every one can be overridden by its flag).
# small / base: the authors' scripts (FUZHIYI/TACO finetune_small.sh, finetune_base.sh: batch 32,
# 100 warm-up steps, lr 5e-5 for 4 epochs / 3e-5 for 6 epochs, max length 128) with the Hugging
# Face Trainer defaults they keep (weight decay 0, AdamW eps 1e-8, linear decay, clip 1.0).
# toy: ours for the narrow tiny / mini models on the toy pair task, which need larger steps.
FT_RECIPES = {
    "toy": dict(lr=5e-4, epochs=3, warmup=0.1, weight_decay=0.01),  # hidden size < 512
    "small": dict(lr=5e-5, epochs=4, warmup=100, weight_decay=0.0),  # 512 <= hidden < 768 (small, medium)
    "base": dict(lr=3e-5, epochs=6, warmup=100, weight_decay=0.0),  # hidden >= 768 (base, large)
}


def ft_recipe(config):
    """The FT_RECIPES entry for a model: by hidden size."""
    return FT_RECIPES["toy" if config.hidden_size < 512 else "small" if config.hidden_size < 768 else "base"]


# ----------------------------------------------------------------------------- training

def run_one(task, data, config, weights, args, lr, batch_size, epochs, seed):
    """Fine-tune a fresh copy of the pre-trained model -> (results.jsonl record, model)."""
    regression, world, device = task.labels is None, args.world, args.device
    torch.manual_seed(seed)  # the same head init on every rank
    raw = BertForSequenceClassification(config, num_labels=1 if regression else len(task.labels))
    raw.load_state_dict(weights, strict=False)
    raw.to(device)
    if not args.plain:
        fast.speed_up(raw)  # faster CPU dropout and attention: the same computation (fast.py)
    model = DDP(raw, device_ids=[device.index] if device.type == "cuda" else None) if world > 1 else raw
    optimizer = configure_optimizer(raw, lr, args.weight_decay)  # as in pre-training
    scaler = torch.amp.GradScaler(device.type, enabled=args.dtype == "fp16")
    train, n = data["train"], len(data["train"]["ids"])
    steps_per_epoch = math.ceil((n + (-n) % world) / batch_size)
    total = steps_per_epoch * epochs
    warmup = round(args.warmup * total) if args.warmup < 1 else int(args.warmup)
    order = torch.Generator().manual_seed(seed)  # the same order on every rank; each takes its share
    torch.manual_seed(seed + args.rank)  # dropout differs across ranks
    record = {"task": task.name, "model": args.source, "max_len": args.max_len, "warmup": args.warmup,
              "weight_decay": args.weight_decay, "lr": lr, "batch_size": batch_size, "epochs": epochs,
              "seed": seed, "per_epoch": []}
    t0, step = time.time(), 0
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(n, generator=order).numpy()
        perm = np.concatenate([perm, perm[:(-n) % world]])  # as DistributedSampler: no rank left empty
        name = f"{task.name} lr {lr:g} bs {batch_size} seed {seed} epoch {epoch}/{epochs}"
        bar = tqdm(range(steps_per_epoch), desc=name, disable=args.rank != 0, leave=False)
        for s in bar:
            idx = perm[s * batch_size:(s + 1) * batch_size][args.rank::world]
            x, mask, types = collate(train, idx, args.pad_id, device)
            y = torch.from_numpy(train["labels"][idx]).to(device)
            for group in optimizer.param_groups:
                group["lr"] = get_lr(step, lr, warmup, total)
            with args.autocast:
                logits = model(x, mask, types).float()  # the loss in fp32
            loss = F.mse_loss(logits[:, 0], y.float()) if regression else F.cross_entropy(logits, y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(raw.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step % 20 == 0 or s == steps_per_epoch - 1:  # .item() waits for the GPU: not every step
                value = loss.item()
                if not math.isfinite(value) and args.dtype != "fp16":  # fp16 overflows: the scaler's job
                    raise FinetuneError(f"{task.name}: loss is {value} at step {step}; lower --lr")
                bar.set_postfix(loss=f"{value:.4f}")
        if args.rank == 0:  # evaluation on rank 0 alone; the others wait at the next collective
            record["per_epoch"].append({"epoch": epoch, **evaluate(raw, task, data, args)})
            print(f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in record["per_epoch"][-1].items() if k != "epoch"))
    if args.rank == 0:
        record["metrics"] = {k: v for k, v in record["per_epoch"][-1].items() if k != "epoch"}
        record["best_epoch"] = max(record["per_epoch"], key=lambda e: e["main"])["epoch"]
        record["time_s"] = round(time.time() - t0, 1)
    return record, raw


@torch.no_grad()
def predict(model, split, regression, args):
    """Class ids (or regression values) for every example of a split, in its order."""
    model.eval()
    order = np.argsort([len(s) for s in split["ids"]], kind="stable")  # similar lengths: little padding
    out = np.zeros(len(order))
    for i in range(0, len(order), args.eval_batch_size):
        idx = order[i:i + args.eval_batch_size]
        with args.autocast:
            logits = model(*collate(split, idx, args.pad_id, args.device)).float()
        out[idx] = (logits[:, 0] if regression else logits.argmax(-1)).cpu().numpy()
    return out


def evaluate(model, task, data, args):
    """Every dev metric of the task (MNLI: acc_m and acc_mm), and the main score."""
    metrics = {}
    for suffix, dev, _ in task.evals:
        preds = predict(model, data[dev], task.labels is None, args)
        for m in task.metrics:
            metrics[f"{m}_{suffix}" if suffix else m] = METRICS[m](preds, data[dev]["labels"])
    metrics["main"] = float(np.mean(list(metrics.values())[:len(task.metrics)]))  # on the first dev set
    return metrics


def write_predictions(model, task, data, args):
    """GLUE server files `index<TAB>prediction`: label names, or STS-B scores within [0, 5]."""
    os.makedirs(os.path.join(args.out, "predictions"), exist_ok=True)
    for suffix, _, test in task.evals:
        preds = predict(model, data[test], task.labels is None, args)
        lines = ["index\tprediction"] + [f"{i}\t{min(max(p, 0.0), 5.0):.3f}" if task.labels is None
                                         else f"{i}\t{task.labels[int(p)]}" for i, p in zip(data[test]["index"], preds)]
        path = os.path.join(args.out, "predictions", f"{task.name}{'-' if suffix else ''}{suffix}.tsv")
        runs.atomic_write(path, lambda f: f.write(("\n".join(lines) + "\n").encode()))


# ----------------------------------------------------------------------------- summary

CONFIG = ("model", "max_len", "warmup", "lr", "batch_size", "epochs")  # a run's settings but its seed


def seed_stats(values):
    """Mean, median and sample standard deviation (0 for a single seed)."""
    return {"mean": float(np.mean(values)), "median": float(np.median(values)),
            "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0}


def summarize(records):
    """Per model, then per task: the configuration with the best mean dev main score, and its
    seeds' statistics. Models are never mixed: each keeps its own best configuration."""
    models = {}
    for model in dict.fromkeys(r["model"] for r in records):
        tasks = {}
        for name in [t.name for t in TASKS.values()]:
            configs = {}
            for r in records:  # a rerun of the same configuration and seed replaces the earlier one
                if r["model"] == model and r["task"] == name:
                    configs.setdefault(tuple(r[k] for k in CONFIG), {})[r["seed"]] = r
            if configs:
                best = max(configs.values(), key=lambda c: np.mean([r["metrics"]["main"] for r in c.values()]))
                chosen = list(best.values())
                tasks[name] = {"config": {k: chosen[0][k] for k in CONFIG}, "seeds": sorted(r["seed"] for r in chosen),
                               "metrics": {m: seed_stats([r["metrics"][m] for r in chosen]) for m in chosen[0]["metrics"]}}
        glue = [s["metrics"]["main"]["mean"] for name, s in tasks.items() if name != "toy"]
        models[model] = {"tasks": tasks, "glue_average": float(np.mean(glue)) if len(glue) > 1 else None}
    return {"split": "dev", "models": models}


def format_table(summary):
    """Per model: task rows, metric columns, cells `mean ± std (median)` over seeds, x100."""
    out = []
    for model, m in summary["models"].items():
        tasks = m["tasks"]
        cols = ["main"] + list(dict.fromkeys(c for s in tasks.values() for c in s["metrics"] if c != "main"))
        lines = [f"model {model}",
                 f"{'task (dev)':<11}{'lr/batch/epochs':<17}{'seeds':>5}  " + "".join(f"{c:<20}" for c in cols)]
        for name, s in tasks.items():
            config = "{lr:g}/{batch_size}/{epochs}".format(**s["config"])
            cells = [f"{100 * v['mean']:.1f} ± {100 * v['std']:.1f} ({100 * v['median']:.1f})"
                     if (v := s["metrics"].get(c)) else "" for c in cols]
            lines.append(f"{name:<11}{config:<17}{len(s['seeds']):>5}  " + "".join(f"{c:<20}" for c in cells))
        if m["glue_average"] is not None:
            lines.append(f"{'GLUE average':<33}  {100 * m['glue_average']:.1f}")
        out.append("\n".join(line.rstrip() for line in lines))
    return "\n\n".join(out)


# ----------------------------------------------------------------------------- command line

def get_args(argv=None):
    p = cli.ArgumentParser(description="Fine-tune BERT on GLUE: dev scores over seeds and a grid.",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    # task and data
    p.add_argument("--task", default="toy", help=f"one task: {', '.join(TASKS)} (GLUE's spelling, e.g. SST-2, works too)")
    p.add_argument("--tasks", default=None, help="comma-separated tasks, or 'all' (the 8 GLUE tasks); overrides --task")
    p.add_argument("--data_dir", default=None, help="local data instead of the hub: GLUE's TSVs (train, dev, test; "
                   "MNLI dev_matched, ...) or .csv/.json/.jsonl with the hub's column names; may hold "
                   "one folder per task named as in GLUE (CoLA, SST-2, ...)")
    p.add_argument("--cache_dir", default=None, help="cache of hub datasets and the toy corpus; None: their usual places")
    p.add_argument("--max_len", type=int_range(4, 512), default=128,
                   help="tokens per example, [CLS] and [SEP]s included")
    # model
    p.add_argument("--model", default="runs/taco", help="taco run directory (its newest checkpoint), checkpoint "
                   "file, or Hugging Face BERT directory (config.json, weights, vocab.txt)")
    # optimisation: the plural flags give a grid of comma-separated values
    p.add_argument("--lr", type=float_range(0, lo_open=True), default=None, help="peak learning rate; None: by model "
                   "size, 5e-5 (small, medium), 3e-5 (base, large), 5e-4 (tiny, mini): see FT_RECIPES")
    p.add_argument("--lrs", type=cli.list_of(float_range(0, lo_open=True)), default=None,
                   help="grid of learning rates, e.g. 1e-5,2e-5,3e-5,5e-5")
    p.add_argument("--batch_size", type=int_range(1), default=32, help="global batch size")
    p.add_argument("--batch_sizes", type=cli.list_of(int_range(1)), default=None,
                   help="grid of batch sizes, e.g. 16,32")
    p.add_argument("--epochs", type=int_range(1), default=None, help="training epochs; None: 4 (small, medium), "
                   "6 (base, large), 3 (tiny, mini)")
    p.add_argument("--epochs_list", type=cli.list_of(int_range(1)), default=None, help="grid of epoch counts, e.g. 4,6")
    p.add_argument("--seed", type=int_range(0, 2**32 - 1), default=1,
                   help="seed of the head's init, the data order and dropout")
    p.add_argument("--seeds", type=cli.list_of(int_range(0, 2**32 - 1)), default=None,
                   help="seeds for every configuration, e.g. 1,2,3,4,5")
    p.add_argument("--warmup", type=float_range(0), default=None, help="linear warm-up: a fraction of all steps if "
                   "< 1, else steps; None: 100 steps (small and up), 0.1 (tiny, mini)")
    p.add_argument("--weight_decay", type=float_range(0), default=None, help="AdamW weight decay on matrices; "
                   "None: 0 (small and up), 0.01 (tiny, mini)")
    p.add_argument("--eval_batch_size", type=int_range(1), default=128, help="batch size of dev and test predictions")
    # system
    p.add_argument("--device", default=None, help="cpu or cuda; None: cuda if available")
    p.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                   help="autocast precision; None: bf16 on capable CUDA, else fp32. fp16 adds a GradScaler")
    cli.add_threads_flag(p)
    p.add_argument("--plain", action="store_true", help="PyTorch's own dropout and attention instead of fast.py's "
                   "CPU equivalents (the same computation, other random draws)")
    # output
    p.add_argument("--out", default="runs/finetune", help="holds results.jsonl (appended), summary.json, predictions/")
    p.add_argument("--predict_test", action="store_true", help="write GLUE server files of each task's best run "
                   "(by dev main score, among this command's runs) to OUT/predictions/")
    return p.parse_args(argv)


def finetune(args):
    """Every task x configuration x seed; then summary.json and the table. Fills in args'
    run-time settings (rank, world, device, dtype, autocast, pad_id, source)."""
    cli.output_path(args.out, "--out", folder=True)  # before any work
    args.rank, _, args.world, args.device = setup_distributed(args.device)
    cli.set_threads(args.threads)
    names = GLUE if args.tasks == "all" else (args.tasks or args.task).split(",")
    for name in names:
        if name.lower().replace("-", "") not in TASKS:  # "SST-2" -> "sst2"
            raise FinetuneError(f"unknown task {name!r}; choose from {', '.join(TASKS)} or --tasks all")
    if args.warmup is not None and args.warmup >= 1 and args.warmup != int(args.warmup):
        raise FinetuneError(f"--warmup {args.warmup}: give a fraction below 1 or a whole number of steps")
    config, weights, vocab, args.source = load_pretrained(args.model)
    for k, v in ft_recipe(config).items():  # flags left unset take the recipe for this model's size
        if getattr(args, k) is None:
            setattr(args, k, v)
    grid = [(lr, bs, ep, seed) for lr in args.lrs or [args.lr] for bs in args.batch_sizes or [args.batch_size]
            for ep in args.epochs_list or [args.epochs] for seed in args.seeds or [args.seed]]
    if any(bs % args.world for _, bs, _, _ in grid):
        raise FinetuneError(f"batch sizes must be multiples of the number of processes, {args.world}")
    if not 4 <= args.max_len <= config.max_position_embeddings:
        raise FinetuneError(f"--max_len {args.max_len}: give 4 to {config.max_position_embeddings}")
    tok = load_tokenizer(vocab)
    if tok.vocab_size != config.vocab_size:
        raise FinetuneError(f"{vocab} has {tok.vocab_size} tokens but the model was pre-trained with "
                            f"{config.vocab_size}; use the vocab.txt that came with --model")
    args.pad_id = tok.pad_id
    args.dtype = args.dtype or ("bf16" if args.device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32")
    args.autocast = (contextlib.nullcontext() if args.dtype == "fp32" else torch.autocast(
        args.device.type, dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float16))
    results = os.path.join(args.out, "results.jsonl")
    if args.rank == 0:
        os.makedirs(args.out, exist_ok=True)
        print(f"fine-tuning {args.source}: {len(grid)} run(s) per task, {args.dtype} on {args.device.type} "
              f"x {args.world}")
    for task in [TASKS[name.lower().replace("-", "")] for name in names]:
        data_dir = args.data_dir or (os.path.join(toy_corpus(args.cache_dir), "glue") if task.name == "toy" else None)
        if data_dir and os.path.isdir(os.path.join(data_dir, task.name)):  # glue_data/CoLA, ...
            data_dir = os.path.join(data_dir, task.name)
        splits = ["train"] + [e[1] for e in task.evals] + [e[2] for e in task.evals if args.predict_test]
        data = {s: load_split(task, s, data_dir, args.cache_dir) for s in splits}  # all errors before any work
        data = {s: encode(tok, d, args.max_len, quiet=args.rank != 0) for s, d in data.items()}
        best = -math.inf
        for lr, bs, epochs, seed in grid:
            record, model = run_one(task, data, config, weights, args, lr, bs, epochs, seed)
            if args.rank == 0:
                runs.append_jsonl(results, record)
                if args.predict_test and record["metrics"]["main"] > best:
                    best = record["metrics"]["main"]
                    write_predictions(model, task, data, args)
    if args.rank == 0:
        summary = summarize(runs.read_jsonl(results))  # a line torn by a kill is dropped
        runs.write_json(os.path.join(args.out, "summary.json"), summary)
        print(format_table(summary))
    if args.world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def main(argv=None):
    """The command line; user mistakes end in one `error:` line (cli.errors, docs/robustness.md)."""
    with cli.errors():
        finetune(get_args(argv))


if __name__ == "__main__":
    main()
