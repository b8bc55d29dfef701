"""Tests for runs.py, a run's engineering: exact resume, one run per folder, non-finite steps, signals, kill -9,
torchrun (a worker crash, a scheduler's SIGTERM to every process, ranks that disagree, 3 ranks), a full disk,
a run's recorded data (docs/robustness.md)."""
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from engine import cli
from engine import checkpoints
from engine import runs
import taco
from taco import get_lr

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root


# ----------------------------------------------------------------------------- resume, one run per folder

def test_resume_is_bit_for_bit(straight, tmp_path, quick, run_taco, final_weights, same_weights):
    crashed = str(tmp_path / "crashed")
    shutil.copytree(straight, crashed)  # as if the run had died right after step 8's checkpoint
    for name in os.listdir(crashed):
        if name.startswith(("ckpt_00000012", "ckpt_00000016")):
            os.remove(os.path.join(crashed, name))
    assert run_taco(quick + ["--out", crashed, "--resume"]) == 0
    assert same_weights(final_weights(straight), final_weights(crashed))
    metrics = lambda d: [json.loads(l)["loss"] for l in open(os.path.join(d, "metrics.jsonl"))]
    assert metrics(straight) == metrics(crashed)  # no step logged twice or lost


def test_out_directory_mistakes(tmp_path, capsys, quick, run_taco):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert run_taco(quick + ["--out", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    assert run_taco(quick + ["--out", str(empty), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "4", "--out", run]) == 0
    before = open(os.path.join(run, "metrics.jsonl")).read()
    assert run_taco(quick + ["--steps", "4", "--out", run]) == 2  # never overwrite silently
    assert "already holds a run" in capsys.readouterr().err
    assert open(os.path.join(run, "metrics.jsonl")).read() == before
    assert run_taco(quick + ["--steps", "4", "--out", run, "--resume", "--lr", "1"]) == 2
    err = capsys.readouterr().err
    assert "differ from the run" in err and ": lr;" in err
    os.chmod(tmp_path, 0o500)
    try:
        if os.geteuid() != 0:  # root writes anywhere: the check cannot be exercised as root
            assert run_taco(quick + ["--out", str(tmp_path / "new")]) == 2
    finally:
        os.chmod(tmp_path, 0o700)


def test_finished_run_is_left_alone(straight, capsys, quick, run_taco):
    config = os.path.join(straight, "config.json")
    before = (open(config).read(), os.stat(config).st_mtime_ns)
    assert run_taco(quick + ["--out", straight, "--resume"]) == 0
    assert "already at step 16" in capsys.readouterr().out
    assert (open(config).read(), os.stat(config).st_mtime_ns) == before


def test_one_run_per_out(tmp_path, capsys, quick, run_taco):
    """A live run's lock refuses a second run; a dead owner's lock (kill -9: the kernel dropped its flock) is taken."""
    out = str(tmp_path / "run")
    with runs.RunLock(out):  # as another run would hold it
        assert run_taco(quick + ["--steps", "2", "--out", out]) == 2
        assert f"--out {out} is in use by another run (process {os.getpid()} on " in capsys.readouterr().err
    assert not os.path.exists(out)  # the lock holder created it and left nothing
    os.makedirs(out)
    with open(os.path.join(out, ".lock"), "w") as f:
        f.write("999999 on elsewhere\n")  # a killed run's lock: its flock died with it
    assert run_taco(quick + ["--steps", "2", "--out", out]) == 0
    assert open(os.path.join(out, ".lock")).read() == ""  # released


# ----------------------------------------------------------------------------- non-finite steps, signals, crashes

def test_nonfinite_loss_stops_or_skips(tmp_path, monkeypatch, capsys, quick, run_taco):
    real = taco.compute_loss
    calls = {"n": 0}

    def poisoned(*a, **k):
        loss, *parts = real(*a, **k)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 6 else loss), *parts

    monkeypatch.setattr(taco, "compute_loss", poisoned)
    out = str(tmp_path / "nan")
    assert run_taco(quick + ["--out", out]) == 3
    err = capsys.readouterr().err
    assert "non-finite loss or gradient at step 5" in err and "ckpt_00000004.pt" in err
    calls["n"] = 0
    out = str(tmp_path / "skip")
    assert run_taco(quick + ["--out", out, "--skip_nonfinite"]) == 0
    last = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))][-1]
    assert last["skipped"] == 1 and math.isfinite(last["loss"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_saves_stops_and_resumes_exactly(sig, straight, tmp_path, monkeypatch, capsys, quick, run_taco, final_weights, same_weights):
    """A real signal during step 10 of a run resumed at 8: the step finishes, a checkpoint is
    saved, exit 128 + signal; --resume then ends where an uninterrupted run does. SIGHUP (a closed
    terminal or ssh session) is a stop that saves too."""
    if signal.getsignal(sig) is signal.SIG_IGN:  # under nohup: ignored, as promised
        pytest.skip(f"{sig.name} is ignored in this process")
    def signalled_get_lr(step, *args):
        if step == 9:
            os.kill(os.getpid(), sig)
        return get_lr(step, *args)

    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000012.*", "ckpt_00000016.*"))
    monkeypatch.setattr(taco, "get_lr", signalled_get_lr)
    assert run_taco(quick + ["--out", run, "--resume"]) == 128 + sig
    err = capsys.readouterr().err
    assert f"stopped by {sig.name} after step 10: saved" in err and "--resume" in err and "Traceback" not in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    monkeypatch.setattr(taco, "get_lr", get_lr)
    assert run_taco(quick + ["--out", run, "--resume"]) == 0
    assert "resumed at step 10" in capsys.readouterr().out
    assert same_weights(final_weights(straight), final_weights(run))


# Step `at` takes ten minutes, as a step of the paper's batch can on a CPU, its main thread blocked
# (time.sleep); during it, two signals arrive `gap` s apart. Patched from outside taco.py.
SLOW_STEP_TACO = """
import os, sys, threading, time
sys.path.insert(0, {here!r})
import taco
get_lr = taco.get_lr

def slow_get_lr(step, *args):
    if step == {at}:
        def send():
            for _ in range(2):
                time.sleep({gap})
                os.kill(os.getpid(), {sig})
        threading.Thread(target=send).start()
        time.sleep(600 if {gap} > 2 else 5)
    return get_lr(step, *args)

taco.get_lr = slow_get_lr
taco.main()
"""


def signalled_twice(tmp_path, quick, out, sig, at, gap):
    """taco.py in a process of its own (a second signal ends the process) -> its CompletedProcess."""
    wrapper = tmp_path / "slow_taco.py"
    wrapper.write_text(SLOW_STEP_TACO.format(here=HERE, at=at, sig=int(sig), gap=gap))
    # the thread count of the in-process runs (`straight`): the same numbers
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    return subprocess.run([sys.executable, str(wrapper), *quick, "--out", out], env=env, capture_output=True,
                          text=True, timeout=300)  # not the 600 s the step would take


def test_a_second_signal_stops_at_once_naming_the_last_checkpoint(straight, tmp_path, quick, run_taco, final_weights, same_weights):
    """The first SIGTERM says the run will stop after this step; a second, 3 s later, stops it at once
    (exit 143) although its main thread is busy, naming the checkpoint to resume from; --resume
    then ends as an unbroken run."""
    run = str(tmp_path / "run")
    r = signalled_twice(tmp_path, quick, run, signal.SIGTERM, at=6, gap=3)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr[-2000:]
    assert "SIGTERM: stopping after this step, once it is saved; a second signal stops at once" in r.stderr
    assert (f"stopped at once by a second SIGTERM after step 6 (not saved); the last checkpoint is "
            f"{os.path.join(run, 'ckpt_00000004.pt')}: to continue from it, run the same command with --resume"
            in r.stderr) and "Traceback" not in r.stderr
    assert run_taco(quick + ["--out", run, "--resume"]) == 0
    assert same_weights(final_weights(straight), final_weights(run))


def test_signals_that_come_together_are_one_stop(tmp_path, quick):
    """A scheduler signals every process of a job, and torchrun forwards its own: two SIGTERMs 0.1 s apart are one
    stop, which saves."""
    run = str(tmp_path / "run")
    r = signalled_twice(tmp_path, quick, run, signal.SIGTERM, at=6, gap=0.1)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr[-2000:]
    assert f"stopped by SIGTERM after step 7: saved {os.path.join(run, 'ckpt_00000007.pt')}" in r.stderr
    assert "at once" not in r.stderr.replace("a second signal stops at once", "")


def taco_cmd(quick, *args):
    return [sys.executable, os.path.join(HERE, "taco.py"), *quick, *args]


def torchrun_cmd(quick, *args, restarts=0, n=2):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
            f"--max_restarts={restarts}", os.path.join(HERE, "taco.py"), *quick, "--device", "cpu", *args]


def torchrun_wrapped(tmp_path, wrapper, quick, *args, **kwargs):
    """torchrun of `wrapper` (a script that patches taco from outside, then runs taco.main) -> CompletedProcess."""
    script = tmp_path / "wrapped_taco.py"
    script.write_text(wrapper.format(here=HERE))
    cmd = torchrun_cmd(quick, *args, **kwargs)
    cmd[cmd.index(os.path.join(HERE, "taco.py"))] = str(script)
    return subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)


def test_kill_9_at_random_moments_then_resume_is_exact(straight, tmp_path, quick, final_weights, same_weights):
    """SIGKILL a real training process several times (saves every step), resume each time."""
    killed = str(tmp_path / "killed")
    common = ["--save_every", "1", "--keep_last", "2"]
    rng = random.Random(0)
    # CPU results depend on the thread count, and other tests may have changed this process's
    # (study.py --threads): the subprocesses use the one `straight` was trained with.
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    for attempt in range(3):
        resume = ["--resume"] if checkpoints.latest_checkpoint(killed) else ["--force"]
        proc = subprocess.Popen(taco_cmd(quick, "--out", killed, *common, *resume), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not checkpoints.list_checkpoints(killed) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)  # wait until training has started
        time.sleep(rng.uniform(0.0, 1.5))
        proc.kill()
        proc.wait()
    assert checkpoints.latest_checkpoint(killed) is not None
    done = subprocess.run(taco_cmd(quick, "--out", killed, *common, "--resume"), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert same_weights(final_weights(straight), final_weights(killed))


# Faults come from outside taco.py: this wrapper patches taco.get_lr (called once per step,
# with the step) to crash or signal one worker, then runs taco.main as `python taco.py` would.
FAULTY_TACO = """
import os, signal, sys
sys.path.insert(0, {here!r})
import taco
get_lr, attempt, rank = taco.get_lr, os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]

def faulty_get_lr(step, *args):
    if rank == "1" and attempt == "0" and step == 6:
        os._exit(13)  # a worker dies: torchrun restarts them all, which resume from step 4
    if rank == "1" and attempt == "1" and step == 9:
        os.kill(os.getpid(), signal.SIGTERM)  # one worker is told to stop: all save and stop after step 10
    return get_lr(step, *args)

taco.get_lr = faulty_get_lr
taco.main()
"""


def test_torchrun_crash_restart_and_sigterm_then_resume_is_exact(tmp_path, quick, final_weights, same_weights):
    """DDP on 3 CPU processes (gloo: with 3, the order of the gradient buckets changes the rounding). A worker
    crashing at step 6 is restarted by torchrun and resumes from the step-4 checkpoint; SIGTERM to one worker then
    stops all after the same step, with a checkpoint, from which torchrun's next restart resumes; the run ends with
    the weights of an uninterrupted one."""
    straight, faulty = str(tmp_path / "straight"), str(tmp_path / "faulty")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # --negatives_from global: the TC negatives come from every process's micro-batch
    three = ["--batch_size", "12", "--device_batch_size", "2", "--negatives_from", "global"]
    r = subprocess.run(torchrun_cmd(quick, "--out", straight, *three, n=3), env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert checkpoints.latest_checkpoint(straight).endswith("ckpt_00000016.pt")
    assert json.load(open(os.path.join(straight, "config.json")))["world_size"] == 3
    # Two restarts are planned (the crash, the SIGTERM); the third is a spare: rarely a gloo worker aborts
    # while exiting after its checkpoint is saved, and torchrun then restarts it.
    r = torchrun_wrapped(tmp_path, FAULTY_TACO, quick, "--out", faulty, *three, restarts=3, n=3)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-6000:]
    assert "resumed at step 4" in r.stdout and "resumed at step 10" in r.stdout
    assert "stopped by SIGTERM after step 10: saved" in r.stderr
    assert same_weights(final_weights(straight), final_weights(faulty))


# Rank 1 dies at step 6 (a node lost). Patched from outside taco.py.
DYING_TACO = """
import os, sys
sys.path.insert(0, {here!r})
import taco
get_lr = taco.get_lr

def dying(step, *args):
    if os.environ["RANK"] == "1" and step == 6:
        os._exit(13)
    return get_lr(step, *args)

taco.get_lr = dying
taco.main()
"""


def test_a_rank_whose_peer_died_says_one_line(tmp_path, quick):
    r = torchrun_wrapped(tmp_path, DYING_TACO, quick, "--out", str(tmp_path / "run"))
    assert "rank 0: stopped: another rank ended first or stopped answering" in r.stderr, r.stderr[-3000:]
    assert "[rank0]" not in r.stderr  # no traceback of the survivor


def test_torchrun_offline_is_one_line_within_seconds(tmp_path):
    """The headline command on a machine without the hub: rank 0 asks it, once and without retries; one `error:`
    line; nothing written, not even the folders above --out."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "https://hub.invalid"}
    work = tmp_path / "work"
    work.mkdir()
    t0 = time.time()
    r = subprocess.run(torchrun_cmd([], "--size", "base", "--out", "runs/base"), env=env, cwd=work,
                       capture_output=True, text=True)
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert r.returncode != 0 and len(errors) == 1, r.stderr[-3000:]
    assert "vocab.txt of 'bert-base-uncased'" in errors[0] and "Retrying" not in r.stderr and time.time() - t0 < 60
    assert os.listdir(work) == []


# Every process of a job step gets SIGTERM (as Slurm sends it): the launcher, which forwards its own, and each
# worker, at step 6. Patched from outside taco.py.
SLURM_TACO = """
import os, signal, sys
sys.path.insert(0, {here!r})
import taco
get_lr = taco.get_lr

def preempted(step, *args):
    if step == 6 and os.environ["RANK"] == "0":
        os.kill(os.getppid(), signal.SIGTERM)  # the launcher
        for pid in {{os.getpid(), *map(int, open({pids!r}).read().split())}}:
            os.kill(pid, signal.SIGTERM)
    return get_lr(step, *args)

with open({pids!r}, "a") as f:
    f.write(f"{{os.getpid()}} ")
taco.get_lr = preempted
taco.main()
"""


def test_a_schedulers_sigterm_to_every_process_saves_once(tmp_path, quick):
    out = str(tmp_path / "run")
    r = torchrun_wrapped(tmp_path, SLURM_TACO.replace("{pids!r}", repr(str(tmp_path / "pids"))), quick, "--out", out)
    assert "stopped by SIGTERM after step 7: saved" in r.stderr, r.stderr[-3000:]
    assert "at once" not in r.stderr.replace("a second signal stops at once", "")
    assert checkpoints.latest_checkpoint(out).endswith("ckpt_00000007.pt")


# Rank 1 is started with another --lr (another node's command line). Patched from outside taco.py.
OTHER_FLAGS_TACO = """
import os, sys
sys.path.insert(0, {here!r})
import taco
taco.main(sys.argv[1:] + (["--lr", "5e-4"] if os.environ["RANK"] == "1" else []))
"""


def test_ranks_started_with_other_flags_stop_before_any_work(tmp_path, quick):
    r = torchrun_wrapped(tmp_path, OTHER_FLAGS_TACO, quick, "--out", str(tmp_path / "run"))
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert r.returncode != 0 and len(errors) == 1 and "rank 1 on " in errors[0], r.stderr[-3000:]
    assert "flags lr=0.0005, rank 0 with 0.001" in errors[0] and not (tmp_path / "run").exists()


def test_more_processes_than_gpus_is_one_line(monkeypatch):
    """torchrun --nproc_per_node=8 on a machine with one GPU: every worker says so alike (rank 0 speaks)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for name, value in dict(RANK="3", LOCAL_RANK="3", WORLD_SIZE="8", LOCAL_WORLD_SIZE="8").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(cli.UsageError, match="torchrun started 8 processes on this machine, which has 1 CUDA "
                                             "device: pass --nproc_per_node=1"):
        runs.setup_distributed(None)


# ----------------------------------------------------------------------------- nothing lost, no stale state reused

def on_a_full_disk(tmp_path, command):
    """command(full) run where the folder `full` is a 10 MB tmpfs in a private mount namespace -> CompletedProcess;
    skipped where user namespaces are off."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m none /tmp"], capture_output=True).returncode:
        pytest.skip("needs unshare and a private tmpfs (user namespaces)")
    full = tmp_path / "full"
    full.mkdir()
    mount = ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=10m none "$FULL" && exec "$@"', "sh"]
    return subprocess.run(mount + command(full), env={**os.environ, "FULL": str(full)}, cwd=HERE, capture_output=True,
                          text=True)


def test_disk_full_for_real_on_a_small_tmpfs(tmp_path, quick):
    """A real full disk (a 10 MB tmpfs): a tiny checkpoint takes 6.6 MB, so the second does not fit."""
    out = str(tmp_path / "full" / "run")
    r = on_a_full_disk(tmp_path, lambda full: [sys.executable, "-c", LIST_AFTER.format(out=out), *quick, "--steps", "8",
                                               "--out", out])
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last == (f"error: no space left in {out} for ckpt_00000008.pt: free some space there; the earlier "
                    f"checkpoints are intact: run the same command with --resume"), r.stderr[-2000:]
    assert json.loads(r.stdout.splitlines()[-1]) == [".lock", "ckpt_00000004.pt", "config.json", "metrics.jsonl",
                                                     "vocab.txt"]


# taco.main, then what the folder holds (the tmpfs vanishes with its namespace)
LIST_AFTER = """
import json, os, sys, taco
try:
    taco.main(sys.argv[1:])
    code = 0
except SystemExit as stop:
    code = stop.code
print(json.dumps(sorted(os.listdir({out!r}))))
sys.exit(code)
"""


@pytest.fixture
def own_data(tmp_path, toy_dir):
    """A small corpus and a copy of the toy vocabulary, both free to edit: -> taco.py flags."""
    lines = open(os.path.join(toy_dir, "train.txt")).read().splitlines()[:400]
    (tmp_path / "data.txt").write_text("\n".join(lines) + "\n")
    shutil.copy(os.path.join(toy_dir, "vocab.txt"), tmp_path / "vocab.txt")
    return ["--data", str(tmp_path / "data.txt"), "--vocab", str(tmp_path / "vocab.txt")]


def rewrite_keeping_size_and_mtime(path, edit):
    st = os.stat(path)
    text = open(path).read()
    new = edit(text)
    assert len(new.encode()) == st.st_size and new != text
    open(path, "w").write(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_resume_refuses_other_tokens_but_not_a_moved_corpus(tmp_path, capsys, quick, run_taco, own_data):
    """A corpus rewritten with the same size and time, or a vocab.txt edited in place, gives other tokens: one line on
    --resume, --force continues. The same text and vocabulary elsewhere (a corpus copied to another disk) resume."""
    run = str(tmp_path / "run")
    assert run_taco(quick + own_data + ["--steps", "8", "--out", run]) == 0
    os.remove(os.path.join(run, "ckpt_00000008.pt"))  # as if stopped after step 4
    data = own_data[1]
    words = open(data).read().split()
    a, b = next((w, v) for w, v in zip(words, words[1:]) if len(w) == len(v) and w != v)
    rewrite_keeping_size_and_mtime(data, lambda t: t.replace(f"{a} ", f"{b} ", 1))
    assert run_taco(quick + own_data + ["--steps", "8", "--out", run, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: --resume with settings that differ from the run in {run}: the tokens of --data "
                          f"and --vocab; pass --force") and "not an exact resume" in err
    moved = str(tmp_path / "moved.txt")
    rewrite_keeping_size_and_mtime(data, lambda t: t.replace(f"{b} ", f"{a} ", 1))
    shutil.copy(data, moved)
    assert run_taco(quick + ["--data", moved, "--vocab", os.path.join(run, "vocab.txt"), "--steps", "8", "--out", run,
                             "--resume"]) == 0
    assert "resumed at step 4" in capsys.readouterr().out


def test_resume_in_other_micro_batches_or_processes_says_what_it_changes(straight, tmp_path, capsys, quick, run_taco):
    """Another --device_batch_size changes the micro-batches TACO draws its negatives from: a warning."""
    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000012.*", "ckpt_00000016.*"))
    assert run_taco(quick + ["--out", run, "--resume", "--device_batch_size", "4"]) == 0
    err = capsys.readouterr().err
    assert ("warning: --resume in micro-batches of 4 sequences, not the 8 this run was trained in: TACO draws its "
            "negatives from other sequences, and the step's random draws and sums come out otherwise (not an exact "
            "resume)") in err
    same = str(tmp_path / "same")
    shutil.copytree(straight, same, ignore=shutil.ignore_patterns("ckpt_00000012.*", "ckpt_00000016.*"))
    assert run_taco(quick + ["--out", same, "--resume"]) == 0
    assert "warning" not in capsys.readouterr().err
    moved = str(tmp_path / "moved")  # trained on 3 processes, resumed on 1
    shutil.copytree(straight, moved, ignore=shutil.ignore_patterns("ckpt_00000012.*", "ckpt_00000016.*"))
    ckpt = os.path.join(moved, "ckpt_00000008.pt")
    torch.save({**torch.load(ckpt, weights_only=True), "world_size": 3}, ckpt)
    assert run_taco(quick + ["--out", moved, "--resume"]) == 0
    assert "warning: --resume on 1 process, not the 3 this run was trained on" in capsys.readouterr().err


def test_a_rank_that_cannot_see_what_rank_0_wrote_says_so_and_how_to_fix_it(tmp_path):
    """Nodes with disks of their own (a node-local $TACO_CACHE or --out): a rank looks for what rank 0 wrote for a
    bounded time, then says in one line which rank, where, what and the fix (with torchrun and two caches by hand:
    `rank 1 on HOST cannot see the token cache at PATH 60 s after rank 0 wrote it: put $TACO_CACHE on ...`)."""
    from types import SimpleNamespace
    tries = []
    with pytest.raises(cli.UsageError, match=rf"^rank 1 on {runs.HOST} cannot see the token cache at {tmp_path} "
                                             r"0.2 s after rank 0 wrote it: put a shared disk$"):
        runs.Run.see(SimpleNamespace(rank=1), "the token cache", tmp_path, lambda: tries.append(1), "a shared disk", 0.2)
    assert len(tries) >= 2  # looked again, not once
    assert runs.Run.see(SimpleNamespace(rank=1), "it", tmp_path, lambda: "found", "", 0.2) == "found"
