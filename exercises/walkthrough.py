"""One batch of the toy corpus traced through TACO's TC loss, with the real numbers at each step:
ids and tokens, e, h, g = h - e, one anchor's positive and negatives, their cosines, the logits,
the loss; first at initialisation, then after a short pre-training (or from a run you give).
The same, with text and pictures, as a notebook: exercises/walkthrough.ipynb.

    python exercises/walkthrough.py                    # init, then the 300-step miniature TACO of exercises 5 and 6 (reused)
    python exercises/walkthrough.py --run runs/taco    # init, then a run you have (its newest checkpoint)
"""
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import engine  # noqa: E402  (first, before torch loads: idle CPU threads sleep; engine/__init__.py)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from data import DataError, load_tokenizer, make_blocks  # noqa: E402
from engine.corpus import tokenize_corpus  # noqa: E402
from model import BertConfig, BertForPreTraining  # noqa: E402
from tools.pictures import topic_words  # noqa: E402
from engine import cli  # noqa: E402
from engine.cli import UsageError  # noqa: E402
from taco import sample_negatives, sample_positives, tc_loss  # noqa: E402


def vec(x, n=4):
    return "[" + ", ".join(f"{v:+.3f}" for v in x[:n].tolist()) + f", ...]  |.| = {x.norm():.3f}"


def show_batch(ids, tok, n=24):
    print(f"== 1. The batch: {ids.shape[0]} blocks of {ids.shape[1]} tokens from the held-out end of the toy corpus ==")
    print("Each block is [CLS] + the next tokens of the corpus + [SEP]; documents are glued together, each ended")
    print("by [SEP], so one block may hold the end of one document and the start of another.")
    print(f"Sequence 0, its first {n} tokens (position: id token):")
    words = [tok.ids_to_tokens[i] for i in ids[0].tolist()]
    print("  " + "  ".join(f"{t}:{i} {w}" for t, (i, w) in enumerate(zip(ids[0, :n].tolist(), words[:n]))))
    seps = [t for t, i in enumerate(ids[0].tolist()) if i == tok.sep_id]
    print(f"  [SEP] at positions {seps}: the last one closes the block, the others are document boundaries.\n")


def trace(encoder, ids, tok, anchor, window, K, tau, title):
    """Print every step of the TC loss for one anchor, then the loss of the whole batch."""
    b, t = anchor
    B, T = ids.shape
    words = [tok.ids_to_tokens[i] for i in ids.flatten().tolist()]
    encoder.eval()  # no dropout: the numbers below are the model's, not a random mask's
    with torch.no_grad():
        h, e = encoder(ids)
    g = h - e
    print(f"== {title} ==")
    print(f"Anchor: sequence {b}, position {t}, token {words[b * T + t]!r}. Its vectors (first 4 of {h.shape[-1]} dims):")
    print(f"  e = embedding-layer output (word + position + type, LayerNorm)  {vec(e[b, t])}")
    print(f"  h = last-layer hidden state                                       {vec(h[b, t])}")
    print(f"  g = h - e, the global part that TC aligns                         {vec(g[b, t])}")
    real = torch.ones(B, T, dtype=torch.bool)
    gen = torch.Generator().manual_seed(0)
    pos = sample_positives(real, window, gen)[b, t].item()
    neg = sample_negatives(real, K, gen)[b, t]
    z = F.normalize(g, dim=-1).reshape(B * T, -1)
    cos_pos = (z[b * T + t] @ z[pos]).item()
    cos_neg = z[neg] @ z[b * T + t]  # (K,)
    print(f"Positive (uniform within W={window}, i.e. up to {window // 2} positions either side): sequence {pos // T}, "
          f"position {pos % T}, token {words[pos]!r}; cos(g_anchor, g_pos) = {cos_pos:+.3f}")
    print(f"Negatives: K={K} real tokens drawn uniformly from the other {B - 1} sequences; the first 6:")
    for k in range(6):
        n = neg[k].item()
        print(f"  sequence {n // T}, position {n % T:3d}, token {words[n]!r:14s} cos = {cos_neg[k]:+.3f}")
    print(f"  all {K}: cos mean {cos_neg.mean():+.3f}, std {cos_neg.std():.3f}")
    logits = torch.cat([torch.tensor([cos_pos]), cos_neg]) / tau
    p = logits.softmax(0)[0].item()
    print(f"Logits = cosines / tau (tau = {tau}), positive first: "
          + ", ".join(f"{v:.2f}" for v in logits[:7].tolist()) + ", ...")
    print(f"softmax probability of the positive = {p:.4f} (chance: 1/(K+1) = {1 / (K + 1):.4f}); "
          f"this anchor's loss = -log p = {-math.log(p):.3f}")
    loss = tc_loss(h, e, None, window, K, tau, torch.Generator().manual_seed(0)).item()
    # the same statistics over every anchor of the batch
    gen = torch.Generator().manual_seed(0)
    P, N = sample_positives(real, window, gen).flatten(), sample_negatives(real, K, gen).reshape(B * T, K)
    cp, cn = (z * z[P]).sum(-1), torch.einsum("nh,nkh->nk", z, z[N])
    sigma = (cn / tau).std(1).mean().item()
    gap = (cp.mean() - cn.mean()).item()
    print(f"The whole batch: TC loss {loss:.3f}; log(K+1) = {math.log(K + 1):.3f}. Over all {B * T} anchors: positives' cos "
          f"{cp.mean():+.3f}, negatives' {cn.mean():+.3f}, spread of the logits sigma = {sigma:.2f}.\n")
    return {"loss": loss, "gap": gap, "sigma": sigma, "h": h, "e": e, "window": window}


def explain_init(r, K, tau):
    print("Why near log(K+1), and above it, at initialisation: if every cosine were equal (collapsed states), every")
    print(f"logit would be equal and the softmax uniform over the K+1 = {K + 1} candidates: loss = log(K+1) exactly.")
    print(f"At init the positive is no closer than the negatives (gap {r['gap']:+.3f} in cosine), so the model is at")
    print("chance; only the random spread of the cosines, magnified by 1/tau, moves the loss off log(K+1): for")
    print(f"logits of spread sigma, E[log sum exp] ~ log(K+1) + sigma^2/2, here {math.log(K + 1):.3f} + "
          f"{r['sigma'] ** 2 / 2:.3f} - gap/tau ({r['gap'] / tau:+.3f}) = "
          f"{math.log(K + 1) + r['sigma'] ** 2 / 2 - r['gap'] / tau:.3f}, against the measured {r['loss']:.3f}.")
    at1 = tc_loss(r["h"], r["e"], None, r["window"], K, 1.0, torch.Generator().manual_seed(0)).item()
    print(f"With tau = 1 the spread is {1 / tau:.0f}x smaller and the loss is {at1:.3f}, next to log(K+1) = "
          f"{math.log(K + 1):.3f}.\n")
    return at1


def held_out_batch(tok, n=4, max_len=64):
    """n consecutive blocks of max_len tokens from the held-out end of the toy corpus (as taco.py's
    evaluation cuts them), starting at the first one with a document boundary inside."""
    blocks = make_blocks(tokenize_corpus("toy", tok), max_len, tok.cls_id, tok.sep_id)
    tail = torch.from_numpy(blocks[-64:].astype("int64"))  # the held-out end, as taco.py's evaluation
    first = int((tail[:, 1:-1] == tok.sep_id).any(1).float().argmax())  # a block with a document boundary
    return tail[first:first + n]


def first_topic_word(ids, tok):
    """Position of the first content word of a topic (a noun, verb or adjective of the generator) in sequence 0."""
    words, T = topic_words(tok), ids.shape[1]
    return next((t for t in range(5, T - 1) if int(ids[0, t]) in words), T // 2)


def initial_encoder(tok):
    """taco.py's tiny model as seed 0 initialises it (the encoder only)."""
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig.from_size("tiny", vocab_size=tok.vocab_size, pad_token_id=tok.pad_id)).bert


def main(argv=None):
    p = cli.ArgumentParser(description="Trace one batch through the TC loss, at init and after training.")
    p.add_argument("--run", default=None, help="a taco run directory or checkpoint for the 'after' part "
                   "(default: pre-train a miniature into --out)")
    p.add_argument("--steps", type=cli.int_range(1), default=None, help="miniature pre-training steps when --run is "
                   "not given (default: the miniature's 300: the very TACO run of exercises 5 and 6, reused if it is there)")
    p.add_argument("--out", default="runs/mini", help="where the miniature pre-training goes (a finished one is reused)")
    p.add_argument("--batch", type=cli.int_range(2), default=4, help="blocks in the batch")
    p.add_argument("--max_len", type=cli.int_range(8, 512), default=64, help="tokens per block")
    p.add_argument("--anchor", type=cli.int_range(1), default=None, help="position of the anchor in sequence 0 "
                   "(default: its first topic word)")
    p.add_argument("--window", type=cli.int_range(2), default=5, help="W")
    p.add_argument("--negatives", type=cli.int_range(1), default=50, help="K")
    p.add_argument("--temperature", type=cli.float_range(0, lo_open=True), default=0.07, help="tau")
    args = p.parse_args(argv)
    from exercises.miniature import threads
    with cli.errors(), threads(1):  # one thread, as the miniature runs and the notebook: the same numbers here
        return trace_all(args)


def trace_all(args):
    try:
        if args.batch < 2 or args.anchor is not None and not 0 < args.anchor < args.max_len - 1:
            raise UsageError("--batch must be >= 2 (negatives come from other sequences) and --anchor inside the block")
        if args.negatives > (args.batch - 1) * args.max_len:
            raise UsageError(f"--negatives {args.negatives} exceeds the {(args.batch - 1) * args.max_len} tokens of the other sequences")
        tok = load_tokenizer("toy")
        ids = held_out_batch(tok, args.batch, args.max_len)
        if args.anchor is None:
            args.anchor = first_topic_word(ids, tok)
        show_batch(ids, tok)
        init = initial_encoder(tok)
        knobs = (0, args.anchor), args.window, args.negatives, args.temperature
        at_init = trace(init, ids, tok, *knobs, "2. At initialisation (taco.py's tiny model, seed 0)")
        at_init["loss_tau_1"] = explain_init(at_init, args.negatives, args.temperature)
        if args.run:
            from tools import analyze
            from engine.tasks import FinetuneError
            try:
                trained, _, _, source = analyze.load_encoder(args.run)
            except FinetuneError as err:
                raise UsageError(str(err)) from None
            title = f"3. After pre-training: {source}"
        else:
            from exercises.miniature import MINI, finished, pretrain
            steps = args.steps or MINI["steps"]
            run_dir, done = finished(args.out, steps=args.steps)
            print(f"{'Reusing' if done else 'Pre-training'} a miniature TACO ({steps} steps, one thread): {run_dir}"
                  + ("" if done else " ..."), flush=True)
            run_dir, _ = pretrain(args.out, steps=args.steps)
            from tools import analyze
            trained, _, _, source = analyze.load_encoder(run_dir)
            title = f"3. After {steps} steps of TACO ({source})"
        if trained.embeddings.word.num_embeddings != tok.vocab_size:
            raise UsageError(f"{args.run} was not trained on the toy vocabulary; pass a toy-corpus run")
        r = trace(trained, ids, tok, *knobs, title)
        K = args.negatives
        if r["loss"] < math.log(K + 1) - 1:
            print(f"The positive now stands out: its cosine is {r['gap']:+.3f} above the negatives' on average, and")
            print(f"the loss ({r['loss']:.3f}) is far below log(K+1). Tokens of one block share a global part, which")
            print("tokens of other blocks do not share: the block (TC's context), not the document's topic, since a")
            print("packed block often holds the end of one document and the start of the next (exercise 6).")
        else:
            print(f"Not yet separated: the loss ({r['loss']:.3f}) is still near log(K+1) = {math.log(K + 1):.3f}. Early in")
            print("training the global parts of all tokens first turn alike (cosines near 1, the collapsed case where the")
            print("loss is exactly log(K+1)); train longer (--steps) to see the positive stand out.")
    except (UsageError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    return {"init": at_init, "trained": r}


if __name__ == "__main__":
    main()
