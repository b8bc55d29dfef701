"""Tests for tools/study.py: python -m pytest -q tests/test_study.py"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tools import study
from engine import flags, toy

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
try:
    import matplotlib  # noqa: F401  (optional: without it the plots are a note)
    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False
TINY = ["--steps", "4", "--save_every", "2", "--max_len", "32", "--batch_size", "4", "--ft_train", "64",
        "--ft_epochs", "1", "--ft_max_len", "32", "--ft_heldout", "100", "--taco_args", "--eval_blocks 8 --negatives 8"]


@pytest.fixture(scope="module", autouse=True)
def taco_cache(tmp_path_factory):
    """Toy corpus and token cache in a temp dir, for this process and its subprocesses."""
    old = os.environ.get("TACO_CACHE")
    os.environ["TACO_CACHE"] = str(tmp_path_factory.mktemp("taco_cache"))
    yield os.environ["TACO_CACHE"]
    if old is None:
        del os.environ["TACO_CACHE"]
    else:
        os.environ["TACO_CACHE"] = old


def tiny_args(**kw):
    """study.py's settings as plan_run reads them."""
    return argparse.Namespace(**{"taco_args": "", "size": "tiny", "data": "toy", "steps": 4, "max_len": 32,
                                 "batch_size": 4, "lr": None, "device": None, "cache_dir": None, "save_every": 2,
                                 "force": False, **kw})


# ----------------------------------------------------------------------------- end to end

def test_study_smoke(tmp_path, capsys):
    """Two objectives over two seeds, side by side (2 jobs: pre-training, then a pool measuring every
    checkpoint); a second call reuses both measured seeds; a seed whose run is no longer the one
    measured (here: unfinished) is measured again."""
    out = tmp_path / "study"
    argv = ["--out", str(out), "--seed", "0,1", "--ft_seeds", "1,2", "--jobs", "2", "--mlm_ft_every", "4", *TINY]
    rows = study.main(argv)
    assert [(r["seed"], r["variant"], r["step"]) for r in rows] == [
        (s, v, step) for s in (0, 1) for v in ("mlm", "taco") for step in (0, 2, 4)]
    step0 = [r for r in rows if r["step"] == 0 and r["seed"] == 0]
    assert step0[0]["ctx_score"] == step0[1]["ctx_score"]  # one init, measured alike
    tuned = [r for r in rows if r["variant"] == "taco" or r["step"] != 2]  # MLM's step 2: analysed, not fine-tuned
    assert all(len(r["ft_scores"]) == len(r["ft_heldout_scores"]) == 2 and 0 <= r["ft_heldout_mean"] <= 1 for r in tuned)
    assert all(r["ft_scores"] == [] and r["ctx_score"] is not None for r in rows if r not in tuned)
    assert all(r["eval_mlm_loss"] is not None for r in rows if r["step"])
    assert "$ " in (out / "seed1" / "taco" / "pretrain.log").read_text()
    saved = json.loads((out / "study.json").read_text())
    assert len(saved["rows"]) == 12 and saved["time"]["cpu_s"] > 0
    assert "| taco | 4 |" in (out / "seed0" / "table.md").read_text()
    table = (out / "table.md").read_text()
    assert "| taco | 4 |" in table and "per seed" in table and "Wall time" in table
    assert (out / "study.png").exists() == (out / "seed0" / "study.png").exists() == HAVE_MATPLOTLIB
    capsys.readouterr()
    assert study.main(argv) == rows
    assert capsys.readouterr().out.count("reusing the measured study") == 2
    args = argparse.Namespace(**saved["settings"])
    for ckpt in (out / "seed1" / "taco").glob("ckpt_00000004.*"):  # as if seed 1's TACO run had been stopped
        ckpt.unlink()
    plans = {s: [study.plan_run(v, args, s, str(out / f"seed{s}")) for v in ("mlm", "taco")] for s in (0, 1)}
    assert plans[1][1][1][-1] == "--resume" and study.measured(str(out / "seed1"), args, 1, plans[1]) is None
    assert study.measured(str(out / "seed0"), args, 0, plans[0]) == [r for r in rows if r["seed"] == 0]


def test_study_retromae_miniature_smoke(tmp_path, capsys):
    """MLM in OUT/stage0, then mlm, taco and retromae continued from its final weights, their [CLS]
    vectors probed as sentence embeddings; a second call reuses all four runs."""
    out = tmp_path / "study"
    argv = ["--retromae", "--out", str(out), "--steps", "4", "--continue_steps", "2", "--save_every", "2",
            "--max_len", "32", "--batch_size", "4", "--ft_seeds", "", "--taco_args", "--eval_blocks 8"]
    rows = study.main(argv)
    assert [(r["variant"], r["step"]) for r in rows] == [("init (MLM stage 0)", 4), ("mlm", 6), ("taco", 6),
                                                         ("retromae", 6)]
    assert all(0 <= r["ndcg@10"] <= 1 and -1 <= r["sts_spearman"] <= 1 and r["ft_scores"] == [] for r in rows)
    config = json.loads((out / "retromae" / "config.json").read_text())
    assert "ckpt_00000004.pt" in str(config["init"]) and config["args"]["objective"] == "retromae"
    assert config["args"]["steps"] == 2 and "| retromae | 6 |" in (out / "table.md").read_text()
    assert [r["variant"] for r in json.loads((out / "study.json").read_text())["rows"]] == [r["variant"] for r in rows]
    capsys.readouterr()
    assert [dict(r, cpu_s=0) for r in study.main(argv)] == [dict(r, cpu_s=0) for r in rows]  # measured again alike
    assert capsys.readouterr().out.count("reusing the finished run") == 4


def test_a_failed_run_is_one_line_naming_its_log(tmp_path, capsys):
    """taco.py refuses what study.py does not check (here a vocabulary file that is not there): the study
    stops with one line, taco.py's last, and where its log is."""
    with pytest.raises(SystemExit) as e:
        study.main(["--out", str(tmp_path / "s"), "--variants", "mlm", *TINY[:-2], "--taco_args",
                    f"--vocab {tmp_path}/none.txt"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("error: taco.py failed for ")
    assert "No such file or directory" in err and "none.txt" in err and f"see {tmp_path / 's' / 'mlm'}/pretrain.log" in err


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the runs in /proc")
def test_ctrl_c_stops_the_runs_which_save_and_the_same_command_resumes_them(tmp_path):
    """Ctrl-C (SIGINT to the study and its runs, as a terminal sends it) while both runs train: each saves
    where it stopped, the study ends, exit 130, its lock free; run again, it resumes them."""
    out = tmp_path / "s"
    cmd = [sys.executable, os.path.join(HERE, "tools", "study.py"), "--out", str(out), "--jobs", "2", "--max_len", "32",
           "--batch_size", "4", "--steps", "100000", "--save_every", "50000", "--ft_seeds", "",
           "--taco_args", "--eval_blocks 8 --negatives 8 --log_every 1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not all((out / v / "metrics.jsonl").exists() and (out / v / "metrics.jsonl").stat().st_size
                      for v in ("mlm", "taco")):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.2)
        children = [int(pid) for f in glob.glob(f"/proc/{proc.pid}/task/*/children") for pid in open(f).read().split()]
        for pid in [proc.pid, *children]:
            os.kill(pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    args = tiny_args(taco_args="--eval_blocks 8 --negatives 8 --log_every 1", steps=100000, save_every=50000)
    for v in ("mlm", "taco"):
        assert "stopped by SIGINT" in (out / v / "pretrain.log").read_text()
        assert study.plan_run(v, args, 0, str(out))[1][-1] == "--resume"
    from engine import runs
    with runs.RunLock(str(out), "--out"):  # free again
        pass


# ----------------------------------------------------------------------------- tables

def row(v, seed, step, dev, held=None, ctx=0.1):
    """A measured row: `dev` / `held` are the per-fine-tuning-seed scores."""
    held = dev if held is None else held
    return {"variant": v, "seed": seed, "step": step, "eval_mlm_loss": None, "eval_mlm_acc": None, "ctx_intra": ctx,
            "ctx_inter": 0.0, "ctx_score": ctx, "ctx_doc_score": ctx,
            "wordsim_cooc": 0.5, "wordsim_spearman": float("nan"), **study.score_fields("ft", dev),
            **study.score_fields("ft_heldout", held)}


def test_one_seed_table_gives_the_first_step_reaching_mlms_final_value():
    rows = [row("mlm", 0, 2, [0.6]), row("mlm", 0, 4, [0.7]), row("taco", 0, 2, [0.75]), row("taco", 0, 4, [0.8])]
    rows[1]["eval_mlm_loss"], rows[2]["eval_mlm_loss"], rows[3]["eval_mlm_loss"] = 4.0, 4.5, 3.9
    table = study.format_table(rows)
    assert "| taco | 2 | 4.500 | – |" in table and "(step 4): fine-tuned (held-out) 0.700, fine-tuned (dev) 0.700" in table
    assert "- taco: fine-tuned (held-out) step 2, fine-tuned (dev) step 2, MLM loss step 4" in table
    assert study.first_match(rows, "taco", "eval_mlm_loss", -1) == 4 and study.first_match(rows, "mlm", "ft_mean") == 4


def test_seeds_table_steps_fraction_and_median():
    """Per seed the first step at which TACO reaches MLM's final score, or "not by"; how many
    seeds do; the median step (a seed that never gets there counts as later than all)."""
    rows = []
    for seed, (taco2, taco4, mlm4) in enumerate([(0.7, 0.8, 0.7), (0.6, 0.8, 0.75), (0.6, 0.7, 0.75)]):
        rows += [row("mlm", seed, 2, [0.6] * 4), row("mlm", seed, 4, [mlm4] * 4),
                 row("taco", seed, 2, [taco2] * 4, ctx=0.3), row("taco", seed, 4, [taco4] * 4, ctx=0.3)]
    table = study.format_seeds_table(rows, [0, 1, 2])
    assert "| 0 | 70.0 | 2 | 70.0 | 2 | 70.0 | 2 | 70.0 | 2 |" in table
    assert "| 2 | 75.0 | not by 4 |" in table
    assert "- taco, held-out pairs, 4 fine-tuning seeds: reaches it with 2 of 3 seeds; median step 4 (1.00" in table
    assert "| taco | 4 | +3.3 ± 7.6 | 2 of 3 |" in table  # paired gap: +10, +5, -5 points
    assert "TACO's is above MLM's at 6 of 6" in table
    rows = [r for r in rows if r["seed"] != 0]
    assert "median step not by 4" in study.format_seeds_table(rows, [1, 2])


def test_seeds_table_with_one_fine_tuning_seed_and_no_held_out_pairs():
    """`--seed 0,1 --ft_seeds 1 --ft_heldout 0`: the crossing steps on the dev pairs; no paired gap
    (it needs the held-out pairs or two halves of the fine-tuning seeds)."""
    rows = [row(v, seed, step, [0.6 + 0.05 * step], held=[]) for seed in (0, 1) for v in ("mlm", "taco")
            for step in (2, 4)]
    table = study.format_seeds_table(rows, [0, 1])
    assert "| seed | MLM final, dev 1,000, 1 seeds | taco |" in table and "| 1 | 80.0 | 4 |" in table
    assert "Paired gap" not in table


def test_miniature_tables():
    r = {**row("tacl", 0, 2, [0.5, 0.7]), "eval_mlm_loss": 4.1, "eval_mlm_acc": 0.2, "self_similarity": [0.1, 0.2],
         "ctx_intra": 0.3, "ctx_inter": 0.2, "ndcg@10": 0.9, "mrr@10": 0.8, "recall@100": 1.0, "sts_spearman": 0.5}
    assert study.format_tacl_table([r]).splitlines()[2] == \
        "| tacl | 2 | 4.100 / 0.200 | 0.100 | 0.200 | 0.100 (0.300 − 0.200) | – | 60.0 ± 14.1 |"
    assert study.format_retromae_table([r]).splitlines()[2] == \
        "| tacl | 2 | 0.900 | 0.800 | 1.000 | 0.500 | 0.100 | – | 60.0 ± 14.1 |"


def test_only_the_checkpoints_every_save_every_are_measured(tmp_path):
    """A run stopped by a signal saved an extra checkpoint where it stopped, then resumed: not a row."""
    for step in (150, 300, 42):
        (tmp_path / f"ckpt_{step:08d}.pt").touch()
    assert [s for s, _ in study.measured_checkpoints(str(tmp_path), {"save_every": 150, "steps": 300})] == [150, 300]
    assert [s for s, _ in study.measured_checkpoints(str(tmp_path), {"save_every": 200, "steps": 300})] == [300]


def test_a_measured_seed_is_reused_only_with_the_same_settings(tmp_path, monkeypatch):
    """`study.py --seed 1 --out OUT/seed1` then `--seed 0,1 --out OUT`: seed 1's rows are reused when
    nothing but where-and-how-fast differs, and its runs are finished."""
    args = lambda **kw: argparse.Namespace(**{"seed": [1], "out": str(tmp_path), "steps": 1200, "threads": 0,
                                              "jobs": 1, "force": False, **kw})
    monkeypatch.setattr(study, "plot", lambda rows, path: None)
    study.save(str(tmp_path), args(), {}, [{"seed": 1, "step": 0}], "t")
    finished = [("mlm", None), ("taco", None)]
    assert study.measured(str(tmp_path), args(seed=[0, 1], out="elsewhere", threads=1, jobs=2), 1,
                          finished) == [{"seed": 1, "step": 0}]
    assert study.measured(str(tmp_path), args(seed=[0, 1], steps=600), 1, finished) is None  # another budget
    assert study.measured(str(tmp_path), args(seed=[0, 1]), 0, finished) is None  # another seed
    assert study.measured(str(tmp_path), args(seed=[0, 1]), 1, [("mlm", None), ("taco", ["--resume"])]) is None


def test_plot_without_matplotlib_is_a_note(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    study.plot([row("mlm", 0, 0, [0.5])], str(tmp_path / "p.png"))
    assert "pip install matplotlib" in capsys.readouterr().out and not (tmp_path / "p.png").exists()


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib is optional")
def test_plot_draws_every_seed_and_the_mean(tmp_path):
    rows = [row(v, s, step, [0.5 + 0.1 * step + 0.01 * s]) for s in (0, 1, 2) for v in ("mlm", "taco") for step in (0, 2)]
    study.plot(rows, str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 0


def test_toy_pair_eval_is_its_own_stream(tmp_path):
    """More pairs of the toy pair task, balanced, from a stream that leaves the corpus's splits alone."""
    folder = toy.toy_pair_eval(tmp_path, n=300)
    lines = (folder / "dev.tsv").read_text().splitlines()
    assert lines[0] == "sentence1\tsentence2\tlabel" and len(lines) == 301
    assert sum(line.endswith("\t1") for line in lines[1:]) == 150
    assert (toy.toy_pair_eval(tmp_path, n=300) / "dev.tsv").read_text() == "\n".join(lines) + "\n"
    dev = (toy.toy_corpus(tmp_path) / "glue" / "dev.tsv").read_text().splitlines()
    assert not set(lines[1:]) & set(dev[1:])


# ----------------------------------------------------------------------------- mistakes and runs in the way

@pytest.mark.parametrize("argv", [["--variants", "mlm,bert"], ["--pairs", "no_such_pairs.tsv"], ["--seed", "1,1"],
                                  ["--max_len", "4"], ["--lr", "nan"], ["--size", "huge"],  # taco.py's parser checks
                                  ["--taco_args", "--bogus 1"], ["--taco_args", "--warmup 'x"], ["--tacl", "--seed", "0,1"]])
def test_study_bad_input_exits_2_before_training(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        study.main(["--out", str(tmp_path / "s"), "--steps", "2", "--save_every", "1", *argv])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: ")
    assert not (tmp_path / "s" / "mlm").exists()


def test_taco_args_go_to_taco_py_before_what_study_py_sets():
    """--taco_args tune what every objective shares; study.py's own flags (a checkpoint every
    --save_every, all kept, the run folder) come after them and win."""
    argv = study.taco_argv("taco", tiny_args(taco_args="--warmup 7 --negatives 8 --save_every 9"), 0, "OUT")
    run = flags.get_args(argv)
    assert (run.warmup, run.negatives, run.save_every, run.keep_last, run.out) == (7, 8, 2, 1000000, "OUT")


def fake_run(folder, args_json=None, step=200, init=None):
    """A run folder as taco.py leaves it (config.json, one checkpoint)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"args": args_json or {"objective": "taco", "steps": 600},
                                                    "init": init}))
    (folder / f"ckpt_{step:08d}.pt").write_bytes(b"weights")


def test_a_run_with_other_settings_is_never_replaced_without_force(tmp_path, capsys):
    """`study.py --out runs` with runs/taco from another `python taco.py`: one error line before any
    training, the run untouched."""
    fake_run(tmp_path / "runs" / "taco")
    before = sorted(p.name for p in (tmp_path / "runs" / "taco").iterdir())
    with pytest.raises(SystemExit) as e:
        study.main(["--out", str(tmp_path / "runs"), *TINY])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "taco holds a run with other settings; pass --force to replace it" in err
    assert sorted(p.name for p in (tmp_path / "runs" / "taco").iterdir()) == before
    assert not (tmp_path / "runs" / "mlm").exists()  # nothing trained


def test_plan_reuses_resumes_or_replaces(tmp_path):
    """The same run finished: reused; stopped: resumed (from the start if it saved nothing); another run:
    replaced only with --force; nothing there: started."""
    args = tiny_args()
    same = lambda out: vars(flags.get_args(study.taco_argv("taco", args, 0, str(out / "taco"))))
    assert study.plan_run("taco", args, 0, str(tmp_path / "empty"))[1][-1] == str(tmp_path / "empty" / "taco")
    fake_run(tmp_path / "done" / "taco", same(tmp_path / "done"), step=4)
    assert study.plan_run("taco", args, 0, str(tmp_path / "done")) == (str(tmp_path / "done" / "taco"), None)
    fake_run(tmp_path / "stopped" / "taco", same(tmp_path / "stopped"), step=2)
    assert study.plan_run("taco", args, 0, str(tmp_path / "stopped"))[1][-1] == "--resume"
    for f in (tmp_path / "stopped" / "taco").glob("ckpt_*"):  # stopped before its first checkpoint
        f.unlink()
    assert study.plan_run("taco", args, 0, str(tmp_path / "stopped"))[1][-1] == "--force"
    fake_run(tmp_path / "other" / "taco", {**same(tmp_path / "other"), "lr": 0.5}, step=4)
    with pytest.raises(study.UsageError, match="holds a run with other settings; pass --force"):
        study.plan_run("taco", args, 0, str(tmp_path / "other"))
    assert study.plan_run("taco", tiny_args(force=True), 0, str(tmp_path / "other"))[1][-1] == "--force"


def test_a_continuation_is_finished_only_from_the_inits_newest_checkpoint(tmp_path):
    """A continuation counts as done only if it started from its init's newest checkpoint: after the
    init was trained again to another step, the continuation is another run."""
    args, init, out = tiny_args(steps=2), tmp_path / "init", tmp_path / "out"
    extra = ["--init", str(init)]
    fake_run(init, step=4)
    config = vars(flags.get_args(study.taco_argv("taco", args, 0, str(out / "taco"), extra)))
    fake_run(out / "taco", config, step=2, init=str(init / "ckpt_00000004.pt"))
    assert study.plan_run("taco", args, 0, str(out), extra, init=str(init)) == (str(out / "taco"), None)
    for f in init.glob("ckpt_*"):
        f.rename(init / f.name.replace("00000004", "00000008"))
    with pytest.raises(study.UsageError, match="other settings"):
        study.plan_run("taco", args, 0, str(out), extra, init=str(init))
