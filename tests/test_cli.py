"""Tests for cli.py: every entry point answers a mistake alike (one `error:` line, exit 2),
the one error path and its exit codes, the thread setting."""
import errno
import importlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from engine import cli

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root



ENTRY_POINT_MISTAKES = [  # (script, argv, message): refused before any work, one line, exit 2
    ("finetune", ["--batch_size", "0"], "argument --batch_size: 0 is not in [1, inf)"),
    ("finetune", ["--lrs", "1e-4,nan"], "argument --lrs: nan is not in (0, inf)"),
    ("finetune", ["--seeds", "1,x"], "argument --seeds: expected an integer, got 'x'"),
    ("finetune", ["--warmup", "-1"], "argument --warmup: -1 is not in [0, inf)"),
    ("finetune", ["--out", "{file}"], "is a file; pass a folder"),
    ("finetune", ["--device", "tpu"], "expected cpu, cuda or cuda:N"),
    ("finetune", ["--model", "{fifo}"], "is not a regular file"),
    ("tools.analyze", ["--json", "{dir}"], "--json {dir} is a folder; pass a file"),
    ("tools.analyze", ["--eval_blocks", "1"], "argument --eval_blocks: 1 is not in [2, inf)"),
    ("tools.analyze", ["--pairs", "{fifo}"], "is not a regular file"),
    ("tools.analyze", ["--pairs", "{loop}"], "Too many levels of symbolic links"),
    ("tools.study", ["--threads", "-1"], "argument --threads: -1 is not in [0, inf)"),
    ("tools.study", ["--ft_lr", "inf"], "argument --ft_lr: inf is not in (0, inf)"),
    ("tools.study", ["--out", "{file}"], "is a file; pass a folder"),
    ("tools.study", ["--plot", "{dir}"], "is a folder; pass a file"),
    ("tools.bench", ["--steps", "0"], "argument --steps: 0 is not in [1, inf)"),
    ("tools.bench", ["--peak_tflops", "nan"], "argument --peak_tflops: nan is not in (0, inf)"),
    ("tools.bench", ["--device", "mps"], "only cpu and cuda"),
    ("tools.bench", ["--tokenizer", "{fifo}", "--vocab", "toy"], "is not a regular file"),
    ("tools.bench", ["--tokenizer", "{dir}", "--vocab", "toy"], "is a folder, not a file"),
    ("tools.bench", ["--probe", "nonsense"], "unknown variant(s) nonsense: choose from taco-mlm"),
    ("tools.bench", ["--variants", "taco-mlm,x"], "unknown variant(s) x: choose from"),
    ("tools.prepare", ["--data", "toy", "--num_proc", "0"], "argument --num_proc: 0 is not in [1, inf)"),
    ("tools.prepare", [], "the following arguments are required: --data"),
]


@pytest.mark.parametrize("script,argv,message", ENTRY_POINT_MISTAKES)
def test_every_entry_point_answers_mistakes_alike(script, argv, message, tmp_path, capsys):
    paths = {"file": tmp_path / "afile", "dir": tmp_path / "adir", "fifo": tmp_path / "fifo", "loop": tmp_path / "loop"}
    paths["file"].write_text("x")
    paths["dir"].mkdir()
    os.mkfifo(paths["fifo"])
    os.symlink(paths["loop"], paths["loop"])
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(script).main([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message.format(**paths) in err
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile", "fifo", "loop"] and not os.listdir(paths["dir"])


@pytest.mark.parametrize("raised,code,stderr", [
    (cli.UsageError("bad flag\nspread over lines"), 2, "error: bad flag spread over lines\n"),
    (PermissionError(13, "Permission denied", "/x/y"), 2, "error: Permission denied: /x/y\n"),
    (FloatingPointError("loss is nan"), 3, "error: loss is nan\n"),
    (cli.Interrupted(15, "stopped by SIGTERM"), 143, "stopped by SIGTERM\n"),
    (KeyboardInterrupt(), 130, "interrupted\n"),
    (cli.Stop(signal.SIGTERM), 143, "stopped by SIGTERM\n"),
    (OSError(errno.ENOSPC, "No space left on device", "/x/y"), 2,
     "error: No space left on device: /x/y; free some space in /x\n"),
    (RuntimeError("a library's own words"), 2, None),  # raised while handling a full disk: see below
])
def test_the_one_error_path(raised, code, stderr, capsys):
    """cli.errors(), around every script's main: one line on stderr, a documented exit code."""
    with pytest.raises(SystemExit) as exit_info, cli.errors():
        if isinstance(raised, RuntimeError):  # torch.save reports a full disk so
            raise raised from OSError(errno.ENOSPC, "No space left on device")
        raise raised
    err = capsys.readouterr().err
    assert exit_info.value.code == code and (err == stderr or stderr is None and err.startswith("error: No space left"))


# A child of errors()' process: SIGTERM to the parent only (kill, timeout) or SIGINT to the whole
# process group (Ctrl-C in a terminal) while a library (here a fork pool, as datasets.map) is busy.
POOL = """
import multiprocessing, sys, time
sys.path.insert(0, {here!r})
from engine import cli
cli.start("__main__")

def work(i):
    time.sleep(60)

with cli.errors():
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print("started", flush=True)
        pool.map(work, range(4))
"""


def start_script(script, text):
    """Run `text` as a script in its own session; return once it has printed "started" (and 0.5 s more)."""
    script.write_text(text.format(here=HERE))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stdout.readline() == "started\n"
    time.sleep(0.5)
    return proc


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_a_signal_ends_the_script_and_every_process_it_started(tmp_path, sig, group):
    proc = start_script(tmp_path / "pool.py", POOL)
    os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    assert proc.wait(timeout=60) == 128 + sig
    assert proc.stderr.read() == ("interrupted\n" if sig == signal.SIGINT else "stopped by SIGTERM\n")
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.splitlines()
    assert not [l for l in ps if int(l.split()[0]) == proc.pid and not l.split()[1].startswith("Z")]


# A stop signal that lands in an at-fork hook, where Python drops the exception its handler raises.
AT_FORK = """
import os, sys, time
sys.path.insert(0, {here!r})
from engine import cli
cli.start("__main__")
os.register_at_fork(after_in_parent=lambda: time.sleep(5))  # the signal lands here
with cli.errors():
    print("started", flush=True)
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
"""


def test_a_signal_python_drops_is_raised_again(tmp_path):
    """Not printed (no "Exception ignored"), raised again once past the hook: exit 143, one line, the child ended."""
    proc = start_script(tmp_path / "at_fork.py", AT_FORK)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert proc.stderr.read() == "stopped by SIGTERM\n"
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.splitlines()
    assert not [l for l in ps if int(l.split()[0]) == proc.pid and not l.split()[1].startswith("Z")]


def test_compile_without_a_compiler_is_one_line(tmp_path):
    """--compile where torch.compile would find no C++ compiler: said before any work."""
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler")}
    for script, argv in [("taco.py", ["--out", str(tmp_path / "run")]), ("tools/bench.py", ["--size", "tiny"])]:
        r = subprocess.run([sys.executable, os.path.join(HERE, script), "--compile", "--device", "cpu", *argv],
                           env=env, capture_output=True, text=True)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr[-2000:]
        assert r.stderr.startswith("error: --compile needs a working C++ compiler on CPU and found none (tried ")
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("flag,env,want,source", [
    (1, None, 1, "--threads"), (None, "1", 1, "$TACO_THREADS"), (2, "1", 2, "--threads"), (None, None, None, "default")])
def test_threads_come_from_the_flag_then_the_environment(flag, env, want, source, monkeypatch):
    """--threads, else $TACO_THREADS, else PyTorch's own count (never the machine's load: the
    same count gives the same numbers)."""
    before = torch.get_num_threads()
    monkeypatch.delenv("TACO_THREADS", raising=False)
    if env is not None:
        monkeypatch.setenv("TACO_THREADS", env)
    try:
        number, why = cli.set_threads(flag)
        assert number == torch.get_num_threads() == (want or before)
        assert why == source or (source == "default" and why in ("$OMP_NUM_THREADS", "PyTorch's default"))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("env", ["x", "0", "-2", "1.5"])
def test_a_bad_thread_count_in_the_environment_is_one_line(env, monkeypatch, tmp_path, capsys, run_taco, quick):
    monkeypatch.setenv("TACO_THREADS", env)
    assert run_taco(quick + ["--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: $TACO_THREADS") and err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_the_start_line_says_the_threads(tmp_path, capsys, run_taco, quick):
    before = torch.get_num_threads()
    try:
        assert run_taco(quick + ["--steps", "2", "--threads", "1", "--out", str(tmp_path / "run")]) == 0
    finally:
        torch.set_num_threads(before)
    assert "fp32 on cpu (1 thread: --threads)" in capsys.readouterr().out


ENTRY_POINTS = ["taco", "finetune", *(f"tools/{n}" for n in ("analyze", "bench", "export", "pictures", "prepare", "study")),
                *(f"exercises/{n}" for n in ("walkthrough", "ex5_ablations", "ex6_mlm_vs_taco", "ex7_embeddings",
                                             "measure", "handout"))]


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_every_script_calls_start_before_anything_imports_torch(script):
    """cli.start(__name__), the first call of every script: it sets the OpenMP wait policy (which
    libgomp reads once, when torch loads) and the stop signals' handlers before any heavy import."""
    import ast
    body = ast.parse(open(os.path.join(HERE, f"{script}.py")).read()).body
    calls = [i for i, n in enumerate(body) if isinstance(n, ast.Expr) and ast.unparse(n) == "cli.start(__name__)"]
    heavy = [i for i, n in enumerate(body) if isinstance(n, (ast.Import, ast.ImportFrom))
             and not ast.unparse(n).startswith(("import argparse", "from engine import cli"))
             and (getattr(n, "module", None) or n.names[0].name).split(".")[0] not in sys.stdlib_module_names]
    assert len(calls) == 1 and (not heavy or calls[0] < heavy[0]), (script, calls, heavy)


def test_idle_threads_sleep_unless_the_user_says_otherwise():
    code = "import os, taco; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    run = lambda env: subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True)
    assert run(env).stdout.strip() == "PASSIVE"
    assert run({**env, "OMP_WAIT_POLICY": "ACTIVE"}).stdout.strip() == "ACTIVE"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_torch_loads_is_one_line(sig, tmp_path):
    """From the first instant: a stop signal while `import torch` runs (before main() sets its own
    handlers) is one line and exit 128 + its number, never a traceback or a silent -15."""
    hold = tmp_path / "sitecustomize.py"  # holds the import of torch until the signal came
    hold.write_text("import builtins, os, sys, time\nreal = builtins.__import__\n"
                    "def slow(name, *a, **k):\n    if name == 'torch' and 'torch' not in sys.modules:\n"
                    "        print('importing', flush=True); time.sleep(30)\n    return real(name, *a, **k)\n"
                    "builtins.__import__ = slow\n")
    for script in ("taco.py", "finetune.py", "tools/bench.py"):
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, script), "--out", str(tmp_path / "run")],
                                env={**os.environ, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # as from a terminal, even under nohup:
                                preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))  # not ignored
        assert proc.stdout.readline() == "importing\n"
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 128 + sig, script
        assert proc.stderr.read() == ("interrupted\n" if sig == signal.SIGINT else f"stopped by {sig.name}\n")
    assert not (tmp_path / "run").exists()


def test_a_closed_or_full_stdout_costs_no_result(tmp_path):
    """`| head -c 1` and `> /dev/full`: the lines are dropped with one warning, the run finishes."""
    cmd = [sys.executable, os.path.join(HERE, "taco.py"), "--steps", "2", "--eval_every", "1", "--log_every", "1",
           "--threads", "1"]
    r = subprocess.run(" ".join(cmd + ["--out", str(tmp_path / "a"), "| head -c 1"]), shell=True, capture_output=True,
                       text=True, executable="/bin/bash", env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0 and os.path.exists(tmp_path / "a" / "ckpt_00000002.pt"), r.stderr[-2000:]
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            r = subprocess.run(cmd + ["--out", str(tmp_path / "b")], stdout=full, stderr=subprocess.PIPE, text=True)
        assert r.returncode == 0 and os.path.exists(tmp_path / "b" / "ckpt_00000002.pt"), r.stderr[-2000:]
        assert "warning: standard output failed (No space left on device)" in r.stderr and "error" not in r.stderr


def test_far_too_many_threads_are_refused_before_anything_is_written(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(HERE, "taco.py"), "--threads", "100000", "--out",
                        str(tmp_path / "run")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: --threads 100000: far more threads than the ")
    assert r.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


def test_a_compiler_that_cannot_compile_is_one_line(tmp_path):
    """It answers --version (what PyTorch's search asks) but fails on a real file."""
    cxx = tmp_path / "g++"
    cxx.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "g++ (fake) 12.0"; exit 0; fi\n'
                   'echo "fake: internal compiler error" >&2; exit 1\n')
    cxx.chmod(0o755)
    r = subprocess.run([sys.executable, os.path.join(HERE, "taco.py"), "--compile", "--device", "cpu", "--out",
                        str(tmp_path / "run")], env={**os.environ, "CXX": str(cxx)}, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr[-2000:]
    assert "cannot compile a test file (fake: internal compiler error)" in r.stderr
    assert not (tmp_path / "run").exists()


def test_under_torchrun_only_local_rank_0_says_a_mistake(monkeypatch, capsys):
    """Every torchrun worker meets the same mistake: local rank 0 says it; another worker waits
    for torchrun to stop it (rank 0 has exited) and exits with the same code, quietly. A worker
    not stopped met a mistake of its own: it says it, naming its rank."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    before = signal.getsignal(signal.SIGTERM)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()  # torchrun stopping the workers
    t0 = time.time()
    with pytest.raises(SystemExit) as exit_info:
        cli.fail("bad flag")
    assert exit_info.value.code == 2 and capsys.readouterr().err == "" and time.time() - t0 < 10
    assert signal.getsignal(signal.SIGTERM) is before
    monkeypatch.setattr(cli, "RANK_WAIT", 0.1)
    with pytest.raises(SystemExit) as exit_info:
        cli.fail("bad flag")
    assert exit_info.value.code == 2 and capsys.readouterr().err == "error: bad flag (rank 1)\n"


def test_a_cache_that_is_not_a_folder_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("TACO_CACHE", str(tmp_path / "afile"))
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module("tools.prepare").main(["--data", "toy", "--vocab", "toy"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: $TACO_CACHE {tmp_path / 'afile'} is not a folder: point it at a folder (or unset it)\n"
