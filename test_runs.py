"""Tests for runs.py, a run's engineering: the schedule and optimizer, exact resume, checkpoints
(verification, rotation), the project's own files, one run per folder, non-finite steps, signals,
kill -9 and a torchrun worker crash (docs/robustness.md)."""
import errno
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

import cli
import runs
import taco
from taco import get_lr

HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- resume, checkpoints, files

@pytest.fixture(scope="module")
def straight(tmp_path_factory, quick, run_taco):
    """An uninterrupted quick run: the reference for every interrupted one below."""
    out = str(tmp_path_factory.mktemp("straight") / "run")
    assert run_taco(quick + ["--out", out]) == 0
    return out


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def metrics_of(out):
    return [(r["step"], r.get("loss"), r.get("eval_mlm_loss")) for r in map(json.loads, open(os.path.join(out, "metrics.jsonl")))]


def test_resume_is_bit_for_bit(straight, tmp_path, quick, run_taco, final_weights):
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
    assert "no valid checkpoint" in capsys.readouterr().err
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


def test_corrupted_checkpoint_falls_back(tmp_path, capsys, quick, run_taco):
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "8", "--out", run]) == 0
    newest = os.path.join(run, "ckpt_00000008.pt")
    with open(newest, "r+b") as f:  # flip a byte in the middle
        f.seek(os.path.getsize(newest) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert runs.latest_checkpoint(run).endswith("ckpt_00000004.pt")
    assert "checksum mismatch" in capsys.readouterr().err
    with open(os.path.join(run, "ckpt_00000004.pt"), "r+b") as f:
        f.truncate(100)
    assert runs.latest_checkpoint(run) is None or not runs.latest_checkpoint(run).endswith("4.pt")
    with pytest.raises(cli.UsageError, match="invalid"):
        runs.load_checkpoint(os.path.join(run, "ckpt_00000004.pt"))


def test_keep_last_rotation(tmp_path, quick, run_taco):
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--out", run, "--keep_last", "2"]) == 0
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt_")) == [
        "ckpt_00000012.json", "ckpt_00000012.pt", "ckpt_00000016.json", "ckpt_00000016.pt"]


def test_torn_and_invalid_run_files_still_resume_exactly(straight, tmp_path, capsys, quick, run_taco, final_weights):
    """What a kill can leave (a torn metrics line, a truncated config.json, a manifest that is
    valid JSON but not an object), and --vocab naming the run's own vocab.txt."""
    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000016.*"))
    with open(os.path.join(run, "ckpt_00000012.json"), "w") as f:
        f.write("[]")  # -> falls back to step 8
    with open(os.path.join(run, "config.json"), "r+") as f:
        f.truncate(100)  # never read on --resume: the checkpoint holds the settings
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write('{"step": 9, "loss": 3.')  # an append cut short
    assert run_taco(quick + ["--out", run, "--resume", "--force", "--vocab", os.path.join(run, "vocab.txt")]) == 0
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "holds a JSON list, not an object" in err
    assert "dropped its last line, cut short" in err
    assert same_weights(final_weights(straight), final_weights(run))
    assert metrics_of(straight) == metrics_of(run)
    assert json.load(open(os.path.join(run, "config.json")))["args"]["steps"] == 16  # rewritten whole


def test_project_files_tolerant_tail_strict_otherwise(tmp_path, capsys):
    """runs.read_jsonl / read_json / append_jsonl: only a torn last line is forgiven."""
    path = tmp_path / "m.jsonl"
    for text, records, error in [('{"a": 1}\n{"a": 2}\n', 2, None), ('{"a": 1}\n{"a"', 1, None),
                                 ('{"a": 1}\n\n{"a": 2}', 2, None), ('{"a"\n{"a": 2}\n', 0, "line 1 is not valid JSON"),
                                 ('[1]\n', 0, "line 1 holds a JSON list"), ('{"a": 1}\n{"a": 2\n', 0, "line 2 is not")]:
        path.write_text(text)
        if error:
            with pytest.raises(cli.UsageError, match=error):
                runs.read_jsonl(str(path))
        else:
            assert len(runs.read_jsonl(str(path))) == records
    for text, error in [("[]", "holds a JSON list, not an object"), ('{"a": ', "not valid JSON"), ("7", "JSON int")]:
        path.write_text(text)
        with pytest.raises(cli.UsageError, match=error):
            runs.read_json(str(path))
    path.write_text('{"a": 1}\n{"a": 2')  # torn: an append after it must not glue to it
    runs.append_jsonl(str(path), {"a": 3})
    assert path.read_text() == '{"a": 1}\n{"a": 3}\n'


def test_trained_with_reads_a_runs_recipe_also_from_older_checkpoints(straight, tmp_path):
    """The recipe a checkpoint's run trained with (recipes depend on --init): recorded since then;
    before, its --size's, unless the model has another shape (an --init of another model)."""
    source, run = runs.trained_with(straight)
    assert source.endswith("ckpt_00000016.pt") and (run["recipe"], run["data"]) == ("tiny", "toy")
    ckpt = torch.load(source, weights_only=True)
    for shape, recipe in (((2, 128, 2), "tiny"), ((6, 384, 12), "continue")):
        old = {**ckpt, "args": {k: v for k, v in ckpt["args"].items() if not k.startswith("recipe")}}
        old["model_config"] = {**ckpt["model_config"], "num_hidden_layers": shape[0], "hidden_size": shape[1],
                               "num_attention_heads": shape[2]}
        torch.save(old, tmp_path / "old.pt")
        assert runs.trained_with(str(tmp_path / "old.pt"))[1]["recipe"] == recipe


def test_finished_run_is_left_alone(straight, capsys, quick, run_taco):
    config = os.path.join(straight, "config.json")
    before = (open(config).read(), os.stat(config).st_mtime_ns)
    assert run_taco(quick + ["--out", straight, "--resume"]) == 0
    assert "already at step 16" in capsys.readouterr().out
    assert (open(config).read(), os.stat(config).st_mtime_ns) == before


def test_one_run_per_out(tmp_path, capsys, quick, run_taco):
    """A live run's lock refuses a second run; a dead owner's lock (kill -9) is taken over."""
    out = str(tmp_path / "run")
    with runs.RunLock(out):  # as another run would hold it
        assert run_taco(quick + ["--steps", "2", "--out", out]) == 2
        assert "is in use by another run (process" in capsys.readouterr().err
    assert not os.path.exists(out)  # the lock holder created it and left nothing
    os.makedirs(out)
    with open(os.path.join(out, ".lock"), "w") as f:
        f.write("999999 on elsewhere\n")  # a killed run's lock: its flock died with it
    assert run_taco(quick + ["--steps", "2", "--out", out]) == 0
    assert "taking over the lock of process 999999 on elsewhere" in capsys.readouterr().err
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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_saves_stops_and_resumes_exactly(sig, straight, tmp_path, monkeypatch, capsys, quick, run_taco, final_weights):
    """A real signal during step 10 of a run resumed at 8: the step finishes, a checkpoint is
    saved, exit 128 + signal; --resume then ends where an uninterrupted run does."""
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
# (time.sleep, as in a long backward pass); during it, two signals arrive. Patched from outside taco.py.
SLOW_STEP_TACO = """
import os, sys, threading, time
sys.path.insert(0, {here!r})
import taco
get_lr = taco.get_lr

def slow_get_lr(step, *args):
    if step == {at}:
        def send():
            for _ in range(2):
                time.sleep(0.5)
                os.kill(os.getpid(), {sig})
        threading.Thread(target=send).start()
        time.sleep(600)
    return get_lr(step, *args)

taco.get_lr = slow_get_lr
taco.main()
"""


def signalled_twice(tmp_path, quick, out, sig, at):
    """taco.py in a process of its own (a second signal ends the process) -> its CompletedProcess."""
    wrapper = tmp_path / "slow_taco.py"
    wrapper.write_text(SLOW_STEP_TACO.format(here=HERE, at=at, sig=int(sig)))
    # the thread count of the in-process runs (`straight`): the same numbers
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    return subprocess.run([sys.executable, str(wrapper), *quick, "--out", out], env=env, capture_output=True,
                          text=True, timeout=300)  # not the 600 s the step would take


def test_a_second_signal_stops_at_once_naming_the_last_checkpoint(straight, tmp_path, quick, run_taco, final_weights):
    """The first SIGTERM says the run will stop after this step; the second stops it at once
    (exit 143) although its main thread is busy, naming the checkpoint to resume from; --resume
    then ends as an unbroken run."""
    run = str(tmp_path / "run")
    r = signalled_twice(tmp_path, quick, run, signal.SIGTERM, at=6)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr[-2000:]
    assert "SIGTERM: stopping after this step, once it is saved; a second signal stops at once" in r.stderr
    assert (f"stopped at once by a second SIGTERM after step 6 (not saved); the last checkpoint is "
            f"{os.path.join(run, 'ckpt_00000004.pt')}: to continue from it, run the same command with --resume"
            in r.stderr) and "Traceback" not in r.stderr
    assert run_taco(quick + ["--out", run, "--resume"]) == 0
    assert same_weights(final_weights(straight), final_weights(run))


def test_a_run_stopped_before_its_first_checkpoint_starts_over(straight, tmp_path, capsys, quick, run_taco,
                                                               final_weights):
    """Stopped before its first checkpoint (two Ctrl-C, a kill, a crash), a folder holds a config
    and a few metrics, nothing to lose: the same command starts it over, and so does --resume.
    A folder whose checkpoints were deleted after it saved one is still refused."""
    run = str(tmp_path / "run")
    for again in ([], ["--resume"]):
        r = signalled_twice(tmp_path, quick, run, signal.SIGINT, at=3)
        assert r.returncode == 130 and ("stopped at once by a second SIGINT after step 3 (not saved); no checkpoint "
                                        "was saved yet: the same command starts the run over") in r.stderr
        assert not runs.list_checkpoints(run) and os.path.exists(os.path.join(run, "config.json"))
        assert run_taco(quick + ["--out", run] + again) == 0
        assert (f"note: {run} holds a run that stopped before its first checkpoint (step 4; its log ends at step 2): "
                f"nothing to lose, starting it over") in capsys.readouterr().err
        assert same_weights(final_weights(straight), final_weights(run))
        assert metrics_of(straight) == metrics_of(run)
        shutil.rmtree(run)
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_*"))
    assert run_taco(quick + ["--out", run]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert run_taco(quick + ["--out", run, "--resume"]) == 2
    assert "no valid checkpoint" in capsys.readouterr().err


def taco_cmd(quick, *args):
    return [sys.executable, os.path.join(HERE, "taco.py"), *quick, *args]


def torchrun_cmd(quick, *args, restarts=0):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            f"--max_restarts={restarts}", os.path.join(HERE, "taco.py"), *quick, "--device", "cpu", *args]


def test_kill_9_at_random_moments_then_resume_is_exact(straight, tmp_path, quick, final_weights):
    """SIGKILL a real training process several times (saves every step), resume each time."""
    killed = str(tmp_path / "killed")
    common = ["--save_every", "1", "--keep_last", "2"]
    rng = random.Random(0)
    # CPU results depend on the thread count, and other tests may have changed this process's
    # (study.py --threads): the subprocesses use the one `straight` was trained with.
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    for attempt in range(3):
        resume = ["--resume"] if runs.latest_checkpoint(killed) else ["--force"]
        proc = subprocess.Popen(taco_cmd(quick, "--out", killed, *common, *resume), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not runs.list_checkpoints(killed) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)  # wait until training has started
        time.sleep(rng.uniform(0.0, 1.5))
        proc.kill()
        proc.wait()
    assert runs.latest_checkpoint(killed) is not None
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
        os._exit(13)  # a worker dies: torchrun restarts both, which resume from step 4
    if rank == "1" and attempt == "1" and step == 9:
        os.kill(os.getpid(), signal.SIGTERM)  # one worker is told to stop: both save and stop after step 10
    return get_lr(step, *args)

taco.get_lr = faulty_get_lr
taco.main()
"""


def test_torchrun_crash_restart_and_sigterm_then_resume_is_exact(tmp_path, quick, final_weights):
    """DDP on 2 CPU processes (gloo). A worker crashing at step 6 is restarted by torchrun and
    resumes from the step-4 checkpoint; SIGTERM to one worker then stops both after the same
    step, with a checkpoint, from which torchrun's next restart resumes; the run ends with the
    weights of an uninterrupted one."""
    straight, faulty = str(tmp_path / "straight"), str(tmp_path / "faulty")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # --negatives_from global: the TC negatives come from both processes' micro-batches
    r = subprocess.run(torchrun_cmd(quick, "--out", straight, "--negatives_from", "global"), env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert runs.latest_checkpoint(straight).endswith("ckpt_00000016.pt")
    assert json.load(open(os.path.join(straight, "config.json")))["world_size"] == 2
    wrapper = tmp_path / "faulty_taco.py"
    wrapper.write_text(FAULTY_TACO.format(here=HERE))
    # Two restarts are planned (the crash, the SIGTERM); the third is a spare: rarely a gloo worker aborts
    # while exiting after its checkpoint is saved (docs/robustness.md), and torchrun then restarts it.
    cmd = torchrun_cmd(quick, "--out", faulty, "--negatives_from", "global", restarts=3)
    cmd[cmd.index(os.path.join(HERE, "taco.py"))] = str(wrapper)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-6000:]
    assert "resumed at step 4" in r.stdout and "resumed at step 10" in r.stdout
    assert "stopped by SIGTERM after step 10: saved" in r.stderr
    assert same_weights(final_weights(straight), final_weights(faulty))


def test_torchrun_offline_says_everything_missing_once(tmp_path):
    """The headline command on a machine without the hub: one `error:` line (not one per worker)
    naming the vocabulary and both corpora; every worker exits 2 alike; nothing written."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf")}
    r = subprocess.run(torchrun_cmd([], "--size", "base", "--out", str(tmp_path / "run")), env=env, cwd=tmp_path,
                       capture_output=True, text=True)
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert r.returncode != 0 and len(errors) == 1, r.stderr[-3000:]
    assert all(n in errors[0] for n in ("vocab.txt of 'bert-base-uncased'", "wikipedia: ", "bookcorpus: "))
    assert "(rank 1)" not in r.stderr and r.stderr.count("exitcode  : 2 ") == 2  # torchrun's table: both alike
    assert not (tmp_path / "run").exists()


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

def flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_rotation_counts_only_valid_checkpoints(straight, tmp_path, monkeypatch, capsys, quick, run_taco, final_weights):
    """Resumed past a corrupted newest checkpoint, then stopped with --keep_last 1: the one just
    saved is kept (the corrupted one, by name newer, used to keep its place), and resumes exactly."""
    def signalled_get_lr(step, *args):
        if step == 13:
            os.kill(os.getpid(), signal.SIGTERM)
        return get_lr(step, *args)

    run = str(tmp_path / "run")
    shutil.copytree(straight, run)
    flip_byte(os.path.join(run, "ckpt_00000016.pt"))
    monkeypatch.setattr(taco, "get_lr", signalled_get_lr)
    assert run_taco(quick + ["--out", run, "--resume", "--keep_last", "1"]) == 143
    assert "skipping checkpoint" in capsys.readouterr().err
    assert sorted(n for n in os.listdir(run) if n.endswith(".pt")) == ["ckpt_00000014.pt", "ckpt_00000016.pt"]
    monkeypatch.setattr(taco, "get_lr", get_lr)
    assert run_taco(quick + ["--out", run, "--resume", "--keep_last", "1"]) == 0
    assert "resumed at step 14" in capsys.readouterr().out
    assert same_weights(final_weights(straight), final_weights(run))


def test_rotation_unit(tmp_path):
    """rotate_checkpoints: keep_last valid ones; an invalid one never counts; later steps untouched."""
    out = str(tmp_path)
    for step in (2, 4, 6, 8):
        runs.save_checkpoint(out, {"step": step, "w": torch.ones(3) * step}, keep_last=10)
    flip_byte(os.path.join(out, "ckpt_00000006.pt"))
    runs.save_checkpoint(out, {"step": 5, "w": torch.zeros(3)}, keep_last=2)  # resumed from 4, saved 5
    assert sorted(os.listdir(out)) == ["ckpt_00000004.json", "ckpt_00000004.pt", "ckpt_00000005.json",
                                       "ckpt_00000005.pt", "ckpt_00000006.json", "ckpt_00000006.pt",
                                       "ckpt_00000008.json", "ckpt_00000008.pt"]


def no_space(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_while_saving_a_checkpoint(straight, tmp_path, monkeypatch, capsys, quick, run_taco, final_weights):
    """ENOSPC in the middle of torch.save (injected): one line naming the folder and the space
    needed, exit 2, the earlier checkpoints intact, no temp file; --resume then ends exactly."""
    real_save = torch.save

    def full_disk_save(state, f):
        if state["step"] == 12:
            f.write(b"x" * 1000)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from OSError(
                errno.ENOSPC, "No space left on device")  # as torch.save reports it
        return real_save(state, f)

    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000012.*", "ckpt_00000016.*"))
    monkeypatch.setattr(runs.torch, "save", full_disk_save)
    assert run_taco(quick + ["--out", run, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: no space left in {run} for ckpt_00000012.pt: it needs ")
    assert "the earlier checkpoints are intact" in err[-1] and "Traceback" not in "".join(err)
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt_") or ".tmp" in n) == [
        "ckpt_00000004.json", "ckpt_00000004.pt", "ckpt_00000008.json", "ckpt_00000008.pt"]
    monkeypatch.setattr(runs.torch, "save", real_save)
    assert run_taco(quick + ["--out", run, "--resume"]) == 0
    assert same_weights(final_weights(straight), final_weights(run))


def test_disk_full_on_the_files_a_run_writes(tmp_path, monkeypatch):
    """config.json, vocab.txt, summaries (atomic_write) and metrics.jsonl (append_jsonl): ENOSPC
    leaves the old file whole and no temp file, in one line naming the folder and the bytes."""
    path = tmp_path / "config.json"
    runs.write_json(str(path), {"old": 1})
    with pytest.raises(cli.DiskFull, match=rf"no space left in {tmp_path} for config.json: it needs 16 bytes"):
        runs.atomic_write(str(path), no_space, 16)
    assert json.load(open(path)) == {"old": 1} and os.listdir(tmp_path) == ["config.json"]
    metrics = tmp_path / "metrics.jsonl"
    runs.append_jsonl(str(metrics), {"step": 1})
    real_write = os.write

    def half_then_full(fd, data):  # a short write, then ENOSPC, on metrics.jsonl only
        if os.readlink(f"/proc/self/fd/{fd}") != str(metrics):
            return real_write(fd, data)
        if len(data) > 4:
            return real_write(fd, bytes(data[:4]))
        no_space()

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(cli.DiskFull, match="for metrics.jsonl: it needs 13 bytes"):
        runs.append_jsonl(str(metrics), {"step": 22})
    monkeypatch.setattr(os, "write", real_write)
    assert metrics.read_text() == '{"step": 1}\n'  # no half line


def unshare_tmpfs():
    """A command prefix running in a private mount namespace where $FULL is a 10 MB tmpfs, or None."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m none /tmp"],
                           capture_output=True)
    return ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=10m none "$FULL" && exec "$@"', "sh"] \
        if probe.returncode == 0 else None


def test_disk_full_for_real_on_a_small_tmpfs(tmp_path, quick):
    """A real full disk (a 10 MB tmpfs): a tiny checkpoint takes 6.6 MB, so the second does not fit."""
    prefix = unshare_tmpfs()
    if prefix is None:
        pytest.skip("needs unshare and a private tmpfs (user namespaces)")
    full = tmp_path / "full"
    full.mkdir()
    out = str(full / "run")
    cmd = prefix + [sys.executable, "-c", LIST_AFTER.format(out=out), *quick, "--steps", "8", "--out", out]
    r = subprocess.run(cmd, env={**os.environ, "FULL": str(full)}, cwd=HERE, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: no space left in {out} for ckpt_00000008.pt: it needs ") and "Traceback" not in r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == [".lock", "ckpt_00000004.json", "ckpt_00000004.pt", "config.json",
                                                     "metrics.jsonl", "vocab.txt"]


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


def test_resume_refuses_another_vocab_or_data(tmp_path, capsys, quick, run_taco, own_data):
    """What a run depends on (the checksums of its vocabulary and token array, in every checkpoint
    and config.json): a vocab.txt edited in place (same size) or a corpus rewritten with the same
    size and time is one line on --resume; --force continues with a warning."""
    run = str(tmp_path / "run")
    assert run_taco(quick + own_data + ["--steps", "8", "--out", run]) == 0
    recorded = json.load(open(os.path.join(run, "config.json")))["depends"]
    assert set(recorded) == {"vocab_sha256", "tokens_sha256"}
    os.remove(os.path.join(run, "ckpt_00000008.pt"))  # as if stopped after step 4
    vocab, data = own_data[3], own_data[1]
    rewrite_keeping_size_and_mtime(vocab, lambda t: t.replace("\na\n", "\nA\n", 1))  # "a" is an unknown word now
    assert run_taco(quick + own_data + ["--steps", "8", "--out", run, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: --resume: --vocab {vocab} is not the vocabulary this run was trained with")
    shutil.copy(os.path.join(run, "vocab.txt"), vocab)  # the run's own copy: back as it was
    words = open(data).read().split()
    a, b = next((w, v) for w, v in zip(words, words[1:]) if len(w) == len(v) and w != v)
    rewrite_keeping_size_and_mtime(data, lambda t: t.replace(f"{a} ", f"{b} ", 1))
    assert run_taco(quick + own_data + ["--steps", "8", "--out", run, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "cannot be used: " in err and "changed since it was built; rebuilding it" in err  # the stale cache
    assert err.strip().splitlines()[-1].startswith(f"error: --resume: --data {data} gives other tokens than this run")
    assert run_taco(quick + own_data + ["--steps", "8", "--out", run, "--resume", "--force"]) == 0
    assert "warning: --resume --force: --data" in capsys.readouterr().err


def test_checkpoints_that_taco_did_not_write(tmp_path, capsys, quick, run_taco):
    """A bare tensor (with a matching manifest), a dict missing keys: one line on --resume, --init
    and finetune.py --model; --objective retromae --force on a taco run names the objective."""
    import finetune
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "4", "--out", run]) == 0
    ckpt = os.path.join(run, "ckpt_00000004.pt")
    assert run_taco(quick + ["--steps", "4", "--out", run, "--resume", "--objective", "retromae", "--force"]) == 2
    assert "holds a taco run's model, which --objective retromae cannot continue" in capsys.readouterr().err
    good = torch.load(ckpt, weights_only=True)
    for content, why in [(torch.zeros(3), "holds a Tensor"), ({k: v for k, v in good.items() if k != "optimizer"},
                                                               "lacks optimizer"),
                         ({**good, "model": [1, 2]}, "malformed model"), ({**good, "step": "4"}, "malformed step"),
                         ({**good, "model": {k: [1] for k in good["model"]}}, "malformed model")]:
        torch.save(content, ckpt)
        runs.write_json(ckpt[:-3] + ".json", {"step": 4, "bytes": os.path.getsize(ckpt), "sha256": runs.sha256(ckpt)})
        assert run_taco(quick + ["--steps", "8", "--out", run, "--resume"]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("data: ")]
        assert len(err) == 1 and err[0].startswith(f"error: {ckpt} is not a taco checkpoint: it ") and why in err[0]
        if why in ("holds a Tensor", "malformed model"):  # what --init and --model read
            assert run_taco(quick + ["--out", str(tmp_path / "b"), "--init", run]) == 2
            assert f"{ckpt} is not a taco checkpoint" in capsys.readouterr().err
            with pytest.raises(SystemExit) as stop:
                finetune.main(["--model", run, "--out", str(tmp_path / "ft")])
            assert stop.value.code == 2 and "is not a taco checkpoint" in capsys.readouterr().err
    shape = {**good, "model": {**good["model"], "bert.embeddings.word.weight": torch.zeros(5, 5)}}
    torch.save(shape, ckpt)  # tensors that do not fit the checkpoint's own config
    runs.write_json(ckpt[:-3] + ".json", {"step": 4, "bytes": os.path.getsize(ckpt), "sha256": runs.sha256(ckpt)})
    assert run_taco(quick + ["--out", str(tmp_path / "c"), "--init", ckpt]) == 2
    assert "does not fit the model: size mismatch for bert.embeddings.word.weight" in capsys.readouterr().err
    torch.save({**good, "depends": "not a record"}, ckpt)  # nothing usable recorded: nothing to compare
    runs.write_json(ckpt[:-3] + ".json", {"step": 4, "bytes": os.path.getsize(ckpt), "sha256": runs.sha256(ckpt)})
    assert run_taco(quick + ["--steps", "4", "--out", run, "--resume"]) == 0


def test_disk_full_when_taking_the_lock(tmp_path, monkeypatch):
    """ENOSPC writing the owner into OUT/.lock (injected): one line naming the folder; the folder
    the lock created is removed again."""
    def no_space(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", no_space)
    with pytest.raises(cli.DiskFull, match=rf"no space left in {tmp_path / 'run'} for the lock of --out"):
        runs.RunLock(str(tmp_path / "run"))
    assert os.listdir(tmp_path) == []
