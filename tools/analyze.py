"""Measure a pre-trained checkpoint the way the TACO paper does (Fu et al., ACL 2022): the contextual score (intra-
minus inter-context similarity of last-layer states on held-out blocks, its Fig. 3b / Fig. 6 / appendix A.3, with Table
9's dot-product and L1 / L2 / L10 variants), word similarity (Fig. 3a), TaCL's self-similarity per layer and heatmap,
and the [CLS] vector's sentence probes (retrieval, STS: docs/retromae.md). docs/paper.md says what each number is.

    python tools/analyze.py --model runs/taco                       # toy corpus and toy word pairs
    python tools/analyze.py --model runs/taco/ckpt_00000400.pt --metrics cosine,dot,l1,l2,l10 --json a.json
    python tools/analyze.py --model hf_bert_dir --data wikitext103 --pairs wordsim353.tsv --max_len 256
    python tools/analyze.py --model runs/tacl --heatmap heatmap.png  # + one sentence's token x token cosines
    python tools/analyze.py --model runs/retromae --retrieval toy --sts toy   # + the sentence probes
    python tools/analyze.py --model hf_bert_dir --retrieval path/to/beir/scifact --similarity cos
"""
import json
import math
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the root's modules
from engine import checkpoints, cli  # first, before torch loads (engine/__init__.py)
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm

from data import load_tokenizer, make_blocks
from engine.cli import UsageError, int_range
from engine.corpus import tokenize_corpus
from engine.evalsets import read_beir, read_pairs, read_sts
from engine.tasks import spearman
from engine.toy import toy_corpus, toy_sentence_eval
from finetune import load_pretrained
from model import Bert
from taco import context_groups, pair_sums

METRICS = ("cosine", "dot", "l1", "l2", "l10")
PICTURE_FORMATS = ("png", "pdf", "svg")


# ----------------------------------------------------------------------------- contextual score

def distance_score(h, real, p, groups=None):
    """Sums of the L_p distance over ordered pairs of distinct real tokens in the same context
    (intra) and in different contexts (inter) of one batch, with their counts, so that batches
    can be pooled. h: (B, T, H); real: (B, T) bool; groups: (B, T) context ids (default: block)."""
    block = torch.arange(len(h), device=h.device)[:, None].expand(real.shape)
    z, g, block = h.double()[real], (block if groups is None else groups)[real], block[real]  # (N, H), (N,), (N,)
    intra = inter = same_n = 0
    for b in range(len(h)):  # one block's tokens against all tokens: memory T x N, not N x N
        d = torch.cdist(z[block == b], z, p=p)  # (n_b, N); self-distances are 0
        same = g[block == b][:, None] == g[None, :]  # (n_b, N) same context, self included
        intra += d[same].sum().item()
        inter += d[~same].sum().item()
        same_n += int(same.sum())
    return {"intra_sum": intra, "intra_n": same_n - len(z), "inter_sum": inter, "inter_n": len(z) ** 2 - same_n}


@torch.no_grad()
def context_scores(encoder, batches, metrics=("cosine",), sep_id=None):
    """{metric: {intra, inter, score, ratio}} of the last-layer states over `batches` (the paper's Table 9); a context
    is a block, or with `sep_id` a document (taco.contextual_score's two forms). cosine / dot: mean similarity, score =
    intra - inter; l1 / l2 / l10: mean distance, score = inter - intra. ratio = intra / inter."""
    was_training = encoder.training
    encoder.eval()
    sums = {m: Counter() for m in metrics}  # intra_sum, intra_n, inter_sum, inter_n pooled over batches
    for ids in batches:
        h, _ = encoder(ids)
        real, groups = torch.ones_like(ids, dtype=torch.bool), context_groups(ids, sep_id)
        for m in metrics:
            if m in ("cosine", "dot"):
                sums[m].update(pair_sums(F.normalize(h.float(), dim=-1) if m == "cosine" else h, groups, real))
            else:
                sums[m].update(distance_score(h, real, int(m[1:]), groups))
    encoder.train(was_training)
    out = {}
    for m, s in sums.items():
        intra, inter = s["intra_sum"] / max(s["intra_n"], 1), s["inter_sum"] / max(s["inter_n"], 1)
        score = intra - inter if m in ("cosine", "dot") else inter - intra
        out[m] = {"intra": intra, "inter": inter, "score": score, "ratio": intra / inter if inter else float("nan")}
    return out


def probe_blocks(data, tok, max_len, eval_blocks, trained_on=True, cache_dir=None):
    """-> ((k, max_len) ids of the blocks to probe, what they are): of the text the model trained on, its last
    min(eval_blocks, n // 10) blocks, as taco.py holds them out; other text is all held out: its first eval_blocks."""
    tokens = tokenize_corpus(data, tok, cache_dir)
    blocks = make_blocks(tokens, max_len, tok.cls_id, tok.sep_id)
    n = min(eval_blocks, len(blocks))
    if trained_on:  # taco.py holds out at most a tenth (all of a corpus under ten blocks)
        n = min(eval_blocks, len(blocks) // 10) or n
    first = len(blocks) - n if trained_on else 0
    text = tokens[first * blocks.body:(first + n) * blocks.body]  # the probed tokens, [CLS] / [SEP] of blocks aside
    about = {"blocks": n, "of_blocks": len(blocks), "part": "last" if trained_on else "first",
             "tokens": len(text), "documents": int(np.count_nonzero(text[:-1] == tok.sep_id)) + 1}
    return blocks[first:first + n], about


def heldout_batches(data, tok, max_len, eval_blocks, batch_size, cache_dir=None):
    """The blocks taco.py's evaluate holds out (probe_blocks of the run's own text), in batches of int64 ids."""
    held = probe_blocks(data, tok, max_len, eval_blocks, True, cache_dir)[0]
    return list(torch.from_numpy(held.astype(np.int64)).split(batch_size))


def describe_probe(source, data, max_len, about, eval_blocks):
    """The line that says what was probed."""
    n, of = about["blocks"], about["of_blocks"]
    if about["part"] == "last":
        which = f"the last {n} of its {of:,} blocks of {max_len}, held out from training as taco.py holds them out"
        which += " (at most a tenth: it trained on the rest)" if n < eval_blocks else ""
    elif n == of:
        which = f"all {n} blocks of {max_len} (text the model did not train on is all held out)"
    else:
        which = f"the first {n} of {of:,} blocks of {max_len} (--eval_blocks {eval_blocks}: raise it to probe more)"
    return f"{source}: probing {data}: {which}; {about['tokens']:,} tokens of {about['documents']:,} document(s)"


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


def heatmap_sentence(data, cache_dir=None):
    """The sentence of TaCL's heatmap; for the toy corpus (whose vocab lacks its words) the corpus's first one."""
    if data != "toy":
        return "The movement has received support from noted science bloggers, such as biologist Jonathan Eisen."
    with open(os.path.join(toy_corpus(cache_dir), "train.txt"), encoding="utf-8") as f:
        return f.readline().strip()


@torch.no_grad()
def token_cosines(encoder, tok, sentence):
    """[CLS] sentence [SEP] -> (tokens, (T, T) cosines of every two of its last-layer states)."""
    tokens = ["[CLS]", *tok.tokenize(sentence)[:encoder.config.max_position_embeddings - 2], "[SEP]"]
    was_training = encoder.training
    h, _ = encoder.eval()(torch.tensor([[tok.vocab[t] for t in tokens]]))
    encoder.train(was_training)
    z = F.normalize(h[0].double(), dim=-1)
    return tokens, (z @ z.T).numpy()


# ----------------------------------------------------------------------------- pictures (pictures.py, study.py)

def picture_path(path, flag):
    """Check a picture's path before any work: a file in an existing folder, its extension naming the format."""
    if os.path.splitext(path)[1][1:].lower() not in PICTURE_FORMATS:
        raise UsageError(f"{flag} {path}: name a .{', .'.join(PICTURE_FORMATS)} file")
    return cli.output_path(path, flag, folder=False)


def pyplot(need=None):
    """matplotlib's pyplot drawing to files, or None where matplotlib is not installed (taco runs without it);
    with `need` (the tool that cannot draw without it), the error that says how to install it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if need:
            raise UsageError(f"{need} draws with matplotlib, which is not installed: pip install matplotlib") from None
        return None
    return plt


def save_figure(fig, path, plt):
    """Write a figure whole (a temp file, then renamed; its folder made if missing) at 150 dpi: fit to print."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fmt = os.path.splitext(path)[1][1:].lower() or "png"
    checkpoints.atomic_write(path, lambda f: fig.savefig(f, format=fmt, dpi=150, bbox_inches="tight"))
    plt.close(fig)


def plot_heatmaps(panels, tokens, path):
    """A token x token cosine heatmap per model ({name: (T, T)}), as TaCL's Fig. 1; no matplotlib: a note."""
    if (plt := pyplot()) is None:
        return print("note: pip install matplotlib for the heatmap; the self-similarity numbers are above")
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 0.8, 4.2), squeeze=False)
    low = min(0.0, *(float(m.min()) for m in panels.values()))  # one colour scale for every panel
    for ax, (name, matrix) in zip(axes[0], panels.items()):
        im = ax.imshow(matrix, cmap="Blues", vmin=low, vmax=1.0)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=6)
        ax.set_title(name, fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="cosine")
    save_figure(fig, path, plt)
    print(f"heatmap: {path}")


# ----------------------------------------------------------------------------- word similarity

def word_similarity(embeddings, tok, pairs, batches=None):
    """Word pairs whose two words are single tokens of the vocab (others are counted): cooc_mean_cosine, the paper's
    Fig. 3a, the mean cosine of the input embeddings of the pairs that co-occur (both words in one document of the
    `batches` blocks); extras: spearman, of the cosine with the human scores, and mean_cosine over all usable pairs."""
    kept = [(a[0], b[0], score) for a, b, score in ((tok.encode(w1), tok.encode(w2), s) for w1, w2, s in pairs)
            if len(a) == len(b) == 1 and tok.unk_id not in (a[0], b[0])]  # (id1, id2, human score)
    cos = [F.cosine_similarity(embeddings[a], embeddings[b], dim=0).item() for a, b, _ in kept]
    wanted, where = {i for a, b, _ in kept for i in (a, b)}, {}  # where: token id -> its documents
    for n, ids in enumerate(batches or []):
        for g, i in zip(context_groups(ids, tok.sep_id).flatten().tolist(), ids.flatten().tolist()):
            if i in wanted:
                where.setdefault(i, set()).add((n, g))  # (batch, document of a block)
    cooc = [c for (a, b, _), c in zip(kept, cos) if where.get(a, set()) & where.get(b, set())]
    return {"pairs": len(pairs), "used": len(kept), "skipped": len(pairs) - len(kept),
            "cooc_pairs": len(cooc), "cooc_mean_cosine": float(np.mean(cooc)) if cooc else float("nan"),
            "mean_cosine": float(np.mean(cos)) if cos else float("nan"),
            "spearman": spearman(cos, [s for _, _, s in kept]) if len(cos) > 1 else float("nan")}


# ----------------------------------------------------------------------------- sentence embeddings

@torch.no_grad()
def embed(encoder, tok, texts, max_len=128, batch_size=64, desc=None):
    """(N, H) float32 sentence vectors: the last-layer [CLS] state of `[CLS] text [SEP]` (cut to max_len), no
    pooler, as RetroMAE's retriever reads it. Batches of similar length; a progress bar named `desc`."""
    was_training = encoder.training
    encoder.eval()
    device = next(encoder.parameters()).device
    ids = [[tok.cls_id] + tok.encode(t)[:max_len - 2] + [tok.sep_id] for t in texts]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.empty(len(ids), encoder.config.hidden_size)
    for i in tqdm(range(0, len(order), batch_size), desc=desc, disable=None if desc else True, leave=False):
        rows = order[i:i + batch_size]
        batch = pad_sequence([torch.tensor(ids[r]) for r in rows], batch_first=True, padding_value=tok.pad_id)
        h, _ = encoder(batch.to(device), attention_mask=(batch != tok.pad_id).to(device))
        out[rows] = h[:, 0].float().cpu()
    encoder.train(was_training)
    return out


def retrieval_metrics(scores, relevance, k_ndcg=10, k_mrr=10, k_recall=100, doc_ids=None, skip=None):
    """BEIR's measures, as pytrec_eval (trec_eval) computes them, of a (Q, D) score matrix -> means over queries.

    relevance  per query, {document id: grade}; the ids are `doc_ids` (default: the column numbers).
               A judged document that is no column is never retrieved, but counts in the ideal
               ranking and in the number of relevant documents (as in BEIR and trec_eval).
    skip       per query, a column left out of its ranking, or None (BEIR's ignore_identical_ids).
    ranking    score descending, ties by document id descending: trec_eval's rule.
    nDCG@k     gain = grade (negative grades count 0), discount log2(rank + 1), ideal from every judged document.
    MRR@k      1 / rank of the first document of grade > 0 in the top k, else 0.
    Recall@k   the share of the grade > 0 documents in the top k (0 for a query without any).
    """
    Q, D = scores.shape
    doc_ids = list(range(D)) if doc_ids is None else doc_ids
    by_id = torch.tensor(sorted(range(D), key=doc_ids.__getitem__, reverse=True), dtype=torch.long)
    k_max = max(k_ndcg, k_mrr, k_recall)
    k_sort = min(k_max + (skip is not None), D)
    discount = [1 / math.log2(r + 2) for r in range(k_ndcg)]
    dcg = lambda grades: sum(max(g, 0) * d for g, d in zip(grades, discount))  # of the first k_ndcg
    ndcg, mrr, recall = [], [], []
    for start in range(0, Q, 256):  # a stable sort over columns in id order: equal scores stay id-descending
        part = scores[start:start + 256, by_id]
        top = by_id[torch.sort(part, dim=1, descending=True, stable=True).indices[:, :k_sort]]
        for q, cols in enumerate(top.tolist(), start):
            rel = relevance[q]
            ranked = [rel.get(doc_ids[c], 0) for c in cols if skip is None or c != skip[q]][:k_max]
            idcg = dcg(sorted(rel.values(), reverse=True))
            ndcg.append(dcg(ranked) / idcg if idcg > 0 else 0.0)
            mrr.append(next((1 / (r + 1) for r, g in enumerate(ranked[:k_mrr]) if g > 0), 0.0))
            n_rel = sum(g > 0 for g in rel.values())
            recall.append(sum(g > 0 for g in ranked[:k_recall]) / n_rel if n_rel else 0.0)
    return {f"ndcg@{k_ndcg}": float(np.mean(ndcg)), f"mrr@{k_mrr}": float(np.mean(mrr)),
            f"recall@{k_recall}": float(np.mean(recall)), "queries": Q}


def dense_retrieval(encoder, tok, beir, similarity="dot", max_len=128):
    """Zero-shot dense retrieval on a BEIR set (read_beir's), each text its [CLS] vector, ranked by dot product
    (RetroMAE's) or cosine; as BEIR: unjudged queries left out, a document never ranked for a query of its id."""
    corpus, queries, qrels = beir
    judged = [(qid, text) for qid, text in queries if qid in qrels]
    doc_ids = [did for did, _ in corpus]
    d = embed(encoder, tok, [t for _, t in corpus], max_len, desc="embedding documents")
    q = embed(encoder, tok, [t for _, t in judged], max_len, desc="embedding queries")
    if similarity == "cos":
        d, q = F.normalize(d, dim=-1), F.normalize(q, dim=-1)
    column = {did: i for i, did in enumerate(doc_ids)}
    skip = [column.get(qid) for qid, _ in judged]
    metrics = retrieval_metrics(q @ d.T, [qrels[qid] for qid, _ in judged], doc_ids=doc_ids, skip=skip)
    return {"similarity": similarity, "documents": len(corpus), **metrics,
            "same_id_skipped": sum(c is not None for c in skip)}


def sentence_similarity(encoder, tok, pairs, max_len=128):
    """Spearman of the cosine of two [CLS] vectors with the gold scores, no fine-tuning (SimCSE-style STS)."""
    cos = F.cosine_similarity(*(embed(encoder, tok, [p[i] for p in pairs], max_len) for i in (0, 1)), dim=-1)
    return {"pairs": len(pairs), "spearman": spearman(cos.tolist(), [p[2] for p in pairs]),
            "mean_cosine": cos.mean().item()}


# ----------------------------------------------------------------------------- one checkpoint

def load_encoder(spec):
    """-> (Bert encoder, tokenizer, checkpoint args or {}, source) of a taco run directory, checkpoint file or Hugging
    Face directory (finetune.load_pretrained finds and checks it); its vocab.txt must fit the embeddings."""
    config, weights, vocab, source = load_pretrained(spec)
    tok = load_tokenizer(vocab)
    if tok.vocab_size != config.vocab_size:  # more: ids past the embeddings; fewer: most likely another vocab
        raise UsageError(f"{spec}: its vocab.txt has {tok.vocab_size:,} tokens but the model has {config.vocab_size:,} "
                         f"word embeddings; put beside it the vocab.txt the model was trained with")
    encoder = Bert(config)
    encoder.load_state_dict({k[5:]: v for k, v in weights.items() if k.startswith("bert.")})
    cfg = os.path.join(os.path.dirname(source), "config.json")
    run_args = checkpoints.read_json(cfg)["args"] if os.path.isfile(source) and os.path.isfile(cfg) else {}
    return encoder.eval(), tok, run_args, source


def analyze(encoder, tok, batches, pairs, metrics=("cosine",)):
    """The probes of the held-out blocks, as one dict: the contextual score with blocks as contexts
    ("context") and with documents as contexts ("context_doc"), word similarity, self-similarity."""
    return {"context": context_scores(encoder, batches, metrics),
            "context_doc": context_scores(encoder, batches, metrics, tok.sep_id),
            "wordsim": word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs, batches),
            "self_similarity": self_similarity(encoder, batches)}


def format_report(result):
    lines = [f"{'contextual score':<26}{'intra':>9}{'inter':>9}{'score':>9}{'ratio':>9}"]
    lines += [f"  {m + ', ' + label + 's':<24}" + "".join(f"{r[k]:>9.4f}" for k in ("intra", "inter", "score", "ratio"))
              for form, label in (("context", "block"), ("context_doc", "document")) for m, r in result[form].items()]
    lines.append("self-similarity per layer (TaCL): "
                 + ", ".join(f"{i} {v:.3f}" for i, v in enumerate(result["self_similarity"], 1)))
    w = result["wordsim"]
    lines.append(f"word similarity (Fig. 3a): mean cosine {w['cooc_mean_cosine']:.4f} of the {w['cooc_pairs']} "
                 f"pairs that co-occur in a held-out document" if w["cooc_pairs"] else
                 "word similarity (Fig. 3a): no pair co-occurs in a held-out document (probe more text)")
    lines.append(f"  extra: Spearman {w['spearman']:.4f} with the human scores, mean cosine {w['mean_cosine']:.4f}, "
                 f"over {w['used']} pairs ({w['skipped']} of {w['pairs']} skipped: not single tokens)")
    if r := result.get("retrieval"):
        lines.append(f"retrieval (cls pooling, {r['similarity']}, {r['queries']} queries, {r['documents']} documents): "
                     f"nDCG@10 {r['ndcg@10']:.4f}, MRR@10 {r['mrr@10']:.4f}, Recall@100 {r['recall@100']:.4f}")
    if s := result.get("sts"):
        lines.append(f"sentence similarity (cls pooling, cosine): Spearman {s['spearman']:.4f} over {s['pairs']} pairs")
    return "\n".join(lines)


def main(argv=None):
    p = cli.ArgumentParser(description="Probes of a checkpoint: contextual score, self-similarity, word similarity; "
                           "with --retrieval / --sts, its [CLS] sentence vectors.", formatter_class=cli.HelpFormatter)
    add = p.add_argument
    add("--model", default="runs/taco", help="taco run directory (its newest checkpoint), checkpoint file, or Hugging "
        "Face BERT directory with vocab.txt")
    add("--data", help="text for the contextual score (as taco.py --data); default: the run's, else toy")
    add("--max_len", type=int_range(8, 512), help="block length; default: the run's, else 128")
    add("--eval_blocks", type=int_range(2), default=64, help="blocks probed: of the run's own text its last ones, as "
        "taco.py holds them out (at most a tenth); of other text (--data) the first ones, all of it when shorter")
    add("--batch_size", type=int_range(2), default=32, help="blocks per batch, the pool of 'inter' pairs")
    add("--metrics", default="cosine", help=f"comma-separated: {', '.join(METRICS)}")
    add("--pairs", default="toy", help="WordSim353-format file (word1<TAB>word2<TAB>score), or toy: the toy corpus's "
        "wordsim.txt")
    add("--cache_dir", help="toy corpus / token cache (default $TACO_CACHE or ~/.cache/taco)")
    add("--retrieval", help="also: dense retrieval on a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv), or "
        "toy: the toy grammar's")
    add("--sts", help="also: Spearman of the cosine of two sentence vectors on an STS-format TSV (sentence1, "
        "sentence2, score), or toy")
    add("--similarity", choices=["dot", "cos"], default="dot", help="retrieval score of two sentence vectors; dot is "
        "RetroMAE's")
    add("--json", help="also write the results to this JSON file")
    cli.add_threads_flag(p)
    add("--heatmap", help=f"picture ({', '.join(PICTURE_FORMATS)}) of one sentence's token x token last-layer cosines")
    add("--sentence", help="the heatmap's sentence; default: TaCL's (--data toy: the corpus's first)")
    args = p.parse_args(argv)
    with cli.errors():
        cli.set_threads(args.threads)  # float sums, so the numbers, depend on it
        metrics = [m.strip().lower() for m in args.metrics.split(",") if m.strip()]
        if not metrics or set(metrics) - set(METRICS):  # every user mistake is caught before the model runs
            raise UsageError(f"--metrics {args.metrics}: choose from {', '.join(METRICS)}")
        pairs_file = os.path.join(toy_corpus(args.cache_dir), "wordsim.txt") if args.pairs == "toy" else args.pairs
        pairs = read_pairs(pairs_file)
        if args.json:
            cli.output_path(args.json, "--json", folder=False)
        if args.heatmap:
            picture_path(args.heatmap, "--heatmap")
        toy = toy_sentence_eval(args.cache_dir) if "toy" in (args.retrieval, args.sts) else None
        retrieval = os.path.join(toy, "retrieval") if args.retrieval == "toy" else args.retrieval
        beir = retrieval and read_beir(retrieval)
        sts_pairs = args.sts and read_sts(os.path.join(toy, "sts.tsv") if args.sts == "toy" else args.sts)
        encoder, tok, run_args, source = load_encoder(args.model)
        if word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs)["used"] == 0:
            raise UsageError(f"none of the {len(pairs)} pairs of {pairs_file} are two single tokens of "
                             f"this model's vocab; pass --pairs for its vocabulary")
        run_data = run_args.get("data")
        data, max_len = args.data or run_data or "toy", args.max_len or run_args.get("max_len") or 128
        if not 8 <= max_len <= encoder.config.max_position_embeddings:
            raise UsageError(f"--max_len {max_len}: give 8 to {encoder.config.max_position_embeddings}")
        sources = lambda spec: [os.path.realpath(s) if os.path.exists(s) else s
                                for s in map(str.strip, spec.split(",")) if s]  # paths resolved
        trained_on = run_data is not None and sources(data) == sources(run_data)
        held, about = probe_blocks(data, tok, max_len, args.eval_blocks, trained_on, args.cache_dir)
        if len(held) < 2:
            raise UsageError(f"{data} gives only one block of {max_len} tokens: 'inter' pairs need two; "
                             f"pass more text or a smaller --max_len")
        print(f"{describe_probe(source, data, max_len, about, args.eval_blocks)} ({torch.get_num_threads()} thread(s))")
        batches = list(torch.from_numpy(held.astype(np.int64)).split(args.batch_size))
        result = {"model": source, "data": data, "max_len": max_len, "blocks": len(held), "probe": about,
                  "pairs_file": pairs_file, **analyze(encoder, tok, batches, pairs, metrics)}
        if beir:
            result["retrieval"] = {"folder": retrieval, **dense_retrieval(encoder, tok, beir, args.similarity, max_len)}
        if sts_pairs:
            result["sts"] = sentence_similarity(encoder, tok, sts_pairs, max_len)
        print(format_report(result))
        if args.json:  # before the picture: a picture that fails never costs the numbers; NaN, Infinity: null
            checkpoints.write_json(args.json, json.loads(json.dumps(result), parse_constant=lambda c: None))
        if args.heatmap:
            tokens, cosines = token_cosines(encoder, tok, args.sentence or heatmap_sentence(data, args.cache_dir))
            plot_heatmaps({os.path.basename(os.path.normpath(args.model)): cosines}, tokens, args.heatmap)
        return result


if __name__ == "__main__":
    main()
