"""Speed of one training step, side by side: taco against Hugging Face's BertForMaskedLM.

    python tools/bench.py --size small --batch_size 16 --max_len 128 --threads 2 --steps 20   # CPU (README: Speed)
    python tools/bench.py --size base --max_len 256 --batch_size 32 --dtype bf16             # one GPU
    python tools/bench.py --compile                                   # torch.compile every model
    python tools/bench.py --variants taco-mlm,taco-tc --profile       # + where the time goes, op by op
    python tools/bench.py --tokenizer big.txt --vocab path/to/vocab.txt   # the tokenizer vs Hugging Face's
    python tools/bench.py --wait_policy --steps 60 --busy 1               # threads on a shared machine (README: Threads)
    python tools/bench.py --loop --size tiny --steps 5                # the real training loop (docs/speed.md)
    python tools/bench.py --gpu_check                                 # the prepared check for a GPU (docs/speed.md)

Every variant runs the full step (forward, loss, backward, clip to norm 1, AdamW as taco.configure_optimizer
builds it) on the same random batch (vocabulary 30,522, 15% masked by data.mask_tokens), the variants taking
turns step by step (A B C D A B C D ...: the machine's drift cancels in the medians): taco-mlm, taco-tc (+ the
TC loss: TACO), hf-mlm (transformers.BertForMaskedLM, sdpa), hf-tc (+ the plain TC loss, as users bolt it on)
and, on request, taco-retromae. docs/speed.md says what each variant and column measures. The last lines are
machine-readable: speedup_vs_hf (taco-mlm tokens/s / hf-mlm's), tc_overhead (taco-tc step time / taco-mlm's)
and, when measured, retromae_overhead (taco-retromae step time / taco-mlm's).
"""
import argparse
import contextlib
import importlib
import io
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # python tools/NAME.py: the root's modules
from engine import cli
cli.start(__name__)  # first, before torch loads: how idle CPU threads wait; Ctrl-C / SIGTERM / SIGHUP from now on
import torch

from engine import checkpoints, fast
from engine.cli import float_range, int_range
from data import WordPieceTokenizer, load_tokenizer, mask_tokens, retromae_batch
from engine.corpus import read_documents
from model import SIZES, BertConfig, BertForPreTraining, RetroMAEForPreTraining
from taco import DecoderInputs, MaskedBatch, compute_loss, configure_optimizer, retromae_loss, tc_loss

VARIANTS = ["taco-mlm", "taco-tc", "hf-mlm", "hf-tc"]
ON_REQUEST = ["taco-retromae"]
# Dense bf16 peak TFLOP/s by torch.cuda.get_device_name(), for MFU: the exact names, since the
# PCIe and NVL parts of one chip run slower than its SXM part. Another name: --peak_tflops.
PEAK_BF16 = {"NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA H100 NVL": 835, "NVIDIA H200": 989,
             "NVIDIA H200 NVL": 835, "NVIDIA GH200 480GB": 989, "NVIDIA H800": 989, "NVIDIA H800 PCIe": 756,
             "NVIDIA B200": 2250, "NVIDIA A100-SXM4-80GB": 312, "NVIDIA A100-SXM4-40GB": 312,
             "NVIDIA A100-PCIE-40GB": 312, "NVIDIA A100 80GB PCIe": 312, "NVIDIA A800-SXM4-80GB": 312,
             "NVIDIA L40S": 362, "NVIDIA L4": 121, "NVIDIA A10": 125}
# bert-base-uncased's special ids; for RetroMAE's whole-word masks every random id is a whole word
TOK = SimpleNamespace(vocab_size=30522, special_ids=[0, 100, 101, 102, 103], mask_id=103, pad_id=0, cls_id=101,
                      sep_id=102, is_continuation=torch.zeros(30522, dtype=torch.bool))


def get_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=cli.HelpFormatter)
    p.add_argument("--size", choices=list(SIZES), help="model size (default: small; base with --gpu_check)")
    p.add_argument("--batch_size", type=int_range(1), help="sequences per step (default: 16; 32 with --gpu_check)")
    p.add_argument("--max_len", type=int_range(8, 512), help="tokens per sequence (default: 128; 256 with --gpu_check)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="autocast precision (default: bf16 on CUDA, "
                   "fp32 on CPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile every model")
    p.add_argument("--steps", type=int_range(1), default=10, help="timed steps per variant")
    p.add_argument("--warmup", type=int_range(0), default=2, help="untimed steps per variant first")
    cli.add_threads_flag(p)
    p.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of "
                   + ", ".join(VARIANTS + ON_REQUEST))
    p.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                   help="measure peak memory; on CPU in one fresh process per variant")
    p.add_argument("--peak_tflops", type=float_range(0, lo_open=True),
                   help="the device's dense bf16 TFLOP/s for MFU (default: looked up by GPU name)")
    p.add_argument("--profile", action="store_true", help="also print torch.profiler's top operations of one step "
                   "of each variant")
    p.add_argument("--probe", help="internal: print one variant's memory and exit")
    # the other modes
    p.add_argument("--loop", action="store_true", help="time the real training loop instead (python taco.py on the toy "
                   "corpus: dynamic masking, 2 micro-batches a step, the optimizer, the loop's checks) and count the "
                   "torch.compile recompiles and the host syncs per step it makes")
    p.add_argument("--gpu_check", action="store_true", help="the prepared check for a GPU (docs/speed.md): one table "
                   "of step times, MFU, tc_overhead, memory, checkpoint and host-sync costs, also written to --out")
    p.add_argument("--out", default="gpu_check", help="with --gpu_check: the folder for gpu_check.md and .json")
    p.add_argument("--tokenizer", metavar="FILE", help="time the tokenizer on this text file against Hugging Face's "
                   "(one thread) instead of a training step")
    p.add_argument("--vocab", default="bert-base-uncased", help="with --tokenizer: toy, a vocab.txt, a folder with "
                   "one, or a hub model id")
    p.add_argument("--wait_policy", action="store_true", help="time `python taco.py --steps STEPS` with 1 and all "
                   "threads, idle threads spinning (OMP_WAIT_POLICY=ACTIVE) or sleeping (PASSIVE, taco's default), "
                   "while --busy other processes keep cores busy")
    p.add_argument("--busy", type=int_range(0), default=1, help="with --wait_policy: busy-looping processes started "
                   "beside the runs, as other jobs on a shared machine")
    args = p.parse_args(argv)
    with cli.errors():
        args.device = cli.device(args.device)
        if args.compile:
            cli.check_compile(args.device)
    args.dtype, args.autocast = cli.precision(args.device, args.dtype)  # taco.py's: bf16 on capable CUDA, else fp32
    check = args.gpu_check
    args.size, args.batch_size = args.size or ("base" if check else "small"), args.batch_size or (32 if check else 16)
    args.max_len = args.max_len or (256 if check else 128)
    args.variants = args.variants.split(",")
    if unknown := set(args.variants + [args.probe] * bool(args.probe)) - set(VARIANTS + ON_REQUEST):
        p.error(f"unknown variant(s) {', '.join(sorted(unknown))}: choose from {', '.join(VARIANTS + ON_REQUEST)}")
    return args


def main(argv=None):
    args = get_args(argv)
    with cli.errors():  # Ctrl-C: one line, no traceback
        cli.set_threads(args.threads)
        if args.tokenizer:
            return tokenizers(args.tokenizer, args.vocab)
        if args.wait_policy:
            return wait_policies(args.steps, args.busy)
        if args.loop:
            step, detail = loop_row(args)
            return print(f"{args.size}, batch {args.batch_size} x {args.max_len}, {args.dtype}"
                         f"{', compiled' * args.compile} | {device_name(args.device)}: step {step}, median of "
                         f"{args.steps}; {detail}")
        if args.gpu_check:
            return gpu_check(args)
        measure(args, argv)


# ----------------------------------------------------------------------------- one step of each variant

def make_batch(args, retromae=False):
    """Random ids of bert-base-uncased's vocabulary, [CLS] ... [SEP], 15% masked (80/10/10) ->
    (inputs, labels) on the device; retromae: RetroMAE's batch -> ((inputs, labels, DecoderInputs), ms it took)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(999, TOK.vocab_size, (args.batch_size, args.max_len), generator=gen)
    ids[:, 0], ids[:, -1] = TOK.cls_id, TOK.sep_id
    if not retromae:
        return [t.to(args.device) for t in mask_tokens(ids, TOK, 0.15, gen)]
    t0 = time.perf_counter()
    inputs, labels, visible, dec_labels = retromae_batch(ids, TOK, 0.3, 0.5, gen)
    ms = (time.perf_counter() - t0) * 1e3
    return (inputs.to(args.device), labels.to(args.device), DecoderInputs(ids, visible, dec_labels).to(args.device)), ms


def make_step(name, args, cfg, inputs, labels):
    """-> (step(seed), model, optimizer): one full training step of the variant."""
    torch.manual_seed(0)
    if name.startswith("hf"):
        import transformers
        model = transformers.BertForMaskedLM(transformers.BertConfig(attn_implementation="sdpa", **cfg.to_hf_dict()))
    else:  # taco's CPU dropout and attention, as taco.py trains
        model = fast.speed_up(RetroMAEForPreTraining(cfg) if name == "taco-retromae" else BertForPreTraining(cfg))
    if name == "taco-retromae":
        inputs, labels, dec = make_batch(args, retromae=True)[0]
    model = model.to(args.device).train()
    loss_args = SimpleNamespace(objective="taco" if name.endswith("tc") else "mlm", tc_weight=1.0, window=5,
                                negatives=50, temperature=0.07, negatives_from="device", plain_tc=False, plain=False)
    optimizer = configure_optimizer(model, lr=1e-4, weight_decay=0.01)
    scaler = torch.amp.GradScaler(args.device.type, enabled=args.dtype == "fp16")
    run = torch.compile(model) if args.compile else model

    def step(seed):
        gen = torch.Generator(args.device).manual_seed(seed)
        with args.autocast:
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
    return step, model, optimizer


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def alternate(fns, device, rounds, warmup=0, times=None):
    """Call every fn(i) in turn (A B C A B C ...: the machine's drift hits each alike), `warmup`
    untimed rounds first -> {name: median ms}; `times` gets every timed call's ms."""
    times = {} if times is None else times
    for i in range(warmup + rounds):
        for name, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            fn(i)
            sync(device)
            if i >= warmup:
                times.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(times[name]) for name in fns}


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
    step = make_step(name, args, cfg, inputs, labels)[0]
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


def peak_flops(args, name):
    """The device's dense bf16 FLOP/s: --peak_tflops, else PEAK_BF16's for its exact name, else None."""
    return args.peak_tflops * 1e12 if args.peak_tflops else PEAK_BF16.get(name, 0) * 1e12 or None


def mfu(args, name, cfg, labels, ms):
    """A step's useful FLOPs on this batch (forward + backward = 3x forward: encoder matmuls, attention, the
    MLM head at the masked rows only) done in `ms`, as a share of the device's dense bf16 peak; or why none."""
    if args.device.type != "cuda":
        return "n/a (no GPU)"
    if not (peak := peak_flops(args, name)):
        return f"n/a (unknown peak of {name}: pass --peak_tflops)"
    (B, T), L, H, V = labels.shape, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
    flops = 6 * B * T * L * 12 * H * H + 12 * B * T * L * T * H + 6 * int((labels != -100).sum()) * (H * H + H * V)
    return f"{flops / ms * 1e3 / peak:.1%}"


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as f:
        return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    return platform.processor() or "cpu"


def row(*cells):
    return "| " + " | ".join(map(str, cells)) + " |"


def head(*names):
    """A markdown table's first two lines; a name ending in ':' is a right-aligned column."""
    return row(*(n.rstrip(":") for n in names)) + "\n" + row(*("---:" if n[-1] == ":" else "---" for n in names))


def measure(args, argv):
    """Time (and size) every variant; print the table and the machine-readable lines."""
    cfg = BertConfig.from_size(args.size)
    inputs, labels = make_batch(args)
    if args.probe:  # a fresh process measuring one variant's CPU memory
        return print(memory(args.probe, args, cfg, inputs, labels))
    try:
        import transformers
    except ImportError:
        transformers = None
        print("note: transformers is not installed; the hf-* variants are skipped")
        args.variants = [v for v in args.variants if not v.startswith("hf")]
    steps, saved, peak = {}, {}, {}
    for v in args.variants:
        steps[v], model, _ = make_step(v, args, cfg, inputs, labels)
        if not args.compile:  # saved-tensor hooks and torch.compile do not mix
            saved[v] = saved_bytes(steps[v], model)
    med = alternate(steps, args.device, args.steps, args.warmup)  # ms
    if args.memory and (args.device.type == "cuda" or os.path.exists("/proc/self/status")):
        for v in args.variants:
            cmd = [sys.executable, os.path.abspath(__file__), *(sys.argv[1:] if argv is None else argv), "--probe", v]
            peak[v] = memory(v, args, cfg, inputs, labels) if args.device.type == "cuda" else probe(cmd, v)

    tokens, name = args.batch_size * args.max_len, device_name(args.device)
    threads = f", {torch.get_num_threads()} threads" if args.device.type == "cpu" else ""
    print(f"{args.size} (L{cfg.num_hidden_layers} H{cfg.hidden_size} A{cfg.num_attention_heads}), batch "
          f"{args.batch_size} x {args.max_len}, {args.dtype}{', compiled' if args.compile else ''} | {name}{threads} | "
          f"torch {torch.__version__}{f', transformers {transformers.__version__}' if transformers else ''} | "
          f"median of {args.steps} alternating steps\n")
    print(head("variant", "step ms:", "tokens/s:", "vs hf-mlm:", "peak MB:", "saved MB:", "MFU:"))
    for v in args.variants:
        mb = [f"{d[v] / 2**20:,.0f}" if v in d else "-" for d in (peak, saved)]
        print(row(v, f"{med[v]:.0f}", f"{tokens / med[v] * 1e3:,.0f}",
                  f"{med['hf-mlm'] / med[v]:.2f}x" if "hf-mlm" in med else "-", *mb,
                  mfu(args, name, cfg, labels, med[v])))
    if args.profile:
        for v in args.variants:
            print(f"\nwhere the time of one {v} step goes:\n{profile(steps[v], args.device)}")

    def ratio(a, b):
        return med[a] / med[b] if a in med and b in med else float("nan")
    print(f"\nTC step / MLM step: taco {ratio('taco-tc', 'taco-mlm'):.3f}, Hugging Face + plain TC "
          f"{ratio('hf-tc', 'hf-mlm'):.3f}; TACO vs Hugging Face + plain TC: {ratio('hf-tc', 'taco-tc'):.2f}x tokens/s")
    route, madds = fast.similarity_route(tokens, tokens, 1 + 50, cfg.hidden_size)  # anchors = keys: every token
    print(f"TC similarities per step (forward + backward): taco {2 * madds / 1e9:.3g} GFLOP by the {route} route; "
          f"the plain einsum {4 * tokens * 51 * cfg.hidden_size / 1e9:.3g} GFLOP; an N x N product "
          f"{2 * (tokens * tokens + tokens * 51) * cfg.hidden_size / 1e9:.3g} GFLOP")
    print(f"speedup_vs_hf: {ratio('hf-mlm', 'taco-mlm'):.3f}")
    print(f"tc_overhead: {ratio('taco-tc', 'taco-mlm'):.3f}")
    if "taco-retromae" in med:
        prep = statistics.median(make_batch(args, retromae=True)[1] for _ in range(3))
        print(f"retromae batch (whole-word masks + decoder visibility, CPU, not in the step): {prep:.0f} ms")
        print(f"retromae_overhead: {ratio('taco-retromae', 'taco-mlm'):.3f}")


def profile(step, device, rows=15):
    """torch.profiler's table of one step: the operations that take the most time themselves."""
    from torch.profiler import ProfilerActivity
    cuda = device.type == "cuda"
    with torch.profiler.profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as p:
        step(0)
        sync(device)
    return p.key_averages().table(sort_by="self_device_time_total" if cuda else "self_cpu_time_total",
                                  row_limit=rows)


# ----------------------------------------------------------------------------- the tokenizer, threads

def tokenizers(path, vocab_spec, repeats=3):
    """Single-thread MB/s of this tokenizer vs Hugging Face's fast (Rust) and slow (Python)
    ones on the same documents, median of alternating runs, and whether the ids agree."""
    os.environ["RAYON_NUM_THREADS"] = "1"  # must be set before tokenizers is imported
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    docs = read_documents(path)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    tok = load_tokenizer(vocab_spec)

    def run_taco():  # a fresh tokenizer per run, so its chunk cache starts empty
        fresh = WordPieceTokenizer(tok.vocab_file, tok.do_lower_case)
        return [fresh.encode(d) for d in docs]
    runners = {"taco": run_taco}
    try:
        from tokenizers import BertWordPieceTokenizer
        hf_fast = BertWordPieceTokenizer(tok.vocab_file, lowercase=tok.do_lower_case)
        runners["hf fast (encode_batch, 1 thread)"] = lambda: [
            e.ids for e in hf_fast.encode_batch(docs, add_special_tokens=False)]
    except ImportError:
        print("tokenizers not installed: skipping Hugging Face's fast tokenizer")
    for module, name in (("transformers.models.bert.tokenization_bert_legacy", "BertTokenizerLegacy"),
                         ("transformers", "BertTokenizer")):  # transformers >= 5 renamed the pure-Python one
        with contextlib.suppress(ImportError):
            slow = getattr(importlib.import_module(module), name)(tok.vocab_file, do_lower_case=tok.do_lower_case)
            runners["hf slow (python)"] = lambda: [slow.encode(d, add_special_tokens=False) for d in docs]
            break
    ids = {}

    def keep(name):  # a timed run that keeps its ids for the comparison
        return lambda i: ids.update({name: runners[name]()})
    ms = alternate({name: keep(name) for name in runners}, torch.device("cpu"), repeats)
    speed = {name: mb / t * 1e3 for name, t in ms.items()}
    print(f"{path}: {mb:.2f} MB, {len(docs):,} documents, vocab {tok.vocab_file}")
    for name, s in speed.items():
        differ = sum(a != b for a, b in zip(ids[name], ids["taco"]))
        print(f"  {name:34s} {s:8.2f} MB/s" + (f"  ids differ on {differ:,} documents" if name != "taco" else ""))
    for name in list(runners)[1:]:
        print(f"  taco / {name}: {speed['taco'] / speed[name]:.2f}x")


def wait_policies(steps, busy, repeats=3):
    """Wall seconds of `python taco.py --steps N` (the default run, shortened) with 1 thread and
    with one per core, idle threads spinning or sleeping, while `busy` busy-looping processes
    run beside it: the variants alternate, medians of `repeats`. Loads the machine on purpose."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def taco_run(threads, policy, out):
        cmd = [sys.executable, os.path.join(ROOT, "taco.py"), "--steps", str(steps), "--eval_every", str(10 * steps),
               "--threads", str(threads), "--out", out, "--force"]
        return lambda i: subprocess.run(cmd, env={**os.environ, "OMP_WAIT_POLICY": policy}, check=True,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hogs, times = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)], {}
    try:
        with tempfile.TemporaryDirectory() as out:
            runs = {(t, p): taco_run(t, p, out) for t, p in [(1, "PASSIVE"), (cores, "ACTIVE"), (cores, "PASSIVE")]}
            alternate(runs, torch.device("cpu"), repeats, times=times)  # every run's wall time
    finally:
        for hog in hogs:
            hog.kill()
    print(f"python taco.py --steps {steps}, {cores} cores, {busy} busy-looping process(es) beside it; "
          f"wall seconds, median of {repeats} alternating runs\n")
    print(head("threads:", "idle threads", "wall s:", "runs"))
    for (threads, policy), t in times.items():
        print(row(threads, f"{'spin' if policy == 'ACTIVE' else 'sleep'} (OMP_WAIT_POLICY={policy})",
                  f"{statistics.median(t) / 1e3:.1f}", ", ".join(f"{x / 1e3:.1f}" for x in t)))


# ----------------------------------------------------------------------------- the real loop, the GPU check

def loop(args, steps, count_syncs=False):
    """`steps` steps of the real training loop (taco.main on the toy corpus: dynamic masking,
    accumulation over 2 micro-batches, the optimizer, the loop's checks) at args' size, batch,
    length, precision and --compile -> {step_ms (median after the first two steps), recompiles
    (frames torch.compile compiled after the first step), syncs: fast.HostSyncs's counts}.
    The step boundaries are taken from outside: train() calls taco.get_lr once per step."""
    import taco
    real, stamps, frames = taco.get_lr, [], torch._dynamo.utils.counters["frames"]

    def stamped(*a):
        sync(args.device)
        stamps.append((time.perf_counter(), frames["ok"]))
        return real(*a)
    flags = {"size": args.size, "data": "toy", "vocab": "toy", "steps": steps, "warmup": 1,
             "batch_size": args.batch_size, "device_batch_size": args.batch_size // 2, "max_len": args.max_len,
             "eval_blocks": 0, "save_every": 10 * steps, "log_every": 10 * steps, "device": args.device,
             "dtype": args.dtype, "threads": args.threads}
    argv = [w for k, v in flags.items() if v is not None for w in (f"--{k}", str(v))] + ["--compile"] * args.compile
    syncs, said = fast.HostSyncs() if count_syncs else contextlib.nullcontext(), io.StringIO()
    with (tempfile.TemporaryDirectory() as out, syncs, contextlib.redirect_stdout(said),
          contextlib.redirect_stderr(said), mock.patch.object(taco, "get_lr", stamped)):
        try:
            taco.main(argv + ["--out", out])
        except SystemExit as stop:  # taco's one error line: the reason
            raise RuntimeError((said.getvalue().strip().splitlines() or [f"exit {stop.code}"])[-1]) from None
    sync(args.device)
    stamps.append((time.perf_counter(), frames["ok"]))
    step_s = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])][2:] or [stamps[-1][0] - stamps[0][0]]
    return {"step_ms": statistics.median(step_s) * 1e3, "recompiles": stamps[-1][1] - stamps[1][1],
            "syncs": syncs.counts if count_syncs else None}


def loop_row(args):
    """-> (the loop's step time, what else it measured), from a timed run and a 3-step counted one."""
    timed, counts = loop(args, args.steps + 2), loop(args, 3, count_syncs=True)["syncs"]
    own = sum(n for w, n in counts.items() if w.startswith("engine/runs.py"))  # the loop's, not the method's
    tokens_s = args.batch_size * args.max_len / timed["step_ms"] * 1e3
    return f"{timed['step_ms']:.1f} ms", (
        f"real loop (toy corpus, dynamic masking, 2 micro-batches, AdamW), {tokens_s:,.0f} tokens/s; "
        f"{timed['recompiles']} recompiles after step 1; host syncs per step: {(sum(counts.values()) - own) / 3:g} in "
        f"the method, {own} by the loop's checks in 3 steps (a .tolist() is not seen on a CPU): {dict(counts)}")


def gpu_check(args, minutes=7.5):
    """The prepared check for the first GPU (docs/speed.md): every row measured or saying why not,
    within `minutes`; the table printed and written to --out as gpu_check.md and gpu_check.json."""
    t_end, cuda, rows = time.time() + 60 * minutes, args.device.type == "cuda", []
    cfg, name, B, T = BertConfig.from_size(args.size), device_name(args.device), args.batch_size, args.max_len

    def steps(variants, b=B, compiled=False):  # -> {variant: median ms of its step at b x T, and MFU}
        run = argparse.Namespace(**{**vars(args), "batch_size": b, "compile": compiled})
        inputs, labels = make_batch(run)
        ms = alternate({v: make_step(v, run, cfg, inputs, labels)[0] for v in variants}, args.device, args.steps,
                       args.warmup)
        return {v: (t, mfu(args, name, cfg, labels, t)) for v, t in ms.items()}

    def fixed(compiled):
        (mlm, mlm_mfu), (tc, tc_mfu) = steps(["taco-mlm", "taco-tc"], compiled=compiled).values()
        return f"{tc:.1f} ms", f"taco-tc: MFU {tc_mfu}; taco-mlm {mlm:.1f} ms, MFU {mlm_mfu}; tc_overhead {tc / mlm:.3f}"

    def largest():
        best = "n/a", "64 does not fit"
        for b in (64, 128, 256, 512, 1024):
            try:
                ms, share = steps(["taco-tc"], b)["taco-tc"]
                best = f"{b} x {T}", f"taco-tc {ms:.0f} ms, {b * T / ms * 1e3:,.0f} tokens/s, MFU {share}"
            except torch.cuda.OutOfMemoryError:
                break
            finally:
                torch.cuda.empty_cache()
        return best

    def peak_memory():
        added = memory("taco-tc", args, cfg, *make_batch(args))
        total = f", peak allocated {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if cuda else ""
        return f"{added / 2**20:,.0f} MB", f"taco-tc {B} x {T}: what two steps add to the weights{total}"

    def save():
        eager = argparse.Namespace(**{**vars(args), "compile": False})
        step, model, optimizer = make_step("taco-mlm", eager, cfg, *make_batch(args))
        step(0)  # AdamW's state exists after a step
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        with tempfile.TemporaryDirectory(dir=".") as out:  # the later saves rotate (keep_last 2), as a run does
            ms = alternate({0: lambda i: checkpoints.save_checkpoint(out, {**state, "step": i + 1}, 2)}, args.device, 3)
            mb = os.path.getsize(checkpoints.list_checkpoints(out)[0]) / 1e6
        return f"{ms[0] / 1e3:.2f} s", f"{mb:,.0f} MB (weights + AdamW), with rotation; every save blocks"

    def global_negatives(ranks=8):
        from engine import runs
        gen = torch.Generator(args.device).manual_seed(0)
        h = torch.randn(B, T, cfg.hidden_size, device=args.device, generator=gen, requires_grad=True)
        e = torch.randn(B, T, cfg.hidden_size, device=args.device, generator=gen)

        def tc(group):
            return lambda i: tc_loss(h, e, generator=torch.Generator(args.device).manual_seed(1), fast=True,
                                     group=group).backward()
        simulated = lambda keys, pool, group: (keys.repeat(ranks, 1), pool.repeat(ranks, 1), slice(0, len(pool)))
        with mock.patch.object(runs, "gather_pool", simulated):  # 8 ranks' pool: this micro-batch's keys 8 times
            # a warm-up round first; fast.py's route is measured for both shapes
            own, pooled = alternate({0: tc(None), 1: tc(True)}, args.device, 3, warmup=1).values()
        gathered = ranks * B * T * (cfg.hidden_size * 4 + 1) / 2**20
        return f"+{pooled - own:.1f} ms", (f"TC loss of a {B} x {T} micro-batch: {own:.1f} ms with its own negatives, "
                                           f"{pooled:.1f} ms from {ranks} ranks' (simulated on one device); per step x "
                                           f"the micro-batches per rank; the all_gather of {gathered:,.0f} MB is not "
                                           f"included")

    checks = [(f"step {B} x {T}", lambda: fixed(False), None),
              (f"step {B} x {T} --compile", lambda: fixed(True),
               None if cuda else "skipped on the CPU (compiling takes minutes)"),
              ("largest micro-batch", largest, None if cuda else "n/a on the CPU (no device memory to fill)"),
              ("peak memory", peak_memory, None), ("training loop step", lambda: loop_row(args), None),
              ("checkpoint save", save, None), ("--negatives_from global", global_negatives, None)]
    print(f"{args.size}, {args.dtype}, {B} x {T} | {name} | torch {torch.__version__}\n\n"
          f"{head('check', 'value:', 'detail')}")
    for check, measure, skip in checks:
        value, detail = "n/a", skip or f"out of time ({minutes} min)"
        if not skip and time.time() < t_end:
            try:
                value, detail = measure()
            except Exception as err:  # fail soft: the row says why, the others still run
                detail = f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"
        rows.append({"check": check, "value": value, "detail": detail})
        print(row(check, value, detail), flush=True)
    peak = peak_flops(args, name)
    about = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": name, "torch": torch.__version__,
             "size": args.size, "dtype": args.dtype, "batch": f"{B} x {T}", "peak_tflops": peak and peak / 1e12}
    os.makedirs(args.out, exist_ok=True)
    checkpoints.write_json(os.path.join(args.out, "gpu_check.json"), {**about, "rows": rows})
    table = "\n".join([head("check", "value:", "detail")] + [row(*r.values()) for r in rows])
    checkpoints.write_bytes(os.path.join(args.out, "gpu_check.md"),
                            f"{', '.join(f'{k} {v}' for k, v in about.items())}\n\n{table}\n".encode())
    print(f"\nwritten: {os.path.join(args.out, 'gpu_check.md')} and gpu_check.json")


if __name__ == "__main__":
    main()
