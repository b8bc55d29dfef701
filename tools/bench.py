"""Speed of one training step, side by side: taco against Hugging Face's BertForMaskedLM.

    python tools/bench.py --size small --batch_size 16 --max_len 128 --threads 2 --steps 20   # CPU (README: Speed)
    python tools/bench.py --size base --max_len 256 --batch_size 32 --dtype bf16 --compile   # one GPU
    python tools/bench.py --gpu_check                                 # the prepared check for a GPU (docs/speed.md)

Every variant runs the full step (forward, loss, backward, clip to norm 1, taco's AdamW) on the same random batch,
taking turns step by step (A B C D A B C D ...: the machine's drift cancels in the medians): taco-mlm, taco-tc (+ the
TC loss: TACO), hf-mlm (transformers.BertForMaskedLM, sdpa), hf-tc (+ the plain TC loss, as users bolt it on);
docs/speed.md says what each variant and column measures. The last lines are machine-readable: speedup_vs_hf
(taco-mlm tokens/s / hf-mlm's) and tc_overhead (taco-tc step time / taco-mlm's)."""
import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the root's modules
from engine import cli, fast  # first, before torch loads (engine/__init__.py)
import torch

from engine.cli import float_range, int_range
from data import mask_tokens
from model import SIZES, BertConfig, BertForPreTraining
from taco import MaskedBatch, compute_loss, configure_optimizer, tc_loss

VARIANTS = ["taco-mlm", "taco-tc", "hf-mlm", "hf-tc"]
# Dense bf16 peak TFLOP/s by torch.cuda.get_device_name(), for MFU: the exact names, since the
# PCIe and NVL parts of one chip run slower than its SXM part. Another name: --peak_tflops.
PEAK_BF16 = {"NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA H100 NVL": 835, "NVIDIA H200": 989,
             "NVIDIA H200 NVL": 835, "NVIDIA B200": 2250, "NVIDIA A100-SXM4-80GB": 312, "NVIDIA A100-SXM4-40GB": 312,
             "NVIDIA A100-PCIE-40GB": 312, "NVIDIA A100 80GB PCIe": 312, "NVIDIA L40S": 362, "NVIDIA L4": 121}
TOK = SimpleNamespace(vocab_size=30522, special_ids=[0, 100, 101, 102, 103], mask_id=103, pad_id=0, cls_id=101,
                      sep_id=102)  # bert-base-uncased's special ids


def get_args(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=cli.HelpFormatter)
    add = p.add_argument
    add("--size", choices=list(SIZES), help="model size (default: small; base with --gpu_check)")
    add("--batch_size", type=int_range(1), help="sequences per step (default: 16; 32 with --gpu_check)")
    add("--max_len", type=int_range(8, 512), help="tokens per sequence (default: 128; 256 with --gpu_check)")
    add("--dtype", choices=["fp32", "bf16", "fp16"], help="autocast precision (default: bf16 on CUDA, fp32 on CPU)")
    add("--compile", action="store_true", help="torch.compile every model")
    add("--steps", type=int_range(1), default=10, help="timed steps per variant")
    add("--warmup", type=int_range(0), default=2, help="untimed steps per variant first")
    cli.add_threads_flag(p)
    add("--device", help="cpu or cuda (default: cuda if available)")
    add("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    add("--peak_tflops", type=float_range(0, lo_open=True), help="the device's dense bf16 TFLOP/s for MFU (default: "
        "looked up by GPU name)")
    add("--gpu_check", action="store_true", help="the prepared check for a GPU (docs/speed.md): the step of BERT-base "
        "against Hugging Face's, eager and compiled, and the largest micro-batch, within 7.5 minutes; its tables for "
        "docs/speed.md")
    args = p.parse_args(argv)
    args.variants = args.variants.split(",")
    if unknown := set(args.variants) - set(VARIANTS):
        p.error(f"unknown variant(s) {', '.join(sorted(unknown))}: choose from {', '.join(VARIANTS)}")
    check = args.gpu_check
    args.size, args.batch_size = args.size or ("base" if check else "small"), args.batch_size or (32 if check else 16)
    args.max_len = args.max_len or (256 if check else 128)
    return args


def main(argv=None):
    args = get_args(argv)
    with cli.errors():
        args.device = cli.device(args.device)
        if args.gpu_check and args.device.type != "cuda":
            raise cli.UsageError("--gpu_check measures a GPU and runs on none here: on a CPU, time the step with "
                                 "python tools/bench.py")
        args.dtype, args.autocast = cli.precision(args.device, args.dtype)  # taco.py's: bf16 on capable CUDA, else fp32
        cli.set_threads(args.threads)
        return gpu_check(args) if args.gpu_check else measure(args)


# ----------------------------------------------------------------------------- one step of each variant

def make_batch(args):
    """Random ids of bert-base-uncased's vocabulary, [CLS] ... [SEP], 15% masked (80/10/10) -> (inputs, labels)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(999, TOK.vocab_size, (args.batch_size, args.max_len), generator=gen)
    ids[:, 0], ids[:, -1] = TOK.cls_id, TOK.sep_id
    return [t.to(args.device) for t in mask_tokens(ids, TOK, 0.15, gen)]


def make_step(name, args, cfg, inputs, labels):
    """-> step(seed): one full training step of the variant."""
    torch.manual_seed(0)
    if name.startswith("hf"):
        import transformers
        model = transformers.BertForMaskedLM(transformers.BertConfig(attn_implementation="sdpa", **cfg.to_hf_dict()))
    else:  # taco's CPU dropout and attention, as taco.py trains
        model = fast.speed_up(BertForPreTraining(cfg))
    model = model.to(args.device).train()
    loss_args = SimpleNamespace(objective="taco" if name.endswith("tc") else "mlm", tc_weight=1.0, window=5,
                                negatives=50, temperature=0.07, negatives_from="device", plain_tc=False, plain=False)
    optimizer = configure_optimizer(model, lr=1e-4, weight_decay=0.01)
    scaler = torch.amp.GradScaler(args.device.type, enabled=args.dtype == "fp16")
    run = torch.compile(model) if args.compile else model

    def step(seed):
        gen = torch.Generator(args.device).manual_seed(seed)
        with args.autocast:
            if name.startswith("taco"):
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
    return step


def alternate(fns, device, rounds, warmup=0):
    """Each fn(i) in turn (A B C A B C ...: drift hits all alike) after `warmup` untimed rounds -> {name: median ms}."""
    times, sync = {}, torch.cuda.synchronize if device.type == "cuda" else lambda: None
    for i in range(warmup + rounds):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn(i)
            sync()
            if i >= warmup:
                times.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(times[name]) for name in fns}


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


def measure(args):
    """Time every variant (peak memory too on CUDA), print the table and the machine-readable lines -> {variant: ms}."""
    cfg = BertConfig.from_size(args.size)
    inputs, labels = make_batch(args)
    try:
        import transformers
    except ImportError:
        transformers = None
        print("note: transformers is not installed; the hf-* variants are skipped")
        args.variants = [v for v in args.variants if not v.startswith("hf")]
    cuda = args.device.type == "cuda"
    med = alternate({v: make_step(v, args, cfg, inputs, labels) for v in args.variants}, args.device, args.steps,
                    args.warmup)  # ms
    peak = {v: peak_memory(make_step(v, args, cfg, inputs, labels)) for v in args.variants if cuda}  # a fresh model
    tokens, name = args.batch_size * args.max_len, device_name(args.device)
    threads = f", {torch.get_num_threads()} threads" if not cuda else ""
    print(f"{args.size} (L{cfg.num_hidden_layers} H{cfg.hidden_size} A{cfg.num_attention_heads}), batch "
          f"{args.batch_size} x {args.max_len}, {args.dtype}{', compiled' if args.compile else ''} | {name}{threads} | "
          f"torch {torch.__version__}{f', transformers {transformers.__version__}' if transformers else ''} | "
          f"median of {args.steps} alternating steps\n")
    print(head("variant", "step ms:", "tokens/s:", "vs hf-mlm:", "peak MB:", "MFU:"))
    for v in args.variants:
        print(row(v, f"{med[v]:.0f}", f"{tokens / med[v] * 1e3:,.0f}",
                  f"{med['hf-mlm'] / med[v]:.2f}x" if "hf-mlm" in med else "-",
                  f"{peak[v] / 2**20:,.0f}" if cuda else "-", mfu(args, name, cfg, labels, med[v])))
    ratio = lambda a, b: med[a] / med[b] if a in med and b in med else float("nan")
    print(f"\nTC step / MLM step: taco {ratio('taco-tc', 'taco-mlm'):.3f}, Hugging Face + plain TC "
          f"{ratio('hf-tc', 'hf-mlm'):.3f}; TACO vs Hugging Face + plain TC: {ratio('hf-tc', 'taco-tc'):.2f}x tokens/s")
    route, madds = fast.similarity_route(tokens, tokens, 1 + 50, cfg.hidden_size)  # anchors = keys: every token
    print(f"TC similarities per step (forward + backward): taco {2 * madds / 1e9:.3g} GFLOP by the {route} route; "
          f"the plain einsum {4 * tokens * 51 * cfg.hidden_size / 1e9:.3g} GFLOP; an N x N product "
          f"{2 * (tokens * tokens + tokens * 51) * cfg.hidden_size / 1e9:.3g} GFLOP")
    print(f"speedup_vs_hf: {ratio('hf-mlm', 'taco-mlm'):.3f}")
    print(f"tc_overhead: {ratio('taco-tc', 'taco-mlm'):.3f}")
    return med


def peak_memory(step):
    """The peak bytes two steps add to what is allocated (gradients, AdamW state, activations, temporaries)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step(0)
    step(1)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


# ----------------------------------------------------------------------------- the GPU check

def gpu_check(args, minutes=7.5):
    """The prepared check for a lent GPU, what docs/speed.md records: the step against Hugging Face's, taco's step
    compiled, and the largest micro-batch that fits, each part started only within `minutes`."""
    end = time.time() + 60 * minutes
    compiled = argparse.Namespace(**{**vars(args), "compile": True, "variants": ["taco-mlm", "taco-tc"]})
    print(f"## GPU check: {device_name(args.device)}, {time.strftime('%Y-%m-%d', time.gmtime())}, "
          f"torch {torch.__version__}")
    for title, part in (("the step against Hugging Face's", lambda: measure(args)),
                        ("taco's step with --compile", lambda: measure(compiled)),
                        ("the largest micro-batch", lambda: largest(args))):
        print(f"\n### {title}\n")
        if time.time() > end:
            print(f"not measured: out of time ({minutes} min)")
            continue
        try:
            part()
        except Exception as err:  # the other parts still run
            print(f"failed: {type(err).__name__}: {cli.reason(err)}")


def largest(args):
    """taco-tc's step at 64, 128, ..., 1,024 sequences until one does not fit: step time, tokens/s, MFU."""
    cfg, name, T = BertConfig.from_size(args.size), device_name(args.device), args.max_len
    print(head("micro-batch", "taco-tc step ms:", "tokens/s:", "MFU:"))
    for b in (64, 128, 256, 512, 1024):
        run = argparse.Namespace(**{**vars(args), "batch_size": b})
        try:
            inputs, labels = make_batch(run)
            ms = alternate({b: make_step("taco-tc", run, cfg, inputs, labels)}, args.device, args.steps, args.warmup)[b]
        except torch.cuda.OutOfMemoryError:
            return print(f"{b} x {T} does not fit")
        print(row(f"{b} x {T}", f"{ms:.0f}", f"{b * T / ms * 1e3:,.0f}", mfu(args, name, cfg, labels, ms)))


if __name__ == "__main__":
    main()
