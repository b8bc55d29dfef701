"""Measure a pre-trained checkpoint the way the TACO paper does (Fu et al., ACL 2022).

    contextual score  intra- minus inter-context similarity of last-layer states on held-out
                      blocks (its Fig. 3b / Fig. 6, appendix A.3), and intra / inter (Table 9):
                      cosine, dot product, or L1 / L2 / L10 distance; a context is a packed
                      block, or one document of a block (documents end with [SEP] inside blocks)
    word similarity   mean cosine of the input embeddings of the WordSim353-style pairs that
                      co-occur in a held-out document (its Fig. 3a); extra: the Spearman
                      correlation of the cosine with the human scores over all pairs
    self-similarity   per layer, the mean cosine of two distinct tokens of one sequence (TaCL's
                      analysis, Su et al. 2022), and with --heatmap one sentence's token-by-token cosines
    sentence probes   what RetroMAE trains, the [CLS] vector as a sentence embedding (docs/retromae.md):
                      retrieval in the BEIR layout (nDCG@10, MRR@10, Recall@100) and STS-format
                      similarity (Spearman of the cosine with the gold scores)

    python analyze.py --model runs/taco                       # toy corpus and toy word pairs
    python analyze.py --model runs/taco/ckpt_00000400.pt --metrics cosine,dot,l1,l2,l10 --json a.json
    python analyze.py --model hf_bert_dir --data wikitext103 --pairs wordsim353.tsv --max_len 256
    python analyze.py --model runs/tacl --heatmap heatmap.png  # + one sentence's token x token cosines
    python analyze.py --model runs/retromae --retrieval toy --sts toy   # + the sentence probes
    python analyze.py --model hf_bert_dir --retrieval path/to/beir/scifact --similarity cos

For distances the score is inter - intra, so for every metric a positive score means that
tokens of one context are closer to each other than to tokens of other contexts.
"""
import argparse
import json
import math
import os

import cli  # before torch: cli sets how idle CPU threads wait
import numpy as np
import torch
import torch.nn.functional as F

import runs
from cli import UsageError, int_range
from data import load_tokenizer, make_blocks, tokenize_corpus
from finetune import load_pretrained, spearman
from model import Bert
from taco import context_groups, pair_sums
from toy import toy_corpus, toy_sentence_eval

METRICS = ("cosine", "dot", "l1", "l2", "l10")


# ----------------------------------------------------------------------------- contextual score

def distance_score(h, real, p, groups=None):
    """Sums of the L_p distance over ordered pairs of distinct real tokens in the same context
    (intra) and in different contexts (inter) of one batch, with their counts, so that batches
    can be pooled. h: (B, T, H); real: (B, T) bool; groups: (B, T) context ids (default: block)."""
    B, T, H = h.shape
    if groups is None:
        groups = torch.arange(B, device=h.device)[:, None].expand(B, T)
    z, g = h.double()[real], groups[real]  # (N, H), (N,) real tokens, grouped by block
    block = torch.arange(B, device=h.device).repeat_interleave(real.sum(1))  # (N,) their block
    out = {"intra_sum": 0.0, "intra_n": 0.0, "inter_sum": 0.0, "inter_n": 0.0}
    for b in range(B):  # one block's tokens against all tokens: memory T x N, not N x N
        rows = block == b
        d = torch.cdist(z[rows], z, p=p)  # (n_b, N); self-distances are 0
        same = g[rows][:, None] == g[None, :]  # (n_b, N) same context, self included
        out["intra_sum"] += d[same].sum().item()
        out["intra_n"] += int(same.sum()) - int(rows.sum())  # minus the self pairs
        out["inter_sum"] += d[~same].sum().item()
        out["inter_n"] += int((~same).sum())
    return out


@torch.no_grad()
def context_scores(encoder, batches, metrics=("cosine",), sep_id=None):
    """{metric: {intra, inter, score, ratio}} of the encoder's last-layer states over `batches`
    (the paper's Table 9). A context is a packed block, or with `sep_id` one document of a block
    (taco.contextual_score's two forms; its cosine is this one). cosine / dot: mean similarity,
    score = intra - inter; l1 / l2 / l10: mean distance, score = inter - intra: a positive score
    always means a context's tokens are closer to each other than to other contexts' tokens.
    ratio = intra / inter (> 1 for similarities, < 1 for distances means the same)."""
    was_training = encoder.training
    encoder.eval()
    sums = {m: {"intra_sum": 0.0, "intra_n": 0.0, "inter_sum": 0.0, "inter_n": 0.0} for m in metrics}
    for ids in batches:
        h, _ = encoder(ids)
        real = torch.ones(ids.shape, dtype=torch.bool, device=ids.device)
        groups = context_groups(ids, sep_id)
        for m in metrics:
            if m in ("cosine", "dot"):
                part = pair_sums(F.normalize(h.float(), dim=-1) if m == "cosine" else h, groups, real)
            else:
                part = distance_score(h, real, int(m[1:]), groups)
            for k, v in part.items():
                sums[m][k] += v
    encoder.train(was_training)
    out = {}
    for m, s in sums.items():
        intra, inter = s["intra_sum"] / max(s["intra_n"], 1), s["inter_sum"] / max(s["inter_n"], 1)
        score = intra - inter if m in ("cosine", "dot") else inter - intra
        out[m] = {"intra": intra, "inter": inter, "score": score, "ratio": intra / inter if inter else float("nan")}
    return out


def heldout_batches(data, tok, max_len, eval_blocks, batch_size, cache_dir=None):
    """The last `eval_blocks` blocks of the corpus (at most a tenth), as taco.py's evaluate
    holds them out, in batches of int64 ids."""
    blocks = make_blocks(tokenize_corpus(data, tok, cache_dir), max_len, tok.cls_id, tok.sep_id)
    n_eval = min(eval_blocks, len(blocks) // 10) or min(eval_blocks, len(blocks))
    _, held = blocks.split(len(blocks) - n_eval)
    return [torch.from_numpy(held[i:i + batch_size].astype(np.int64)) for i in range(0, n_eval, batch_size)]


# ----------------------------------------------------------------------------- self-similarity per layer (TaCL)

@torch.no_grad()
def self_similarity(encoder, batches):
    """TaCL's anisotropy analysis (Su et al. 2022): for each layer 1..L, the mean cosine of two
    distinct tokens of one sequence, pooled over sequences (sum of cosines / number of pairs).
    The last layer's is contextual_score's intra. -> [layer 1, ..., layer L].
    For unit vectors z of one sequence, the sum over its ordered pairs is |sum z|^2 - n."""
    was_training = encoder.training
    encoder.eval()
    sums, pairs = 0.0, 0
    for ids in batches:
        B, n = ids.shape
        z = F.normalize(torch.stack(encoder.hidden_states(ids)[1:]).double(), dim=-1)  # (L, B, T, H)
        sums = sums + (z.sum(2).pow(2).sum(-1) - n).sum(1)  # (L,)
        pairs += B * n * (n - 1)
    encoder.train(was_training)
    return (sums / pairs).tolist()


TACL_SENTENCE = "The movement has received support from noted science bloggers, such as biologist Jonathan Eisen."


def heatmap_sentence(data, cache_dir=None):
    """The sentence of TaCL's heatmap; for the toy corpus (whose vocab lacks its words) the corpus's first one."""
    if data != "toy":
        return TACL_SENTENCE
    with open(os.path.join(toy_corpus(cache_dir), "train.txt"), encoding="utf-8") as f:
        return f.readline().strip()


@torch.no_grad()
def token_cosines(encoder, tok, sentence):
    """[CLS] sentence [SEP] -> (tokens, (T, T) cosines of every two of its last-layer states)."""
    tokens = ["[CLS]", *tok.tokenize(sentence)[:encoder.config.max_position_embeddings - 2], "[SEP]"]
    ids = torch.tensor([[tok.vocab[t] for t in tokens]])
    was_training = encoder.training
    h, _ = encoder.eval()(ids)
    encoder.train(was_training)
    z = F.normalize(h[0].double(), dim=-1)
    return tokens, (z @ z.T).numpy()


def plot_heatmaps(panels, tokens, path):
    """One token x token cosine heatmap per model ({name: (T, T)}) side by side, as TaCL's
    Fig. 1 draws them. matplotlib is optional: without it a note and no file."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: pip install matplotlib for the heatmap; the self-similarity numbers are above")
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 0.8, 4.2), squeeze=False)
    low = min(0.0, *(float(m.min()) for m in panels.values()))  # one colour scale for every panel
    for ax, (name, matrix) in zip(axes[0], panels.items()):
        im = ax.imshow(matrix, cmap="Blues", vmin=low, vmax=1.0)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=6)
        ax.set_title(name, fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="cosine")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    print(f"heatmap: {path}")


# ----------------------------------------------------------------------------- word similarity

def read_pairs(path):
    """[(word1, word2, score)] of a WordSim353-format file: `word1<TAB>word2<TAB>score`,
    '#' comments and blank lines ignored; a first line without a numeric score is a header."""
    if not os.path.lexists(path):
        raise UsageError(f"word-pair file {path} not found: pass a WordSim353-format file (word1<TAB>word2<TAB>score)")
    cli.regular_file(path, "word-pair file")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError:
        raise UsageError(f"word-pair file {path} is not UTF-8 text") from None
    pairs, first = [], True
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split("\t") if "\t" in line else line.split(",") if "," in line else line.split()
        try:
            if len(cols) != 3:
                raise ValueError
            score = float(cols[2])
            if not math.isfinite(score):
                raise ValueError
        except ValueError:
            if first:  # WordSim353's own files open with "Word 1<TAB>Word 2<TAB>Human (mean)"
                first = False
                continue
            raise UsageError(f"{path} line {no}: expected word1<TAB>word2<TAB>score, got {line[:60]!r}") from None
        first = False
        pairs.append((cols[0].strip(), cols[1].strip(), score))
    if not pairs:
        raise UsageError(f"word-pair file {path} holds no pairs: add lines word1<TAB>word2<TAB>score")
    return pairs


def cooccurring(id_pairs, batches, sep_id):
    """The (id1, id2) pairs whose two tokens occur together in one document of a block."""
    wanted = {i for pair in id_pairs for i in pair}
    together = set()
    for ids in batches:
        groups = context_groups(ids, sep_id)
        docs = {}  # context id -> the wanted tokens in it
        for g, i in zip(groups.flatten().tolist(), ids.flatten().tolist()):
            if i in wanted:
                docs.setdefault(g, set()).add(i)
        together.update(pair for pair in id_pairs if any(set(pair) <= d for d in docs.values()))
    return together


def word_similarity(embeddings, tok, pairs, batches=None):
    """Word pairs whose two words are single tokens of the vocab (others are counted):

    cooc_mean_cosine   the paper's Fig. 3a: mean cosine of the input embeddings of the pairs
                       that co-occur, i.e. both words in one document of the `batches` blocks
    spearman           an extra: Spearman correlation of the cosine with the human scores
    mean_cosine        the mean cosine over all usable pairs
    """
    kept, cos, human = [], [], []
    for w1, w2, score in pairs:
        ids = [tok.encode(w) for w in (w1, w2)]
        if all(len(i) == 1 and i[0] != tok.unk_id for i in ids):
            kept.append((ids[0][0], ids[1][0]))
            human.append(score)
            cos.append(F.cosine_similarity(embeddings[ids[0][0]], embeddings[ids[1][0]], dim=0).item())
    together = cooccurring(kept, batches, tok.sep_id) if batches is not None else set()
    cooc = [c for pair, c in zip(kept, cos) if pair in together]
    return {"pairs": len(pairs), "used": len(kept), "skipped": len(pairs) - len(kept),
            "cooc_pairs": len(cooc), "cooc_mean_cosine": float(np.mean(cooc)) if cooc else float("nan"),
            "mean_cosine": float(np.mean(cos)) if cos else float("nan"),
            "spearman": spearman(cos, human) if len(cos) > 1 else float("nan")}


# ----------------------------------------------------------------------------- sentence embeddings

@torch.no_grad()
def embed(encoder, tok, texts, max_len=128, batch_size=64):
    """(N, H) float32 sentence embeddings: the last-layer [CLS] state of `[CLS] text [SEP]`
    (cut to max_len), no pooler, as RetroMAE's retriever. Batches of similar length."""
    was_training = encoder.training
    encoder.eval()
    device = next(encoder.parameters()).device
    ids = [[tok.cls_id] + tok.encode(t)[:max_len - 2] + [tok.sep_id] for t in texts]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.empty(len(ids), encoder.config.hidden_size)
    for i in range(0, len(order), batch_size):
        rows = order[i:i + batch_size]
        T = max(len(ids[r]) for r in rows)
        batch = torch.full((len(rows), T), tok.pad_id, dtype=torch.long)
        for j, r in enumerate(rows):
            batch[j, :len(ids[r])] = torch.tensor(ids[r])
        h, _ = encoder(batch.to(device), attention_mask=(batch != tok.pad_id).to(device))
        out[rows] = h[:, 0].float().cpu()
    encoder.train(was_training)
    return out


def _read_jsonl(path, what):
    rows = []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                    title = row.get("title") or ""
                    rows.append((str(row["_id"]), f"{title} {row['text']}" if title else row["text"]))
                except (ValueError, KeyError, TypeError):
                    raise UsageError(f"{path} line {no}: expected a JSON object with _id and text ({what})") from None
    return rows


def read_beir(folder, split="test"):
    """A BEIR data set folder -> (corpus [(id, text)], queries [(id, text)], qrels {qid: {doc id: grade}}).
    Layout: corpus.jsonl ({"_id", "title", "text"}), queries.jsonl ({"_id", "text"}),
    qrels/<split>.tsv (query-id, corpus-id, score; a header line). Title and text are joined."""
    paths = [os.path.join(folder, n) for n in ("corpus.jsonl", "queries.jsonl", os.path.join("qrels", f"{split}.tsv"))]
    for path in paths:
        if not os.path.isfile(path):
            raise UsageError(f"{path} not found: --retrieval takes a BEIR folder (corpus.jsonl, queries.jsonl, "
                             f"qrels/{split}.tsv)")
    corpus, queries = _read_jsonl(paths[0], "a document"), _read_jsonl(paths[1], "a query")
    qrels = {}
    with open(paths[2], encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if no == 1 and not cols[-1].strip().lstrip("-").isdigit():
                continue  # the header
            if len(cols) != 3 or not cols[2].strip().lstrip("-").isdigit():
                raise UsageError(f"{paths[2]} line {no}: expected query-id<TAB>corpus-id<TAB>integer score")
            qrels.setdefault(cols[0], {})[cols[1]] = int(cols[2])
    return corpus, queries, qrels


def retrieval_metrics(scores, relevance, k_ndcg=10, k_mrr=10, k_recall=100):
    """BEIR's measures (as pytrec_eval computes them) of a (Q, D) score matrix -> means over queries.
    relevance: per query, {document index: grade}. nDCG@k: gain = grade, discount log2(rank + 1),
    ideal from all graded documents; MRR@k: 1 / rank of the first document of grade > 0 in the
    top k, else 0; Recall@k: share of the grade > 0 documents in the top k. Ties: earlier document first."""
    k_max = min(max(k_ndcg, k_mrr, k_recall), scores.size(1))
    top = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k_max]  # (Q, k)
    ndcg, mrr, recall = [], [], []
    for q, rel in enumerate(relevance):
        ranked = [rel.get(d, 0) for d in top[q].tolist()]
        discount = [1 / math.log2(r + 2) for r in range(k_max)]
        ideal = sorted(rel.values(), reverse=True)[:k_ndcg]
        idcg = sum(g * d for g, d in zip(ideal, discount))
        ndcg.append(sum(g * d for g, d in zip(ranked[:k_ndcg], discount)) / idcg if idcg > 0 else 0.0)
        first = next((r for r, g in enumerate(ranked[:k_mrr]) if g > 0), None)
        mrr.append(0.0 if first is None else 1 / (first + 1))
        n_rel = sum(g > 0 for g in rel.values())
        recall.append(sum(g > 0 for g in ranked[:k_recall]) / n_rel if n_rel else 0.0)
    return {f"ndcg@{k_ndcg}": float(np.mean(ndcg)), f"mrr@{k_mrr}": float(np.mean(mrr)),
            f"recall@{k_recall}": float(np.mean(recall)), "queries": len(relevance)}


def cls_retrieval(encoder, tok, folder, similarity="dot", max_len=128, split="test"):
    """Zero-shot dense retrieval with [CLS] vectors on a BEIR folder: dot product (RetroMAE's
    choice) or cosine. Queries without judgements are left out, as BEIR does."""
    corpus, queries, qrels = read_beir(folder, split)
    queries = [(qid, text) for qid, text in queries if qid in qrels]
    if not queries or not corpus:
        raise UsageError(f"{folder}: no judged queries or no documents")
    doc_index = {did: i for i, (did, _) in enumerate(corpus)}
    d = embed(encoder, tok, [t for _, t in corpus], max_len)
    q = embed(encoder, tok, [t for _, t in queries], max_len)
    if similarity == "cos":
        d, q = F.normalize(d, dim=-1), F.normalize(q, dim=-1)
    relevance = [{doc_index[did]: g for did, g in qrels[qid].items() if did in doc_index} for qid, _ in queries]
    return {"similarity": similarity, "documents": len(corpus), **retrieval_metrics(q @ d.T, relevance)}


def read_sts(path):
    """[(sentence1, sentence2, score)] of an STS-format TSV with a header (STS-B's columns
    sentence1, sentence2 and score, or the first three columns when those names are absent)."""
    if not os.path.isfile(path):
        raise UsageError(f"STS file {path} not found: pass a TSV with sentence1, sentence2, score columns")
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    header = rows.pop(0) if rows else []
    cols = [header.index(c) for c in ("sentence1", "sentence2", "score")] if {"sentence1", "sentence2", "score"} <= set(header) \
        else [0, 1, 2]
    pairs = []
    for no, row in enumerate(rows, 2):
        try:
            pairs.append((row[cols[0]], row[cols[1]], float(row[cols[2]])))
        except (IndexError, ValueError):
            raise UsageError(f"{path} line {no}: expected sentence1<TAB>sentence2<TAB>score") from None
    if len(pairs) < 2:
        raise UsageError(f"STS file {path} holds fewer than two pairs")
    return pairs


def sentence_similarity(encoder, tok, pairs, max_len=128):
    """Spearman of the [CLS] cosine with the gold scores, no fine-tuning (SimCSE-style STS)."""
    a = embed(encoder, tok, [p[0] for p in pairs], max_len)
    b = embed(encoder, tok, [p[1] for p in pairs], max_len)
    cos = F.cosine_similarity(a, b, dim=-1)
    return {"pairs": len(pairs), "spearman": spearman(cos.tolist(), [p[2] for p in pairs]),
            "mean_cosine": cos.mean().item()}


# ----------------------------------------------------------------------------- one checkpoint

def load_encoder(spec):
    """-> (Bert encoder, tokenizer, checkpoint args or {}, source) of a taco run directory,
    checkpoint file or Hugging Face directory (finetune.load_pretrained finds and checks it)."""
    config, weights, vocab, source = load_pretrained(spec)
    encoder = Bert(config)
    encoder.load_state_dict({k[5:]: v for k, v in weights.items() if k.startswith("bert.")})
    run_args = {}
    if os.path.isfile(source):
        cfg = os.path.join(os.path.dirname(source), "config.json")
        if os.path.isfile(cfg):
            run_args = runs.read_json(cfg).get("args", {})
    return encoder.eval(), load_tokenizer(vocab), run_args, source


def analyze(encoder, tok, batches, pairs, metrics=("cosine",)):
    """Everything this script measures, as one dict: the contextual score with blocks as
    contexts ("context") and with documents as contexts ("context_doc"), word similarity."""
    return {"context": context_scores(encoder, batches, metrics),
            "context_doc": context_scores(encoder, batches, metrics, tok.sep_id),
            "wordsim": word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs, batches),
            "self_similarity": self_similarity(encoder, batches)}


def format_report(result):
    lines = [f"{'contextual score':<26}{'intra':>9}{'inter':>9}{'score':>9}{'ratio':>9}"]
    for form, label in (("context", "block"), ("context_doc", "document")):
        for m, r in result[form].items():
            lines.append(f"  {m + ', ' + label + 's':<24}{r['intra']:>9.4f}{r['inter']:>9.4f}"
                         f"{r['score']:>9.4f}{r['ratio']:>9.4f}")
    lines.append("self-similarity per layer (TaCL): "
                 + ", ".join(f"{i} {v:.3f}" for i, v in enumerate(result["self_similarity"], 1)))
    w = result["wordsim"]
    lines.append(f"word similarity (Fig. 3a): mean cosine {w['cooc_mean_cosine']:.4f} of the {w['cooc_pairs']} "
                 f"pairs that co-occur in a held-out document")
    lines.append(f"  extra: Spearman {w['spearman']:.4f} with the human scores, mean cosine {w['mean_cosine']:.4f}, "
                 f"over {w['used']} pairs ({w['skipped']} of {w['pairs']} skipped: not single tokens)")
    if "retrieval" in result:
        r = result["retrieval"]
        lines.append(f"[CLS] retrieval ({r['similarity']}, {r['queries']} queries, {r['documents']} documents): "
                     f"nDCG@10 {r['ndcg@10']:.4f}, MRR@10 {r['mrr@10']:.4f}, Recall@100 {r['recall@100']:.4f}")
    if "sts" in result:
        lines.append(f"[CLS] sentence similarity: Spearman {result['sts']['spearman']:.4f} over {result['sts']['pairs']} pairs")
    return "\n".join(lines)


def main(argv=None):
    p = cli.ArgumentParser(description="Contextual score and word similarity of a checkpoint.",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="runs/taco", help="taco run directory (its newest checkpoint), "
                   "checkpoint file, or Hugging Face BERT directory with vocab.txt")
    p.add_argument("--data", default=None, help="text for the contextual score (as taco.py --data); "
                   "default: the run's own --data, else toy")
    p.add_argument("--max_len", type=int_range(8, 512), default=None, help="block length; default: the run's, else 128")
    p.add_argument("--eval_blocks", type=int_range(2), default=64,
                   help="held-out blocks: the corpus's last ones, as in taco.py")
    p.add_argument("--batch_size", type=int_range(2), default=32,
                   help="blocks per batch; 'inter' pairs come from one batch")
    p.add_argument("--metrics", default="cosine", help=f"comma-separated: {', '.join(METRICS)}")
    p.add_argument("--pairs", default="toy", help="WordSim353-format file (word1<TAB>word2<TAB>score), "
                   "or toy: the toy corpus's wordsim.txt")
    p.add_argument("--cache_dir", default=None, help="toy corpus / token cache (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--retrieval", default=None, help="also: [CLS] retrieval on a BEIR folder (corpus.jsonl, "
                   "queries.jsonl, qrels/test.tsv), or toy: the toy grammar's")
    p.add_argument("--similarity", default="dot", choices=["dot", "cos"], help="retrieval score of two [CLS] vectors")
    p.add_argument("--sts", default=None, help="also: Spearman of the [CLS] cosine on an STS-format TSV "
                   "(sentence1, sentence2, score), or toy")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    cli.add_threads_flag(p)
    p.add_argument("--heatmap", default=None, help="PNG of one sentence's token x token last-layer cosines")
    p.add_argument("--sentence", default=None, help="the heatmap's sentence (default: TaCL's; for --data toy "
                   "the toy corpus's first)")
    args = p.parse_args(argv)
    with cli.errors():
        cli.set_threads(args.threads)
        metrics = [m.strip().lower() for m in args.metrics.split(",") if m.strip()]
        bad = [m for m in metrics if m not in METRICS]
        if bad or not metrics:
            raise UsageError(f"unknown metric {', '.join(bad) or repr(args.metrics)}; choose from {', '.join(METRICS)}")
        pairs_file = os.path.join(toy_corpus(args.cache_dir), "wordsim.txt") if args.pairs == "toy" else args.pairs
        pairs = read_pairs(pairs_file)  # every user mistake is caught before the model runs
        for flag in ("json", "heatmap"):
            if getattr(args, flag):
                cli.output_path(getattr(args, flag), f"--{flag}", folder=False)
        toy_eval = toy_sentence_eval(args.cache_dir) if "toy" in (args.retrieval, args.sts) else None
        retrieval = args.retrieval and (os.path.join(toy_eval, "retrieval") if args.retrieval == "toy" else args.retrieval)
        sts_pairs = args.sts and read_sts(os.path.join(toy_eval, "sts.tsv") if args.sts == "toy" else args.sts)
        if retrieval:
            read_beir(retrieval)  # a bad folder fails before the model runs
        encoder, tok, run_args, source = load_encoder(args.model)
        if word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs)["used"] == 0:
            raise UsageError(f"none of the {len(pairs)} pairs of {pairs_file} are two single tokens of "
                             f"this model's vocab; pass --pairs for its vocabulary")
        data = args.data or run_args.get("data", "toy")
        max_len = args.max_len or run_args.get("max_len", 128)
        if not 8 <= max_len <= encoder.config.max_position_embeddings:
            raise UsageError(f"--max_len {max_len}: give 8 to {encoder.config.max_position_embeddings}")
        batches = heldout_batches(data, tok, max_len, args.eval_blocks, args.batch_size, args.cache_dir)
        if len(batches[0]) < 2:
            raise UsageError(f"{data} gives only one block of {max_len} tokens: 'inter' pairs need two; "
                             f"pass more text or a smaller --max_len")
        result = {"model": source, "data": data, "max_len": max_len, "blocks": sum(len(b) for b in batches),
                  "pairs_file": pairs_file, **analyze(encoder, tok, batches, pairs, metrics)}
        if retrieval:
            result["retrieval"] = {"folder": retrieval, **cls_retrieval(encoder, tok, retrieval, args.similarity, max_len)}
        if sts_pairs:
            result["sts"] = sentence_similarity(encoder, tok, sts_pairs, max_len)
        print(f"{source}: {result['blocks']} held-out blocks of {max_len} from {data}")
        print(format_report(result))
        if args.heatmap:
            tokens, cosines = token_cosines(encoder, tok, args.sentence or heatmap_sentence(data, args.cache_dir))
            plot_heatmaps({os.path.basename(os.path.normpath(args.model)): cosines}, tokens, args.heatmap)
        if args.json:
            runs.write_json(args.json, result)  # all or nothing
        return result


if __name__ == "__main__":
    main()
