"""Tests of finetune.py: metrics, GLUE file layouts, training on a learnable toy rule, errors."""
import json
import math
import os
import random
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from data import load_tokenizer
from finetune import (TASKS, FinetuneError, accuracy, collate, encode, f1_score, format_table, load_split, main,
                      matthews_corrcoef, pearson, spearman, summarize)
from model import BertConfig, BertForPreTraining

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the a cat dog sat ran on mat big small red blue fish bird tree sky good".split()
FILLER = WORDS[:-1]  # every word but the keyword "good"


# ----------------------------------------------------------------------------- metrics

def test_accuracy_and_f1():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    assert f1_score([1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(4 / 6)  # tp 2, fp 1, fn 1
    assert f1_score([0, 0, 0], [1, 0, 1]) == 0.0  # no positive predicted: 0, not NaN


def test_matthews_corrcoef():
    # tp 2, fp 1, tn 2, fn 0: (2*2 - 1*0) / sqrt(3 * 2 * 3 * 2)
    assert matthews_corrcoef([1, 1, 0, 0, 1], [1, 0, 0, 0, 1]) == pytest.approx(4 / 6)
    assert matthews_corrcoef([1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(-1 / 3)
    assert matthews_corrcoef([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert matthews_corrcoef([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0  # one predicted class
    assert matthews_corrcoef([0, 1], [1, 1]) == 0.0  # one true class


def test_pearson_and_spearman():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert pearson([0.1, 0.1, 0.1], [1, 2, 3]) == 0.0  # constant predictions
    assert spearman([1, 2, 3], [1, 10, 100]) == pytest.approx(1.0)
    # ties share average ranks: x -> 1, 2.5, 2.5, 4 (scipy.stats.spearmanr gives the same)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([2, 2, 2], [1, 2, 3]) == 0.0
    assert not math.isnan(pearson([], []))


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models train fastest on one thread; two threads spin-waiting on a busy 2-core
    machine made these tests 20x slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def write_tsv(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for row in ([header] if header else []) + rows:
            f.write("\t".join(map(str, row)) + "\n")


def sentence(rng, keyword=False, n=6):
    words = [rng.choice(FILLER) for _ in range(n)]
    if keyword:
        words[rng.randrange(n)] = "good"
    return " ".join(words)


def keyword_rows(n, seed):
    """(a, b, label): label 1 iff sentence a holds the keyword 'good'."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        y = rng.random() < 0.5
        rows.append((sentence(rng, y), sentence(rng), int(y)))
    return rows


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A random tiny "pre-trained" model: a taco run directory, a single checkpoint file, and a
    checkpoint whose vocabulary size does not match the vocab.txt beside it."""
    from runs import save_checkpoint  # writes the manifest that marks a checkpoint valid
    root = tmp_path_factory.mktemp("models")
    vocab = SPECIALS + WORDS
    out = {}
    for name, vocab_size in (("run", len(vocab)), ("mismatch", len(vocab) + 3)):
        (root / name).mkdir()
        (root / name / "vocab.txt").write_text("\n".join(vocab) + "\n")
        cfg = BertConfig.from_size("tiny", vocab_size=vocab_size)
        torch.manual_seed(0)
        state = {"model": BertForPreTraining(cfg).state_dict(), "model_config": asdict(cfg), "step": 10}
        out[name] = str(root / name / "ckpt_00000010.pt")
        torch.save(state, out[name])
        if name == "run":
            save_checkpoint(str(root / name), {**state, "step": 20}, keep_last=2)
    out["dir"] = str(root / "run")
    return out


def toy_dir(root, n_train=400, n_dev=100, n_test=30):
    d = os.path.join(root, "toy")
    write_tsv(f"{d}/train.tsv", ["sentence1", "sentence2", "label"], keyword_rows(n_train, 1))
    write_tsv(f"{d}/dev.tsv", ["sentence1", "sentence2", "label"], keyword_rows(n_dev, 2))
    write_tsv(f"{d}/test.tsv", ["index", "sentence1", "sentence2"],
              [(i, a, b) for i, (a, b, _) in enumerate(keyword_rows(n_test, 3))])
    return d


def run(args):
    main(["--device", "cpu", "--max_len", "32", "--eval_batch_size", "64"] + args)


def results(out):
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f]


# ----------------------------------------------------------------------------- training

def test_toy_keyword_task_learns(models, tmp_path):
    out = str(tmp_path / "out")
    run(["--model", models["dir"], "--task", "toy", "--data_dir", toy_dir(tmp_path), "--epochs", "2",
         "--lr", "1e-3", "--batch_size", "16", "--out", out, "--predict_test"])
    (r,) = results(out)
    assert r["model"].endswith("ckpt_00000020.pt")  # the newest checkpoint of the run directory
    assert [e["epoch"] for e in r["per_epoch"]] == [1, 2] and r["best_epoch"] in (1, 2)
    assert r["metrics"]["acc"] >= 0.8, r
    assert r["metrics"]["main"] == pytest.approx((r["metrics"]["acc"] + r["metrics"]["f1"]) / 2)
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["split"] == "dev" and summary["models"][r["model"]]["tasks"]["toy"]["seeds"] == [1]
    lines = open(os.path.join(out, "predictions", "toy.tsv")).read().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 31
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}


def test_hugging_face_directory(models, tmp_path):
    hf = str(tmp_path / "hf")
    cfg = BertConfig.from_size("tiny", vocab_size=len(SPECIALS + WORDS))
    BertForPreTraining(cfg).save_pretrained(hf, vocab_file=os.path.join(models["dir"], "vocab.txt"))
    out = str(tmp_path / "out")
    run(["--model", hf, "--data_dir", toy_dir(tmp_path, 40, 20, 5), "--epochs", "1", "--out", out])
    assert results(out)[0]["model"] == hf


def test_stsb_regression(models, tmp_path):
    d, rng = str(tmp_path / "STS-B"), random.Random(0)
    header = "index genre filename year old_index source1 source2 sentence1 sentence2 score".split()
    def rows(n):
        out = []
        for i in range(n):
            y = rng.random() < 0.5
            out.append([i, "main-captions", "MSRvid", "2012test", i, "none", "none",
                        sentence(rng, y), sentence(rng), f"{(4.0 if y else 1.0) + rng.random():.3f}"])
        return out
    write_tsv(f"{d}/train.tsv", header, rows(200))
    write_tsv(f"{d}/dev.tsv", header, rows(60))
    write_tsv(f"{d}/test.tsv", header[:-1], [r[:-1] for r in rows(20)])
    out = str(tmp_path / "out")
    run(["--model", models["run"], "--task", "STS-B", "--data_dir", str(tmp_path), "--epochs", "1",
         "--lr", "1e-3", "--batch_size", "16", "--out", out, "--predict_test"])
    (r,) = results(out)
    assert set(r["metrics"]) == {"pearson", "spearman", "main"}
    assert -1 <= r["metrics"]["pearson"] <= 1 and r["metrics"]["pearson"] != 0
    lines = open(os.path.join(out, "predictions", "STS-B.tsv")).read().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 21
    assert all(0 <= float(line.split("\t")[1]) <= 5 for line in lines[1:])


def test_mnli_both_dev_sets_and_prediction_files(models, tmp_path):
    d, rng = str(tmp_path / "MNLI"), random.Random(0)
    names = ["entailment", "neutral", "contradiction"]
    head = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse "
            "sentence1_parse sentence2_parse sentence1 sentence2").split()
    def rows(n, extra):
        out = []
        for i in range(n):
            y = rng.randrange(3)
            a = sentence(rng, y == 0)
            out.append([i, i, f"{i}e", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)", a, sentence(rng)]
                       + [names[y]] * extra)
        return out
    write_tsv(f"{d}/train.tsv", head + ["label1", "gold_label"], rows(60, 2))
    for s in ("matched", "mismatched"):
        write_tsv(f"{d}/dev_{s}.tsv", head + [f"label{i}" for i in range(1, 6)] + ["gold_label"], rows(20, 6))
        write_tsv(f"{d}/test_{s}.tsv", head, rows(15 if s == "matched" else 12, 0))
    out = str(tmp_path / "out")
    run(["--model", models["run"], "--task", "mnli", "--data_dir", d, "--epochs", "1",
         "--batch_size", "16", "--out", out, "--predict_test"])
    (r,) = results(out)
    assert set(r["metrics"]) == {"acc_m", "acc_mm", "main"} and r["metrics"]["main"] == r["metrics"]["acc_m"]
    for name, n in (("MNLI-m.tsv", 15), ("MNLI-mm.tsv", 12)):
        lines = open(os.path.join(out, "predictions", name)).read().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == n + 1
        assert {line.split("\t")[1] for line in lines[1:]} <= set(names)


def test_cola_headerless_files_and_grid(models, tmp_path):
    """CoLA's train/dev have no header; two seeds x two lrs give a summary at the best lr."""
    d, rng = str(tmp_path / "CoLA"), random.Random(0)
    rows = lambda n: [("gj04", int(y), "" if y else "*", sentence(rng, y))
                      for y in (rng.random() < 0.5 for _ in range(n))]
    write_tsv(f"{d}/train.tsv", None, rows(40))
    write_tsv(f"{d}/dev.tsv", None, rows(20))
    write_tsv(f"{d}/test.tsv", ["index", "sentence"], [(i, sentence(rng)) for i in range(9)])
    out = str(tmp_path / "out")
    run(["--model", models["run"], "--tasks", "cola", "--data_dir", str(tmp_path), "--epochs", "1",
         "--lrs", "1e-4,1e-3", "--seeds", "1,2", "--batch_size", "8", "--out", out, "--predict_test"])
    assert len(results(out)) == 4 and {"mcc", "main"} == set(results(out)[0]["metrics"])
    (model,) = json.load(open(os.path.join(out, "summary.json")))["models"].values()
    s = model["tasks"]["CoLA"]
    assert s["seeds"] == [1, 2] and set(s["metrics"]["mcc"]) == {"mean", "median", "std"}
    lines = open(os.path.join(out, "predictions", "CoLA.tsv")).read().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 10


def test_summary_table_and_glue_average():
    recs = []
    for task, metric, lr, seed, v in [("RTE", "acc", 2e-5, 1, 0.6), ("RTE", "acc", 2e-5, 2, 0.7),
                                      ("RTE", "acc", 3e-5, 1, 0.5), ("SST-2", "acc", 2e-5, 1, 0.9)]:
        recs.append({"task": task, "model": "m", "max_len": 128, "warmup": 0.1, "lr": lr, "batch_size": 32,
                     "epochs": 3, "seed": seed, "metrics": {metric: v, "main": v}})
    s = summarize(recs)["models"]["m"]
    assert s["tasks"]["RTE"]["config"]["lr"] == 2e-5 and s["tasks"]["RTE"]["seeds"] == [1, 2]
    assert s["tasks"]["RTE"]["metrics"]["acc"]["mean"] == pytest.approx(0.65)
    assert s["tasks"]["RTE"]["metrics"]["acc"]["std"] == pytest.approx(0.0707107, rel=1e-4)
    assert s["glue_average"] == pytest.approx((0.65 + 0.9) / 2)
    table = format_table(summarize(recs))
    assert table.splitlines()[0] == "model m" and "dev" in table.splitlines()[1]
    assert "65.0 ± 7.1 (65.0)" in table and "GLUE average" in table
    assert summarize(recs[-1:])["models"]["m"]["glue_average"] is None  # one GLUE task: no average


def test_summary_keeps_models_apart():
    """A weak model's best run is never reported as a strong model's, nor averaged with it."""
    recs = [{"task": "RTE", "model": model, "max_len": 128, "warmup": 100, "lr": lr, "batch_size": 32, "epochs": 4,
             "seed": 1, "metrics": {"acc": v, "main": v}}
            for model, lr, v in [("runs/taco", 5e-5, 0.7), ("runs/mlm", 3e-5, 0.6), ("runs/mlm", 5e-5, 0.55)]]
    s = summarize(recs)["models"]
    assert s["runs/taco"]["tasks"]["RTE"]["metrics"]["acc"]["mean"] == pytest.approx(0.7)
    assert s["runs/mlm"]["tasks"]["RTE"]["metrics"]["acc"]["mean"] == pytest.approx(0.6)
    assert s["runs/mlm"]["tasks"]["RTE"]["config"]["lr"] == 3e-5
    table = format_table(summarize(recs))
    assert table.index("model runs/taco") < table.index("70.0") < table.index("model runs/mlm") < table.index("60.0")


def test_two_models_fine_tuned_into_one_out(models, tmp_path):
    """Fine-tuning one model and then another into the same --out: the summary names both and
    gives each its own runs, settings and scores."""
    out, data = str(tmp_path / "out"), toy_dir(tmp_path, n_train=48, n_dev=24, n_test=4)
    common = ["--task", "toy", "--data_dir", data, "--epochs", "1", "--batch_size", "16", "--out", out]
    run(["--model", models["run"], "--lr", "1e-3"] + common)
    run(["--model", models["dir"], "--lr", "1e-4"] + common)
    recs = results(out)
    summary = json.load(open(os.path.join(out, "summary.json")))["models"]
    assert list(summary) == [r["model"] for r in recs] and len(summary) == 2  # ckpt 10, then the run's newest (20)
    for r in recs:
        toy = summary[r["model"]]["tasks"]["toy"]
        assert toy["config"]["lr"] == r["lr"] and toy["metrics"]["main"]["mean"] == pytest.approx(r["metrics"]["main"])


def test_fine_tuning_recipe_by_model_size():
    """The authors' scripts for small (5e-5, 4 epochs) and base (3e-5, 6 epochs), batch 32, 100 warm-up
    steps, no weight decay; the narrow toy models keep their own."""
    from finetune import FT_RECIPES, ft_recipe
    assert ft_recipe(BertConfig.from_size("small")) == ft_recipe(BertConfig.from_size("medium")) == \
        dict(lr=5e-5, epochs=4, warmup=100, weight_decay=0.0)
    assert ft_recipe(BertConfig.from_size("base")) == ft_recipe(BertConfig.from_size("large")) == \
        dict(lr=3e-5, epochs=6, warmup=100, weight_decay=0.0)
    assert ft_recipe(BertConfig.from_size("tiny")) is ft_recipe(BertConfig.from_size("mini")) is FT_RECIPES["toy"]


# ----------------------------------------------------------------------------- data details

def test_pair_encoding_truncates_longest_first(models):
    tok = load_tokenizer(os.path.join(os.path.dirname(models["run"]), "vocab.txt"))
    split = {"a": ["cat " * 10, "cat dog sat on mat"], "b": ["dog dog dog", "red blue big small fish"], "labels": None}
    enc = encode(tok, split, 10)
    # 10 + 3 and 5 + 5 tokens into 10 - 3 = 7: trim the longer side, b first on a tie
    assert enc["ids"][0].tolist() == [tok.cls_id] + tok.encode("cat " * 4) + [tok.sep_id] \
        + tok.encode("dog dog dog") + [tok.sep_id]
    assert enc["ids"][1].tolist() == [tok.cls_id, *tok.encode("cat dog sat on"), tok.sep_id,
                                      *tok.encode("red blue big"), tok.sep_id]
    x, mask, types = collate(enc, [0, 1], tok.pad_id, "cpu")
    assert types.tolist() == [[0] * 6 + [1] * 4] * 2 and mask.all()
    enc = encode(tok, {"a": ["cat dog", "cat"], "b": None, "labels": None}, 10)
    x, mask, types = collate(enc, [0, 1], tok.pad_id, "cpu")  # padded to the longest: 4
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]] and x[1, 3] == tok.pad_id and not types.any()


def test_tsv_quotes_are_text(tmp_path):
    rows = [('He said "hi', 1), ("a plain one", 0), ('"quoted" start', 1), ("it's 5\" long", 0)]
    write_tsv(str(tmp_path / "train.tsv"), ["sentence", "label"], rows)
    split = load_split(TASKS["sst2"], "train", str(tmp_path))
    assert split["a"] == [r[0] for r in rows] and split["labels"].tolist() == [1, 0, 1, 0]


def test_hub_columns(monkeypatch):
    """The hub's column names, integer labels and split names (datasets.load_dataset faked)."""
    import datasets
    calls = []
    def fake_load_dataset(path, name, split, cache_dir=None):
        calls.append((path, name, split))
        label = [-1, -1] if split.startswith("test") else [2, 0]
        return datasets.Dataset.from_dict({"premise": ["p1", "p2"], "hypothesis": ["h1", "h2"],
                                           "label": label, "idx": [7, 8]})
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    dev = load_split(TASKS["mnli"], "dev_mismatched")
    assert calls[-1] == ("nyu-mll/glue", "mnli", "validation_mismatched")
    assert dev["a"] == ["p1", "p2"] and dev["b"] == ["h1", "h2"] and dev["labels"].tolist() == [2, 0]
    test = load_split(TASKS["mnli"], "test_matched")
    assert calls[-1][2] == "test_matched" and test["labels"] is None and test["index"] == [7, 8]


def test_hub_offline_is_one_line_exit_2(models, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "finetune.py", "--task", "rte", "--model", models["run"], "--device",
                           "cpu", "--out", str(tmp_path / "out")], cwd=os.path.dirname(os.path.abspath(__file__)),
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: cannot load nyu-mll/glue rte train")


def test_csv_and_jsonl_files(tmp_path):
    (tmp_path / "train.csv").write_text('sentence1,sentence2,label\n"a, b",c,entailment\nd,e,not_entailment\n')
    (tmp_path / "dev.jsonl").write_text('{"sentence1": "x", "sentence2": "y", "label": 1}\n'
                                        '{"sentence1": "z", "sentence2": "w", "label": 0}\n')
    train = load_split(TASKS["rte"], "train", str(tmp_path))
    assert train["a"] == ["a, b", "d"] and train["labels"].tolist() == [0, 1]
    assert load_split(TASKS["rte"], "dev", str(tmp_path))["labels"].tolist() == [1, 0]


def test_data_files_with_a_trailing_tab_or_foreign_json(tmp_path, capsys):
    """A tab ending every row is no column; rows that fit no header, or JSON that is not one
    object per example, are explained in one line (and a skipped row is a warning on stderr)."""
    rows = [("a b", "c", 1), ("d", "e f", 0)]
    with open(tmp_path / "train.tsv", "w") as f:
        f.write("sentence1\tsentence2\tlabel\n" + "".join("\t".join(map(str, r)) + "\t\n" for r in rows))
    train = load_split(TASKS["rte"], "train", str(tmp_path))
    assert train["a"] == ["a b", "d"] and train["labels"].tolist() == [1, 0]
    with open(tmp_path / "dev.tsv", "w") as f:
        f.write("sentence1\tsentence2\tlabel\nx\ty\t1\nonly one field\n")
    assert len(load_split(TASKS["rte"], "dev", str(tmp_path))["a"]) == 1
    assert "warning: skipped 1 malformed rows" in capsys.readouterr().err
    with open(tmp_path / "dev.tsv", "w") as f:
        f.write("sentence1\tsentence2\tlabel\nx\t\ty\t\t1\n")
    with pytest.raises(FinetuneError, match="no row of .* has the 3 tab-separated fields"):
        load_split(TASKS["rte"], "dev", str(tmp_path))
    os.remove(tmp_path / "dev.tsv")
    for text in ("[[1, 2]]", "[1]", "7", '{"sentence1": "x"}\n[2]\n'):
        (tmp_path / "dev.jsonl").write_text(text)
        with pytest.raises(FinetuneError, match="expected JSON objects"):
            load_split(TASKS["rte"], "dev", str(tmp_path))


# ----------------------------------------------------------------------------- bad input

def bad_toy(root, dev=None, dev_header=("sentence1", "sentence2", "label")):
    d = toy_dir(root, 20, 10, 5)
    if dev == "missing":
        os.remove(f"{d}/dev.tsv")
    elif dev == "empty":
        open(f"{d}/dev.tsv", "w").close()
    elif dev is not None:
        write_tsv(f"{d}/dev.tsv", list(dev_header), dev)
    return d


@pytest.mark.parametrize("case, hint", [
    ("unknown task", "unknown task"),
    ("missing split", "no dev.tsv"),
    ("missing column", "lacks the text columns"),
    ("label out of range", "is not one of 0, 1"),
    ("empty file", "is empty"),
    ("vocab mismatch", "pre-trained with"),
    ("no model", "does not exist"),
])
def test_bad_input_is_one_line_exit_2(models, tmp_path, capsys, case, hint):
    args = ["--model", models["run"], "--task", "toy", "--out", str(tmp_path / "out"), "--epochs", "1"]
    data = {"missing split": dict(dev="missing"), "empty file": dict(dev="empty"),
            "missing column": dict(dev=[("a", 1)], dev_header=("sentence1", "label")),
            "label out of range": dict(dev=[("a", "b", 2)])}.get(case, {})
    args += ["--data_dir", bad_toy(tmp_path, **data)]
    if case == "unknown task":
        args += ["--task", "wnli"]
    if case == "vocab mismatch":
        args += ["--model", models["mismatch"]]
    if case == "no model":
        args += ["--model", str(tmp_path / "nowhere")]
    with pytest.raises(SystemExit) as exit_info:
        run(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and hint in err[0], err
