"""Fine-tune a pre-trained BERT (TACO, MLM or any BERT) on GLUE or a task of your own; report dev scores over seeds.

    python finetune.py                                     # after python taco.py: toy task, offline
    python finetune.py --task rte --model runs/taco        # one GLUE task, data from the hub
    python finetune.py --task mnli --data_dir glue_data/MNLI   # ... from the original GLUE TSV files
    python finetune.py --task rte --lrs 1e-5,2e-5,3e-5 --batch_sizes 16,32 --seeds 1,2,3,4,5   # a grid, 5 seeds
    python finetune.py --tasks all --predict_test          # GLUE's 8 tasks, + server files in OUT/predictions/
    torchrun --standalone --nproc_per_node=8 finetune.py --task mnli   # several GPUs
    python finetune.py --task data/reviews --label_column sentiment   # a task of your own: train, dev, labels.txt
    python finetune.py --predict new.txt --model runs/finetune/best/reviews   # -> runs/finetune/best/reviews-new.tsv

Each run (task x configuration x seed) is scored on dev after every epoch; its score is its last epoch's (the
epochs are a grid setting: picking the best epoch too would select on dev twice). A task's main score (CoLA MCC;
MRPC, QQP the mean of F1 and accuracy; STS-B of Pearson and Spearman; MNLI matched accuracy; toy accuracy and F1;
the others accuracy) picks its configuration. OUT: results.jsonl, summary.json (mean, std, median over seeds),
best/TASK (the best classifier, Hugging Face format), and one table comparing the models fine-tuned into OUT with
each task's chance level. The engineering: engine/finetuning.py (flags, recipes, outputs, the table),
engine/tasks.py (tasks, their files, metrics).
"""
import math
import os
import sys
import time

from engine import checkpoints, cli, fast, finetuning, folders, hf  # first, before torch loads (engine/__init__.py)
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from data import load_tokenizer
from engine.finetuning import say
from engine.runs import setup_distributed
from engine.tasks import GLUE, TASKS, FinetuneError, chance, find_task, load_split, read_examples, score
from engine.toy import toy_corpus
from model import BertConfig, BertForSequenceClassification, load_hf_state_dict
from taco import configure_optimizer, get_lr


# ----------------------------------------------------------------------------- model inputs

def encode(tok, split, max_len, quiet=True):
    """Adds the ids of [CLS] a [SEP] (b [SEP]) and the length of segment A to a split."""
    ids, first = [], []
    for i in tqdm(range(len(split["a"])), desc="tokenize", disable=quiet or not sys.stderr.isatty(), leave=False):
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
    """A taco run directory (its newest checkpoint), a checkpoint file, or a Hugging Face directory ->
    (config, encoder weights under our names, vocab.txt path, the file or folder used); the task head is new."""
    try:
        source, is_hf = checkpoints.find_weights(spec)
        if is_hf:
            config = BertConfig.from_dict(checkpoints.read_json(os.path.join(spec, "config.json")))
            model = BertForSequenceClassification(config)
            fresh = load_hf_state_dict(model, {k: v for k, v in hf.read_weights(spec).items()
                                               if not k.startswith("classifier.")})
            weights = {k: v for k, v in model.state_dict().items() if k not in fresh}
        else:  # taco: the encoder of BertForPreTraining, and the pooler an --init brought
            state = checkpoints.load_checkpoint(source, ("model", "model_config"))
            config = BertConfig.from_dict(state["model_config"])
            weights = {k: v for k, v in state["model"].items() if k.startswith(("bert.", "pooler."))}
        BertForSequenceClassification(config).load_state_dict(weights, strict=False)
    except cli.UsageError as err:  # no such model, not a taco checkpoint
        raise FinetuneError(f"--model {err}") from err
    except Exception as err:  # a foreign file, wrong shapes: which file, in one line
        raise FinetuneError(f"cannot load --model {spec}: {cli.reason(err)}") from err
    vocab = checkpoints.vocab_beside(source)
    if not os.path.isfile(vocab):
        raise FinetuneError(f"{vocab} is missing; copy there the vocab.txt the model was pre-trained with")
    return config, weights, vocab, source


# ----------------------------------------------------------------------------- training

def run_one(task, data, config, weights, args, lr, batch_size, epochs, seed):
    """Fine-tune a fresh copy of the pre-trained model -> (results.jsonl record, model)."""
    regression, world, device = task.labels is None, args.world, args.device
    torch.manual_seed(seed)  # the same head init on every rank
    raw = BertForSequenceClassification(config, num_labels=1 if regression else len(task.labels)).to(device)
    raw.load_state_dict(weights, strict=False)
    if not args.plain:
        fast.speed_up(raw)  # faster CPU dropout and attention: the same computation (engine/fast.py)
    model = DDP(raw, device_ids=[device.index] if device.type == "cuda" else None) if world > 1 else raw
    optimizer = configure_optimizer(raw, lr, args.weight_decay)  # as in pre-training
    scaler = torch.amp.GradScaler(device.type, enabled=args.dtype == "fp16")
    train, n = data["train"], len(data["train"]["ids"])
    steps_per_epoch = math.ceil((n + (-n) % world) / batch_size)
    total = steps_per_epoch * epochs
    warmup = finetuning.warmup_steps(args.warmup, total)
    if warmup > total and args.rank == 0:  # --warmup 100 on a small task of your own
        print(f"warning: {task.name}: warm-up {warmup} steps > the {total} steps of training: the lr never reaches "
              f"{lr:g}; pass a fraction, e.g. --warmup 0.1", file=sys.stderr)
    order = torch.Generator().manual_seed(seed)  # the same order on every rank; each takes its share
    torch.manual_seed(seed + args.rank)  # dropout differs across ranks
    record = {"task": task.name, "model": args.source, "max_len": args.max_len, "warmup": args.warmup,
              "warmup_steps": warmup, "weight_decay": args.weight_decay, "lr": lr, "batch_size": batch_size,
              "epochs": epochs, "seed": seed, "chance": chance(task, data), "per_epoch": []}
    if args.rank == 0:
        say(f"{task.name} lr {lr:g} bs {batch_size} seed {seed}: {total} steps, warm-up {warmup}")
    t0, step = time.time(), 0
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(n, generator=order).numpy()
        perm = np.concatenate([perm, perm[:(-n) % world]])  # as DistributedSampler: no rank left empty
        name = f"{task.name} lr {lr:g} bs {batch_size} seed {seed} epoch {epoch}/{epochs}"
        bar = tqdm(range(steps_per_epoch), desc=name, leave=False,  # off a terminal: the epoch's line alone
                   disable=args.rank != 0 or not sys.stderr.isatty())
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
            scores = evaluate(raw, task, data, args)
            record["per_epoch"].append({"epoch": epoch, **scores})
            say(f"{name}: loss {value:.4f}, " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    if args.rank == 0:  # the score is the last epoch's; the best epoch is recorded for reference
        record.update(metrics=scores, best_epoch=max(record["per_epoch"], key=lambda e: e["main"])["epoch"],
                      time_s=round(time.time() - t0, 1))
    return record, raw


@torch.no_grad()
def predict(model, split, regression, args):
    """-> class ids (or regression values) of a split's examples, in order, and the softmax probability of each."""
    model.eval()
    order = np.argsort([len(s) for s in split["ids"]], kind="stable")  # similar lengths: little padding
    out, prob = np.zeros(len(order)), np.ones(len(order))
    for i in range(0, len(order), args.eval_batch_size):
        idx = order[i:i + args.eval_batch_size]
        with args.autocast:
            logits = model(*collate(split, idx, args.pad_id, args.device)).float()
        out[idx] = (logits[:, 0] if regression else logits.argmax(-1)).cpu().numpy()
        if not regression:
            prob[idx] = logits.softmax(-1).max(-1).values.cpu().numpy()
    return out, prob


def evaluate(model, task, data, args):
    """Every dev metric of the task (MNLI: acc_m and acc_mm), and the main score."""
    preds = {dev: predict(model, data[dev], task.labels is None, args)[0] for _, dev, _ in task.evals}
    if not all(np.isfinite(p).all() for p in preds.values()):  # a diverged model: no score rather than a NaN one
        raise FinetuneError(f"{task.name}: the model's dev predictions are not finite (diverged); lower --lr")
    return score(task, data, preds)


def write_predictions(model, task, data, args):
    """GLUE server files `index<TAB>prediction`: label names, or STS-B scores within [0, 5]."""
    for suffix, _, test in task.evals:
        preds, _ = predict(model, data[test], task.labels is None, args)
        rows = [f"{i}\t{min(max(p, 0.0), 5.0):.3f}" if task.labels is None else f"{i}\t{task.labels[int(p)]}"
                for i, p in zip(data[test]["index"], preds)]
        path = os.path.join(args.out, "predictions", f"{task.name}{'-' if suffix else ''}{suffix}.tsv")
        finetuning.write_tsv(path, "index\tprediction", rows)


def predict_file(args):
    """--predict FILE --model FOLDER (save_best's): a label and probability per line (or row) of FILE beside its text ->
    FOLDER-<FILE's name>.tsv, or with --out OUT/predict/<FILE's name>.tsv (never OUT/predictions'); --force replaces."""
    task, max_len = finetuning.saved_task(args.model)
    data = read_examples(args.predict, task)  # before the model: a bad file fails fast
    name = os.path.splitext(os.path.basename(args.predict))[0] + ".tsv"
    if args.out:
        cli.output_path(args.out, "--out", folder=True)
    out = os.path.join(args.out, "predict", name) if args.out else f"{os.path.normpath(args.model)}-{name}"
    if os.path.exists(out) and not args.force:
        raise FinetuneError(f"{out} holds the predictions of an earlier --predict; pass --force to replace them")
    args.device = cli.device(args.device)
    args.dtype, args.autocast = cli.precision(args.device, "fp32")  # predictions in full precision
    cli.set_threads(args.threads)
    model = BertForSequenceClassification.from_pretrained(args.model, num_labels=len(task.labels or "x"))
    tok, max_len = load_tokenizer(args.model), args.max_len or max_len  # its vocab.txt, lower case as in training
    args.pad_id = tok.pad_id
    finetuning.check_fit(tok, max_len, model.config, args.model)
    preds, prob = predict(model.to(args.device), encode(tok, data, max_len), task.labels is None, args)
    texts = zip(*(data[k] for k in "ab" if data[k] is not None))  # written as they were read, tabs aside
    rows = [f"{i}\t" + (f"{p:.4f}" if task.labels is None else f"{task.labels[int(p)]}\t{q:.4f}")
            + "".join("\t" + t.replace("\t", " ").replace("\n", " ") for t in text)
            for i, p, q, text in zip(data["index"], preds, prob, texts)]
    header = "index\tprediction" + "\tprobability" * (task.labels is not None) + "".join("\t" + c for c in task.text)
    finetuning.write_tsv(out, header, rows)
    say(f"{task.name}: {len(preds)} predictions of {args.model} for {args.predict} in {out}")


# ----------------------------------------------------------------------------- command line

def finetune(args):
    """Every task x configuration x seed; then summary.json and the table. Fills in args'
    run-time settings (rank, world, device, dtype, autocast, pad_id, source)."""
    if args.predict:
        return predict_file(args)
    args.out = args.out or "runs/finetune"
    cli.output_path(args.out, "--out", folder=True)  # before any work
    args.rank, _, args.world, args.device = setup_distributed(args.device)
    cli.set_threads(args.threads)
    tasks = [find_task(spec, args.text_columns, args.label_column, args.metrics)  # [(Task, its folder or None)]
             for spec in (GLUE if args.task == "all" else args.task.split(","))]
    config, weights, vocab, args.source = load_pretrained(args.model)
    origin = "huggingface" if os.path.isdir(args.source) else checkpoints.trained_with(args.source)[1]["recipe"]
    recipe, why = finetuning.choose_ft_recipe(config, origin)
    vars(args).update({k: v for k, v in finetuning.FT_RECIPES[recipe].items() if getattr(args, k) is None})
    args.max_len = args.max_len or 128
    grid = [(lr, bs, ep, seed) for lr in args.lrs or [args.lr] for bs in args.batch_sizes or [args.batch_size]
            for ep in args.epochs_list or [args.epochs] for seed in args.seeds or [args.seed]]
    for task, _ in tasks:  # OUT/best/TASK may be replaced: checked now, not after the training
        folders.check(os.path.join(args.out, "best", task.name), "finetune.py", True, {"--model": args.model})
    tok = load_tokenizer(vocab)
    finetuning.check_fit(tok, args.max_len, config, args.model)
    args.pad_id = tok.pad_id
    args.dtype, args.autocast = cli.precision(args.device, args.dtype)  # bf16 on capable CUDA, else fp32
    results = os.path.join(args.out, "results.jsonl")
    if args.rank == 0:
        warmup = "10% of the steps, at most 100" if args.warmup is None else f"{args.warmup:g}"
        say(f"fine-tuning {args.source}: recipe {recipe} ({why}): lr {args.lr:g}, epochs {args.epochs}, warm-up "
            f"{warmup}, weight decay {args.weight_decay:g} | {len(grid)} run(s) per task | {args.dtype} on "
            f"{args.device.type} x {args.world}")
    for task, folder in tasks:
        data_dir = folder or args.data_dir or (os.path.join(toy_corpus(args.cache_dir), "glue") if task is TASKS["toy"]
                                               else None)
        if data_dir and os.path.isdir(os.path.join(data_dir, task.name)):  # glue_data/CoLA, ...
            data_dir = os.path.join(data_dir, task.name)
        splits = ["train"] + [e[1] for e in task.evals] + [e[2] for e in task.evals if args.predict_test]
        data = {s: load_split(task, s, data_dir, args.cache_dir) for s in splits}  # all errors before any work
        data = {s: encode(tok, d, args.max_len, quiet=args.rank != 0) for s, d in data.items()}
        best = -math.inf
        for lr, bs, epochs, seed in grid:
            record, model = run_one(task, data, config, weights, args, lr, bs, epochs, seed)
            if args.rank == 0:
                os.makedirs(args.out, exist_ok=True)  # only now: a mistake found before leaves no folder
                checkpoints.append_jsonl(results, record)
                finetuning.save_best(model, task, record, tok, args)
                if args.predict_test and record["metrics"]["main"] > best:
                    best = record["metrics"]["main"]
                    write_predictions(model, task, data, args)
    if args.rank == 0:
        summary = finetuning.summarize(checkpoints.read_jsonl(results))  # a line torn by a kill: dropped, warned
        checkpoints.write_json(os.path.join(args.out, "summary.json"), summary)
        say(finetuning.format_table(summary))
    if args.world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def main(argv=None):
    """The command line; user mistakes end in one `error:` line (cli.errors, docs/robustness.md)."""
    with cli.errors():
        finetune(finetuning.get_args(argv))


if __name__ == "__main__":
    main()
