"""Tests of tasks.py: the metrics, the GLUE file layouts (TSV, CSV, JSON lines, the hub's columns),
and tasks of your own described by their files."""
import json
import math
import os
import re

import pytest

import numpy as np

from engine.tasks import (TASKS, FinetuneError, accuracy, chance, f1_score, find_task, folder_task, load_split,
                         matthews_corrcoef, pearson, read_examples, spearman)


def write_tsv(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for row in ([header] if header else []) + rows:
            f.write("\t".join(map(str, row)) + "\n")


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


def test_chance_is_the_best_constant_answer():
    """Always one label: a balanced binary task's accuracy 0.5, its (acc + F1) / 2 0.583 (always 1), MCC and a
    regression's correlations 0, a 3-class task's majority class."""
    binary = {"dev": {"labels": np.array([0, 1] * 10)}}
    assert chance(TASKS["sst2"], binary) == {"acc": 0.5, "main": 0.5}
    assert chance(TASKS["toy"], binary)["main"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert chance(TASKS["cola"], binary)["main"] == 0.0
    assert chance(TASKS["stsb"], {"dev": {"labels": np.array([0.5, 2.0, 4.5])}})["main"] == 0.0
    nli = {d: {"labels": np.array(y)} for d, y in (("dev_matched", [0, 1, 1, 2]), ("dev_mismatched", [2, 2, 0]))}
    assert chance(TASKS["mnli"], nli) == {"acc_m": 0.5, "acc_mm": pytest.approx(0.0), "main": 0.5}


# ----------------------------------------------------------------------------- GLUE's files

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


def test_csv_and_jsonl_files(tmp_path):
    (tmp_path / "train.csv").write_text('sentence1,sentence2,label\n"a, b",c,entailment\nd,e,not_entailment\n')
    (tmp_path / "dev.jsonl").write_text('{"sentence1": "x", "sentence2": "y", "label": 1}\n'
                                        '{"sentence1": "z", "sentence2": "w", "label": 0}\n')
    train = load_split(TASKS["rte"], "train", str(tmp_path))
    assert train["a"] == ["a, b", "d"] and train["labels"].tolist() == [0, 1]
    assert load_split(TASKS["rte"], "dev", str(tmp_path))["labels"].tolist() == [1, 0]


def test_tsv_rows_that_do_not_fit_the_header_are_skipped_with_a_warning(tmp_path, capsys):
    """A few lines of GLUE's QQP train.tsv lack fields: skipped, and said on stderr."""
    with open(tmp_path / "dev.tsv", "w") as f:
        f.write("sentence1\tsentence2\tlabel\nx\ty\t1\nonly one field\n")
    assert len(load_split(TASKS["rte"], "dev", str(tmp_path))["a"]) == 1
    assert "warning: skipped 1 malformed rows" in capsys.readouterr().err


# ----------------------------------------------------------------------------- a task of your own

def test_a_folder_describes_its_task(tmp_path, capsys):
    """Text columns: every one but the label and an id; classes: labels.txt, in its order; without it a
    regression of numbers (with a note), scored by Pearson and Spearman."""
    write_tsv(str(tmp_path / "stars" / "train.tsv"), ["id", "review", "stars"], [(1, "a", 10), (2, "b", 9), (3, "c", 2)])
    write_tsv(str(tmp_path / "stars" / "dev.tsv"), ["id", "review", "stars"], [(1, "d", 9)])
    (tmp_path / "stars" / "labels.txt").write_text("10\n9\n2\n")
    task = folder_task(str(tmp_path / "stars"), label_column="stars")
    assert (task.name, task.text, task.labels, task.metrics) == ("stars", ("review",), ("10", "9", "2"), ("acc",))
    assert load_split(task, "dev", str(tmp_path / "stars"))["labels"].tolist() == [1]  # "9" is the 2nd label
    assert capsys.readouterr().err == ""
    ratings = folder_task(str(tmp_path / "stars"), label_column="stars", metrics=["spearman"])
    assert (ratings.labels, ratings.metrics) == ((("10", "9", "2"), ("spearman",)))  # labels.txt: still classes
    os.remove(tmp_path / "stars" / "labels.txt")
    task = folder_task(str(tmp_path / "stars"), label_column="stars")
    assert (task.labels, task.metrics) == (None, ("pearson", "spearman"))
    assert "stars has no labels.txt: stars is a regression of its numbers" in capsys.readouterr().err
    assert load_split(task, "train", str(tmp_path / "stars"))["labels"].tolist() == [10, 9, 2]

    write_tsv(str(tmp_path / "sim" / "train.jsonl"), None, [(json.dumps({"s1": "a", "s2": "b", "label": x}),)
                                                           for x in (0.5, 4, 2.25)])
    write_tsv(str(tmp_path / "sim" / "validation.jsonl"), None, [(json.dumps({"s1": "c", "s2": "d", "label": 1.5}),)])
    task = folder_task(str(tmp_path / "sim"))
    assert (task.text, task.labels, task.metrics, task.evals[0][1]) == (("s1", "s2"), None, ("pearson", "spearman"),
                                                                        "validation")
    assert load_split(task, "validation", str(tmp_path / "sim"))["labels"].tolist() == [1.5]


def test_a_task_is_a_name_or_a_folder(tmp_path):
    assert find_task("SST-2") == (TASKS["sst2"], None)
    glue = tmp_path / "glue_data" / "RTE"
    glue.mkdir(parents=True)
    assert find_task(str(glue)) == (TASKS["rte"], str(glue))  # GLUE's files in a folder named as GLUE names it
    for spec in ("wnli", str(tmp_path / "nowhere")):
        with pytest.raises(FinetuneError, match="unknown task .* or a folder holding train.tsv and dev.tsv"):
            find_task(spec)


@pytest.mark.parametrize("case, hint", [
    ("no dev", "needs train.tsv and dev.tsv or validation.tsv"),
    ("no label column", "no label column 'label' (it has id, text, sentiment); pass --label_column"),
    ("three text columns", "the text is one column or a pair, of id, a, b, c, label"),
    ("unknown text column", "got title: pass --text_columns"),
    ("one label", "a classification needs at least 2 labels, found 1"),
    ("regression scored by accuracy", "is a regression (no labels.txt): score it by pearson, spearman, or list"),
    ("dev label not in labels.txt", "dev.tsv row 1: label 'maybe' is not one of no, yes"),
    ("a number that labels.txt does not name", "dev.tsv row 1: label '0' is not one of 1, 2"),  # never class 0
    ("a row without a label", "train.tsv row 2: label ' ' is not one of no, yes"),
    ("a label that is not a number", "train.tsv row 2: label 'nan' is not a finite number"),
    ("a score that is text", "train.tsv row 2: label 'n/a' is not a finite number"),
])
def test_task_folder_mistakes_say_what_to_do(tmp_path, case, hint):
    d, kw = tmp_path / "mine", {}
    header, rows = ["text", "label"], [("a", "yes"), ("b", "no")]
    if case == "no label column":
        header, rows = ["id", "text", "sentiment"], [(1, "a", "yes")]
    if case == "three text columns":
        header, rows = ["id", "a", "b", "c", "label"], [(1, "x", "y", "z", "yes")]
    if case == "unknown text column":
        kw = {"text_columns": ["title"]}
    if case == "one label":
        rows = [("a", "yes"), ("b", "yes")]
    if case == "regression scored by accuracy":
        rows, kw = [("a", 0.5), ("b", 1.5)], {"metrics": ["acc"]}
    if case == "a row without a label":
        rows = [("a", "yes"), ("b", " ")]
    if case == "a label that is not a number":
        rows = [("a", "1"), ("b", "nan")]
    if case == "a score that is text":
        rows = [("a", "0.5"), ("b", "n/a"), ("c", "2.5")]
    if case == "a number that labels.txt does not name":
        rows = [("a", "1"), ("b", "2")]
    write_tsv(str(d / "train.tsv"), header, rows)
    if case != "no dev":
        dev = {"dev label not in labels.txt": [("c", "maybe")], "a number that labels.txt does not name": [("c", 0)]}
        write_tsv(str(d / "dev.tsv"), header, dev.get(case, rows))
    if case not in ("regression scored by accuracy", "a label that is not a number", "a score that is text"):
        (d / "labels.txt").write_text({"one label": "yes\n", "a number that labels.txt does not name": "1\n2\n"}
                                      .get(case, "no\nyes\n"))
    with pytest.raises(FinetuneError, match=re.escape(hint)):
        task = folder_task(str(d), **kw)
        for split in ("train", "dev"):
            load_split(task, split, str(d))


def test_examples_to_label_from_a_file(tmp_path):
    """One example per line, an empty line too: the rows match the file's lines; a pair needs its tab."""
    pairs = TASKS["rte"]
    (tmp_path / "new.txt").write_text("a cat\tthe dog\n\t\nthe sky\tblue\n")
    ex = read_examples(str(tmp_path / "new.txt"), pairs)
    assert (ex["a"], ex["b"], ex["labels"], ex["index"]) == (["a cat", "", "the sky"], ["the dog", "", "blue"], None,
                                                             [0, 1, 2])
    (tmp_path / "one.txt").write_text("a cat\n\nthe sky\n")
    assert read_examples(str(tmp_path / "one.txt"), TASKS["sst2"])["a"] == ["a cat", "", "the sky"]
    (tmp_path / "bad.txt").write_text("a\tb\n\n")
    with pytest.raises(FinetuneError, match="bad.txt line 2: RTE reads text pairs: write each line as text<TAB>text"):
        read_examples(str(tmp_path / "bad.txt"), pairs)
    write_tsv(str(tmp_path / "new.tsv"), ["index", "sentence1", "sentence2"], [(7, "x", "y")])
    ex = read_examples(str(tmp_path / "new.tsv"), pairs)
    assert (ex["a"], ex["b"], ex["index"]) == (["x"], ["y"], ["7"])
