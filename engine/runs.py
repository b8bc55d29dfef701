"""A run's engineering, shared by every script: everything about a run that is not the method.
RunLock and StopSignals (one run per --out; a signal stops it at a step boundary), torchrun's ranks,
seeds from (seed, step, rank) for exact resume, and Run: the moments of taco.py's train(), one call
each. What a run writes and reads back is in checkpoints.py; user mistakes are cli.UsageError.
"""
import contextlib
import fcntl
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict

import torch
import torch.distributed as dist
from tqdm import tqdm

from engine import checkpoints
from engine import cli
from engine.cli import DataError, UsageError
from engine.corpus import cached_tokens, tokenize_corpus, tokens_sha256, unavailable
from engine.flags import RESUMABLE, check_args


# ----------------------------------------------------------------------------- one run per folder, signals

class RunLock(contextlib.AbstractContextManager):
    """Exclusive use of a run folder: flock on FOLDER/.lock, which the kernel drops when its owner
    dies (even by kill -9), so a dead owner's lock is taken over with a note. Under torchrun only
    rank 0 takes it. Creates the folder if needed and removes it again if the run wrote nothing."""

    def __init__(self, folder, flag="--out"):
        cli.output_path(folder, flag, folder=True)
        self.folder, self.created = folder, not os.path.exists(folder)
        try:
            os.makedirs(folder, exist_ok=True)
            self.fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise UsageError(f"cannot write to {flag} {folder}: {err.strerror}") from None
        owner = os.pread(self.fd, 200, 0).decode(errors="replace").strip()
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise UsageError(f"{flag} {folder} is in use by another run (process {owner or '?'}); "
                             f"wait for it to end, or pick another {flag}") from None
        if owner:
            print(f"note: {folder}: taking over the lock of process {owner}, which ended without "
                  f"releasing it (killed?)", file=sys.stderr)
        os.ftruncate(self.fd, 0)
        try:
            os.pwrite(self.fd, f"{os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError as err:  # a full disk: leave nothing, say where
            self.release()
            if cli.disk_full(err):
                raise cli.DiskFull(folder, 100, f"the lock of {flag}") from None
            raise

    def __exit__(self, *exc):
        os.ftruncate(self.fd, 0)  # empty: released cleanly
        os.close(self.fd)
        if self.created and os.listdir(self.folder) == [".lock"]:
            os.remove(os.path.join(self.folder, ".lock"))
            os.rmdir(self.folder)

    release = __exit__


class StopSignals(contextlib.AbstractContextManager):
    """While active, a first SIGINT / SIGTERM / SIGHUP sets `signum` (the loop saves and stops at the
    next step boundary); a second one stops at once, exit 128 + its number, after printing
    `at_once(its name)`. During a backward pass Python runs no signal handler, so a thread sees each
    signal as it arrives (signal.set_wakeup_fd), tells `say` of the first and ends the process at the
    second (os._exit: checkpoints are atomic, a torn metrics line is tolerated)."""

    def __init__(self, say, at_once):
        self.say, self.at_once, self.signum = say, at_once, 0
        self.old = {s: signal.signal(s, self.handle) for s in cli.STOPS if signal.getsignal(s) is not signal.SIG_IGN}
        self.wake = socket.socketpair()  # the interpreter writes each signal's number into wake[1]
        self.wake[1].setblocking(False)
        self.old_fd = signal.set_wakeup_fd(self.wake[1].fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self.watch, daemon=True).start()

    def handle(self, signum, frame):  # the main thread, at its next Python instruction: the loop's flag
        self.signum = self.signum or signum

    def watch(self):
        seen = 0
        while (signum := self.wake[0].recv(1)[0]) != 0:  # 0: __exit__ ends the watch
            if signum not in cli.STOPS:
                continue
            seen, name = seen + 1, signal.Signals(signum).name
            if seen == 1:
                self.say(f"{name}: stopping after this step, once it is saved; a second signal stops at once")
            else:
                if message := self.at_once(name):
                    print(message, file=sys.stderr)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(128 + signum)
        for end in self.wake:
            end.close()

    def __exit__(self, *exc):
        signal.set_wakeup_fd(self.old_fd)
        self.wake[1].setblocking(True)
        self.wake[1].send(b"\0")
        for s, handler in self.old.items():
            signal.signal(s, handler)


# ----------------------------------------------------------------------------- processes

def setup_distributed(device_arg):
    """-> (rank, local rank, world size, device): torchrun sets RANK / LOCAL_RANK / WORLD_SIZE; a
    plain `python taco.py` is rank 0 of 1."""
    device = cli.device(device_arg)  # one line if it cannot be used here
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
    """--negatives_from global: the detached unit global parts (M, H) and real-token masks (B', T)
    of every rank's micro-batch, in rank order, and the rows of this rank's sequences among them.
    all_gather carries no gradient: no gradient crosses ranks."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = [[torch.empty_like(t) for _ in range(world)] for t in (keys, real.to(torch.uint8))]
    dist.all_gather(parts[0], keys.contiguous(), group=group)
    dist.all_gather(parts[1], real.to(torch.uint8).contiguous(), group=group)
    B = real.shape[0]
    return torch.cat(parts[0]), torch.cat(parts[1]).bool(), slice(rank * B, (rank + 1) * B)


def step_seed(seed, step, rank):
    """Every step reseeds from (seed, step, rank): resuming needs no RNG state to be exact."""
    return hash((seed, step, rank)) & (2 ** 62 - 1)  # hashing ints is stable across runs


# ----------------------------------------------------------------------------- a pre-training run

@contextlib.contextmanager
def also_missing(args):
    """Around loading --vocab: if it cannot be had, --data is checked too (without loading it), so
    that one message names everything missing (the paper's run offline: both)."""
    try:
        yield
    except DataError as err:
        if also := unavailable(args.data, args.cache_dir):
            raise DataError(f"{err}; {also}") from None
        raise


class Run(contextlib.AbstractContextManager):
    """The engineering of one taco.py run. `with Run(args) as run:` sets its state in one place,
    before the loop's first line: torchrun's ranks, CPU threads, the checks across flags, --out and
    its lock, the checkpoint to resume from, the precision; leaving it releases what the run holds.
    begin adds what needs the model (-> the step to start at), steps the bar and the stop signals.
    In the loop: reseed, early_estimate, agree (the step's one host sync), eval_due, log, save,
    stop_if_signalled; then end."""

    def __init__(self, args):
        self.args = args
        with contextlib.ExitStack() as stack:  # released at once if a check below fails, else by __exit__
            self.rank, _, self.world, self.device = setup_distributed(args.device)
            if self.world > 1:
                stack.callback(dist.destroy_process_group)
            self.master = self.rank == 0
            self.threads = cli.set_threads(args.threads)
            if args.compile:
                cli.check_compile(self.device)  # a missing compiler: one line now, not a traceback at step 1
            check_args(args, self.world, lambda text: self.say(f"warning: {text}"))  # before writing anything
            self.dtype, self.autocast = cli.precision(self.device, args.dtype)
            if self.master:  # --out, before anything in it is read or written
                stack.enter_context(RunLock(args.out))
                checkpoints.remove_leftovers(args.out)  # a killed writer's temp files
            # the newest valid checkpoint, with --resume or in a worker restarted by torchrun --max_restarts
            self.restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0
            found = (args.resume or self.restarted) and checkpoints.latest_checkpoint(args.out, checkpoints.RESUME)
            self.resume_from, self.checkpoint = found or (None, {})
            self.resuming = bool(found)
            # a run that stopped before its first checkpoint: starting it over loses nothing (rank 0 decides)
            unsaved = [checkpoints.stopped_before_first_checkpoint(args.out) if self.master else None]
            if self.world > 1:
                dist.broadcast_object_list(unsaved, src=0)
            self.unsaved = unsaved[0]
            if args.resume and not (found or self.restarted or self.unsaved):
                raise UsageError(f"--resume: no valid checkpoint in {args.out}")
            self.start = self.done = self.checkpoint.get("step", 0)
            self.skipped, self.signum, self.estimated = self.checkpoint.get("skipped", 0), 0, False
            self.last_ckpt = self.last_eval = None
            self.metrics = os.path.join(args.out, "metrics.jsonl")
            self.exit = stack.pop_all()

    def __exit__(self, *exc):
        self.exit.close()

    def say(self, line):  # rank 0, above the progress bar if one is drawn
        if self.master:
            tqdm.write(line, file=sys.stderr)

    def tokens(self, tok):
        """The corpus as one token array (a memory map). Rank 0 tokenises and caches (hours for the
        paper's corpora); the others wait for its cache, not in a collective that would time out
        (torchrun ends them if rank 0 fails)."""
        args = self.args
        if self.master:
            return tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc, say=self.say)  # says what it read
        while (tokens := cached_tokens(args.data, tok, args.cache_dir)) is None:
            time.sleep(2)
        return tokens

    def begin(self, raw, optimizer, scaler, tok, batches, eval_blocks, init=None):
        """Refuse to clobber another run or to resume with other settings or inputs; restore a
        checkpoint; rank 0 writes config.json and vocab.txt. -> the step to start at."""
        args, self.steps_per_epoch, self.n_eval = self.args, batches.per_epoch, len(eval_blocks)
        # what the run depends on: the vocabulary's and the token array's checksums
        self.depends = {"vocab_sha256": checkpoints.sha256(tok.vocab_file),
                        "tokens_sha256": tokens_sha256(args.data, tok, args.cache_dir)}
        if self.master:
            self.check_resume(init) if self.resuming else self.check_clobber()
        if self.world > 1:
            dist.barrier()
        if self.resuming:
            self.restore(raw, optimizer, scaler)
        if self.master and self.start >= args.steps:
            print(f"{args.out} is already at step {self.start} (--steps {args.steps}): nothing to do")
        elif self.master:
            self.write_config(raw, tok, batches, eval_blocks, init)
        return self.start

    def check_resume(self, init):
        """The settings compared are the checkpoint's own (config.json is a copy for people to read), and
        so are the checksums of the vocabulary and the token array; a TaCL run's teacher is rebuilt from
        --init, which must not have changed (e.g. --init RUN whose newest checkpoint is now another)."""
        args, old, now = self.args, self.checkpoint["args"], self.depends
        was = self.checkpoint.get("depends") if isinstance(self.checkpoint.get("depends"), dict) else {}
        changed = sorted(k for k, v in vars(args).items() if k not in RESUMABLE and old.get(k) != v
                         and not (k == "vocab" and was.get("vocab_sha256") == now["vocab_sha256"]))
        if changed and not args.force:
            raise UsageError(f"--resume with settings that differ from the run in {args.out}: "
                             f"{', '.join(changed)}; pass --force to accept them")
        problem = None  # a checkpoint from before the record has nothing to compare
        if was.get("vocab_sha256") not in (None, now["vocab_sha256"]):
            problem = (f"--vocab {args.vocab} is not the vocabulary this run was trained with (its sha256 changed); "
                       f"pass the run's own copy, --vocab {os.path.join(args.out, 'vocab.txt')}")
        elif was.get("tokens_sha256") not in (None, now["tokens_sha256"]):
            problem = (f"--data {args.data} gives other tokens than this run was trained on (the token array's "
                       f"sha256 changed): the data changed since; resume with the data it was trained on")
        if problem and not args.force:
            raise UsageError(f"--resume: {problem}, or pass --force to continue anyway (not an exact resume)")
        if problem:
            self.say(f"warning: --resume --force: {problem.split(';')[0]}; continuing on it (not an exact resume)")
        if old.get("device_batch_size") not in (None, args.device_batch_size):
            why = ("TACO draws its negatives from other sequences of the micro-batch, so from here on from another "
                   "pool" if args.objective == "taco" else "the loss is averaged over other micro-batches")
            self.say(f"warning: --resume in micro-batches of {args.device_batch_size} sequences, not the "
                     f"{old['device_batch_size']} this run was trained in: {why} (not an exact resume)")
        if args.objective == "tacl" and not args.force:
            try:
                recorded = checkpoints.read_json(os.path.join(args.out, "config.json")).get("init") or {}
            except (OSError, UsageError):  # no (readable) config.json: nothing recorded to compare with
                return
            if recorded.get("sha256") != checkpoints.sha256(init.source):
                raise UsageError(f"--init now gives {init.source}, not the {recorded.get('source')} this run's "
                                 f"TaCL teacher was built from; resume with that one or pass --force")

    def check_clobber(self):
        """A new run in a folder that holds one (its files go): only with --force, after a stop before
        its first checkpoint, or in torchrun's restart."""
        args = self.args
        if not (os.path.exists(os.path.join(args.out, "config.json")) or checkpoints.list_checkpoints(args.out)):
            return
        if not (args.force or self.restarted):
            if not self.unsaved:
                raise UsageError(f"{args.out} already holds a run; pass --resume to continue it, "
                                 f"--force to overwrite it, or another --out")
            self.say(f"note: {args.out} holds a run that stopped before its first checkpoint (step "
                     f"{self.unsaved[1]}; its log ends at step {self.unsaved[0]}): nothing to lose, starting it over")
        for name in os.listdir(args.out):
            if name.startswith("ckpt_") or name in ("metrics.jsonl", "config.json"):
                os.remove(os.path.join(args.out, name))

    def restore(self, raw, optimizer, scaler):
        ckpt, args = self.checkpoint, self.args
        try:
            raw.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scaler.load_state_dict(ckpt["scaler"])
        except (RuntimeError, ValueError, KeyError, TypeError) as err:
            was, cfg = ckpt["args"].get("objective"), ckpt["model_config"]
            if was != args.objective:  # only with --force: RetroMAE's model has a decoder, the others not
                raise UsageError(f"--resume: {self.resume_from} holds a {was} run's model, which --objective "
                                 f"{args.objective} cannot continue, even with --force; resume with --objective {was}, "
                                 f"or start a new --out with --init {args.out}") from err
            raise UsageError(f"{self.resume_from} holds another model ({cfg.get('hidden_size')} hidden, "
                             f"{cfg.get('num_hidden_layers')} layers) or optimizer than --size {args.size} builds; "
                             f"resume with its settings or start a new --out") from err

    def write_config(self, raw, tok, batches, eval_blocks, init):
        args, cfg, start, accum, blocks = self.args, raw.config, self.start, batches.accumulation, len(batches.blocks)
        params = sum(p.numel() for p in raw.parameters())
        checkpoints.write_json(os.path.join(args.out, "config.json"), {
            "args": vars(args), "model_config": asdict(cfg), "world_size": self.world, "accumulation": accum,
            "dtype": self.dtype, "train_blocks": blocks, "eval_blocks": len(eval_blocks), "parameters": params,
            "depends": self.depends,
            "init": init and {"source": init.source, "sha256": checkpoints.sha256(init.source)}})
        vocab = os.path.join(args.out, "vocab.txt")
        if not (os.path.exists(vocab) and os.path.samefile(tok.vocab_file, vocab)):
            with open(tok.vocab_file, "rb") as f:
                checkpoints.write_bytes(vocab, f.read())
        if self.resuming and os.path.exists(self.metrics):  # drop lines logged after the checkpoint, a torn one
            checkpoints.write_jsonl(self.metrics, [r for r in checkpoints.read_jsonl(self.metrics)
                                                   if r.get("step", 0) <= start])
        threads, why = self.threads
        cpu = f" ({threads} thread{'s' * (threads > 1)}: {why})" if self.device.type == "cpu" else ""
        tokens = args.steps * args.batch_size * args.max_len  # what the run will cost, before it starts
        model = f"{cfg.num_hidden_layers} x {cfg.hidden_size} from --init" if init else args.size
        print(f"{args.objective} | {model} ({params / 1e6:.1f}M params) | {args.steps:,} steps x "
              f"{args.batch_size} x {args.max_len} tokens = {count(tokens)} tokens "
              f"({args.steps * args.batch_size / blocks:.3g} epochs of {blocks:,} blocks) | batch {args.batch_size} "
              f"= {self.world} x {accum} x {args.device_batch_size} | {self.dtype} on {self.device.type}{cpu}"
              + (f" | init {init.source} | recipe {args.recipe} ({args.recipe_why})" if init else "")
              + (f" | resumed at step {start}" if self.resuming else ""))

    def steps(self, start):
        """The steps start .. --steps - 1 under a progress bar (in a log file: a line every --log_every
        steps), and from here on StopSignals."""
        self.stop = self.exit.enter_context(StopSignals(self.say, self.stopped_at_once))
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

    def early_estimate(self, i, n):
        """A first step that takes long (minutes on a CPU) gives the estimate after 30 s."""
        elapsed = time.time() - self.t0
        if i and self.done == self.start and elapsed >= 30:
            self.estimate(elapsed / i * n, f"the first {i} of a step's {n} micro-batches")

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
        if not self.master:
            return
        elapsed, steps, aux = time.time() - self.t0, done - self.start, AUX_LOSS[args.objective]
        left = (args.steps - done) * elapsed / steps  # seconds, at this pace
        if left and (steps >= 20 or elapsed >= 30):
            self.estimate(elapsed / steps, f"the first {steps} step{'s' * (steps > 1)}")
        due = done % args.log_every == 0 or done == args.steps
        if not (due or evals):
            return
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
        checkpoints.append_jsonl(self.metrics, {"step": done, **record, **evals})

    def estimate(self, per_step, basis):
        if self.master and not self.estimated:
            self.estimated, left = True, self.args.steps - self.done
            self.say(f"estimate: {duration(per_step)} a step here (from {basis}): the {left:,} steps left take "
                     f"~{duration(left * per_step)}")

    def stopping(self, done):
        return bool(self.signum) and done < self.args.steps

    def save(self, done, raw, optimizer, scaler):
        args = self.args
        if self.master and (done % args.save_every == 0 or done == args.steps or self.stopping(done)):
            self.last_ckpt = checkpoints.save_checkpoint(args.out, {
                "model": raw.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "step": done, "skipped": self.skipped, "model_config": asdict(raw.config), "args": vars(args),
                "depends": self.depends,
                "data_position": {"epoch": done // self.steps_per_epoch, "batch": done % self.steps_per_epoch}},
                args.keep_last)

    def stop_if_signalled(self, done):
        """Every rank stops after the same step, once rank 0 has saved it."""
        if not self.stopping(done):
            return
        if self.world > 1:
            dist.barrier()
        name = signal.Signals(int(self.signum)).name
        raise cli.Interrupted(int(self.signum), f"stopped by {name} after step {done}: saved {self.last_ckpt}; "
                              f"to continue, run the same command with --resume" if self.master else "")

    def stopped_at_once(self, name):
        last = self.last_ckpt or self.resume_from
        saved = (f"the last checkpoint is {last}: to continue from it, run the same command with --resume" if last
                 else "no checkpoint was saved yet: the same command starts the run over")
        return f"stopped at once by a second {name} after step {self.done} (not saved); {saved}" if self.master else ""

    def end(self):
        if self.master and (ev := self.last_eval):
            mlm = (f"eval MLM loss {ev['eval_mlm_loss']:.3f}, acc {ev['eval_mlm_acc']:.3f}" if "eval_mlm_loss" in ev
                   else "no eval MLM (masking chose no held-out token)")
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
