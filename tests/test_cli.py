"""Tests for cli.py: every entry point answers a mistake alike (one `error:` line, exit 2, nothing written),
the one error path and its exit codes, the thread setting, output that goes nowhere."""
import errno
import importlib
import os
import subprocess
import sys

import pytest
import torch

from engine import cli

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root

ENTRY_POINT_MISTAKES = [  # (script, argv, message): refused before any work, one line, exit 2
    ("taco", ["--steps", "0"], "argument --steps: 0 is not in [1, inf)"),
    ("taco", ["--lr", "nan"], "argument --lr: nan is not in (0, inf)"),
    ("taco", ["--out", "{file}"], "--out {file} is a file; pass a folder"),
    ("taco", ["--device", "cuda:7"], "--device cuda:7: "),
    ("taco", ["--data", "{missing}"], "unknown data source"),
    ("taco", ["--vocab", "{missing}.txt"], "No such file or directory"),
    ("taco", ["--vocab", "{file}"], "lacks [PAD], [UNK], [CLS], [SEP], [MASK]"),
    ("taco", ["--init", "{missing}"], "does not exist: pass a taco run directory"),
    ("taco", ["--resume", "--out", "{dir}"], "--resume: no checkpoint in"),
    ("taco", ["--data", "{file}"], "convert it to one"),
    ("finetune", ["--batch_size", "0"], "argument --batch_size: 0 is not in [1, inf)"),
    ("finetune", ["--out", "{file}"], "is a file; pass a folder"),
    ("finetune", ["--device", "tpu"], "expected cpu, cuda or cuda:N"),
    ("finetune", ["--model", "{missing}"], "does not exist"),
    ("tools.analyze", ["--json", "{dir}"], "--json {dir} is a folder; pass a file"),
    ("tools.study", ["--out", "{file}"], "is a file; pass a folder"),
    ("tools.bench", ["--steps", "0"], "argument --steps: 0 is not in [1, inf)"),
    ("tools.bench", ["--device", "mps"], "only cpu and cuda"),
    ("tools.prepare", ["--data", "toy", "--num_proc", "0"], "argument --num_proc: 0 is not in [1, inf)"),
    ("tools.prepare", [], "the following arguments are required: --data"),
]


@pytest.mark.parametrize("script,argv,message", ENTRY_POINT_MISTAKES)
def test_every_entry_point_answers_mistakes_alike(script, argv, message, tmp_path, capsys):
    paths = {"file": tmp_path / "afile", "dir": tmp_path / "adir", "missing": tmp_path / "missing"}
    paths["file"].write_text("x")
    paths["dir"].mkdir()
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(script).main([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message.format(**paths) in err
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile"] and not os.listdir(paths["dir"])


@pytest.mark.parametrize("raised,code,stderr", [
    (cli.UsageError("bad flag\nspread over lines"), 2, "error: bad flag spread over lines\n"),
    (PermissionError(13, "Permission denied", "/x/y"), 2, "error: Permission denied: /x/y\n"),
    (FloatingPointError("loss is nan"), 3, "error: loss is nan\n"),
    (KeyboardInterrupt(), 130, "interrupted\n"),
    (OSError(errno.ENOSPC, "No space left on device", "/x/y"), 2, "error: no space left in /x; free some space there\n"),
    (RuntimeError("a library's own words"), 2, "error: no space left in the output or cache folder; free some "
                                               "space there\n"),  # raised while handling a full disk: see below
])
def test_the_one_error_path(raised, code, stderr, capsys):
    """cli.errors(), around every script's main: one line on stderr, a documented exit code."""
    with pytest.raises(SystemExit) as exit_info, cli.errors():
        if isinstance(raised, RuntimeError):  # torch.save reports a full disk so
            raise raised from OSError(errno.ENOSPC, "No space left on device")
        raise raised
    assert exit_info.value.code == code and capsys.readouterr().err == stderr


def test_a_bug_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError), cli.errors():
        1 / 0


@pytest.mark.parametrize("flag,env,want", [(1, None, 1), (None, "1", 1), (2, "1", 2), (None, None, None)])
def test_threads_come_from_the_flag_then_the_environment(flag, env, want, monkeypatch):
    """--threads, else $TACO_THREADS, else PyTorch's own count (never the machine's load: the
    same count gives the same numbers)."""
    before = torch.get_num_threads()
    monkeypatch.delenv("TACO_THREADS", raising=False)
    if env is not None:
        monkeypatch.setenv("TACO_THREADS", env)
    try:
        assert cli.set_threads(flag) == torch.get_num_threads() == (want or before)
    finally:
        torch.set_num_threads(before)


def test_a_bad_thread_count_in_the_environment_is_one_line(monkeypatch, tmp_path, capsys, run_taco, quick):
    monkeypatch.setenv("TACO_THREADS", "x")
    assert run_taco(quick + ["--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: $TACO_THREADS") and err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_the_start_line_says_the_threads(tmp_path, capsys, run_taco, quick):
    before = torch.get_num_threads()
    try:
        assert run_taco(quick + ["--steps", "2", "--threads", "1", "--out", str(tmp_path / "run")]) == 0
    finally:
        torch.set_num_threads(before)
    assert "fp32 on cpu (1 thread)" in capsys.readouterr().out


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


def test_under_torchrun_local_rank_0_says_a_mistake(monkeypatch, capsys):
    """Every torchrun worker meets the same mistake: local rank 0 says it at once; another waits 3 s for torchrun
    to end it, and, still alive, says its own mistake with its rank."""
    waited = []
    monkeypatch.setattr(cli.time, "sleep", waited.append)
    for rank, line in (("0", "error: bad flag\n"), ("1", "error: bad flag (rank 1)\n")):
        monkeypatch.setenv("LOCAL_RANK", rank)
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(SystemExit) as exit_info:
            cli.fail("bad flag")
        assert exit_info.value.code == 2 and capsys.readouterr().err == line
    assert waited == [3]


SCRIPTS = ["taco", "finetune", *(f"tools/{n}" for n in ("analyze", "bench", "export", "pictures", "prepare", "study"))]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_imports_the_engine_before_torch(script):
    """engine/__init__.py sets how idle CPU threads wait (OMP_WAIT_POLICY, which libgomp reads once, as torch loads):
    sleeping, not spinning, which on a busy machine makes a run several times faster."""
    import ast
    body = ast.parse(open(os.path.join(HERE, f"{script}.py")).read()).body
    imports = [(getattr(n, "module", None) or n.names[0].name).split(".")[0] for n in body
               if isinstance(n, (ast.Import, ast.ImportFrom))]
    heavy = [m for m in imports if m not in sys.stdlib_module_names]
    assert heavy[0] == "engine", (script, heavy)


def test_idle_threads_sleep_unless_the_user_says_otherwise():
    code = "import os, taco; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    run = lambda env: subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True)
    assert run(env).stdout.strip() == "PASSIVE"
    assert run({**env, "OMP_WAIT_POLICY": "ACTIVE"}).stdout.strip() == "ACTIVE"
