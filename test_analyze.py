"""Tests for analyze.py: python -m pytest -q test_analyze.py (study.py: test_study.py)"""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import analyze
from data import make_blocks, tokenize_corpus
from finetune import spearman
from taco import contextual_score, document_segments
from model import BertConfig, BertForPreTraining

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session", autouse=True)
def taco_cache(tmp_path_factory):
    """Toy corpus and token cache in a temp dir, for this process and its subprocesses."""
    old = os.environ.get("TACO_CACHE")
    os.environ["TACO_CACHE"] = str(tmp_path_factory.mktemp("taco_cache"))
    yield os.environ["TACO_CACHE"]
    if old is None:
        del os.environ["TACO_CACHE"]
    else:
        os.environ["TACO_CACHE"] = old


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


def test_read_pairs_comments_header_and_separators(tmp_path):
    path = tmp_path / "ws.tsv"
    path.write_text("# a comment\nWord 1\tWord 2\tHuman (mean)\n\ncat\tdog\t7.5\n  # indented comment\ncar,bus,6\n")
    assert analyze.read_pairs(str(path)) == [("cat", "dog", 7.5), ("car", "bus", 6.0)]


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
    return subprocess.run([sys.executable, os.path.join(HERE, "analyze.py"), *args],
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
