"""A run's engineering: one run per --out (RunLock), torchrun's ranks, the stop signals, seeds from (seed, step,
rank) for exact resume, and Run: the moments of taco.py's train(), one call each (docs/robustness.md)."""
import contextlib
import fcntl
import functools
import hashlib
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict

import torch
import torch.distributed as dist
from tqdm import tqdm

from engine import checkpoints, cli
from engine.cli import UsageError
from engine.corpus import cache_path, cached, resolve, tokenize_corpus
from engine.flags import RESUMABLE, check_args

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill / a scheduler, a closed terminal or ssh
HOST = socket.gethostname()


class RunLock(contextlib.AbstractContextManager):
    """Exclusive use of a run folder: flock on FOLDER/.lock, which the kernel drops when its owner dies (even by
    kill -9), so a lock is never stuck. Creates the folder if needed and removes it again if the run wrote nothing."""

    def __init__(self, folder, flag="--out"):
        cli.output_path(folder, flag, folder=True)
        self.folder, self.created, missing = folder, [], os.path.abspath(folder)
        while not os.path.exists(missing):  # the folders it makes, the run's own first: removed again if unused
            self.created.append(missing)
            missing = os.path.dirname(missing)
        os.makedirs(folder, exist_ok=True)
        self.fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(self.fd, 200, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise UsageError(f"{flag} {folder} is in use by another run (process {owner}); wait for it to end, "
                             f"or pick another {flag}") from None
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()} on {HOST}\n".encode(), 0)  # who holds it, for that message
        except OSError:  # a full disk: leave nothing
            self.__exit__()
            raise

    def __exit__(self, *exc):
        os.ftruncate(self.fd, 0)
        os.close(self.fd)
        if os.listdir(self.folder) == [".lock"]:  # nothing written
            os.remove(os.path.join(self.folder, ".lock"))
            with contextlib.suppress(OSError):
                for made in self.created:
                    os.rmdir(made)


class StopSignals(contextlib.AbstractContextManager):
    """While active, a stop signal sets `signum`: the loop saves and stops at the next step boundary, agreed by every
    rank in the step's all-reduce. Signals within TOGETHER s of the first are that stop (Slurm signals every process
    of a job, torchrun forwards its own); a later one stops at once, after `at_once(its name)`."""
    TOGETHER = 2.0

    def __init__(self, master, at_once):
        self.master, self.at_once, self.signum, self.first = master, at_once, 0, 0.0
        self.old = {s: signal.signal(s, self.handle) for s in STOPS if signal.getsignal(s) is not signal.SIG_IGN}

    def handle(self, signum, frame):  # by os.write: a handler may land inside a print
        name = signal.Signals(signum).name
        if not self.signum:
            self.signum, self.first = signum, time.monotonic()
            if self.master:
                os.write(2, f"\n{name}: stopping after this step, once it is saved; a second signal stops at once\n"
                         .encode())
        elif time.monotonic() - self.first > self.TOGETHER:
            if self.master:
                os.write(2, f"\n{self.at_once(name)}\n".encode())
            os._exit(128 + signum)

    def __exit__(self, *exc):
        for s, handler in self.old.items():
            signal.signal(s, handler)


# ----------------------------------------------------------------------------- processes

def setup_distributed(device_arg):
    """-> (rank, local rank, world size, device) from torchrun's RANK, LOCAL_RANK, WORLD_SIZE; else rank 0 of 1."""
    device = cli.device(device_arg)
    if "RANK" not in os.environ:
        return 0, 0, 1, device
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    if device.type == "cuda":
        here, gpus = int(os.environ.get("LOCAL_WORLD_SIZE", 1)), torch.cuda.device_count()
        if here > gpus:  # each process takes the GPU of its local rank
            raise UsageError(f"torchrun started {here} processes on this machine, which has {gpus} CUDA device"
                             f"{'s' * (gpus != 1)}: pass --nproc_per_node={gpus} (or --device cpu)")
        torch.cuda.set_device(local_rank)
    # torchrun restarts workers against the same key-value store, which still holds the
    # dead workers' addresses; a prefix per attempt keeps the new ones from reading them.
    store, _, _ = next(dist.rendezvous("env://"))
    store = dist.PrefixStore(f"attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo",
                            store=store, rank=rank, world_size=world)
    return rank, local_rank, world, torch.device(device.type, local_rank if device.type == "cuda" else None)


def gather_pool(keys, real, group):
    """--negatives_from global: the detached unit global parts (M, H) and real-token masks (B', T) of every rank's
    micro-batch, in rank order, and this rank's rows among them (all_gather: no gradient crosses ranks)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = [[torch.empty_like(t) for _ in range(world)] for t in (keys, real.to(torch.uint8))]
    dist.all_gather(parts[0], keys.contiguous(), group=group)
    dist.all_gather(parts[1], real.to(torch.uint8).contiguous(), group=group)
    B = real.shape[0]
    return torch.cat(parts[0]), torch.cat(parts[1]).bool(), slice(rank * B, (rank + 1) * B)


def settle_buckets(model, loss, autocast):
    """DDP reduces gradients in buckets, which it re-orders after the first backward it sees: a resumed run's
    first step would reduce in other buckets than the unbroken run's, and round otherwise (with 3 or more
    ranks). One backward of loss() now, its gradients dropped, puts them in order before the first real step."""
    with autocast:
        loss = loss()
    loss.backward()
    for p in model.parameters():
        p.grad = None


def step_seed(seed, step, rank):
    """Every step reseeds from (seed, step, rank): resuming needs no RNG state to be exact."""
    return hash((seed, step, rank)) & (2 ** 62 - 1)  # hashing ints is stable across runs


def fingerprint(tokens):
    """A token array's length and a checksum of its first and last million ids: cheap, and another data's differ."""
    n = 1 << 20
    return f"{len(tokens)}:{hashlib.sha256(tokens[:n].tobytes() + tokens[-n:].tobytes()).hexdigest()[:16]}"


def metrics_logger(args):
    """--log: send(step, numbers), which gives TensorBoard (OUT/tensorboard) or Weights & Biases the numbers
    metrics.jsonl records, or None. The package is imported only when asked, at once: a missing one is one line."""
    try:
        if args.log == "wandb":
            import wandb
            run = lambda: wandb.run or wandb.init(project="taco", config=vars(args))  # at the first numbers
            return lambda step, numbers: run().log(numbers, step=step)
        if args.log == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            writer = functools.cache(lambda: SummaryWriter(os.path.join(args.out, "tensorboard")))  # at the first
            return lambda step, numbers: [writer().add_scalar(k, v, step) for k, v in numbers.items()] + [
                writer().flush()]
    except ImportError:
        raise UsageError(f"--log {args.log} needs its package: pip install {args.log}") from None
    return None


def commit():
    """The repository's commit (with "+" if the tree has changes), or None outside git."""
    git = lambda *a: subprocess.run(["git", *a], cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    capture_output=True, text=True)
    with contextlib.suppress(OSError):
        if (head := git("rev-parse", "HEAD")).returncode == 0:
            return head.stdout.strip() + "+" * bool(git("status", "--porcelain", "-uno").stdout.strip())
    return None


# ----------------------------------------------------------------------------- a pre-training run

class Run(contextlib.AbstractContextManager):
    """The engineering of one taco.py run. `with Run(args) as run:` sets its state in one place, before the loop's
    first line: torchrun's ranks, CPU threads, the checks across flags and across ranks, --out and its lock, the
    checkpoint to resume from, the precision; leaving it releases what the run holds. first() and tokens() let
    rank 0 go first; begin() adds what needs the model (-> the step to start at), steps() the bar and the stop
    signals. In the loop: reseed, agree (the step's one host sync), eval_due, log, save, stop_if_signalled; end."""

    def __init__(self, args):
        self.args = args
        with contextlib.ExitStack() as stack:  # released at once if a check below fails, else by __exit__
            self.rank, self.local_rank, self.world, self.device = setup_distributed(args.device)
            if self.world > 1:
                self.store = dist.distributed_c10d._get_default_store()
            self.master = self.rank == 0
            self.threads = cli.set_threads(args.threads)
            check_args(args, self.world, lambda text: self.say(f"warning: {text}"))  # before writing anything
            resolve(args.data, args.cache_dir)  # a mistake in --data: said before the vocabulary is fetched
            per_rank = {"device", "threads", "num_proc", "cache_dir"}
            self.agree_across_ranks("flags", {k: v for k, v in vars(args).items() if k not in per_rank})
            self.dtype, self.autocast = cli.precision(self.device, args.dtype)
            self.send = metrics_logger(args) if self.master else None
            if self.master:  # --out, before anything in it is read or written
                stack.enter_context(RunLock(args.out))
                checkpoints.remove_leftovers(args.out)  # a killed writer's temp files
            # the newest checkpoint, with --resume or in a worker restarted by torchrun --max_restarts
            self.restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0
            found = (self.master and (args.resume or self.restarted)
                     and checkpoints.latest_checkpoint(args.out, checkpoints.RESUME)) or (None, {})
            self.resume_from, self.checkpoint = [found[0]], found[1]
            if self.world > 1:  # the checkpoint rank 0 chose
                dist.broadcast_object_list(self.resume_from, src=0)
            self.resume_from = self.resume_from[0]
            if self.resume_from and not self.master:
                self.checkpoint = self.see("the checkpoint", self.resume_from, lambda: checkpoints.read_state(
                    self.resume_from, checkpoints.RESUME), "--out on a disk every node shares")
            if args.resume and not self.resume_from and not self.restarted:
                raise UsageError(f"--resume: no checkpoint in {args.out}")
            self.resuming = bool(self.resume_from)
            self.start = self.done = self.checkpoint.get("step", 0)
            self.skipped, self.last_ckpt, self.last_eval = self.checkpoint.get("skipped", 0), None, None
            self.init_eval = {}  # taco.py's evaluation of an --init, for the end line
            self.metrics = os.path.join(args.out, "metrics.jsonl")
            self.exit = stack.pop_all()

    def __exit__(self, kind, *exc):
        self.exit.close()
        if self.world > 1 and kind in (None, SystemExit):  # after a mistake of its own, the others learn of it when
            dist.destroy_process_group()  # this process has said it (cli.fail) and exited

    def say(self, line):  # rank 0, above the progress bar if one is drawn
        if self.master:
            tqdm.write(line, file=sys.stderr)

    def first(self, what, work):
        """work() on rank 0, then on the others once rank 0 is done (torchrun ends them if it fails instead):
        rank 0 asks the hub and tokenises, once; the others then find what it left."""
        if self.world > 1 and not self.master and not self.store.check([what]):
            if self.local_rank == 0:
                print(f"rank {self.rank} on {HOST}: waiting for rank 0 to {what}", file=sys.stderr)
            while not self.store.check([what]):
                time.sleep(1)
        result = work()
        if self.world > 1 and self.master:
            self.store.set(what, "done")
        return result

    def see(self, what, path, read, fix, bound=60):
        """read() `what` at `path` once rank 0 has written it, trying for up to `bound` s (a shared disk may show it
        late); else one line: this rank cannot see it, and `fix`."""
        deadline = time.monotonic() + bound
        while True:
            with contextlib.suppress(OSError, UsageError):
                if (found := read()) is not None:
                    return found
            if time.monotonic() > deadline:
                raise UsageError(f"rank {self.rank} on {HOST} cannot see {what} at {path} {bound} s after rank 0 wrote "
                                 f"it: put {fix}")
            time.sleep(min(2, bound))

    def agree_across_ranks(self, what, value):
        """Every rank's `value` (a dict) must be rank 0's: else one line naming the first key and rank that differ."""
        if self.world == 1:
            return
        values = [None] * self.world
        dist.all_gather_object(values, (HOST, value))
        for rank, (host, theirs) in enumerate(values):
            if differ := [k for k in value if str(theirs.get(k)) != str(values[0][1].get(k))]:
                raise UsageError(f"rank {rank} on {host} runs with {what} {differ[0]}={theirs.get(differ[0])}, rank 0 "
                                 f"with {values[0][1].get(differ[0])}: start every node with the same command and data")

    def tokens(self, tok):
        """The corpus as one token array (a memory map). Rank 0 tokenises and caches it (hours for the paper's
        corpora); the others wait, then read the cache, which must be on a disk they share (or prepared there)."""
        args, what = self.args, "tokenise --data"
        if self.master:
            tokens = self.first(what, lambda: tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc,
                                                              say=self.say))
        else:
            path = cache_path(resolve(args.data, args.cache_dir), tok, args.cache_dir)
            fix = ("$TACO_CACHE on a disk every node shares, or run tools/prepare.py with the same --data and --vocab "
                   "on each node first")
            tokens = self.first(what, lambda: self.see("the token cache", path, lambda: cached(path, tok), fix))
        self.data = fingerprint(tokens)
        self.agree_across_ranks("data", {"tokens": self.data})
        return tokens

    def begin(self, raw, optimizer, scaler, tok, batches, eval_blocks, init=None):
        """Refuse to clobber another run or to resume with other settings or data; restore a checkpoint; rank 0
        writes config.json and vocab.txt. -> the step to start at."""
        args, self.steps_per_epoch, self.n_eval = self.args, batches.per_epoch, len(eval_blocks)
        self.init = init and init.source
        if self.master:
            self.check_resume() if self.resuming else self.check_clobber()
        if self.world > 1:
            dist.barrier()
        if self.resuming:
            self.restore(raw, optimizer, scaler)
        if self.master and self.start >= args.steps:
            print(f"{args.out} is already at step {self.start} (--steps {args.steps}): nothing to do")
        elif self.master:
            self.write_config(raw, tok, batches, eval_blocks, init)
        return self.start

    def check_resume(self):
        """The settings compared are the checkpoint's own (config.json is a copy for people to read). --data and
        --vocab may name the same tokens otherwise (a corpus moved): the token array is compared instead."""
        args, old = self.args, self.checkpoint
        same_tokens = old.get("data") in (None, self.data)  # (a checkpoint from before the record: nothing to compare)
        changed = sorted(k for k, v in vars(args).items() if k not in RESUMABLE and old["args"].get(k) != v
                         and not (k in ("data", "vocab") and same_tokens))
        if not same_tokens:
            changed.insert(0, "the tokens of --data and --vocab")
        if args.objective == "tacl" and old.get("init") not in (None, self.init):  # the teacher is rebuilt from it
            changed.append(f"--init (now {self.init}, then {old['init']})")
        if changed and not args.force:
            raise UsageError(f"--resume with settings that differ from the run in {args.out}: {', '.join(changed)}; "
                             f"pass --force to accept them (not an exact resume)")
        why = ("TACO draws its negatives from other sequences, and " if args.objective == "taco" else "") + \
            "the step's random draws and sums come out otherwise (not an exact resume)"
        if old["args"].get("device_batch_size") not in (None, args.device_batch_size):
            self.say(f"warning: --resume in micro-batches of {args.device_batch_size} sequences, not the "
                     f"{old['args']['device_batch_size']} this run was trained in: {why}")
        if old.get("world_size", self.world) != self.world:
            self.say(f"warning: --resume on {self.world} process{'es' * (self.world > 1)}, not the {old['world_size']} "
                     f"this run was trained on: {why}")

    def check_clobber(self):
        """A new run in a folder that holds one (its files go): only with --force, or in torchrun's restart."""
        args = self.args
        if os.path.exists(os.path.join(args.out, "config.json")) or checkpoints.list_checkpoints(args.out):
            if not (args.force or self.restarted):
                raise UsageError(f"{args.out} already holds a run; pass --resume to continue it, "
                                 f"--force to overwrite it, or another --out")
            for name in os.listdir(args.out):
                if name.startswith("ckpt_") or name in ("metrics.jsonl", "config.json"):
                    os.remove(os.path.join(args.out, name))

    def restore(self, raw, optimizer, scaler):
        ckpt = self.checkpoint
        try:
            raw.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scaler.load_state_dict(ckpt["scaler"])
        except (RuntimeError, ValueError, KeyError) as err:  # only with --force: another --size or --objective
            raise UsageError(f"{self.resume_from} holds another model or optimizer than this command builds "
                             f"({cli.reason(err)}); resume with its settings, or start a new --out with "
                             f"--init {self.args.out}") from err

    def write_config(self, raw, tok, batches, eval_blocks, init):
        args, cfg, accum, blocks = self.args, raw.config, batches.accumulation, len(batches.blocks)
        params = sum(p.numel() for p in raw.parameters())
        devices = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                   if self.device.type == "cuda" else [platform.processor() or platform.machine()])
        checkpoints.write_json(os.path.join(args.out, "config.json"), {
            "args": vars(args), "model_config": asdict(cfg), "world_size": self.world, "accumulation": accum,
            "dtype": self.dtype, "train_blocks": blocks, "eval_blocks": len(eval_blocks), "parameters": params,
            "data": self.data, "init": self.init, "threads": self.threads,
            "made_by": {"commit": commit(), "torch": torch.__version__, "cuda": torch.version.cuda,
                        "python": platform.python_version(), "host": HOST, "devices": devices}})
        vocab = os.path.join(args.out, "vocab.txt")
        if not (os.path.exists(vocab) and os.path.samefile(tok.vocab_file, vocab)):
            with open(tok.vocab_file, "rb") as f:
                checkpoints.write_bytes(vocab, f.read())
        if self.resuming and os.path.exists(self.metrics):  # drop lines logged after the checkpoint, a torn one
            checkpoints.write_jsonl(self.metrics, [r for r in checkpoints.read_jsonl(self.metrics)
                                                   if r.get("step", 0) <= self.start])
        cpu = f" ({self.threads} thread{'s' * (self.threads > 1)})" if self.device.type == "cpu" else ""
        tokens = args.steps * args.batch_size * args.max_len  # what the run will cost, before it starts
        model = f"{cfg.num_hidden_layers} x {cfg.hidden_size} from --init" if init else args.size
        print(f"{args.objective} | {model} ({params / 1e6:.1f}M params) | {args.steps:,} steps x "
              f"{args.batch_size} x {args.max_len} tokens = {count(tokens)} tokens "
              f"({args.steps * args.batch_size / blocks:.3g} epochs of {blocks:,} blocks) | batch {args.batch_size} "
              f"= {self.world} x {accum} x {args.device_batch_size} | {self.dtype} on {self.device.type}{cpu}"
              + (f" | init {init.source} | recipe {args.recipe} ({args.recipe_why})" if init else "")
              + (f" | resumed at step {self.start}" if self.resuming else ""))

    def steps(self, start):
        """The steps start .. --steps - 1 under a progress bar (in a log file: a line every --log_every
        steps), and from here on StopSignals."""
        self.stop = self.exit.enter_context(StopSignals(self.master, self.stopped_at_once))
        self.plain = not sys.stderr.isatty()  # tqdm would write ~250 bytes a step into a log
        self.bar = tqdm(range(start, self.args.steps), initial=start, total=self.args.steps,
                        disable=not self.master or self.plain, dynamic_ncols=True, desc="train")
        self.tokens_seen, self.t0 = 0, time.time()
        return self.bar

    def reseed(self, step):
        """The step's random numbers, from (seed, step, rank) alone, so that a resumed run draws what
        an unbroken one would: dropout (torch's), masking (a CPU generator) and TC's sampling (on a GPU
        a generator of its own, on the CPU the masking one; for --negatives_from global rank 0's)."""
        seed, rank, shared = self.args.seed, self.rank, self.args.negatives_from == "global"
        torch.manual_seed(step_seed(seed, step, rank))
        masking = torch.Generator().manual_seed(step_seed(seed + 1, step, rank))
        if self.device.type == "cpu" and not shared:
            return masking, masking
        return masking, torch.Generator(self.device).manual_seed(step_seed(seed + 2, step, 0 if shared else rank))

    def agree(self, step, losses, grad_norm):
        """The step's one host sync: every rank agrees whether its losses and gradient norm are finite
        (fp16's scaler handles overflowing gradients itself) and whether a stop signal came. -> True
        to take the step; a non-finite one stops the run (exit 3), or --skip_nonfinite counts it."""
        ok = torch.isfinite(losses).all() & (torch.isfinite(grad_norm) | (self.dtype == "fp16"))
        flags = torch.stack([(~ok).float(), torch.full((), float(self.stop.signum), device=self.device)])
        if self.world > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        bad, self.signum = flags.tolist()
        if bad and not self.args.skip_nonfinite:
            raise FloatingPointError(f"non-finite loss or gradient at step {step}; last good checkpoint: "
                                     f"{self.last_ckpt or self.resume_from or 'none'} (resume with --resume, "
                                     f"maybe a lower --lr, or pass --skip_nonfinite)")
        self.skipped += bool(bad)
        return not bad

    def eval_due(self, done):
        return self.master and self.n_eval > 0 and (done % self.args.eval_every == 0 or done == self.args.steps)

    def log(self, done, losses, lr, grad_norm, evals):
        """Rank 0: the losses read to the host (a sync) only every --log_every steps and with an
        evaluation, for the bar (in a log: a line) and metrics.jsonl."""
        args, self.done = self.args, done
        self.tokens_seen += args.batch_size * args.max_len
        due = done % args.log_every == 0 or done == args.steps
        if not self.master or not (due or evals):
            return
        elapsed, aux = time.time() - self.t0, AUX_LOSS[args.objective]
        left = (args.steps - done) * elapsed / (done - self.start)  # seconds, at this pace
        loss, mlm, tc, tp, norm = torch.cat([losses, grad_norm.float().reshape(1)]).tolist()  # one host sync
        tok_s, self.last_eval = self.tokens_seen / elapsed, evals or self.last_eval
        shown = {"loss": loss, "mlm": mlm, aux: tc, "tp": tp if args.predict_all else None}
        shown = {k: f"{v:.3f}" for k, v in shown.items() if k and v is not None}  # each objective's own loss
        if not self.plain:
            ctx = {"ctx": f"{self.last_eval['ctx_score']:.3f}"} if self.last_eval else {}
            self.bar.set_postfix(**shown, lr=f"{lr:.1e}", tok_s=f"{tok_s:,.0f}", **ctx)
        elif due:
            self.say(f"step {done}/{args.steps} | {' '.join(f'{k} {v}' for k, v in shown.items())} | lr {lr:.1e} | "
                     f"{tok_s:,.0f} tok/s | {duration(elapsed)}" + f", ~{duration(left)} left" * (left > 0))
        if evals:
            held_out = (f"held-out MLM loss {evals['eval_mlm_loss']:.3f} (accuracy {evals['eval_mlm_acc']:.3f})"
                        if "eval_mlm_loss" in evals else "no held-out MLM (masking chose no held-out token)")
            self.say(f"step {done}: {held_out}; contextual score {evals['ctx_score']:.3f} (intra "
                     f"{evals['ctx_intra']:.3f} - inter {evals['ctx_inter']:.3f}; within documents "
                     f"{evals['ctx_doc_score']:.3f})")
        record = {"loss": loss, "mlm": mlm, "tc": tc, "tc_is": aux, "lr": lr, "tokens_per_s": tok_s, "grad_norm": norm,
                  "skipped": self.skipped, **({"tp": tp} if args.predict_all else {})} if due else {}
        checkpoints.append_jsonl(self.metrics, {"step": done, "time": round(time.time(), 3), **record, **evals})
        if self.send:
            self.send(done, {k: v for k, v in {**record, **evals}.items() if isinstance(v, (int, float))})

    def stopping(self, done):
        return bool(self.signum) and done < self.args.steps

    def save(self, done, raw, optimizer, scaler):
        args = self.args
        if self.master and (done % args.save_every == 0 or done == args.steps or self.stopping(done)):
            self.last_ckpt = checkpoints.save_checkpoint(args.out, {
                "model": raw.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "step": done, "skipped": self.skipped, "model_config": asdict(raw.config), "args": vars(args),
                "data": self.data, "world_size": self.world, "init": self.init}, args.keep_last)

    def stop_if_signalled(self, done):
        """Every rank stops after the same step, once rank 0 has saved it."""
        if not self.stopping(done):
            return
        if self.world > 1:
            dist.barrier()
        name = signal.Signals(int(self.signum)).name
        if self.master:
            print(f"stopped by {name} after step {done}: saved {self.last_ckpt}; to continue, run the same command "
                  f"with --resume", file=sys.stderr)
        sys.exit(128 + int(self.signum))

    def stopped_at_once(self, name):
        last = self.last_ckpt or self.resume_from
        saved = (f"the last checkpoint is {last}: to continue from it, run the same command with --resume" if last
                 else "no checkpoint was saved yet: the same command starts the run over (with --force)")
        return f"stopped at once by a second {name} after step {self.done} (not saved); {saved}"

    def end(self):
        if self.master and not self.last_eval:  # (no held-out blocks)
            print(f"done: run in {self.args.out}")
        if self.master and (ev := self.last_eval):
            was = f" (--init's {self.init_eval['eval_mlm_acc']:.3f})" if "eval_mlm_acc" in self.init_eval else ""
            mlm = (f"eval MLM loss {ev['eval_mlm_loss']:.3f}, acc {ev['eval_mlm_acc']:.3f}{was}"
                   if "eval_mlm_loss" in ev else "no eval MLM (masking chose no held-out token)")
            print(f"done: {mlm}, contextual score {ev['ctx_score']:.3f} (intra {ev['ctx_intra']:.3f}, "
                  f"inter {ev['ctx_inter']:.3f}); run in {self.args.out}")
        if self.world > 1:
            dist.barrier()


# The name of the loss compute_loss returns third (logged as "tc", as the bar names it): TACO's TC
# loss, TaCL's, RetroMAE's decoder loss; MLM has none.
AUX_LOSS = {"taco": "tc", "tacl": "tacl", "retromae": "dec", "mlm": None}


def duration(seconds):
    """4.2 s, 3.5 min, 2.1 h, 12.3 days, 98.5 years."""
    units = (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60))
    return next((f"{seconds / size:.1f} {unit}" for unit, size in units if seconds >= 2 * size), f"{seconds:.3g} s")


def count(n):
    """163.8B, 2.5M, 4.1k."""
    return next((f"{n / size:.1f}{unit}" for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)) if n >= size), str(n))
