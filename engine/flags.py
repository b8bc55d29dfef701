"""taco.py's command line: the flags, the recipes that fill in their defaults (--size, or an --init
that fits), and the checks of mistakes across flags, made before anything is written.

    args = get_args(argv)                     # parses; reads no file
    apply_recipe(args, init)                  # an --init's recipe, once the init is loaded (taco.train)
    micro_batches = check_args(args, world)   # the micro-batch split; refuses what cannot run
"""
from engine import checkpoints, cli
from engine.cli import UsageError, float_range, int_range
from engine.toy import is_toy_vocab


# --size -> training recipe (docs/paper.md: where each value comes from). tiny/mini are ours: the toy corpus trains in
# minutes on a laptop CPU; small/base are the authors' (train_small.sh, train_base.sh; the paper's Sec. 4.1), medium/large
# follow them; "continue" is for --init of a trained model (choose_recipe; its sources: docs/model.md).
# The paper's sizes save every 25,000 steps and evaluate every 10,000: under 1% of the wall time on 8 GPUs
# (a base save of 1.31 GB takes up to 8.7 s, a step 0.05-0.08 s; the arithmetic: docs/speed.md).
PAPER_CADENCE = dict(save_every=25_000, eval_every=10_000)
RECIPES = {
    "tiny": dict(steps=600, warmup=60, batch_size=32, max_len=128, lr=1e-3, save_every=200, eval_every=100),
    "mini": dict(steps=3000, warmup=300, batch_size=64, max_len=128, lr=5e-4, save_every=200, eval_every=100),
    "small": dict(steps=250_000, warmup=2_500, batch_size=1280, max_len=256, lr=1e-4, **PAPER_CADENCE),
    "medium": dict(steps=250_000, warmup=2_500, batch_size=1280, max_len=256, lr=1e-4, **PAPER_CADENCE),
    "base": dict(steps=500_000, warmup=10_000, batch_size=1280, max_len=256, lr=1e-4, **PAPER_CADENCE),
    "large": dict(steps=500_000, warmup=10_000, batch_size=1280, max_len=256, lr=1e-4, **PAPER_CADENCE),
    "continue": dict(steps=1000, warmup=100, batch_size=32, max_len=128, lr=2e-5, save_every=200, eval_every=100),
}

# The paper's corpora (Wikipedia + BookCorpus, bert-base-uncased vocab) for --size small and
# up; the sizes below train on the offline toy corpus by default.
PAPER_DATA, TOY_SIZES = "wikipedia,bookcorpus", ("tiny", "mini")
SIZES = [size for size in RECIPES if size != "continue"]  # model.SIZES' names

# Settings that may change between a run and its --resume without making it another run.
RESUMABLE = {"recipe", "recipe_why", "out", "resume", "force", "save_every", "eval_every", "log_every", "keep_last",
             "skip_nonfinite", "compile", "plain_tc", "plain", "threads", "num_proc", "cache_dir", "device", "device_batch_size",
             "log"}


class FlagParser(cli.ArgumentParser):
    """A mistake in taco's flags is raised (main's cli.errors says it), so another tool (study.py) may parse them."""

    def error(self, message):
        raise UsageError(message)


def parser():
    """taco.py's flags; a default None is filled in by get_args (the objective's) or apply_recipe."""
    p = FlagParser(description="TACO / MLM pre-training of BERT.", formatter_class=cli.HelpFormatter)
    # model and objective
    p.add_argument("--size", default=None, choices=SIZES, help="model size (default tiny) and its recipe (RECIPES)")
    p.add_argument("--objective", default="taco", choices=["taco", "mlm", "tacl", "retromae"],
                   help="taco = MLM + TC; mlm = the baseline; tacl = MLM + TaCL (Su et al. 2022; needs --init); "
                   "retromae = whole-word MLM + RetroMAE's decoder loss (Xiao et al. 2022)")
    p.add_argument("--tc_weight", type=float_range(0), default=1.0, help="lambda in loss = MLM + lambda * TC (or TaCL)")
    p.add_argument("--tc_positions", default="all", choices=["all", "masked", "unmasked"],
                   help="anchors of the TC loss: every real token, or only masked / unmasked ones")
    p.add_argument("--window", type=int_range(2), default=5, help="W: positives lie within W//2 positions of the anchor "
                   "(an even W counts as W+1)")
    p.add_argument("--negatives", type=int_range(1), default=50, help="K: negatives per anchor, from other sequences")
    p.add_argument("--negatives_from", default="device", choices=["device", "global"],
                   help="draw negatives from this device's micro-batch, or from every rank's (all-gathered, "
                   "detached), as the official single-process multi-GPU runs did")
    p.add_argument("--temperature", type=float_range(0, lo_open=True), default=None, help="tau of the InfoNCE softmax "
                   "(default: 0.07 for taco, 0.01 for tacl)")
    p.add_argument("--plain_tc", action="store_true", help="compute the TC cosines by the plain einsum "
                   "(the same numbers, slower, more memory) instead of engine/fast.py's SampledCosines")
    p.add_argument("--teacher_dropout", default="on", choices=["on", "off"],
                   help="tacl: dropout in the frozen teacher; on as in the official code (yxuansu/TaCL#11)")
    p.add_argument("--mlm_probability", type=float_range(0, 1, lo_open=True, hi_open=True), default=None,
                   help="fraction of tokens masked (default 0.15; 0.3 for retromae, whole words)")
    p.add_argument("--predict_all", action="store_true", help="MLM+TP ablation: add a token-prediction loss, "
                   "the mean over the other non-special tokens, to MLM's mean over the chosen ones")
    p.add_argument("--init", default=None, help="continue from trained weights: a run directory, checkpoint file or Hugging "
                   "Face directory (weights only: new optimizer and schedule; the model is the init's; see choose_recipe)")
    # RetroMAE (--objective retromae)
    p.add_argument("--decoder_mlm_probability", type=float_range(0, 1, lo_open=True, hi_open=True), default=0.5,
                   help="retromae: fraction of tokens (whole words) each decoder row cannot see")
    p.add_argument("--decoder_pool", type=int_range(1, 512), default=256,
                   help="retromae: whole-word masks drawn per sequence; each decoder row picks one")
    p.add_argument("--decoder_weight", type=float_range(0), default=1.0, help="retromae: loss = L_enc + w * L_dec")
    p.add_argument("--freeze_embeddings", action="store_true",
                   help="keep the whole embedding layer (word, position, type, LayerNorm) at its init: "
                   "random, or with --init trained (the paper's Fig. 4)")
    p.add_argument("--untie_embeddings", action="store_true", help="separate MLM decoder matrix (Appendix B)")
    # data
    p.add_argument("--data", default=None, help="comma-separated: toy, wikipedia, bookcorpus, wikitext103, files or "
                   "folders (default: toy for --size tiny and mini, else the paper's; --init: toy models only)")
    p.add_argument("--vocab", default=None, help="vocab.txt, a folder with one, or a hub id (default: toy vocab "
                   "for --data toy, else bert-base-uncased)")
    p.add_argument("--max_len", type=int_range(8, 512), default=None, help="tokens per block (default: the recipe's)")
    p.add_argument("--cache_dir", default=None, help="where tokenised corpora are cached (default $TACO_CACHE or ~/.cache/taco)")
    p.add_argument("--num_proc", type=int_range(1), default=None,
                   help="tokenisation processes (default: one per 100 MB of text, at most one per core)")
    p.add_argument("--eval_blocks", type=int_range(0), default=64, help="blocks held out for evaluation")
    # optimisation
    p.add_argument("--steps", type=int_range(1), default=None, help="optimizer steps (default: the recipe's)")
    p.add_argument("--warmup", type=int_range(0), default=None, help="linear warm-up steps (default: the recipe's)")
    p.add_argument("--batch_size", type=int_range(1), default=None, help="global batch in sequences (default: the recipe's)")
    p.add_argument("--device_batch_size", type=int_range(1), default=32, help="at most this many sequences per device "
                   "per micro-step (the largest divisor of the per-process batch up to this)")
    p.add_argument("--lr", type=float_range(0, lo_open=True), default=None, help="peak learning rate (default: the recipe's)")
    p.add_argument("--weight_decay", type=float_range(0), default=None, help="AdamW weight decay on matrices "
                   "(default: 0.01; 0 for tacl, as its official code)")
    p.add_argument("--clip", type=float_range(0, lo_open=True), default=1.0, help="gradient-norm clipping")
    p.add_argument("--seed", type=int_range(0, 2**32 - 1), default=0, help="seeds init, data order, masking and sampling")
    # system
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                   help="autocast precision (default: bf16 on capable CUDA, else fp32)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--plain", action="store_true", help="every plain form: --plain_tc, and PyTorch's own dropout and "
                   "attention instead of engine/fast.py's CPU equivalents (the same computation, other random draws)")
    cli.add_threads_flag(p)
    # output
    p.add_argument("--out", default="runs/taco", help="run directory: config, metrics, checkpoints")
    p.add_argument("--save_every", type=int_range(1), default=None,
                   help="checkpoint every N steps, and at the end (default: the recipe's)")
    p.add_argument("--eval_every", type=int_range(1), default=None,
                   help="evaluate every N steps, and at the end (default: the recipe's)")
    p.add_argument("--log_every", type=int_range(1), default=10, help="write metrics.jsonl every N steps")
    p.add_argument("--keep_last", type=int_range(1), default=3, help="checkpoints kept in --out")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out (one that "
                   "does not load is skipped)")
    p.add_argument("--force", action="store_true", help="overwrite a run in --out, resume with changed settings, or "
                   "continue an --init without an MLM head")
    p.add_argument("--skip_nonfinite", action="store_true", help="skip steps with a non-finite loss instead of stopping")
    p.add_argument("--log", default=None, choices=["tensorboard", "wandb"],
                   help="also send metrics.jsonl's numbers to TensorBoard (OUT/tensorboard) or Weights & Biases")
    return p


def get_args(argv=None):
    """taco.py's flags, the recipe's defaults filled in, reading no file. Where the recipe depends on
    the --init model (neither --size nor --data given), args.recipe is None until apply_recipe."""
    args = parser().parse_args(argv)
    args.temperature = args.temperature or (0.01 if args.objective == "tacl" else 0.07)
    if args.weight_decay is None:  # TaCL's AdamW (transformers' default) has none; TACO's scripts 0.01
        args.weight_decay = 0.0 if args.objective == "tacl" else 0.01
    args.mlm_probability = args.mlm_probability or (0.3 if args.objective == "retromae" else 0.15)  # RetroMAE's: 30%
    args.recipe = args.recipe_why = None
    args.vocab = args.vocab or (checkpoints.vocab_beside(args.init) if args.init else None)  # the init's own
    if not args.init or (args.size and args.data):  # nothing to read from the init (which may not exist yet: study.py)
        apply_recipe(args)
    return args


def apply_recipe(args, init=None):
    """Fill in the recipe's defaults (RECIPES): --size's, or with an --init that needs it read, one
    that fits the loaded init (choose_recipe), which it must fit (an MLM head, the positions)."""
    if args.recipe is None:  # (else get_args applied it already)
        args.recipe, args.recipe_why = choose_recipe(args, init)
        args.size, recipe = args.size or "tiny", RECIPES[args.recipe]
        if args.warmup is None and args.steps is not None:  # keep the recipe's warm-up fraction
            args.warmup = round(recipe["warmup"] * args.steps / recipe["steps"])
        vars(args).update({k: v for k, v in recipe.items() if getattr(args, k) is None})
        args.data = args.data or ("toy" if args.recipe in TOY_SIZES or args.init else PAPER_DATA)  # --init: a toy's
        args.vocab = args.vocab or ("toy" if args.data == "toy" else "bert-base-uncased")  # the data's usual one
    if init and not init.head and not args.force:
        raise UsageError(f"--init {args.init} has no MLM head (a sentence encoder): continuing it trains a fresh head, "
                         f"and the encoder with it, from chance, so its representations decay first. Continue a model "
                         f"with its MLM head, or pass --force (then compare the end line's MLM accuracy with the init's)")
    if init and args.max_len > (most := init.config.max_position_embeddings):
        raise UsageError(f"--max_len {args.max_len}: --init {args.init} has {most} positions; pass --max_len {most} "
                         f"or less")


def choose_recipe(args, init=None):
    """-> (RECIPES key, why): --size's, or with --init (loaded: `init`) one that fits it (docs/model.md)."""
    if not args.init:
        return args.size or "tiny", "--size"
    if args.size and args.data:
        return args.size, "--size as given"
    source, run = checkpoints.trained_with(init.source)
    if args.data is None and not is_toy_vocab(checkpoints.vocab_beside(source), args.cache_dir):  # no toy corpus for it
        raise UsageError(f"--init {args.init} has its own vocabulary: pass --data, the text to continue it on")
    if args.size or (run and run["recipe"] in TOY_SIZES):  # a toy run continues as it was trained
        return (args.size, "--size as given") if args.size else (run["recipe"], "--init is a taco toy run")
    return "continue", f"--init is a {'Hugging Face' if run is None else 'trained'} model: lr {RECIPES['continue']['lr']:g}"


def check_args(args, world_size, warn=print):
    """Catch mistakes that involve several flags (each flag's own range is checked by argparse)
    before anything is written, and warn of doubtful ones. Sets args.device_batch_size to the
    micro-batch that Batches reads; returns the micro-batches per step."""
    check_tacl_args(args)
    if args.warmup > args.steps:
        raise UsageError(f"--warmup must be between 0 and --steps ({args.steps})")
    if args.objective == "retromae" and (args.predict_all or args.tc_positions != "all"):
        raise UsageError("--predict_all and --tc_positions are MLM/TACO ablations; retromae's decoder "
                         "already predicts every token and it has no TC loss")
    if args.batch_size % world_size:
        raise UsageError(f"--batch_size {args.batch_size} is not divisible by the {world_size} processes")
    per_rank = args.batch_size // world_size
    # the micro-batch: the largest divisor of the per-process batch up to --device_batch_size
    # (1,280 sequences on 16 processes: 80 each, in micro-batches of 20 under the default 32)
    dbs = max(d for d in range(1, min(args.device_batch_size, per_rank) + 1) if per_rank % d == 0)
    pool = dbs * (world_size if args.negatives_from == "global" else 1)  # sequences negatives come from
    if args.objective == "taco" and pool < 2:
        raise UsageError("TACO draws negatives from other sequences of the device batch: "
                         + ("--device_batch_size must be >= 2" if dbs == args.device_batch_size else
                            f"no divisor of the per-process batch {per_rank} between 2 and --device_batch_size "
                            f"{args.device_batch_size}; change --batch_size or the number of processes, or "
                            f"pass --negatives_from global"))
    if args.objective == "taco" and args.negatives > (pool - 1) * args.max_len:
        raise UsageError(f"--negatives {args.negatives} exceeds the {(pool - 1) * args.max_len} tokens "
                         f"of the {pool - 1} other sequences negatives come from; lower it or raise --device_batch_size")
    if dbs < min(args.device_batch_size, per_rank):
        warn(f"micro-batches of {dbs} sequences, the largest divisor of the per-process batch {per_rank} up to "
             f"--device_batch_size {args.device_batch_size}" + ("; TACO's negatives come from them" * (args.objective == "taco")))
    if args.lr > 5 * (lr := RECIPES[args.recipe]["lr"]):  # far from the recipe (TaCL's 1e-4 is not): say what it risks
        warn(f"--lr {args.lr:g} is {args.lr / lr:.0f}x the {args.recipe} recipe's {lr:g}: a trained model can collapse")
    chosen = args.mlm_probability * dbs * (args.max_len - 2)  # MLM targets per micro-batch, on average
    if chosen < 1 and args.objective != "retromae":  # whole-word masking chooses at least one word
        warn(f"--mlm_probability {args.mlm_probability:g} chooses {chosen:.2f} tokens per micro-batch of {dbs} x "
             f"{args.max_len} on average: most micro-batches have no MLM target (their MLM term is 0)")
    if "toy" in args.data.split(",") and args.size not in TOY_SIZES:
        warn(f"--size {args.size} on the toy corpus (0.4M tokens) is a smoke test, not the paper's run: that is "
             f"the default --data {PAPER_DATA}")
    args.device_batch_size = dbs
    return per_rank // dbs


def check_tacl_args(args):
    """TaCL continues a trained model (its teacher is a frozen copy of it); TACO's sampling flags
    do not apply to it, nor the teacher's flag to the other objectives."""
    defaults = parser()  # (its defaults, not get_args([])'s: no recipe to apply)
    given = lambda flag: getattr(args, flag) != defaults.get_default(flag)  # set to other than its default
    if args.objective != "tacl":
        if given("teacher_dropout"):
            raise UsageError("--teacher_dropout applies only to --objective tacl")
        return
    if not args.init:
        raise UsageError("--objective tacl continues a trained model and distils from a frozen copy of it: "
                         "pass --init RUN|ckpt|HF dir")
    refused = [f"--{flag}" for flag in ("window", "negatives", "negatives_from", "tc_positions", "predict_all",
                                        "plain_tc") if given(flag)]
    if refused:
        raise UsageError(f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not apply to --objective "
                         f"tacl (its anchors are the masked tokens, its negatives the other tokens of the sequence)")
