"""Measure a pre-trained checkpoint the way the TACO paper does (Fu et al., ACL 2022).

    contextual score  intra- minus inter-context similarity of last-layer states on held-out
                      blocks (its Fig. 3b / Fig. 6, appendix A.3), and intra / inter (Table 9):
                      cosine, dot product, or L1 / L2 / L10 distance; a context is a packed
                      block, or one document of a block (documents end with [SEP] inside blocks)
    word similarity   mean cosine of the input embeddings of the WordSim353-style pairs that
                      co-occur in a held-out document (its Fig. 3a); extra: the Spearman
                      correlation of the cosine with the human scores over all pairs

    python analyze.py --model runs/taco                       # toy corpus and toy word pairs
    python analyze.py --model runs/taco/ckpt_00000400.pt --metrics cosine,dot,l1,l2,l10 --json a.json
    python analyze.py --model hf_bert_dir --data wikitext103 --pairs wordsim353.tsv --max_len 256

For distances the score is inter - intra, so for every metric a positive score means that
tokens of one context are closer to each other than to tokens of other contexts.
"""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import cli
from cli import int_range
from data import load_tokenizer, make_blocks, tokenize_corpus, toy_corpus
from finetune import load_pretrained, spearman
from model import Bert
from taco import UsageError, context_groups, pair_sums

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
            run_args = cli.read_json(cfg).get("args", {})
    return encoder.eval(), load_tokenizer(vocab), run_args, source


def analyze(encoder, tok, batches, pairs, metrics=("cosine",)):
    """Everything this script measures, as one dict: the contextual score with blocks as
    contexts ("context") and with documents as contexts ("context_doc"), word similarity."""
    return {"context": context_scores(encoder, batches, metrics),
            "context_doc": context_scores(encoder, batches, metrics, tok.sep_id),
            "wordsim": word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs, batches)}


def format_report(result):
    lines = [f"{'contextual score':<26}{'intra':>9}{'inter':>9}{'score':>9}{'ratio':>9}"]
    for form, label in (("context", "block"), ("context_doc", "document")):
        for m, r in result[form].items():
            lines.append(f"  {m + ', ' + label + 's':<24}{r['intra']:>9.4f}{r['inter']:>9.4f}"
                         f"{r['score']:>9.4f}{r['ratio']:>9.4f}")
    w = result["wordsim"]
    lines.append(f"word similarity (Fig. 3a): mean cosine {w['cooc_mean_cosine']:.4f} of the {w['cooc_pairs']} "
                 f"pairs that co-occur in a held-out document")
    lines.append(f"  extra: Spearman {w['spearman']:.4f} with the human scores, mean cosine {w['mean_cosine']:.4f}, "
                 f"over {w['used']} pairs ({w['skipped']} of {w['pairs']} skipped: not single tokens)")
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
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    with cli.errors():
        metrics = [m.strip().lower() for m in args.metrics.split(",") if m.strip()]
        bad = [m for m in metrics if m not in METRICS]
        if bad or not metrics:
            raise UsageError(f"unknown metric {', '.join(bad) or repr(args.metrics)}; choose from {', '.join(METRICS)}")
        pairs_file = os.path.join(toy_corpus(args.cache_dir), "wordsim.txt") if args.pairs == "toy" else args.pairs
        pairs = read_pairs(pairs_file)  # every user mistake is caught before the model runs
        if args.json:
            cli.output_path(args.json, "--json", folder=False)
        encoder, tok, run_args, source = load_encoder(args.model)
        wordsim = word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs)
        if wordsim["used"] == 0:
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
        print(f"{source}: {result['blocks']} held-out blocks of {max_len} from {data}")
        print(format_report(result))
        if args.json:
            cli.write_json(args.json, result)  # all or nothing
        return result


if __name__ == "__main__":
    main()
