"""What a fine-tuning task is and how its files are read: GLUE's eight tasks and the toy pair task (TASKS),
a task of your own described by its folder (folder_task), TSV / CSV / JSON(L) splits from disk or the hub
(load_split), and the metrics that score them."""
import contextlib
import csv
import json
import math
import os
import sys
from dataclasses import dataclass

import numpy as np

from engine import cli
from engine.evalsets import read_lines


FinetuneError = cli.UsageError  # a user's mistake (missing file, unknown task, ...): one `error:` line, exit 2


# ----------------------------------------------------------------------------- tasks

@dataclass(frozen=True)
class Task:
    name: str              # GLUE's: the data folder, the prediction file; lower case without '-': the hub's config
    text: tuple            # text columns on the hub and in CSV / JSON files (label: "label")
    labels: tuple | None   # label names in the hub's order; None = regression
    metrics: tuple         # their mean on the first dev set is the task's main score
    tsv: tuple = ()        # text columns, then the label column, of the original GLUE TSV; () = text, "label"
    evals: tuple = (("", "dev", "test"),)  # (metric suffix, dev split, test split)
    no_header: tuple = ()  # column names of train / dev files that have no header row

    def __post_init__(self):
        object.__setattr__(self, "tsv", self.tsv or (*self.text, "label"))


def task_key(name):
    """TASKS' key of a task name in any of GLUE's spellings (SST-2, sst2)."""
    return name.lower().replace("-", "")


BINARY, NLI, PAIR = ("0", "1"), ("entailment", "not_entailment"), ("sentence1", "sentence2")
TASKS = {task_key(t.name): t for t in (  # WNLI is left out, as in the paper
    Task("CoLA", ("sentence",), BINARY, ("mcc",), no_header=("source", "label", "original_label", "sentence")),
    Task("SST-2", ("sentence",), BINARY, ("acc",)),
    Task("MRPC", PAIR, BINARY, ("f1", "acc"), tsv=("#1 String", "#2 String", "Quality")),
    Task("STS-B", PAIR, None, ("pearson", "spearman"), tsv=(*PAIR, "score")),
    Task("QQP", ("question1", "question2"), BINARY, ("f1", "acc"), tsv=("question1", "question2", "is_duplicate")),
    Task("MNLI", ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"), ("acc",),
         tsv=(*PAIR, "gold_label"), evals=(("m", "dev_matched", "test_matched"),
                                            ("mm", "dev_mismatched", "test_mismatched"))),
    Task("QNLI", ("question", "sentence"), NLI, ("acc",)),
    Task("RTE", PAIR, NLI, ("acc",)),
    Task("toy", PAIR, BINARY, ("acc", "f1")),  # the toy corpus's pair task: one topic or two? (GLUE's layout)
)}
GLUE = [t for t in TASKS if t != "toy"]

# ----------------------------------------------------------------------------- metrics
# Degenerate inputs (one class, constant predictions) score 0 rather than NaN.

def accuracy(preds, labels):
    return float((np.asarray(preds) == np.asarray(labels)).mean()) if len(labels) else 0.0


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


def spearman(x, y):
    """Pearson of the ranks; tied values share the average of their ranks."""
    def ranks(v):
        _, group, count = np.unique(np.asarray(v, dtype=np.float64), return_inverse=True, return_counts=True)
        return (np.cumsum(count) - (count - 1) / 2)[group]
    return pearson(ranks(x), ranks(y))


METRICS = {"acc": accuracy, "f1": f1_score, "mcc": matthews_corrcoef, "pearson": pearson, "spearman": spearman}


def score(task, data, preds):
    """Every dev metric of the predictions {dev split: values} (MNLI: acc_m and acc_mm), and the main score."""
    metrics = {f"{m}_{suffix}" if suffix else m: METRICS[m](preds[dev], data[dev]["labels"])
               for suffix, dev, _ in task.evals for m in task.metrics}
    metrics["main"] = float(np.mean(list(metrics.values())[:len(task.metrics)]))  # on the first dev set
    return metrics


def chance(task, data):
    """The scores of the best constant answer, one label for every dev example: what a model that learnt nothing
    of the text scores (accuracy: the majority class's; MCC and the correlations: 0)."""
    return max((score(task, data, {dev: np.full(len(data[dev]["labels"]), a) for _, dev, _ in task.evals})
                for a in range(len(task.labels or [0]))), key=lambda metrics: metrics["main"])

# ----------------------------------------------------------------------------- data

SPLIT_FILES = (".tsv", ".csv", ".jsonl", ".json")


def split_file(folder, split):
    """FOLDER/split.tsv (or .csv, .jsonl, .json), or None."""
    return next((p for ext in SPLIT_FILES if os.path.exists(p := os.path.join(folder, split + ext))), None)


def read_table(path, names=()):
    """Columns {name: [values]} of a TSV (headerless when `names` are given), CSV or JSON lines file."""
    lines = [line for _, line in read_lines(path)]
    if path.endswith(".tsv"):  # GLUE quotes nothing: a '"' is text
        rows = [line.split("\t") for line in lines]
        header = list(names) or (rows.pop(0) if rows else [])
        good = [r for r in rows if len(r) == len(header)]
        if len(good) < len(rows):  # a few lines of GLUE's QQP train.tsv lack fields
            print(f"warning: skipped {len(rows) - len(good)} malformed rows of {path}", file=sys.stderr)
        return {h: [r[i] for r in good] for i, h in enumerate(header)}
    try:
        rows = (list(csv.DictReader(line + "\n" for line in lines)) if path.endswith(".csv") else
                [json.loads(line) for line in lines if line.strip()])
    except json.JSONDecodeError as err:
        raise FinetuneError(f"cannot parse {path}: {err}") from None
    return {k: [r.get(k) for r in rows] for k in (rows[0] if rows else {})}


def load_split(task, split, data_dir=None, cache_dir=None):
    """One split, from data_dir's files or the hub: {"a", "b" (or None), "labels" (None: test), "index"}."""
    if data_dir is None:
        from datasets import load_dataset  # a slow import, needed only for the hub
        config, hub_split = task_key(task.name), split.replace("dev", "validation")
        where = f"nyu-mll/glue {config} {hub_split}"
        try:
            cols = load_dataset("nyu-mll/glue", config, split=hub_split, cache_dir=cache_dir).to_dict()
        except Exception as err:  # offline, no such split, ...: one line, not a traceback
            raise FinetuneError(f"cannot load {where} from the hub ({err.__class__.__name__}); "
                                f"offline, pass --data_dir with the GLUE files") from err
    elif (where := split_file(data_dir, split)) is None:
        raise FinetuneError(f"{data_dir} has no {split}.tsv (nor .csv/.jsonl/.json); point --data_dir "
                            f"(or --task) at the folder of {task.name}'s files")
    else:
        cols = read_table(where, task.no_header if split in ("train", "dev") else ())
    return to_examples(task, cols, where, labelled=not split.startswith("test"))  # test labels are hidden


def read_examples(path, task):
    """Examples to label, from one file: the task's text columns of a TSV (with a header), CSV or JSON(L)
    file, or any other text file with one example per line, an empty one too (a pair: a<TAB>b)."""
    if path.endswith(SPLIT_FILES):
        return to_examples(task, read_table(path), path, labelled=False)
    rows = [line.split("\t", len(task.text) - 1) for _, line in read_lines(path)]
    if (bad := next((i for i, r in enumerate(rows) if len(r) != len(task.text)), None)) is not None:
        raise FinetuneError(f"{path} line {bad + 1}: {task.name} reads text pairs: write each line as text<TAB>text")
    return to_examples(task, dict(zip(task.text, zip(*rows))), path, labelled=False)


def to_examples(task, cols, where, labelled=True):
    """Columns of a file -> {"a": texts, "b": texts or None, "labels": array or None, "index": ids}."""
    if not any(cols.values()):
        raise FinetuneError(f"{where} is empty; {task.name} needs examples")
    # GLUE's TSV names first, then the hub's (which CSV / JSON files use too); STS-B: both share the text names
    fits = [c for c in ((task.tsv[:-1], task.tsv[-1]), (task.text, "label")) if set(c[0]) <= set(cols)]
    if not fits:
        raise FinetuneError(f"{where} lacks the text columns {', '.join(task.tsv[:-1])} "
                            f"(or {', '.join(task.text)}); it has {', '.join(cols)}")
    text, label = next((c for c in fits if c[1] in cols), fits[0])
    out = {"a": [str(s) for s in cols[text[0]]], "b": [str(s) for s in cols[text[1]]] if len(text) > 1 else None,
           "labels": None, "index": list(next((cols[c] for c in ("index", "idx", "id") if c in cols),
                                              range(len(cols[text[0]]))))}
    if labelled:
        if label not in cols:
            raise FinetuneError(f"{where} has no label column {label!r}; it has {', '.join(cols)}")
        out["labels"] = np.array([to_label(task, v, f"{where} row {i + 1}") for i, v in enumerate(cols[label])])
    return out


def to_label(task, value, where):
    """The training target: a finite number (a regression), or the class of a label's name."""
    if task.labels is None:
        with contextlib.suppress(TypeError, ValueError):
            if math.isfinite(y := float(value)):
                return y
        raise FinetuneError(f"{where}: label {value!r} is not a finite number")
    if str(value) in task.labels:
        return task.labels.index(str(value))
    if task in TASKS.values() and str(value).isdigit() and int(value) < len(task.labels):  # the hub's class numbers;
        return int(value)  # never a task of your own's: its `0` that labels.txt does not name is not class 0
    raise FinetuneError(f"{where}: label {value!r} is not one of {', '.join(task.labels)}")


# ----------------------------------------------------------------------------- a task of your own

def find_task(spec, text_columns=None, label_column="label", metrics=None):
    """--task: a name (GLUE's, any spelling: SST-2, sst2; toy) -> (Task, None); a folder -> (Task,
    the folder): GLUE's task if the folder is named as one (glue_data/SST-2), else folder_task."""
    name = task_key(os.path.basename(os.path.normpath(spec)))
    if os.path.isdir(spec):
        return TASKS.get(name) or folder_task(spec, text_columns, label_column, metrics), spec
    if name not in TASKS or os.sep in spec:
        raise FinetuneError(f"unknown task {spec!r}: choose from {', '.join(TASKS)}, --tasks all, or a folder "
                            f"holding train.tsv and dev.tsv (a task of your own)")
    return TASKS[name], None


def folder_task(folder, text_columns=None, label_column="label", metrics=None):
    """A task described by its folder: train and dev (or validation) splits with a header row, the label in
    `label_column`, the text in `text_columns` (default: the others but an id; one or two), the classes in labels.txt
    (none: a regression), scored by the mean of `metrics` (default: acc, or pearson and spearman)."""
    name, train = os.path.basename(os.path.normpath(folder)), split_file(folder, "train")
    dev = next((s for s in ("dev", "validation") if split_file(folder, s)), None)
    if train is None or dev is None:
        raise FinetuneError(f"task folder {folder} needs train.tsv and dev.tsv or validation.tsv (or .csv, .jsonl, "
                            f".json) with a header row")
    cols = read_table(train)
    if label_column not in cols:
        raise FinetuneError(f"{train} has no label column {label_column!r} (it has {', '.join(cols)}); "
                            f"pass --label_column")
    text = tuple(text_columns or [c for c in cols if c not in (label_column, "index", "idx", "id")])
    if not 1 <= len(text) <= 2 or not set(text) <= set(cols):
        raise FinetuneError(f"{train}: the text is one column or a pair, of {', '.join(cols)}; got "
                            f"{', '.join(text) or 'none'}: pass --text_columns A or A,B")
    labels_file, labels = os.path.join(folder, "labels.txt"), None
    if os.path.exists(labels_file):
        labels = tuple(dict.fromkeys(line.strip() for _, line in read_lines(labels_file) if line.strip()))
        if len(labels) < 2:
            raise FinetuneError(f"{labels_file}: a classification needs at least 2 labels, found {len(labels)}")
    else:
        print(f"note: {folder} has no labels.txt: {name} is a regression of its numbers (a classification lists "
              f"its labels there, one per line)", file=sys.stderr)
    metrics = tuple(metrics or (("acc",) if labels else ("pearson", "spearman")))
    if labels is None and not set(metrics) <= {"pearson", "spearman"}:
        raise FinetuneError(f"{name} is a regression (no labels.txt): score it by pearson, spearman, or list its "
                            f"labels in {labels_file}")
    return Task(name, text, labels, metrics, tsv=(*text, label_column), evals=(("", dev, "test"),))
