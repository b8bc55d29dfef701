"""Tests of finetune.py: training on a learnable toy rule, GLUE tasks and tasks of your own, the recipe by
what the model is, the summary, the saved classifier and --predict, errors."""
import json
import os
import random
import subprocess
import sys
from dataclasses import asdict
from types import SimpleNamespace

import pytest
import torch

from data import load_tokenizer
from engine.finetuning import format_table, summarize
from finetune import collate, encode, main
from model import BertConfig, BertForPreTraining

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the a cat dog sat ran on mat big small red blue fish bird tree sky good".split()
FILLER = WORDS[:-1]  # every word but the keyword "good"






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
    from engine.checkpoints import save_checkpoint  # written whole, as a run writes it
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
    table = format_table(summarize(recs)).splitlines()
    assert table[0].split() == ["task", "(dev)", "model", "seeds", "lr/batch/epochs", "main", "acc"]
    assert table[1].split()[:4] == ["RTE", "m", "2", "seeds"] and "65.0 ± 7.1 (65.0)" in table[1]
    assert table[2].split() == ["SST-2", "m", "1", "seed", "2e-05/32/3", "90.0", "90.0"]  # one seed: its score
    # the average says what it averages: not GLUE's 8 tasks
    assert table[-1] == "GLUE average of m over 2 of the 8 GLUE tasks (RTE, SST-2): 77.5"
    assert "GLUE average" not in format_table(summarize(recs[-1:]))  # one GLUE task: no average
    mine = {**recs[0], "task": "reviews", "metrics": {"acc": 0.1, "main": 0.1}}  # a task of your own, or the toy
    s = summarize(recs + [mine, {**mine, "task": "toy"}])  # task: never in the GLUE average
    assert list(s["models"]["m"]["tasks"]) == ["RTE", "SST-2", "reviews", "toy"]  # as they came
    assert format_table(s).splitlines()[-1] == table[-1]


def test_summary_keeps_models_apart():
    """A weak model's best run is never reported as a strong model's, nor averaged with it."""
    recs = [{"task": "RTE", "model": model, "max_len": 128, "warmup": 100, "lr": lr, "batch_size": 32, "epochs": 4,
             "seed": 1, "metrics": {"acc": v, "main": v}}
            for model, lr, v in [("runs/taco", 5e-5, 0.7), ("runs/mlm", 3e-5, 0.6), ("runs/mlm", 5e-5, 0.55)]]
    s = summarize(recs)["models"]
    assert s["runs/taco"]["tasks"]["RTE"]["metrics"]["acc"]["mean"] == pytest.approx(0.7)
    assert s["runs/mlm"]["tasks"]["RTE"]["metrics"]["acc"]["mean"] == pytest.approx(0.6)
    assert s["runs/mlm"]["tasks"]["RTE"]["config"]["lr"] == 3e-5
    rows = [line.split() for line in format_table(summarize(recs)).splitlines()[1:]]
    assert [r[1] for r in rows] == ["runs/taco", "runs/mlm"] and [r[-1] for r in rows] == ["70.0", "60.0"]


def test_two_models_fine_tuned_into_one_out(models, tmp_path, capsys):
    """Fine-tuning one model and then another into the same --out: the summary names both and
    gives each its own runs, settings and scores; the second prints one table comparing them, one seed
    without a spread, and the task's chance level: the best score of always answering one label."""
    from engine.tasks import f1_score
    out, data = str(tmp_path / "out"), toy_dir(tmp_path, n_train=48, n_dev=24, n_test=4)
    common = ["--task", "toy", "--data_dir", data, "--epochs", "1", "--batch_size", "16", "--out", out]
    run(["--model", models["run"], "--lr", "1e-3"] + common)
    capsys.readouterr()
    run(["--model", models["dir"], "--lr", "1e-4"] + common)
    recs = results(out)
    table = capsys.readouterr().out.split("\n" + "task (dev)")[1].strip().splitlines()
    dev = [int(line.split("\t")[-1]) for line in open(os.path.join(data, "dev.tsv")).read().splitlines()[1:]]
    chance = max((dev.count(a) / len(dev) + f1_score([a] * len(dev), dev)) / 2 for a in (0, 1))  # toy: (acc + F1) / 2
    assert [row.split()[:4] for row in table[1:]] == [["toy", r["model"], "1", "seed"] for r in recs] + [
        ["toy", "chance", "(always", "one"]]
    assert "±" not in "".join(table) and table[-1].split()[5] == f"{100 * chance:.1f}"  # the main column
    summary = json.load(open(os.path.join(out, "summary.json")))["models"]
    assert list(summary) == [r["model"] for r in recs] and len(summary) == 2  # ckpt 10, then the run's newest (20)
    for r in recs:
        toy = summary[r["model"]]["tasks"]["toy"]
        assert toy["config"]["lr"] == r["lr"] and toy["metrics"]["main"]["mean"] == pytest.approx(r["metrics"]["main"])


def test_fine_tuning_recipe_by_what_the_model_is(minilm, tmp_path, capsys):
    """A taco toy run gets the toy recipe; any other model the authors' (small: 5e-5, 4 epochs; base:
    3e-5, 6 epochs; batch 32, no weight decay; their 100 warm-up steps at most 10% of the training),
    by its width: MiniLM (hidden 384, a Hugging Face model) is not a toy model. The start line names
    the recipe and why, each run its steps and warm-up."""
    from engine.finetuning import FT_RECIPES, choose_ft_recipe, ft_recipe, warmup_steps
    assert FT_RECIPES["small"] == dict(lr=5e-5, epochs=4, warmup=None, weight_decay=0.0)
    assert FT_RECIPES["base"] == dict(lr=3e-5, epochs=6, warmup=None, weight_decay=0.0)
    for warmup, total, steps in ((None, 28, 3), (None, 999, 100), (None, 4, 0), (0.1, 5000, 500), (100, 28, 100)):
        assert warmup_steps(warmup, total) == steps
    tiny, mini, small, base = (BertConfig.from_size(n) for n in ("tiny", "mini", "small", "base"))
    minilm_cfg = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    for config, origin, recipe in [(tiny, "tiny", "toy"), (mini, "mini", "toy"), (tiny, "huggingface", "small"),
                                   (minilm_cfg, "huggingface", "small"), (minilm_cfg, "continue", "small"),
                                   (small, "small", "small"), (base, "huggingface", "base"), (base, "continue", "base"),
                                   (tiny, None, "toy"), (minilm_cfg, None, "small")]:  # None: not known, by shape
        assert choose_ft_recipe(config, origin)[0] == recipe, (config, origin)
    assert ft_recipe(tiny) is FT_RECIPES["toy"]  # study.py's and the exercises' toy runs
    data = tmp_path / "pairs"
    write_tsv(str(data / "train.tsv"), ["sentence1", "sentence2", "label"], keyword_rows(8, 1))
    write_tsv(str(data / "dev.tsv"), ["sentence1", "sentence2", "label"], keyword_rows(4, 2))
    (data / "labels.txt").write_text("0\n1\n")
    run(["--model", minilm, "--task", str(data), "--epochs", "1", "--batch_size", "4", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert "recipe small (a Hugging Face model, hidden 384: the paper's small recipe): lr 5e-05, epochs 1, warm-up " \
           "10% of the steps, at most 100, weight decay 0" in out
    assert "pairs lr 5e-05 bs 4 seed 1: 2 steps, warm-up 0" in out and "warning" not in err
    run(["--model", minilm, "--task", str(data), "--epochs", "1", "--batch_size", "4", "--warmup", "100",
         "--out", str(tmp_path / "out")])
    assert "warning: pairs: warm-up 100 steps > the 2 steps of training" in capsys.readouterr().err  # asked for


def sentiment_rows(n, rng):
    """(sentence, label) of a small sentiment task in plain English: 1 for praise, 0 for blame."""
    subjects = ["the movie", "this film", "the acting", "the story", "the plot", "the music", "the ending", "the cast"]
    good = ["wonderful", "great", "excellent", "delightful", "brilliant", "moving", "charming", "superb"]
    bad = ["terrible", "awful", "boring", "dull", "painful", "disappointing", "bad", "tedious"]
    tails = ["", " from start to finish", " , i thought", " overall", " in my opinion", " honestly"]
    return [(f"{rng.choice(subjects)} was {rng.choice(good if y else bad)}{rng.choice(tails)}", int(y))
            for y in (rng.random() < 0.5 for _ in range(n))]


def test_a_real_model_learns_a_small_task_with_the_defaults(minilm, tmp_path, capsys):
    """MiniLM on 160 examples with every default (4 epochs of 32: 20 steps): 10% of the steps (2) of
    warm-up learn the task (dev accuracy 1.00 here); the paper's 100 steps, never reached, gave 0.93
    (and 0.80 on 200 others), the majority class 0.51."""
    rng = random.Random(0)
    task = tmp_path / "sentiment"
    write_tsv(str(task / "train.tsv"), ["sentence", "label"], sentiment_rows(160, rng))
    dev = sentiment_rows(100, rng)
    write_tsv(str(task / "dev.tsv"), ["sentence", "label"], dev)
    (task / "labels.txt").write_text("0\n1\n")
    main(["--model", minilm, "--task", str(task), "--device", "cpu", "--out", str(tmp_path / "out")])
    assert "sentiment lr 5e-05 bs 32 seed 1: 20 steps, warm-up 2" in capsys.readouterr().out
    (r,) = results(str(tmp_path / "out"))
    majority = max(sum(y for _, y in dev), sum(1 - y for _, y in dev)) / len(dev)
    assert r["metrics"]["acc"] >= 0.95 > majority + 0.4, (r["metrics"], majority)


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






def test_hub_offline_is_one_line_exit_2(models, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "finetune.py", "--task", "rte", "--model", models["run"], "--device",
                           "cpu", "--out", str(tmp_path / "out")], cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: cannot load nyu-mll/glue rte train")






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


@pytest.mark.parametrize("case", ["a dev label labels.txt does not name", "a score that is text"])
def test_a_label_that_is_not_the_tasks_is_one_line_naming_the_row(models, tmp_path, capsys, case):
    """Ratings 1..5 in labels.txt and a dev label 0: never taken for class number 0; a score `n/a` among
    numbers: never a class of its own. One line naming the file and the row, exit 2, nothing written."""
    task, rng = tmp_path / "ratings", random.Random(0)
    rows = [(sentence(rng), str(1 + i % 5) if case.startswith("a dev") else f"{i % 5}.5") for i in range(10)]
    write_tsv(str(task / "train.tsv"), ["text", "label"], rows if case.startswith("a dev") else
              rows[:6] + [("a cat", "n/a")] + rows[6:])
    write_tsv(str(task / "dev.tsv"), ["text", "label"], rows[:2] + [("a dog", "0")])
    if case.startswith("a dev"):
        (task / "labels.txt").write_text("1\n2\n3\n4\n5\n")
    with pytest.raises(SystemExit) as exit_info:
        run(["--model", models["run"], "--task", str(task), "--out", str(tmp_path / "out")])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note: ")]
    assert exit_info.value.code == 2 and not (tmp_path / "out").exists()
    assert err == ([f"error: {task}/dev.tsv row 3: label '0' is not one of 1, 2, 3, 4, 5"] if case.startswith("a dev")
                   else [f"error: {task}/train.tsv row 7: label 'n/a' is not a finite number"])


def test_logs_off_a_terminal_are_plain_lines(models, tmp_path, capsys):
    """stderr to a file or a pipe: no progress bars (their carriage returns), a line per epoch on stdout."""
    run(["--model", models["run"], "--task", "toy", "--data_dir", toy_dir(str(tmp_path), 40, 20, 5), "--epochs", "2",
         "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert "\r" not in err and "it/s" not in err
    assert "seed 1 epoch 1/2: loss " in out and "seed 1 epoch 2/2: loss " in out


def test_output_that_goes_nowhere_loses_no_result(models, tmp_path):
    """`finetune.py | head -1`: stdout closes after the first line (or `> /dev/full` fails every line); the runs
    go on, and results.jsonl, summary.json and OUT/best/TASK are written."""
    out, data = tmp_path / "out", toy_dir(str(tmp_path), 40, 20, 5)
    command = [sys.executable, "finetune.py", "--model", models["run"], "--task", "toy", "--data_dir", data,
               "--epochs", "1", "--device", "cpu", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(["bash", "-c", " ".join(command) + ' | head -1; echo "exit ${PIPESTATUS[0]}" >&2'],
                          capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.stdout.startswith("fine-tuning ") and proc.stdout.count("\n") == 1, proc.stderr
    assert proc.stderr.endswith("exit 0\n") and "Error" not in proc.stderr, proc.stderr
    assert len(results(str(out))) == 1
    assert (out / "summary.json").exists() and (out / "best" / "toy" / "model.safetensors").exists()
    if os.path.exists("/dev/full"):  # a full disk under stdout
        with open("/dev/full", "w") as full:
            proc = subprocess.run(command[:-1] + [str(tmp_path / "b")], stdout=full, stderr=subprocess.PIPE, text=True,
                                  timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert proc.returncode == 0 and "Error" not in proc.stderr and len(results(str(tmp_path / "b"))) == 1


# ----------------------------------------------------------------------------- a task of your own, the saved classifier

def review_rows(n, seed):
    """(id, text, sentiment): "good" somewhere in the text makes it "pos", else "neg"."""
    rng = random.Random(seed)
    return [(f"r{i}", sentence(rng, y), "pos" if y else "neg") for i, y in enumerate(rng.random() < 0.5 for _ in range(n))]


def test_a_task_of_your_own_fine_tunes_under_its_name_and_its_best_classifier_predicts(models, tmp_path, capsys):
    """A folder with train.tsv / validation.tsv / labels.txt, its own label column and names: no renaming,
    no GLUE name. Its best classifier is saved in Hugging Face format (transformers loads it, labels by
    name) and labels new text with --predict."""
    transformers = pytest.importorskip("transformers")
    task = tmp_path / "reviews"
    write_tsv(str(task / "train.tsv"), ["id", "review", "sentiment"], review_rows(64, 1))
    write_tsv(str(task / "validation.tsv"), ["id", "review", "sentiment"], review_rows(32, 2))
    (task / "labels.txt").write_text("neg\npos\n")
    out = str(tmp_path / "out")
    run(["--model", models["dir"], "--task", str(task), "--label_column", "sentiment", "--metrics", "acc,f1",
         "--epochs", "2", "--lr", "1e-3", "--batch_size", "16", "--seeds", "1,2", "--out", out])
    table = capsys.readouterr().out
    recs = results(out)
    assert [r["task"] for r in recs] == ["reviews", "reviews"] and set(recs[0]["metrics"]) == {"acc", "f1", "main"}
    assert "reviews" in table and "GLUE average" not in table
    best = max(recs, key=lambda r: r["metrics"]["main"])
    saved = os.path.join(out, "best", "reviews")
    config = json.load(open(os.path.join(saved, "config.json")))
    assert config["taco_task"]["dev"] == best["metrics"] and config["taco_task"]["seed"] == best["seed"]
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["finetuning_task"] == "reviews"

    clf, info = transformers.AutoModelForSequenceClassification.from_pretrained(saved, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and clf.config.id2label[1] == "pos"
    texts = ["the good cat sat on the mat", "a red fish ran", "good good good", "the sky"]
    (tmp_path / "new.txt").write_text("\n".join(texts) + "\n")
    run(["--predict", str(tmp_path / "new.txt"), "--model", saved, "--out", out])
    assert "reviews: 4 predictions" in capsys.readouterr().out
    lines = open(os.path.join(out, "predict", "new.tsv")).read().splitlines()
    assert lines[0] == "index\tprediction\tprobability\treview" and len(lines) == 5
    tok = transformers.AutoTokenizer.from_pretrained(saved)
    with torch.no_grad():
        logits = clf.eval()(**tok(texts, padding=True, return_tensors="pt")).logits
    for line, p, text in zip(lines[1:], logits.softmax(-1), texts):  # what transformers computes with the saved model
        _, label, prob, written = line.split("\t")
        assert label == ["neg", "pos"][p.argmax()] and float(prob) == pytest.approx(p.max().item(), abs=1e-4)
        assert written == text
    write_tsv(str(tmp_path / "new.tsv"), ["review"], [(t,) for t in texts])  # the task's own columns work too
    run(["--predict", str(tmp_path / "new.tsv"), "--model", saved, "--out", out, "--force"])  # over new.txt's
    assert open(os.path.join(out, "predict", "new.tsv")).read().splitlines() == lines


def test_the_saved_classifier_is_the_best_of_the_runs(models, tmp_path):
    """A later, worse run keeps the saved classifier, whichever model it fine-tuned; a better one replaces it."""
    from engine.finetuning import save_best
    from model import BertForSequenceClassification
    from engine.tasks import TASKS
    tok = load_tokenizer(os.path.join(models["dir"], "vocab.txt"))
    args = SimpleNamespace(out=str(tmp_path), model=models["dir"])
    clf = BertForSequenceClassification(BertConfig.from_size("tiny", vocab_size=tok.vocab_size))
    record = {"model": "runs/a", "max_len": 32, "lr": 1e-3, "batch_size": 16, "epochs": 1, "seed": 1}
    saved = lambda: json.load(open(tmp_path / "best" / "toy" / "config.json"))["taco_task"]
    for model, score, kept in (("runs/a", 0.7, ("runs/a", 0.7)), ("runs/a", 0.6, ("runs/a", 0.7)),
                               ("runs/a", 0.8, ("runs/a", 0.8)), ("runs/b", 0.1, ("runs/a", 0.8)),
                               ("runs/b", 0.9, ("runs/b", 0.9))):
        save_best(clf, TASKS["toy"], {**record, "model": model, "metrics": {"main": score}}, tok, args)
        assert (saved()["model"], saved()["dev"]["main"]) == kept
    assert os.listdir(tmp_path / "best") == ["toy"]  # no temporary folder left behind


def test_predict_and_task_flag_mistakes_are_one_line_exit_2(models, tmp_path, capsys):
    (tmp_path / "new.txt").write_text("a cat\n")
    for argv, hint in ((["--predict", str(tmp_path / "new.txt"), "--model", models["dir"]], "is not one"),
                       (["--predict", str(tmp_path / "nothing.txt"), "--model", models["dir"]], "is not one"),
                       (["--metrics", "acc,auc"], "unknown metric 'auc'; choose from acc, f1, mcc")):
        with pytest.raises(SystemExit) as exit_info:
            run(argv + ["--out", str(tmp_path / "out")])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(err) == 1 and hint in err[0], err


@pytest.mark.parametrize("split, score", [("dev", "nan"), ("train", "inf"), ("dev", "-Infinity")])
def test_a_score_that_is_not_finite_is_refused(models, tmp_path, capsys, split, score):
    """STS-B with a `nan` (or infinite) gold score: refused in one line naming the file and the
    row, before any work: a NaN main score (and a summary.json holding NaN) cannot happen."""
    d = tmp_path / "STS-B"
    rows = [(f"{sentence(random.Random(i))}", f"{sentence(random.Random(-i))}", f"{i % 5}.0") for i in range(12)]
    for name in ("train", "dev"):
        write_tsv(f"{d}/{name}.tsv", ["sentence1", "sentence2", "score"],
                  [r if not (name == split and i == 3) else (*r[:2], score) for i, r in enumerate(rows)])
    with pytest.raises(SystemExit) as exit_info:
        run(["--model", models["run"], "--task", "stsb", "--data_dir", str(d), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1
    assert err[0] == f"error: {d}/{split}.tsv row 4: label '{score}' is not a finite number"
    assert not (tmp_path / "out").exists()


def test_a_torn_last_line_of_results_is_dropped_with_a_warning(models, tmp_path, capsys):
    """A kill while results.jsonl was appended leaves half a line: the next fine-tuning drops it with a
    warning, and summary.json holds the whole runs."""
    out = tmp_path / "out"
    run(["--model", models["run"], "--task", "toy", "--data_dir", toy_dir(str(tmp_path), 40, 20, 5), "--epochs", "1",
         "--out", str(out)])
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(results(str(out))[0])[:50])
    run(["--model", models["run"], "--task", "toy", "--data_dir", str(tmp_path / "toy"), "--epochs", "1",
         "--seed", "2", "--out", str(out)])
    assert "dropped its last line, cut short" in capsys.readouterr().err
    assert [r["seed"] for r in results(str(out))] == [1, 2]
    assert json.loads((out / "summary.json").read_text())["models"][models["run"]]["tasks"]["toy"]["seeds"] == [1, 2]


def test_stsb_json_with_the_hubs_names_and_a_null_score(models, tmp_path, capsys):
    """STS-B's TSV and the hub share the text column names; a JSON file with the hub's "label"
    (not the TSV's "score") is read as such, and its null score is one line, not a NaN."""
    d = tmp_path / "STS-B"
    d.mkdir()
    rows = [{"sentence1": "a b", "sentence2": "b c", "label": i % 5} for i in range(10)]
    (d / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    rows[2]["label"] = None
    (d / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(SystemExit) as exit_info:
        run(["--model", models["run"], "--task", "stsb", "--data_dir", str(d), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: {d}/dev.jsonl row 3: label None is not a finite number\n"


# ----------------------------------------------------------------------------- nothing a user has is lost

def refused(argv, capsys, hint):
    """run(argv) ends with one `error:` line holding `hint` (after progress bars and notes), exit 2."""
    capsys.readouterr()  # what earlier commands wrote
    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("error: ") == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("error: ") and hint in err.strip().splitlines()[-1], err


def test_predict_never_takes_a_submission_or_an_earlier_prediction(models, tmp_path, capsys):
    """--predict X/toy.txt after --predict_test: OUT/predictions/toy.tsv (the test-set submission) stays;
    the labels go beside the model (best/toy-toy.tsv), or to OUT/predict/toy.tsv with --out, which a later
    --predict replaces only with --force. Every line is a row, an empty one too, its text beside its label."""
    out, saved = str(tmp_path / "out"), str(tmp_path / "out" / "best" / "toy")
    run(["--model", models["dir"], "--task", "toy", "--data_dir", toy_dir(str(tmp_path), 48, 24, 6), "--epochs", "1",
         "--batch_size", "16", "--out", out, "--predict_test"])
    submission = open(os.path.join(out, "predictions", "toy.tsv")).read()
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "toy.txt").write_text("a cat\tthe dog\n\t\nred fish\tblue sky\n")
    run(["--predict", str(tmp_path / "x" / "toy.txt"), "--model", saved])
    beside = os.path.join(out, "best", "toy-toy.tsv")
    assert f"toy: 3 predictions of {saved} for {tmp_path}/x/toy.txt in {beside}" in capsys.readouterr().out
    rows = [line.split("\t") for line in open(beside).read().splitlines()]
    assert rows[0] == ["index", "prediction", "probability", "sentence1", "sentence2"]
    assert [(r[0], r[3], r[4]) for r in rows[1:]] == [("0", "a cat", "the dog"), ("1", "", ""),
                                                      ("2", "red fish", "blue sky")]
    predict = ["--predict", str(tmp_path / "x" / "toy.txt"), "--model", saved, "--out", out]
    run(predict)
    assert len(open(os.path.join(out, "predict", "toy.tsv")).read().splitlines()) == 4
    refused(predict, capsys, "predict/toy.tsv holds the predictions of an earlier --predict; pass --force")
    run(predict + ["--force"])
    assert open(os.path.join(out, "predictions", "toy.tsv")).read() == submission
    (tmp_path / "x" / "toy.txt").write_text("a cat\tthe dog\nno tab\n")
    refused(predict + ["--force"], capsys, "toy.txt line 2: toy reads text pairs: write each line as text<TAB>text")


def test_the_best_classifiers_folder_is_checked_before_any_training(models, tmp_path, capsys):
    """OUT/best/TASK being --model itself: one line before any training, nothing written. An empty one is filled."""
    out, data = tmp_path / "out", toy_dir(str(tmp_path), 48, 24, 6)
    toy = ["--task", "toy", "--data_dir", data, "--epochs", "1", "--batch_size", "16", "--out", str(out)]
    (out / "best" / "toy").mkdir(parents=True)
    run(["--model", models["dir"]] + toy)  # empty: filled
    assert os.path.isfile(out / "best" / "toy" / "model.safetensors")
    before = (out / "results.jsonl").read_text()
    refused(["--model", str(out / "best" / "toy")] + toy, capsys, "best/toy is or holds --model")
    assert (out / "results.jsonl").read_text() == before


def test_a_full_disk_while_saving_the_classifier_names_the_folder_and_keeps_the_earlier_one(models, tmp_path,
                                                                                           capsys, monkeypatch):
    from engine import hf
    out, data = tmp_path / "out", toy_dir(str(tmp_path), 48, 24, 6)
    toy = ["--task", "toy", "--data_dir", data, "--epochs", "1", "--batch_size", "16", "--out", str(out)]
    run(["--model", models["run"]] + toy)
    before = (out / "best" / "toy" / "model.safetensors").read_bytes()
    config = json.loads((out / "best" / "toy" / "config.json").read_text())
    config["taco_task"]["dev"]["main"] = -1  # any run is better: the next one replaces it
    (out / "best" / "toy" / "config.json").write_text(json.dumps(config))

    def full(path, tensors):
        open(path, "wb").close()
        raise OSError(28, "No space left on device", path)
    monkeypatch.setattr(hf, "write_safetensors", full)
    refused(["--model", models["dir"]] + toy, capsys, f"no space left in {out}/best")
    assert (out / "best" / "toy" / "model.safetensors").read_bytes() == before and os.listdir(out / "best") == ["toy"]
    assert len(results(str(out))) == 2  # the run's scores are kept


@pytest.mark.parametrize("edit, hint", [
    (lambda c, d: open(d / "vocab.txt", "a").write("extra\n"),
     "23 tokens in vocab.txt and max_len 32, but the model was pre-trained with 22 tokens"),
    (lambda c, d: c.pop("taco_task"), "is not one"),
])
def test_predict_with_a_classifier_that_does_not_fit_is_one_line(models, tmp_path, capsys, edit, hint):
    """A vocab.txt that is not the classifier's, or a model finetune.py did not save: one line."""
    from engine.finetuning import save_best
    from engine.tasks import folder_task
    from model import BertForSequenceClassification
    task = tmp_path / "reviews"
    write_tsv(str(task / "train.tsv"), ["id", "review", "sentiment"], review_rows(8, 1))
    write_tsv(str(task / "dev.tsv"), ["id", "review", "sentiment"], review_rows(8, 2))
    (task / "labels.txt").write_text("neg\npos\n")
    tok = load_tokenizer(os.path.join(models["dir"], "vocab.txt"))
    clf = BertForSequenceClassification(BertConfig.from_size("tiny", vocab_size=tok.vocab_size), num_labels=2)
    record = {"model": "m", "max_len": 32, "lr": 1e-3, "batch_size": 16, "epochs": 1, "seed": 1, "metrics": {"main": 1}}
    save_best(clf, folder_task(str(task), label_column="sentiment"), record, tok,
              SimpleNamespace(out=str(tmp_path), model=models["dir"]))
    path = tmp_path / "best" / "reviews" / "config.json"
    config = json.loads(path.read_text())
    edit(config, path.parent)
    path.write_text(json.dumps(config))
    (tmp_path / "new.txt").write_text("a good cat\n")
    refused(["--predict", str(tmp_path / "new.txt"), "--model", str(path.parent), "--out", str(tmp_path)], capsys, hint)
