"""Pictures of what the TC loss does, as PNG files, from taco run directories (offline).

    python pictures.py cosine runs/mlm runs/taco --out docs/cosine.png   # token x token cosines of one block
    python pictures.py pca runs/mlm runs/taco --out pca.png              # global parts g, coloured by topic
    python pictures.py curves runs/mlm runs/taco --out curves.png        # loss, MLM, TC, contextual score vs step

cosine: the last-layer states h of one held-out block (the one with most document boundaries,
[SEP], inside it), every pair's cosine, one panel per run, the boundaries drawn as lines. TACO's
picture shows squares along the diagonal: tokens of one document agree with each other.
pca: g = h - e of held-out tokens of the toy corpus, projected on their first two principal
components, coloured by the topic of their document (the toy generator's latent topic,
recovered from the document's content words). curves: from each run's metrics.jsonl.
Drawing needs matplotlib (`pip install matplotlib`); the rest of taco does not.
"""
import argparse
import json
import os
import sys
from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F

from cli import UsageError
from data import DataError, make_blocks, tokenize_corpus
from toy import TOPICS


class PictureError(UsageError):
    """A user mistake: one line, exit code 2."""


# ----------------------------------------------------------------------------- the toy corpus's topics

def topic_words(tok):
    """{token id: topic index} for the content words of exactly one topic that are one token
    (or whose first piece is unique to one topic: "light" of "light-house")."""
    owner = {}
    for i, (topic, parts) in enumerate(TOPICS.items()):
        for word in " ".join(parts).split():
            owner.setdefault(word.split("-")[0], set()).add(i)
    return {tok.vocab[w]: next(iter(t)) for w, t in owner.items() if len(t) == 1 and w in tok.vocab}


def document_topics(tokens, tok):
    """Each token's document topic (index into TOPICS; -1 if no content word decides it). Documents
    end at [SEP]; a document's topic is the one most of its content words belong to (85% are drawn
    from it by the generator, so the vote is nearly always right)."""
    words = topic_words(tok)
    tokens = np.asarray(tokens)
    doc = np.concatenate([[0], np.cumsum(tokens[:-1] == tok.sep_id)])  # document index of each token
    votes = {}
    for d, t in zip(doc, tokens):
        if int(t) in words:
            votes.setdefault(int(d), Counter())[words[int(t)]] += 1
    best = np.full(doc[-1] + 1, -1)
    for d, c in votes.items():
        best[d] = c.most_common(1)[0][0]
    return best[doc]


# ----------------------------------------------------------------------------- runs and their states

def load_run(spec):
    import analyze
    from finetune import FinetuneError
    try:
        encoder, tok, run_args, source = analyze.load_encoder(spec)
    except FinetuneError as err:
        raise PictureError(str(err)) from None
    return encoder, tok, run_args, source


def heldout(tok, data, max_len, eval_blocks=64, cache_dir=None):
    """The held-out blocks taco.py evaluates on (the corpus's last ones, as analyze.heldout_batches)
    -> (ids (n, max_len) int64, topic (n, max_len); topic is -1 for [CLS]/[SEP] and outside the toy corpus)."""
    tokens = tokenize_corpus(data, tok, cache_dir)
    body = max_len - 2
    n = len(tokens) // body
    n_eval = min(eval_blocks, n // 10) or min(eval_blocks, n)
    lo, hi = (n - n_eval) * body, n * body
    ids = make_blocks(tokens[lo:hi], max_len, tok.cls_id, tok.sep_id)[:].astype(np.int64)  # every block, as an array
    topic = np.full(ids.shape, -1)
    if data == "toy":
        topic[:, 1:-1] = document_topics(tokens, tok)[lo:hi].reshape(n_eval, body)
        topic[ids == tok.sep_id] = -1
    return torch.from_numpy(ids), topic


@torch.no_grad()
def states(encoder, ids):
    encoder.eval()
    return encoder(ids)  # (h, e)


def short_name(spec):
    return os.path.basename(os.path.normpath(spec)) if os.path.isdir(spec) else os.path.normpath(spec)


# ----------------------------------------------------------------------------- the pictures

def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PictureError("pictures.py draws with matplotlib, which is not installed: pip install matplotlib") from None
    return plt


def cosine(runs, out, part="h", block=None):
    """Token x token cosine matrix of one held-out block for each run, boundaries drawn."""
    plt = pyplot()
    panels = []
    for spec in runs:
        encoder, tok, run_args, _ = load_run(spec)
        ids, _ = heldout(tok, run_args.get("data", "toy"), run_args.get("max_len", 128))
        if block is None:  # the block with the most document boundaries inside it (the first such)
            block = int((ids[:, 1:-1] == tok.sep_id).sum(1).argmax())
        if block >= len(ids):
            raise PictureError(f"--block {block}: the held-out set has {len(ids)} blocks")
        h, e = states(encoder, ids[block:block + 1])
        x = F.normalize((h - e if part == "g" else h)[0].float(), dim=-1)
        cos = (x @ x.T).numpy()
        T = len(cos)
        off = cos[~np.eye(T, dtype=bool)]
        panels.append((short_name(spec), cos, (ids[block] == tok.sep_id).nonzero().flatten().tolist(), off.mean()))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    for ax, (name, cos, seps, mean) in zip(axes[0], panels):
        im = ax.imshow(cos, vmin=-0.2, vmax=1, cmap="viridis")
        for s in seps[:-1]:  # document boundaries: after each inner [SEP]
            ax.axhline(s + 0.5, color="red", lw=0.8)
            ax.axvline(s + 0.5, color="red", lw=0.8)
        ax.set_title(f"{name}: cosine of {part} (mean {mean:.2f})", fontsize=9)
        ax.set_xlabel("token position")
    axes[0, 0].set_ylabel(f"held-out block {block}; red: document boundaries ([SEP])", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    return save(fig, out, plt)


def pca(runs, out, max_tokens=3000):
    """2-D PCA of the global parts g of held-out tokens, coloured by their document's topic."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 4.2), squeeze=False)
    for ax, spec in zip(axes[0], runs):
        encoder, tok, run_args, _ = load_run(spec)
        if run_args.get("data", "toy") != "toy":
            raise PictureError(f"{spec} was not trained on the toy corpus: pca colours tokens by the toy documents' topics")
        ids, topic = heldout(tok, "toy", run_args.get("max_len", 128))
        h, e = states(encoder, ids)
        keep = torch.from_numpy(topic >= 0)
        g = (h - e)[keep].double()[:max_tokens]
        t = topic[topic >= 0][:max_tokens]
        g = g - g.mean(0)
        _, _, v = torch.linalg.svd(g, full_matrices=False)
        xy = (g @ v[:2].T).numpy()
        for i, name in enumerate(TOPICS):
            ax.scatter(*xy[t == i].T, s=3, alpha=0.6, color=plt.cm.tab10(i), label=name)
        ax.set_title(f"{short_name(spec)}: g = h - e of {len(t)} tokens, PCA", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0, -1].legend(fontsize=7, markerscale=3, loc="center left", bbox_to_anchor=(1, 0.5), title="document topic")
    return save(fig, out, plt)


def curves(runs, out):
    """Training loss, MLM, TC (every --log_every steps) and the contextual score (every --eval_every) vs step."""
    plt = pyplot()
    panels = [("loss", "training loss (MLM + lambda TC)"), ("mlm", "MLM loss"), ("tc", "TC loss"),
              ("ctx_score", "contextual score (held-out)")]
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.5))
    for spec in runs:
        path = os.path.join(spec, "metrics.jsonl")
        if not os.path.isfile(path):
            raise PictureError(f"{spec} has no metrics.jsonl: pass taco.py run directories")
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for ax, (key, title) in zip(axes.flat, panels):
            pts = [(r["step"], r[key]) for r in rows if key in r]
            if pts and not (key == "tc" and all(v == 0 for _, v in pts)):  # an MLM run has no TC curve
                ax.plot(*zip(*pts), marker="o" if key == "ctx_score" else None, ms=3, label=short_name(spec))
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return save(fig, out, plt)


def save(fig, out, plt):
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise PictureError(f"--out {out}: its folder does not exist")
    fig.savefig(out, dpi=80, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {out}")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="PNG pictures of what TACO's TC loss does, from run directories.")
    sub = p.add_subparsers(dest="picture", required=True)
    c = sub.add_parser("cosine", help="token x token cosine matrix of one held-out block per run")
    c.add_argument("runs", nargs="+", help="taco run directories or checkpoints (e.g. runs/mlm runs/taco)")
    c.add_argument("--part", default="h", choices=["h", "g"], help="last-layer states h, or global parts g = h - e")
    c.add_argument("--block", type=int, default=None, help="held-out block (default: the one with most boundaries)")
    c.add_argument("--out", default="cosine.png", help="PNG file")
    q = sub.add_parser("pca", help="2-D PCA of g of held-out tokens, coloured by document topic (toy corpus)")
    q.add_argument("runs", nargs="+", help="taco run directories or checkpoints trained on the toy corpus")
    q.add_argument("--tokens", type=int, default=3000, help="at most this many tokens")
    q.add_argument("--out", default="pca.png", help="PNG file")
    k = sub.add_parser("curves", help="loss, MLM, TC and contextual score vs step from metrics.jsonl")
    k.add_argument("runs", nargs="+", help="taco run directories")
    k.add_argument("--out", default="curves.png", help="PNG file")
    args = p.parse_args(argv)
    try:
        if args.picture == "cosine":
            return cosine(args.runs, args.out, args.part, args.block)
        if args.picture == "pca":
            return pca(args.runs, args.out, args.tokens)
        return curves(args.runs, args.out)
    except (UsageError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
