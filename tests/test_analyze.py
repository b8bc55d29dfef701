"""Tests for tools/analyze.py: python -m pytest -q tests/test_analyze.py (tools/study.py: tests/test_study.py)"""
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import numpy as np
import torch.nn.functional as F

from tools import analyze
from data import make_blocks
from engine.corpus import tokenize_corpus
from taco import contextual_score, document_segments
from model import BertConfig, BertForPreTraining
from engine.tasks import spearman

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root


class FixedStates(nn.Module):
    """An 'encoder' with given last-layer states: a batch's ids[:, 0] are rows of `states`."""

    def __init__(self, states):
        super().__init__()
        self.states = states

    def forward(self, ids, attention_mask=None):
        return self.states[ids[:, 0]], None


def as_batches(states, sizes):
    """Row indices of `states` cut into batches of the given sizes, shaped like token ids."""
    T, out, start = states.shape[1], [], 0
    for n in sizes:
        out.append(torch.arange(start, start + n)[:, None].expand(n, T))
        start += n
    return out


def brute_force(states, sizes):
    """Intra / inter means of cosine, L1 and L2 with a loop over every ordered pair of tokens."""
    sums = {m: {"intra": [0.0, 0], "inter": [0.0, 0]} for m in ("cosine", "l1", "l2")}
    start = 0
    for n in sizes:
        toks = [(b, t) for b in range(start, start + n) for t in range(states.shape[1])]
        for i, (b1, t1) in enumerate(toks):
            for j, (b2, t2) in enumerate(toks):
                if i == j:
                    continue
                x, y = states[b1, t1].double(), states[b2, t2].double()
                kind = "intra" if b1 == b2 else "inter"
                for m, v in (("cosine", F.cosine_similarity(x, y, dim=0)), ("l1", (x - y).abs().sum()),
                             ("l2", (x - y).norm())):
                    sums[m][kind][0] += v.item()
                    sums[m][kind][1] += 1
        start += n
    return {m: {k: s / n for k, (s, n) in d.items()} for m, d in sums.items()}


# ----------------------------------------------------------------------------- contextual score

def test_identical_vectors_within_a_sequence():
    torch.manual_seed(0)
    per_seq = torch.randn(4, 1, 8)
    states = per_seq.expand(4, 5, 8).clone()  # every token of a sequence has the same state
    res = analyze.context_scores(FixedStates(states), as_batches(states, [4]), ("cosine", "l1", "l2"))
    assert res["cosine"]["intra"] == pytest.approx(1.0, abs=1e-6)
    assert res["l1"]["intra"] == pytest.approx(0.0, abs=1e-9)
    assert res["l2"]["intra"] == pytest.approx(0.0, abs=1e-9)
    assert res["cosine"]["inter"] < 1.0 and res["cosine"]["score"] > 0 and res["l2"]["score"] > 0


def test_cosine_l1_l2_match_brute_force():
    """Cosine is taco.contextual_score; L1 / L2 are ours: both equal a loop over all pairs,
    pooled over batches of different sizes."""
    torch.manual_seed(1)
    states, sizes = torch.randn(5, 4, 6), [3, 2]
    res = analyze.context_scores(FixedStates(states), as_batches(states, sizes), ("cosine", "l1", "l2"))
    ref = brute_force(states, sizes)
    for m in ("cosine", "l1", "l2"):
        for k in ("intra", "inter"):
            assert res[m][k] == pytest.approx(ref[m][k], rel=1e-5, abs=1e-6), (m, k)
    assert res["cosine"]["score"] == pytest.approx(ref["cosine"]["intra"] - ref["cosine"]["inter"], abs=1e-6)
    assert res["l2"]["score"] == pytest.approx(ref["l2"]["inter"] - ref["l2"]["intra"], rel=1e-5)


def test_distance_score_ignores_padding():
    torch.manual_seed(2)
    h = torch.randn(3, 5, 4)
    real = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    got = analyze.distance_score(h, real, 2)
    intra = inter = 0.0
    n_intra = n_inter = 0
    toks = [(b, t) for b in range(3) for t in range(5) if real[b, t]]
    for b1, t1 in toks:
        for b2, t2 in toks:
            if (b1, t1) != (b2, t2):
                d = (h[b1, t1] - h[b2, t2]).double().norm().item()
                if b1 == b2:
                    intra, n_intra = intra + d, n_intra + 1
                else:
                    inter, n_inter = inter + d, n_inter + 1
    assert got["intra_n"] == n_intra and got["inter_n"] == n_inter
    assert got["intra_sum"] == pytest.approx(intra) and got["inter_sum"] == pytest.approx(inter)


class Replay(nn.Module):
    """An 'encoder' that returns the given states of each batch in turn."""

    def __init__(self, states):
        super().__init__()
        self.states, self.calls = states, 0

    def forward(self, ids, attention_mask=None):
        self.calls += 1
        return self.states[(self.calls - 1) % len(self.states)], None


SEP = 3


def doc_batches():
    """Two batches of blocks with documents ended by [SEP] (id 3) inside them: one document,
    two, three with an empty-bodied one ([SEP][SEP]), and a block that starts mid-document."""
    torch.manual_seed(3)
    ids = [torch.randint(5, 50, (3, 8)), torch.randint(5, 50, (2, 8))]
    for batch, seps in zip(ids, ([[7], [3, 7], [2, 3, 7]], [[0, 5, 7], [6, 7]])):
        for row, cols in zip(batch, seps):
            row[cols] = SEP
    return ids, [torch.randn(len(b), 8, 5) for b in ids]


def brute_force_docs(ids, states):
    """Intra / inter means of cosine, dot and L1 / L2 / L10 distance, contexts = documents:
    a loop over every ordered pair of tokens, each token's document counted by the [SEP]s
    before it in its block."""
    fns = {"cosine": lambda x, y: F.cosine_similarity(x, y, dim=0), "dot": lambda x, y: x @ y,
           "l1": lambda x, y: (x - y).abs().sum(), "l2": lambda x, y: (x - y).norm(),
           "l10": lambda x, y: (x - y).abs().pow(10).sum().pow(0.1)}
    sums = {m: {"intra": [0.0, 0], "inter": [0.0, 0]} for m in fns}
    for batch, h in zip(ids, states):
        toks = [(b, t, int((batch[b, :t] == SEP).sum())) for b in range(len(batch)) for t in range(batch.shape[1])]
        for i, (b1, t1, d1) in enumerate(toks):
            for j, (b2, t2, d2) in enumerate(toks):
                if i != j:
                    kind = "intra" if (b1, d1) == (b2, d2) else "inter"
                    for m, fn in fns.items():
                        sums[m][kind][0] += fn(h[b1, t1].double(), h[b2, t2].double()).item()
                        sums[m][kind][1] += 1
    return {m: {k: s / n for k, (s, n) in d.items()} for m, d in sums.items()}


def test_document_bounded_scores_match_brute_force():
    """Contexts = documents within blocks: analyze's five metrics and taco.contextual_score's
    logged form (ctx_doc_*) equal a loop over all pairs; the block form is unchanged."""
    ids, states = doc_batches()
    ref = brute_force_docs(ids, states)
    res = analyze.context_scores(Replay(states), ids, ("cosine", "dot", "l1", "l2", "l10"), sep_id=SEP)
    for m in ref:
        for k in ("intra", "inter"):
            assert res[m][k] == pytest.approx(ref[m][k], rel=1e-6, abs=1e-9), (m, k)
        assert res[m]["ratio"] == pytest.approx(ref[m]["intra"] / ref[m]["inter"], rel=1e-6)
    assert res["dot"]["score"] == pytest.approx(ref["dot"]["intra"] - ref["dot"]["inter"], rel=1e-6)
    assert res["l10"]["score"] == pytest.approx(ref["l10"]["inter"] - ref["l10"]["intra"], rel=1e-6)
    logged = contextual_score(Replay(states), ids, sep_id=SEP)
    assert logged["doc_intra"] == pytest.approx(ref["cosine"]["intra"], abs=1e-6)
    assert logged["doc_inter"] == pytest.approx(ref["cosine"]["inter"], abs=1e-6)
    block = analyze.context_scores(Replay(states), ids, ("cosine",))["cosine"]
    assert logged["intra"] == pytest.approx(block["intra"], abs=1e-9) and logged["score"] != logged["doc_score"]
    assert contextual_score(Replay(states), ids)["score"] == pytest.approx(logged["score"], abs=1e-9)


def test_document_segments_count_the_seps_before():
    ids = torch.tensor([[2, 9, 3, 9, 9, 3, 3, 3]])  # [CLS] a [SEP] b c [SEP] [SEP] [SEP]
    assert document_segments(ids, 3).tolist() == [[0, 0, 0, 1, 1, 1, 2, 3]]


def test_heldout_blocks_are_the_ones_taco_holds_out():
    """taco.py's evaluate uses the last min(eval_blocks, n // 10) blocks of the corpus."""
    tok = analyze.load_tokenizer("toy")
    blocks = make_blocks(tokenize_corpus("toy", tok), 64, tok.cls_id, tok.sep_id)
    got = torch.cat(analyze.heldout_batches("toy", tok, 64, 40, 16))
    assert [len(b) for b in analyze.heldout_batches("toy", tok, 64, 40, 16)] == [16, 16, 8]
    assert torch.equal(got, torch.from_numpy(blocks[len(blocks) - 40:].astype("int64")))


# ----------------------------------------------------------------------------- word similarity

@pytest.fixture
def small_vocab(tmp_path):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat", "dog", "car", "bus", "light", "##house", "tree"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(words) + "\n")
    return analyze.load_tokenizer(str(path))


def test_word_similarity_skips_and_counts(small_vocab):
    emb = torch.randn(small_vocab.vocab_size, 4)
    pairs = [("cat", "dog", 9.0), ("Car", "bus", 8.0),  # capitals are lowercased, as the tokenizer does
             ("lighthouse", "tree", 5.0),  # two word pieces: not one embedding
             ("cat", "zebra", 3.0), ("tree", "dog", 1.0)]  # zebra is [UNK]
    res = analyze.word_similarity(emb, small_vocab, pairs)
    assert (res["pairs"], res["used"], res["skipped"]) == (5, 3, 2)


def test_fig3a_mean_cosine_of_cooccurring_pairs(small_vocab):
    """Only pairs whose words share a document (not merely a block) enter the paper's mean."""
    v = small_vocab.vocab
    emb = torch.zeros(small_vocab.vocab_size, 2)
    emb[v["cat"]] = emb[v["dog"]] = torch.tensor([1.0, 0.0])  # cos(cat, dog) = 1
    emb[v["car"]], emb[v["tree"]], emb[v["bus"]] = torch.tensor([-1.0, 0.0]), torch.tensor([0.0, 2.0]), torch.tensor([1.0, 1.0])
    cls, sep = v["[CLS]"], v["[SEP]"]
    blocks = [torch.tensor([[cls, v["cat"], v["dog"], sep, v["car"], v["tree"], sep, sep],
                            [cls, v["bus"], sep, v["tree"], v["cat"], v["cat"], sep, sep]])]
    pairs = [("cat", "dog", 9.0), ("car", "tree", 8.0), ("cat", "car", 1.0), ("bus", "tree", 2.0)]
    res = analyze.word_similarity(emb, small_vocab, pairs, blocks)
    assert res["cooc_pairs"] == 2  # cat-dog and car-tree; cat-car and bus-tree only share a block
    assert res["cooc_mean_cosine"] == pytest.approx((1.0 + 0.0) / 2)
    assert res["mean_cosine"] == pytest.approx((1.0 + 0.0 - 1.0 + 0.5 ** 0.5) / 4)
    assert res["spearman"] == pytest.approx(spearman([1.0, 0.0, -1.0, 0.5 ** 0.5], [9.0, 8.0, 1.0, 2.0]))


def test_spearman_of_a_monotone_relation_is_one(small_vocab):
    """Embeddings at growing angles from 'cat': cosine falls as the human score falls."""
    emb = torch.zeros(small_vocab.vocab_size, 2)
    others = ["dog", "car", "bus", "tree", "light"]
    emb[small_vocab.vocab["cat"]] = torch.tensor([1.0, 0.0])
    for k, w in enumerate(others):
        angle = 0.3 * (k + 1)
        emb[small_vocab.vocab[w]] = torch.tensor([torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))]) * (k + 1)
    pairs = [("cat", w, 10.0 - k) for k, w in enumerate(others)]
    res = analyze.word_similarity(emb, small_vocab, pairs)
    assert res["spearman"] == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [10, 20, 35, 100]) == pytest.approx(1.0)
    assert analyze.word_similarity(emb, small_vocab, [(a, b, -s) for a, b, s in pairs])["spearman"] == pytest.approx(-1.0)


# ----------------------------------------------------------------------------- command line

def run_analyze(*args):
    return subprocess.run([sys.executable, os.path.join(HERE, "tools", "analyze.py"), *args],
                          capture_output=True, text=True, cwd=HERE, timeout=300)


@pytest.fixture(scope="session")
def hf_model(tmp_path_factory):
    """A tiny random BERT saved as a Hugging Face directory with the toy vocab."""
    tok = analyze.load_tokenizer("toy")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=64))
    path = tmp_path_factory.mktemp("hf")
    model.save_pretrained(str(path), vocab_file=tok.vocab_file)
    return str(path)


def test_cli_analyzes_a_hugging_face_directory(hf_model, tmp_path):
    out = tmp_path / "a.json"
    r = run_analyze("--model", hf_model, "--max_len", "32", "--eval_blocks", "8", "--batch_size", "4",
                    "--metrics", "cosine,l2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["context"]) == set(res["context_doc"]) == {"cosine", "l2"} and res["blocks"] == 8
    assert res["wordsim"]["used"] + res["wordsim"]["skipped"] == res["wordsim"]["pairs"] > 0
    assert "contextual score" in r.stdout and "Fig. 3a" in r.stdout and "extra: Spearman" in r.stdout


@pytest.mark.parametrize("case", ["missing model", "missing pairs", "empty pairs", "malformed pairs",
                                  "unknown metric", "json folder missing", "no single-token pairs"])
def test_cli_bad_input_is_one_line_exit_2(case, hf_model, tmp_path):
    pairs = tmp_path / "pairs.tsv"
    out = tmp_path / "a.json"
    args = ["--model", hf_model, "--max_len", "32", "--eval_blocks", "8", "--json", str(out)]
    if case == "missing model":
        args[1] = str(tmp_path / "no_such_run")
    elif case == "missing pairs":
        args += ["--pairs", str(tmp_path / "nope.tsv")]
    elif case == "empty pairs":
        pairs.write_text("# only a comment\n\n")
        args += ["--pairs", str(pairs)]
    elif case == "malformed pairs":
        pairs.write_text("dog\tcow\t8.0\ndog\tcow\tvery\n")
        args += ["--pairs", str(pairs)]
    elif case == "unknown metric":
        args += ["--metrics", "cosine,euclid"]
    elif case == "json folder missing":
        args[-1] = str(tmp_path / "no_dir" / "a.json")
    else:
        pairs.write_text("xylophone\tquasar\t5\n")
        args += ["--pairs", str(pairs)]
    r = run_analyze(*args)
    assert r.returncode == 2, (case, r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tmp*"))


# ----------------------------------------------------------------------------- retrieval scores agree with trec_eval

def test_retrieval_counts_missing_judged_documents_and_breaks_ties_by_id():
    """By hand. Judged documents absent from the corpus are never retrieved: q0 judges d1 (found)
    and d9 (absent): Recall 1/2, nDCG (1) / (1 + 1/log2 3). Ties: document id descending, as
    trec_eval: equal scores over d1, d10, d2 rank d2, d10, d1."""
    ids = ["d1", "d10", "d2"]
    got = analyze.retrieval_metrics(torch.tensor([[0.9, 0.1, 0.2]]), [{"d1": 1, "d9": 1}], doc_ids=ids)
    assert got["recall@100"] == 0.5 and got["mrr@10"] == 1.0
    assert got["ndcg@10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    tied = torch.zeros(1, 3)
    for relevant, rank in (("d2", 1), ("d10", 2), ("d1", 3)):
        assert analyze.retrieval_metrics(tied, [{relevant: 1}], doc_ids=ids)["mrr@10"] == pytest.approx(1 / rank)
    # skip (BEIR's ignore_identical_ids): the column is not ranked, the ones after it move up
    assert analyze.retrieval_metrics(tied, [{"d10": 1}], doc_ids=ids, skip=[2])["mrr@10"] == 1.0
    # a negative grade gains nothing (trec_eval): d1 = -1 first, d2 = 2 second -> nDCG 1/log2(3)
    got = analyze.retrieval_metrics(torch.tensor([[0.9, 0.1, 0.2]]), [{"d1": -1, "d2": 2}], doc_ids=ids)
    assert got["ndcg@10"] == pytest.approx(1 / math.log2(3)) and got["mrr@10"] == 0.5


def test_retrieval_metrics_match_pytrec_eval():
    """Against trec_eval itself (pytrec_eval, a test-only dependency): random scores with many
    ties, ids whose string order is not their number order, graded and negative judgements,
    judged documents missing from the corpus, queries without a relevant document, and BEIR's
    identical-id rule (the document is taken out of the run, as BEIR does)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    gen = torch.Generator().manual_seed(0)
    Q, D = 40, 130
    doc_ids = [f"d{i}" for i in torch.randperm(D, generator=gen).tolist()]
    scores = torch.randint(0, 6, (Q, D), generator=gen).float() / 5  # ~26 documents share each score
    qrels, skip = {}, []
    for q in range(Q):
        judged = torch.randint(0, D + 20, (8,), generator=gen).tolist()  # ids >= D are not in the corpus
        qrels[f"q{q}"] = {f"d{j}": int(g) for j, g in zip(judged, torch.randint(-1, 3, (8,), generator=gen))}
        skip.append(doc_ids.index(f"d{q}") if q % 3 == 0 else None)  # query q's id is the document "d{q}"
    run = {f"q{q}": {doc_ids[c]: float(scores[q, c]) for c in range(D) if c != skip[q]} for q in range(Q)}
    for k in (5, 10, 100):
        ours = analyze.retrieval_metrics(scores, list(qrels.values()), k_ndcg=k, k_mrr=D, k_recall=k,
                                         doc_ids=doc_ids, skip=skip)
        trec = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{k}", f"recall.{k}", "recip_rank"}).evaluate(run)
        assert len(trec) == Q
        for ours_name, trec_name in ((f"ndcg@{k}", f"ndcg_cut_{k}"), (f"recall@{k}", f"recall_{k}"),
                                     (f"mrr@{D}", "recip_rank")):
            assert ours[ours_name] == pytest.approx(np.mean([t[trec_name] for t in trec.values()]), abs=1e-12), k


# ----------------------------------------------------------------------------- the command line: refused before the work

def main_exit(argv, capsys):
    """analyze.main in-process -> (exit code, stdout, stderr)."""
    try:
        analyze.main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def hf_copy(hf_model, tmp_path, vocab_extra=0, vocab_less=0):
    """The hf_model folder with its vocab.txt longer or shorter."""
    path = tmp_path / "hf"
    shutil.copytree(hf_model, path)
    words = (path / "vocab.txt").read_text().splitlines()
    words = words[:len(words) - vocab_less] + [f"extra{i}" for i in range(vocab_extra)]
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    return str(path)


@pytest.mark.parametrize("case", ["beir", "sts", "heatmap xyz", "heatmap no extension", "sts folder"])
def test_bad_input_is_refused_before_the_model_runs(case, hf_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(analyze, "load_encoder", lambda spec: pytest.fail("the model was loaded"))
    out = tmp_path / "a.json"
    args = ["--model", hf_model, "--json", str(out)]
    if case == "beir":
        (tmp_path / "beir" / "qrels").mkdir(parents=True)
        (tmp_path / "beir" / "corpus.jsonl").write_text('{"_id": "d1", "text": "a dog"\n')
        (tmp_path / "beir" / "queries.jsonl").write_text('{"_id": "q1", "text": "dog"}\n')
        (tmp_path / "beir" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
        args += ["--retrieval", str(tmp_path / "beir")]
    elif case == "sts":
        (tmp_path / "sts.tsv").write_text("a\tb\t1\nc\td\tsimilar\ne\tf\t2\n")
        args += ["--sts", str(tmp_path / "sts.tsv")]
    elif case == "heatmap xyz":
        args += ["--heatmap", str(tmp_path / "h.xyz")]
    elif case == "heatmap no extension":
        args += ["--heatmap", str(tmp_path / "h")]
    else:
        args += ["--sts", str(tmp_path)]
    code, _, err = main_exit(args, capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (case, err)
    assert not list(tmp_path.glob("a.*"))


@pytest.mark.parametrize("case,message", [
    ("vocab too big", "its vocab.txt has 556 tokens but the model has 551 word embeddings"),
    ("vocab too small", "its vocab.txt has 548 tokens but the model has 551 word embeddings"),
])
def test_a_vocabulary_that_does_not_fit_is_one_line(case, message, hf_model, tmp_path, capsys):
    path = hf_copy(hf_model, tmp_path, vocab_extra=5) if case == "vocab too big" else hf_copy(hf_model, tmp_path,
                                                                                             vocab_less=3)
    code, _, err = main_exit(["--model", path, "--max_len", "32", "--eval_blocks", "4"], capsys)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_a_text_file_is_probed_whole_and_the_run_says_what(hf_model, tmp_path, capsys, toy_dir):
    """--data FILE: text the model never trained on is all held out: every block is probed (up to
    --eval_blocks, the first ones), and the start line says blocks, tokens and documents, here
    counted independently from each document's first token."""
    tok = analyze.load_tokenizer("toy")
    docs = open(os.path.join(toy_dir, "train.txt"), encoding="utf-8").read().split("\n\n")[:40]
    text = tmp_path / "probe.txt"
    text.write_text("\n\n".join(docs) + "\n")
    lengths = [len(tok.encode(d)) + 1 for d in docs if d.strip()]  # + its [SEP]
    starts = np.cumsum([0] + lengths[:-1])
    n_blocks = sum(lengths) // 30
    out = tmp_path / "a.json"
    code, stdout, _ = main_exit(["--model", hf_model, "--data", str(text), "--max_len", "32", "--eval_blocks", "10000",
                                 "--json", str(out)], capsys)
    assert code == 0
    probe = json.loads(out.read_text())["probe"]
    assert probe["blocks"] == probe["of_blocks"] == n_blocks and probe["tokens"] == 30 * n_blocks
    assert probe["documents"] == int(np.sum(starts < 30 * n_blocks))
    assert f"all {n_blocks} blocks of 32" in stdout and f"{30 * n_blocks:,} tokens of {probe['documents']} document" in stdout
    code, stdout, _ = main_exit(["--model", hf_model, "--data", str(text), "--max_len", "32", "--eval_blocks", "5",
                                 "--json", str(out)], capsys)
    assert f"the first 5 of {n_blocks} blocks" in stdout and "raise it" in stdout
    held, about = analyze.probe_blocks(str(text), tok, 32, 5, trained_on=True)  # the run's own text: its tail
    assert about["part"] == "last" and about["blocks"] == min(5, n_blocks // 10)


def test_json_is_strict_and_kept_when_the_picture_fails(hf_model, tmp_path, monkeypatch, capsys):
    """No pair co-occurs: the Fig. 3a mean is null in the JSON (NaN is not JSON), 'none' in the
    report; a heatmap that cannot be written costs the picture, not the numbers."""
    pairs = tmp_path / "ws.tsv"
    pairs.write_text("comet\tdog\t1\ncow\tplanet\t2\n")  # words of different topics: never in one document
    out = tmp_path / "a.json"

    def fail(*args):
        raise OSError(28, "No space left on device", str(tmp_path / "h.png"))
    monkeypatch.setattr(analyze, "plot_heatmaps", fail)
    code, stdout, err = main_exit(["--model", hf_model, "--max_len", "32", "--eval_blocks", "4", "--pairs", str(pairs),
                                   "--json", str(out), "--heatmap", str(tmp_path / "h.png")], capsys)
    assert code == 2 and err.splitlines()[-1].startswith("error: ") and "Traceback" not in err
    res = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert res["wordsim"]["cooc_pairs"] == 0 and res["wordsim"]["cooc_mean_cosine"] is None
    assert "no pair co-occurs in a held-out document" in stdout


def test_a_run_is_probed_on_its_held_out_tail(tmp_path, capsys, quick, run_taco):
    """A taco run: its own --data and --max_len (config.json) choose the blocks, the ones taco.py held out."""
    out = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "4", "--out", out]) == 0
    code, stdout, _ = main_exit(["--model", out, "--eval_blocks", "4", "--threads", "1"], capsys)
    assert code == 0 and "the last 4 of its" in stdout and "blocks of 32, held out from training" in stdout
