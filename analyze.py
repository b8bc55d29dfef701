"""Measure a pre-trained checkpoint the way the TACO paper does (Fu et al., ACL 2022).

    contextual score  intra- minus inter-context similarity of last-layer states on held-out
                      blocks (its Fig. 3b / Fig. 6, appendix A.3): cosine, or L1 / L2 distance
    word similarity   cosine of the input embeddings of WordSim353-style pairs and its Spearman
                      correlation with the human scores (its Fig. 3a)
    self-similarity   per layer, the mean cosine of two distinct tokens of one sequence (TaCL's
                      analysis, Su et al. 2022), and with --heatmap one sentence's token-by-token cosines

    python analyze.py --model runs/taco                       # toy corpus and toy word pairs
    python analyze.py --model runs/taco/ckpt_00000400.pt --metrics cosine,l1,l2 --json a.json
    python analyze.py --model hf_bert_dir --data wikitext103 --pairs wordsim353.tsv --max_len 256
    python analyze.py --model runs/tacl --heatmap heatmap.png  # + one sentence's token x token cosines

For distances the score is inter - intra, so for every metric a positive score means that
tokens of one context are closer to each other than to tokens of other contexts.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from data import DataError, load_tokenizer, make_blocks, tokenize_corpus, toy_corpus
from finetune import FinetuneError, load_pretrained, spearman
from model import Bert
from taco import UsageError, contextual_score

METRICS = ("cosine", "l1", "l2")


# ----------------------------------------------------------------------------- contextual score

def distance_score(h, real, p):
    """Mean L_p distance of two distinct tokens of one sequence (intra) and of two tokens of
    different sequences (inter) of one batch. h: (B, T, H); real: (B, T) bool.
    Returns the sums and pair counts so that batches can be pooled."""
    B, T, H = h.shape
    z = h.double()[real]  # (N, H) real tokens, grouped by sequence
    seq = torch.arange(B, device=h.device).repeat_interleave(real.sum(1))  # (N,) their sequence
    out = {"intra_sum": 0.0, "intra_n": 0.0, "inter_sum": 0.0, "inter_n": 0.0}
    for b in range(B):  # one sequence against all tokens: memory T x N, not N x N
        d = torch.cdist(z[seq == b], z, p=p)  # (n_b, N); the diagonal (self) is 0
        same = seq == b
        n_b = int(same.sum())
        out["intra_sum"] += d[:, same].sum().item()
        out["intra_n"] += n_b * (n_b - 1)
        out["inter_sum"] += d[:, ~same].sum().item()
        out["inter_n"] += n_b * int((~same).sum())
    return out


@torch.no_grad()
def context_scores(encoder, batches, metrics=("cosine",)):
    """{metric: {intra, inter, score}} of the encoder's last-layer states over `batches`.
    Cosine is taco.contextual_score (score = intra - inter); L1 / L2 score = inter - intra."""
    out = {}
    if "cosine" in metrics:
        out["cosine"] = contextual_score(encoder, batches)
    dist = [m for m in metrics if m != "cosine"]
    if dist:
        was_training = encoder.training
        encoder.eval()
        sums = {m: {"intra_sum": 0.0, "intra_n": 0.0, "inter_sum": 0.0, "inter_n": 0.0} for m in dist}
        for ids in batches:
            h, _ = encoder(ids)
            real = torch.ones(ids.shape, dtype=torch.bool, device=ids.device)
            for m in dist:
                for k, v in distance_score(h, real, int(m[1])).items():
                    sums[m][k] += v
        encoder.train(was_training)
        for m, s in sums.items():
            intra, inter = s["intra_sum"] / max(s["intra_n"], 1), s["inter_sum"] / max(s["inter_n"], 1)
            out[m] = {"intra": intra, "inter": inter, "score": inter - intra}
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
    if not os.path.isfile(path):
        raise UsageError(f"word-pair file {path} not found: pass a WordSim353-format file (word1<TAB>word2<TAB>score)")
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


def word_similarity(embeddings, tok, pairs):
    """Cosine of the input embeddings of each pair whose two words are single tokens of the
    vocab, and its Spearman correlation with the human scores; other pairs are counted."""
    kept, cos, human = [], [], []
    for w1, w2, score in pairs:
        ids = [tok.encode(w) for w in (w1, w2)]
        if all(len(i) == 1 and i[0] != tok.unk_id for i in ids):
            kept.append((w1, w2))
            human.append(score)
            cos.append(F.cosine_similarity(embeddings[ids[0][0]], embeddings[ids[1][0]], dim=0).item())
    return {"pairs": len(pairs), "used": len(kept), "skipped": len(pairs) - len(kept),
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
            with open(cfg) as f:
                run_args = json.load(f).get("args", {})
    return encoder.eval(), load_tokenizer(vocab), run_args, source


def analyze(encoder, tok, batches, pairs, metrics=("cosine",)):
    """Everything this script measures, as one dict."""
    return {"context": context_scores(encoder, batches, metrics),
            "wordsim": word_similarity(encoder.embeddings.word.weight.detach(), tok, pairs),
            "self_similarity": self_similarity(encoder, batches)}


def format_report(result):
    lines = [f"{'contextual score':<18}{'intra':>9}{'inter':>9}{'score':>9}"]
    for m, r in result["context"].items():
        lines.append(f"  {m:<16}{r['intra']:>9.4f}{r['inter']:>9.4f}{r['score']:>9.4f}")
    lines.append("self-similarity per layer (TaCL): "
                 + ", ".join(f"{i} {v:.3f}" for i, v in enumerate(result["self_similarity"], 1)))
    w = result["wordsim"]
    lines.append(f"word similarity: Spearman {w['spearman']:.4f}, mean cosine {w['mean_cosine']:.4f} "
                 f"over {w['used']} pairs ({w['skipped']} of {w['pairs']} skipped: not single tokens)")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description="Contextual score and word similarity of a checkpoint.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="runs/taco", help="taco run directory (its newest checkpoint), "
                   "checkpoint file, or Hugging Face BERT directory with vocab.txt")
    p.add_argument("--data", default=None, help="text for the contextual score (as taco.py --data); "
                   "default: the run's own --data, else toy")
    p.add_argument("--max_len", type=int, default=None, help="block length; default: the run's, else 128")
    p.add_argument("--eval_blocks", type=int, default=64, help="held-out blocks: the corpus's last ones, as in taco.py")
    p.add_argument("--batch_size", type=int, default=32, help="blocks per batch; 'inter' pairs come from one batch")
    p.add_argument("--metrics", default="cosine", help=f"comma-separated: {', '.join(METRICS)}")
    p.add_argument("--pairs", default="toy", help="WordSim353-format file (word1<TAB>word2<TAB>score), "
                   "or toy: the toy corpus's wordsim.txt")
    p.add_argument("--cache_dir", default=None, help="toy corpus / token cache (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument("--heatmap", default=None, help="PNG of one sentence's token x token last-layer cosines")
    p.add_argument("--sentence", default=None, help="the heatmap's sentence (default: TaCL's; for --data toy "
                   "the toy corpus's first)")
    args = p.parse_args(argv)
    try:
        metrics = [m.strip().lower() for m in args.metrics.split(",") if m.strip()]
        bad = [m for m in metrics if m not in METRICS]
        if bad or not metrics:
            raise UsageError(f"unknown metric {', '.join(bad) or repr(args.metrics)}; choose from {', '.join(METRICS)}")
        if args.eval_blocks < 2 or args.batch_size < 2:
            raise UsageError("--eval_blocks and --batch_size must be >= 2: 'inter' pairs need two blocks in a batch")
        pairs_file = os.path.join(toy_corpus(args.cache_dir), "wordsim.txt") if args.pairs == "toy" else args.pairs
        pairs = read_pairs(pairs_file)  # every user mistake is caught before the model runs
        for flag in ("json", "heatmap"):
            path = getattr(args, flag)
            if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                raise UsageError(f"--{flag} {path}: its folder does not exist")
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
                  "pairs_file": pairs_file, "context": context_scores(encoder, batches, metrics), "wordsim": wordsim,
                  "self_similarity": self_similarity(encoder, batches)}
    except (UsageError, DataError, FinetuneError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"{source}: {result['blocks']} held-out blocks of {max_len} from {data}")
    print(format_report(result))
    if args.heatmap:
        tokens, cosines = token_cosines(encoder, tok, args.sentence or heatmap_sentence(data, args.cache_dir))
        plot_heatmaps({os.path.basename(os.path.normpath(args.model)): cosines}, tokens, args.heatmap)
    if args.json:
        tmp = f"{args.json}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
        os.replace(tmp, args.json)  # all or nothing
    return result


if __name__ == "__main__":
    main()
