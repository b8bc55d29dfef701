"""Speed of one training step, side by side: taco against Hugging Face's BertForMaskedLM.

    python tools/bench.py --size small --batch_size 16 --max_len 128 --threads 2 --steps 20   # CPU (README: Speed)
    python tools/bench.py --size tiny --batch_size 32 --threads 2
    python tools/bench.py --size base --max_len 256 --batch_size 32 --dtype bf16             # one GPU
    python tools/bench.py --compile                                   # torch.compile every model
    python tools/bench.py --variants taco-mlm,taco-tc --profile       # + where the time goes, op by op
    python tools/bench.py --tokenizer big.txt --vocab path/to/vocab.txt   # the tokenizer vs Hugging Face's
    python tools/bench.py --wait_policy --steps 60 --busy 1               # threads on a shared machine (README: Threads)

Every variant runs the full step (forward, loss, backward, clip to norm 1, AdamW as
taco.configure_optimizer builds it) on the same random batch: vocabulary 30,522, 15% of the
tokens masked by data.mask_tokens.
    taco-mlm  taco's BertForPreTraining: MLM logits only at the masked rows
    taco-tc   the same + taco's TC loss (window 5, K 50, tau 0.07): TACO
    hf-mlm    transformers.BertForMaskedLM (sdpa): logits over the vocabulary at every token
    hf-tc     the same + the TC loss in its plain form, as users bolt it on: taco.tc_loss(fast=False),
              which gathers an (N, 1+K, H) copy of the keys
    taco-retromae  (on request) RetroMAE: whole-word MLM at 30% + the one-layer decoder rebuilding
              every token (taco.retromae_loss); its batch (masks, decoder visibility) is built
              once, outside the timed step, and its own cost is printed apart
Variants alternate step by step (A B C D A B C D ...) and the table shows medians, so the
machine's drift cancels. "peak MB" is what two steps add on top of the weights (gradients,
AdamW state, activations, temporaries): the CUDA allocator's peak, or on CPU the peak RSS
of a fresh process per variant. "saved MB" is what autograd keeps for the backward. MFU
(CUDA only) counts the same useful FLOPs for every variant (encoder + MLM head at the
masked rows) against the device's dense bf16 peak. The last two lines are machine-readable:
    speedup_vs_hf: taco-mlm tokens/s / hf-mlm tokens/s
    tc_overhead:   taco-tc step time / taco-mlm step time
    retromae_overhead: taco-retromae step time / taco-mlm step time (when measured)
With --tokenizer FILE it times the WordPiece tokenizer instead (`tokenizers` below).
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # python tools/NAME.py: the root's modules
from engine import cli
cli.start(__name__)  # first, before torch loads: how idle CPU threads wait; Ctrl-C / SIGTERM / SIGHUP from now on
import torch

from engine import fast
from engine.cli import float_range, int_range
from data import load_tokenizer, mask_tokens, retromae_batch
from engine.corpus import read_documents
from model import SIZES, BertConfig, BertForPreTraining, RetroMAEForPreTraining
from taco import DecoderInputs, MaskedBatch, compute_loss, configure_optimizer, retromae_loss, tc_loss
from data import WordPieceTokenizer

VARIANTS = ["taco-mlm", "taco-tc", "hf-mlm", "hf-tc"]
ON_REQUEST = ["taco-retromae"]
# Dense bf16 peak FLOP/s by device name, for MFU.
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "GH200": 989e12, "B200": 2250e12,
             "A100": 312e12, "A800": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12}


def get_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small", choices=list(SIZES), help="model size (default: small)")
    p.add_argument("--batch_size", type=int_range(1), default=16, help="sequences per step (default: 16)")
    p.add_argument("--max_len", type=int_range(8, 512), default=128, help="tokens per sequence (default: 128)")
    p.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"],
                   help="autocast precision (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile every model")
    p.add_argument("--steps", type=int_range(1), default=10, help="timed steps per variant (default: 10)")
    p.add_argument("--warmup", type=int_range(0), default=2, help="untimed steps per variant first (default: 2)")
    p.add_argument("--threads", type=int_range(1), default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the default "
                   + ",".join(VARIANTS))
    p.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                   help="measure peak memory; on CPU in one fresh process per variant (default: on)")
    p.add_argument("--peak_tflops", type=float_range(0, lo_open=True), default=None,
                   help="the device's dense bf16 TFLOP/s for MFU (default: looked up by GPU name)")
    p.add_argument("--profile", action="store_true",
                   help="also print torch.profiler's top operations of one step of each variant")
    p.add_argument("--probe", default=None, help="internal: print one variant's memory and exit")
    p.add_argument("--tokenizer", metavar="FILE", help="time the tokenizer on this text file against Hugging Face's "
                   "(one thread) instead of a training step")
    p.add_argument("--wait_policy", action="store_true", help="time `python taco.py --steps STEPS` with 1 and all "
                   "threads, idle threads spinning (OMP_WAIT_POLICY=ACTIVE) or sleeping (PASSIVE, taco's default), "
                   "while --busy other processes keep cores busy")
    p.add_argument("--busy", type=int_range(0), default=1, help="with --wait_policy: busy-looping processes started "
                   "beside the runs, as other jobs on a shared machine (default: 1)")
    p.add_argument("--vocab", default="bert-base-uncased", help="with --tokenizer: toy, a vocab.txt, a folder with "
                   "one, or a hub model id")
    args = p.parse_args(argv)
    with cli.errors():
        args.device = cli.device(args.device)
        if args.compile:
            cli.check_compile(args.device)
    args.dtype, args.autocast = cli.precision(args.device, args.dtype)  # taco.py's: bf16 on capable CUDA, else fp32
    args.variants = args.variants.split(",")
    if unknown := set(args.variants + [args.probe] * bool(args.probe)) - set(VARIANTS + ON_REQUEST):
        p.error(f"unknown variant(s) {', '.join(sorted(unknown))}: choose from {', '.join(VARIANTS + ON_REQUEST)}")
    return args


def make_batch(args):
    """Random bert-base-uncased ids: [CLS] ... [SEP], 15% masked (80/10/10)."""
    tok = SimpleNamespace(vocab_size=30522, special_ids=[0, 100, 101, 102, 103], mask_id=103)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(999, tok.vocab_size, (args.batch_size, args.max_len), generator=gen)
    ids[:, 0], ids[:, -1] = 101, 102
    inputs, labels = mask_tokens(ids, tok, 0.15, gen)
    return inputs.to(args.device), labels.to(args.device)


def make_retromae_batch(args):
    """make_batch's ids as RetroMAE's batch (every id a whole word) -> (inputs, labels, DecoderInputs, ms)."""
    tok = SimpleNamespace(vocab_size=30522, special_ids=[0, 100, 101, 102, 103], mask_id=103, pad_id=0, cls_id=101,
                          sep_id=102, is_continuation=torch.zeros(30522, dtype=torch.bool))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(999, tok.vocab_size, (args.batch_size, args.max_len), generator=gen)
    ids[:, 0], ids[:, -1] = 101, 102
    t0 = time.perf_counter()
    inputs, labels, visible, dec_labels = retromae_batch(ids, tok, 0.3, 0.5, gen)
    ms = (time.perf_counter() - t0) * 1e3
    dec = DecoderInputs(ids, visible, dec_labels).to(args.device)
    return inputs.to(args.device), labels.to(args.device), dec, ms


def make_step(name, args, cfg, inputs, labels):
    """-> (step(seed), model): one full training step of the variant."""
    torch.manual_seed(0)
    if name == "taco-retromae":
        model = RetroMAEForPreTraining(cfg)
        inputs, labels, dec, _ = make_retromae_batch(args)
    elif name.startswith("taco"):
        model = BertForPreTraining(cfg)
    else:
        import transformers
        hf_cfg = transformers.BertConfig(attn_implementation="sdpa", **{
            k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                         "intermediate_size", "max_position_embeddings", "type_vocab_size",
                                         "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps")})
        model = transformers.BertForMaskedLM(hf_cfg)
    model = model.to(args.device).train()
    if name.startswith("taco"):
        fast.speed_up(model)  # taco's CPU dropout and attention, as taco.py trains
    loss_args = SimpleNamespace(objective="taco" if name.endswith("tc") else "mlm", tc_weight=1.0, window=5,
                                negatives=50, temperature=0.07, negatives_from="device", plain_tc=False, plain=False)
    optimizer = configure_optimizer(model, lr=1e-4, weight_decay=0.01)
    scaler = torch.amp.GradScaler(args.device.type, enabled=args.dtype == "fp16")
    run = torch.compile(model) if args.compile else model
    amp = args.autocast

    def step(seed):
        gen = torch.Generator(args.device).manual_seed(seed)
        with amp:
            if name == "taco-retromae":
                loss = retromae_loss(run, inputs, labels, dec)[0]
            elif name.startswith("taco"):
                loss = compute_loss(run, MaskedBatch(inputs, labels), loss_args, gen)[0]
            else:
                out = run(input_ids=inputs, labels=labels, output_hidden_states=name == "hf-tc")
                loss = out.loss if name == "hf-mlm" else out.loss + tc_loss(
                    out.hidden_states[-1], out.hidden_states[0], generator=gen, fast=False)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return step, model


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def saved_bytes(step, model):
    """Bytes autograd keeps for the backward in one step (parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step(0)
    return sum(seen.values())


def memory(name, args, cfg, inputs, labels):
    """Peak bytes that two training steps add on top of the weights (gradients, AdamW state,
    activations, temporaries): from the CUDA allocator, or on CPU (run in a fresh process)
    from the peak RSS. A step of a tiny model first does the lazy imports and set-up."""
    tiny = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    make_step(name, args, tiny, inputs[:2, :16].contiguous(), labels[:2, :16].contiguous())[0](0)
    step, _ = make_step(name, args, cfg, inputs, labels)
    cuda = args.device.type == "cuda"
    if cuda:
        sync(args.device)
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if cuda else rss("VmRSS")
    step(0)
    step(1)
    sync(args.device)
    return (torch.cuda.max_memory_allocated() if cuda else rss("VmHWM")) - before


def probe(cmd, variant):
    """Run a --probe process (it ends with the parent on Ctrl-C or SIGTERM) -> its peak bytes."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    try:
        return int(done.stdout.split()[-1])
    except (IndexError, ValueError):
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise cli.UsageError(f"the memory probe of {variant} failed ({why}); rerun with --no-memory") from None


def rss(field):
    """VmRSS (now) or VmHWM (peak) of this process in bytes. Not ru_maxrss: that one carries
    over the parent's peak through exec."""
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))


def model_flops(cfg, tokens, masked, T):
    """Useful FLOPs of a step (forward + backward = 3x forward): encoder matmuls, attention,
    and the MLM head at the masked rows only."""
    L, H, V = cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
    return 6 * tokens * L * 12 * H * H + 12 * tokens * L * T * H + 6 * masked * (H * H + H * V)


def profile(step, device, rows=15):
    """torch.profiler's table of one step: the operations that take the most time themselves."""
    from torch.profiler import ProfilerActivity
    cuda = device.type == "cuda"
    with torch.profiler.profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as p:
        step(0)
        sync(device)
    return p.key_averages().table(sort_by="self_device_time_total" if cuda else "self_cpu_time_total",
                                  row_limit=rows)


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "cpu"


def main(argv=None):
    args = get_args(argv)
    with cli.errors():  # Ctrl-C: one line, no traceback
        if args.tokenizer:
            return tokenizers(args.tokenizer, args.vocab)
        if args.wait_policy:
            return wait_policies(args.steps, args.busy)
        measure(args, argv)


def measure(args, argv):
    """Time (and size) every variant; print the table and the machine-readable lines."""
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = BertConfig.from_size(args.size)
    inputs, labels = make_batch(args)
    if args.probe:  # a fresh process measuring one variant's CPU memory
        print(memory(args.probe, args, cfg, inputs, labels))
        return
    try:
        import transformers
    except ImportError:
        transformers = None
        print("note: transformers is not installed; the hf-* variants are skipped")
        args.variants = [v for v in args.variants if not v.startswith("hf")]
    steps, times, saved = {}, {v: [] for v in args.variants}, {}
    for v in args.variants:
        steps[v], model = make_step(v, args, cfg, inputs, labels)
        if not args.compile:  # saved-tensor hooks and torch.compile do not mix
            saved[v] = saved_bytes(steps[v], model)
        for i in range(args.warmup):
            steps[v](i)
    for i in range(args.steps):  # A B C D A B C D ...: drift hits every variant alike
        for v in args.variants:
            sync(args.device)
            t0 = time.perf_counter()
            steps[v](i)
            sync(args.device)
            times[v].append(time.perf_counter() - t0)
    peak = {}
    if args.memory and (args.device.type == "cuda" or os.path.exists("/proc/self/status")):
        for v in args.variants:
            if args.device.type == "cuda":
                peak[v] = memory(v, args, cfg, inputs, labels)
            else:
                cmd = [sys.executable, os.path.abspath(__file__), *(argv if argv is not None else sys.argv[1:]),
                       "--probe", v]
                peak[v] = probe(cmd, v)

    tokens, med = args.batch_size * args.max_len, {v: statistics.median(t) for v, t in times.items()}
    name = device_name(args.device)
    peak_flops = args.peak_tflops * 1e12 if args.peak_tflops else next(
        (f for k, f in PEAK_BF16.items() if k in name), None)
    flops = model_flops(cfg, tokens, int((labels != -100).sum()), args.max_len)
    threads = f", {torch.get_num_threads()} threads" if args.device.type == "cpu" else ""
    print(f"{args.size} (L{cfg.num_hidden_layers} H{cfg.hidden_size} A{cfg.num_attention_heads}), batch "
          f"{args.batch_size} x {args.max_len}, {args.dtype}{', compiled' if args.compile else ''} | {name}{threads} | "
          f"torch {torch.__version__}{f', transformers {transformers.__version__}' if transformers else ''} | "
          f"median of {args.steps} alternating steps\n")
    print("| variant | step ms | tokens/s | vs hf-mlm | peak MB | saved MB | MFU |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for v in args.variants:
        vs_hf = f"{med['hf-mlm'] / med[v]:.2f}x" if "hf-mlm" in med else "-"
        mfu = ("n/a (no GPU)" if args.device.type == "cpu" else "n/a (unknown peak)" if not peak_flops
               else f"{flops / med[v] / peak_flops:.1%}")
        mb = [f"{d[v] / 2**20:,.0f}" if v in d else "-" for d in (peak, saved)]
        print(f"| {v} | {med[v] * 1e3:.0f} | {tokens / med[v]:,.0f} | {vs_hf} | {mb[0]} | {mb[1]} | {mfu} |")

    if args.profile:
        for v in args.variants:
            print(f"\nwhere the time of one {v} step goes:\n{profile(steps[v], args.device)}")

    def ratio(a, b):
        return med[a] / med[b] if a in med and b in med else float("nan")
    print(f"\nTC step / MLM step: taco {ratio('taco-tc', 'taco-mlm'):.3f}, Hugging Face + plain TC "
          f"{ratio('hf-tc', 'hf-mlm'):.3f}; TACO vs Hugging Face + plain TC: {ratio('hf-tc', 'taco-tc'):.2f}x tokens/s")
    n = args.batch_size * args.max_len  # anchors = keys: every token of the micro-batch
    route, madds = fast.similarity_route(n, n, 1 + 50, cfg.hidden_size)
    print(f"TC similarities per step (forward + backward): taco {2 * madds / 1e9:.3g} GFLOP by the {route} route; "
          f"the plain einsum {4 * n * 51 * cfg.hidden_size / 1e9:.3g} GFLOP; an N x N product "
          f"{2 * (n * n + n * 51) * cfg.hidden_size / 1e9:.3g} GFLOP")
    print(f"speedup_vs_hf: {ratio('hf-mlm', 'taco-mlm'):.3f}")
    print(f"tc_overhead: {ratio('taco-tc', 'taco-mlm'):.3f}")
    if "taco-retromae" in med:
        prep = statistics.median(make_retromae_batch(args)[3] for _ in range(3))
        print(f"retromae batch (whole-word masks + decoder visibility, CPU, not in the step): {prep:.0f} ms")
        print(f"retromae_overhead: {ratio('taco-retromae', 'taco-mlm'):.3f}")


def tokenizers(path, vocab_spec, repeats=3):
    """Single-thread MB/s of this tokenizer vs Hugging Face's fast (Rust) and slow (Python)
    ones on the same documents, median of alternating runs, and whether the ids agree."""
    os.environ["RAYON_NUM_THREADS"] = "1"  # must be set before tokenizers is imported
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    docs = read_documents(path)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    tok = load_tokenizer(vocab_spec)

    def run_taco(ds):  # a fresh tokenizer per run, so its chunk cache starts empty
        fresh = WordPieceTokenizer(tok.vocab_file, tok.do_lower_case)
        return [fresh.encode(d) for d in ds]

    runners = {"taco": run_taco}
    try:
        from tokenizers import BertWordPieceTokenizer
        fast = BertWordPieceTokenizer(tok.vocab_file, lowercase=tok.do_lower_case)
        runners["hf fast (encode_batch, 1 thread)"] = lambda ds: [
            e.ids for e in fast.encode_batch(ds, add_special_tokens=False)]
    except ImportError:
        print("tokenizers not installed: skipping Hugging Face's fast tokenizer")
    try:  # transformers >= 5 renamed the pure-Python tokenizer
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Slow
    except ImportError:
        try:
            from transformers import BertTokenizer as Slow
        except ImportError:
            Slow = None
    if Slow is not None:
        slow = Slow(tok.vocab_file, do_lower_case=tok.do_lower_case)
        runners["hf slow (python)"] = lambda ds: [
            slow.encode(d, add_special_tokens=False) for d in ds]
    times, ids = {name: [] for name in runners}, {}
    for _ in range(repeats):  # alternate so that machine noise hits every tokenizer alike
        for name, run in runners.items():
            t0 = time.perf_counter()
            ids[name] = run(docs)
            times[name].append(time.perf_counter() - t0)
    print(f"{path}: {mb:.2f} MB, {len(docs):,} documents, vocab {tok.vocab_file}")
    speed = {name: mb / statistics.median(t) for name, t in times.items()}
    for name, s in speed.items():
        differ = sum(a != b for a, b in zip(ids[name], ids["taco"]))
        agree = "" if name == "taco" else f"  ids differ on {differ:,} documents"
        print(f"  {name:34s} {s:8.2f} MB/s{agree}")
    for name in list(runners)[1:]:
        print(f"  taco / {name}: {speed['taco'] / speed[name]:.2f}x")



def wait_policies(steps, busy, repeats=3):
    """Wall seconds of `python taco.py --steps N` (the default run, shortened) with 1 thread and
    with one per core, idle threads spinning or sleeping, while `busy` busy-looping processes
    run beside it: the variants alternate, medians of `repeats`. Loads the machine on purpose."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    here = os.path.dirname(os.path.abspath(__file__))
    variants = [(1, "PASSIVE"), (cores, "ACTIVE"), (cores, "PASSIVE")]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    times = {v: [] for v in variants}
    try:
        with tempfile.TemporaryDirectory() as out:
            for _ in range(repeats):
                for threads, policy in variants:
                    t0 = time.perf_counter()
                    subprocess.run([sys.executable, os.path.join(here, "taco.py"), "--steps", str(steps),
                                    "--eval_every", str(10 * steps), "--threads", str(threads), "--out", out,
                                    "--force"], env={**os.environ, "OMP_WAIT_POLICY": policy}, check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    times[threads, policy].append(time.perf_counter() - t0)
    finally:
        for hog in hogs:
            hog.kill()
    print(f"python taco.py --steps {steps}, {cores} cores, {busy} busy-looping process(es) beside it; "
          f"wall seconds, median of {repeats} alternating runs\n")
    print("| threads | idle threads | wall s | runs |\n| ---: | --- | ---: | --- |")
    for (threads, policy), t in times.items():
        print(f"| {threads} | {'spin' if policy == 'ACTIVE' else 'sleep'} (OMP_WAIT_POLICY={policy}) | "
              f"{statistics.median(t):.1f} | {', '.join(f'{x:.1f}' for x in t)} |")

if __name__ == "__main__":
    main()
