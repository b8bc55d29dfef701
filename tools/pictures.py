"""Pictures of what the TC loss does (docs/pictures.md), from taco run directories, offline; drawn with matplotlib.

    python tools/pictures.py cosine runs/mlm runs/taco --out cosine.png   # token x token cosines of two held-out blocks
    python tools/pictures.py pca runs/mlm runs/taco --out pca.png         # global parts g, coloured by block and by topic
    python tools/pictures.py curves runs/mlm runs/taco --out curves.png   # loss, MLM, each objective's own loss, contextual score

TACO's cosine picture is one bright square per BLOCK, whichever documents it holds: TC's negatives come from the
other sequences of the batch (sample_negatives), so for TC a context is a block; in pca each TACO cluster is one
block, and blocks of one topic do not merge.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the root's modules
from engine import checkpoints, cli  # first, before torch loads (engine/__init__.py)
import numpy as np
import torch
import torch.nn.functional as F

from engine.cli import UsageError
from engine.toy import TOPICS
from taco import context_groups
from tools import analyze

# each objective's total loss ("loss" in metrics.jsonl) and its own auxiliary one ("tc"), as curves names them
OBJECTIVES = {"mlm": ("MLM", None), "taco": ("MLM + λ·TC", "TC (token alignment)"),
              "tacl": ("MLM + λ·TaCL", "TaCL (token contrast with the teacher)"),
              "retromae": ("encoder MLM + decoder", "RetroMAE decoder (rebuilds the text)")}


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
    """Each token's document topic (index into TOPICS; -1 if no content word decides it): the topic of most of the
    content words of its document (ending at [SEP]); the generator draws 85% from it, so the vote is nearly right."""
    words, tokens = topic_words(tok), np.asarray(tokens)
    doc = np.concatenate([[0], np.cumsum(tokens[:-1] == tok.sep_id)])  # document index of each token
    topic = np.array([words.get(int(t), -1) for t in tokens])
    votes = np.zeros((doc[-1] + 1, len(TOPICS)), dtype=int)
    np.add.at(votes, (doc[topic >= 0], topic[topic >= 0]), 1)
    return np.where(votes.any(1), votes.argmax(1), -1)[doc]


# ----------------------------------------------------------------------------- runs and their states

def heldout(tok, run_args):
    """The held-out blocks taco.py evaluates on (the corpus's last ones, analyze.probe_blocks): (n, max_len) int64."""
    return analyze.probe_blocks(run_args.get("data", "toy"), tok, run_args.get("max_len", 128), 64)[0].astype(np.int64)


def short_name(spec):
    return os.path.basename(os.path.normpath(spec)) if os.path.isdir(spec) else os.path.normpath(spec)


def objective_of(run):
    """The --objective a run directory was trained with (its config.json; "taco" if it does not say)."""
    path = os.path.join(run, "config.json")
    return checkpoints.read_json(path)["args"].get("objective", "taco") if os.path.isfile(path) else "taco"


# ----------------------------------------------------------------------------- the pictures

def cosine(run_dirs, out, part="h", block=None, n_blocks=2):
    """Token x token cosine matrix of n_blocks consecutive held-out blocks for each run; block edges white, document
    boundaries red; mean cosines within a block (same / other document) and across blocks in the title."""
    plt = analyze.pyplot("pictures.py")
    fig, axes = plt.subplots(1, len(run_dirs), figsize=(4.6 * len(run_dirs), 4.6), squeeze=False)
    for ax, spec in zip(axes[0], run_dirs):
        encoder, tok, run_args, _ = analyze.load_encoder(spec)
        ids = heldout(tok, run_args)
        if block is None:  # where n_blocks consecutive blocks hold the most document boundaries inside them
            inner = (ids[:, 1:-1] == tok.sep_id).sum(1)
            block = int(np.argmax(np.convolve(inner, np.ones(min(n_blocks, len(ids)), dtype=int), "valid")))
        if block + n_blocks > len(ids):
            raise UsageError(f"--block {block} --blocks {n_blocks}: the held-out set has {len(ids)} blocks "
                             f"(0 to {len(ids) - 1})")
        chosen = torch.from_numpy(ids[block:block + n_blocks])
        with torch.no_grad():
            h, e = encoder(chosen)  # load_encoder's encoder is in eval mode
        x = F.normalize((h - e if part == "g" else h).float(), dim=-1).reshape(-1, h.shape[-1])
        cos, T, flat = (x @ x.T).numpy(), chosen.shape[1], chosen.flatten().numpy()
        blk, doc = (context_groups(chosen, sep).flatten().numpy() for sep in (None, tok.sep_id))  # TC's contexts
        same_block, same_doc = blk[:, None] == blk[None, :], doc[:, None] == doc[None, :]
        pairs = {"same document": same_doc & ~np.eye(len(flat), dtype=bool),
                 "other document, same block": same_block & ~same_doc, "other block": ~same_block}
        im = ax.imshow(cos, vmin=-0.2, vmax=1, cmap="viridis")
        seps = [(i + 0.5, "red", 0.8, "--") for i in np.flatnonzero(flat == tok.sep_id) if i % T != T - 1]  # a doc ends
        for at, colour, width, style in seps + [(k * T - 0.5, "white", 1.5, "-") for k in range(1, n_blocks)]:
            for line in (ax.axhline, ax.axvline):
                line(at, color=colour, lw=width, ls=style)
        said = "\n".join(f"{k}: {cos[m].mean():.2f}" for k, m in pairs.items() if m.any())
        ax.set_title(f"{short_name(spec)}: cosine of {part}; mean over pairs of\n{said}", fontsize=8)
        ax.set_xlabel("token position")
    axes[0, 0].set_ylabel(f"held-out blocks {block} to {block + n_blocks - 1}", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    fig.text(0.02, -0.02, "white lines: block edges; red dashed: document boundaries ([SEP]) inside a block",
             fontsize=8)
    return save(fig, out, plt)


def pca(run_dirs, out, max_tokens=3000):
    """2-D PCA of the global parts g of held-out tokens: coloured by block (top) and by their document's topic."""
    plt = analyze.pyplot("pictures.py")
    fig, axes = plt.subplots(2, len(run_dirs), figsize=(4.5 * len(run_dirs), 8.4), squeeze=False)
    for col, spec in enumerate(run_dirs):
        encoder, tok, run_args, _ = analyze.load_encoder(spec)
        if run_args.get("data", "toy") != "toy":
            raise UsageError(f"{spec} was not trained on the toy corpus: pca colours tokens by the toy documents' topics")
        ids = heldout(tok, run_args)
        topic = np.full(ids.shape, -1)  # -1: [CLS] / [SEP], or a document no content word decides
        topic[:, 1:-1] = document_topics(ids[:, 1:-1].reshape(-1), tok).reshape(len(ids), -1)  # the corpus's text
        topic[ids == tok.sep_id] = -1
        keep = topic >= 0
        if keep.sum() < 2:
            raise UsageError(f"{spec}: its vocab.txt holds none of the toy topics' words, so no held-out document has "
                             f"a topic to colour by; pca needs a run with the toy corpus's vocabulary")
        with torch.no_grad():
            h, e = encoder(torch.from_numpy(ids))
        block = np.nonzero(keep)[0][:max_tokens]  # each token's block
        g = (h - e)[torch.from_numpy(keep)].double()[:max_tokens]
        t = topic[keep][:max_tokens]
        g = g - g.mean(0)
        xy = (g @ torch.linalg.svd(g, full_matrices=False)[2][:2].T).numpy()
        top, bottom = axes[0, col], axes[1, col]
        top.scatter(*xy.T, s=3, alpha=0.6, c=[plt.cm.tab20(b % 20) for b in block])
        for b in np.unique(block):  # a block that forms a cluster: its number at its centre
            mine = xy[block == b]
            if np.linalg.norm(mine.std(0)) < 0.3 * np.linalg.norm(xy.std(0)):
                top.annotate(str(b), mine.mean(0), fontsize=6, ha="center", va="center")
        for i, name in enumerate(TOPICS):
            bottom.scatter(*xy[t == i].T, s=3, alpha=0.6, color=plt.cm.tab10(i), label=name)
        top.set_title(f"{short_name(spec)}: g = h - e of {len(t)} tokens, PCA\ncoloured by block "
                      f"({len(np.unique(block))} blocks; tight ones numbered)", fontsize=9)
        bottom.set_title("the same points, coloured by their document's topic", fontsize=9)
    plt.setp(axes.flat, xticks=[], yticks=[])  # PCA's axes have no units
    axes[1, -1].legend(fontsize=7, markerscale=3, loc="center left", bbox_to_anchor=(1, 0.5), title="document topic")
    return save(fig, out, plt)


def curves(run_dirs, out):
    """Training loss, MLM loss, each objective's own auxiliary loss (every --log_every steps) and the held-out
    contextual score (every --eval_every) vs step; one colour per run in every panel."""
    plt = analyze.pyplot("pictures.py")
    read = []
    for i, spec in enumerate(run_dirs):
        path = os.path.join(spec, "metrics.jsonl")
        if not os.path.isfile(path):
            raise UsageError(f"{spec} has no metrics.jsonl: pass taco.py run directories")
        read.append((short_name(spec), objective_of(spec), checkpoints.read_jsonl(path), plt.cm.tab10(i % 10)))
    names = {o for _, o, _, _ in read}
    used = [OBJECTIVES[o] for o in OBJECTIVES if o in names]
    aux = [own for _, own in used if own]
    panels = {"loss": "training loss: " + " / ".join(total for total, _ in used),
              "mlm": "MLM loss" + (" (RetroMAE: its encoder's)" if "retromae" in names else ""),
              "tc": "each objective's own loss: " + " / ".join(aux) if aux else "no auxiliary loss (MLM runs only)",
              "ctx_score": "contextual score (held-out blocks)"}
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for name, objective, rows, colour in read:
        own = OBJECTIVES.get(objective, (None, None))[1]
        for ax, key in zip(axes.flat, panels):
            pts = [(r["step"], r[key]) for r in rows if key in r]  # records that lack it: not drawn
            if pts and (key != "tc" or own):  # an MLM run logs tc = 0: no curve
                label = f"{name} ({objective}" + (f": {own.split(' (')[0]})" if key == "tc" else ")")
                ax.plot(*zip(*pts), color=colour, marker="o" if key == "ctx_score" else None, ms=3, label=label)
            tp = [(r["step"], r["tp"]) for r in rows if "tp" in r]
            if key == "tc" and tp:  # --predict_all: MLM+TP's token-prediction loss
                ax.plot(*zip(*tp), color=colour, ls="--", label=f"{name} (MLM+TP: token prediction)")
    for ax, title in zip(axes.flat, panels.values()):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out, plt)


def save(fig, out, plt):
    analyze.save_figure(fig, out, plt)  # whole, at 150 dpi
    print(f"wrote {out}")
    return out


def main(argv=None):
    p = cli.ArgumentParser(description="Pictures of what TACO's TC loss does, from run directories.")
    sub = p.add_subparsers(dest="picture", required=True)
    c = sub.add_parser("cosine", help="token x token cosine matrix of consecutive held-out blocks per run")
    c.add_argument("runs", nargs="+", help="taco run directories or checkpoints (e.g. runs/mlm runs/taco)")
    c.add_argument("--part", default="h", choices=["h", "g"], help="last-layer states h, or global parts g = h - e")
    c.add_argument("--block", type=cli.int_range(0), default=None,
                   help="the first held-out block (default: where --blocks blocks hold the most document boundaries)")
    c.add_argument("--blocks", type=cli.int_range(1, 8), default=2, help="consecutive blocks in the matrix")
    q = sub.add_parser("pca", help="2-D PCA of g of held-out tokens, coloured by block and by document topic (toy corpus)")
    q.add_argument("runs", nargs="+", help="taco run directories or checkpoints trained on the toy corpus")
    q.add_argument("--tokens", type=cli.int_range(2), default=3000, help="at most this many tokens")
    k = sub.add_parser("curves", help="loss, MLM, each objective's own loss and contextual score vs step")
    k.add_argument("runs", nargs="+", help="taco run directories")
    for name, picture in sub.choices.items():  # the flags every picture has, last in its --help
        picture.add_argument("--out", default=f"{name}.png", help="the picture file: .png, .pdf or .svg")
        if name != "curves":  # curves reads numbers, runs no model
            cli.add_threads_flag(picture)
    args = p.parse_args(argv)
    with cli.errors():
        cli.set_threads(getattr(args, "threads", None))
        analyze.pyplot("pictures.py")  # before any work: matplotlib is there, --out can be written
        out = analyze.picture_path(args.out, "--out")
        if args.picture == "cosine":
            return cosine(args.runs, out, args.part, args.block, args.blocks)
        if args.picture == "pca":
            return pca(args.runs, out, args.tokens)
        return curves(args.runs, out)


if __name__ == "__main__":
    main()
