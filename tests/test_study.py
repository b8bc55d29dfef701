"""Tests for tools/study.py: python -m pytest -q tests/test_study.py"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import study, study_tables
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


# ----------------------------------------------------------------------------- end to end

def test_study_smoke(tmp_path, capsys):
    """Two objectives over two seeds, side by side (2 jobs: pre-training, then a pool measuring
    every checkpoint); a second call reuses both measured seeds without pre-training."""
    out = tmp_path / "study"
    argv = ["--out", str(out), "--seed", "0,1", "--ft_seeds", "1,2", "--jobs", "2", "--mlm_ft_every", "4", *TINY,
            "--plot", str(tmp_path / "p.png")]
    rows = study.main(argv)
    assert [(r["seed"], r["variant"], r["step"]) for r in rows] == [
        (s, v, step) for s in (0, 1) for v in ("mlm", "taco") for step in (0, 2, 4)]
    step0 = [r for r in rows if r["step"] == 0 and r["seed"] == 0]
    assert step0[0]["ctx_score"] == step0[1]["ctx_score"]  # one shared init
    tuned = [r for r in rows if r["variant"] == "taco" or r["step"] != 2]  # MLM's step 2: analysed, not fine-tuned
    assert all(len(r["ft_scores"]) == len(r["ft_heldout_scores"]) == 2 and 0 <= r["ft_heldout_mean"] <= 1 for r in tuned)
    assert all(r["ft_scores"] == [] and r["ctx_score"] is not None for r in rows if r not in tuned)
    assert all(r["eval_mlm_loss"] is not None for r in rows if r["step"])
    assert (out / "seed1" / "taco" / study.MARKER).exists() and (out / "seed1" / "taco" / "pretrain.log").exists()
    saved = json.loads((out / "study.json").read_text())
    assert len(saved["rows"]) == 12 and saved["time"]["cpu_s"] > 0
    assert set(saved["time"]["per_seed"]["0"]["pretrain"]) == {"seed0/mlm", "seed0/taco"}
    table = (out / "table.md").read_text()
    assert "| taco | 4 |" in table and "per seed" in table and "Wall time" in table
    assert (tmp_path / "p.png").exists() == HAVE_MATPLOTLIB
    capsys.readouterr()
    assert study.main(argv) == rows
    assert capsys.readouterr().out.count("reusing the measured study") == 2
    manifest = out / "seed1" / "taco" / "ckpt_00000004.json"  # as if seed 1's TACO run were trained again
    manifest.write_text(manifest.read_text().replace(json.loads(manifest.read_text())["sha256"], "0" * 64))
    assert study.finished(str(out / "seed1"), argparse.Namespace(**saved["settings"]), 1) is None
    assert study.finished(str(out / "seed0"), argparse.Namespace(**saved["settings"]), 0)


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
    assert config["init"]["source"].endswith("ckpt_00000004.pt") and config["args"]["objective"] == "retromae"
    assert config["args"]["steps"] == 2 and "| retromae | 6 |" in (out / "table.md").read_text()
    assert [r["variant"] for r in json.loads((out / "study.json").read_text())["rows"]] == [r["variant"] for r in rows]
    capsys.readouterr()
    assert [dict(r, cpu_s=0) for r in study.main(argv)] == [dict(r, cpu_s=0) for r in rows]  # measured again alike
    assert capsys.readouterr().out.count("reusing the finished run") == 4


# ----------------------------------------------------------------------------- tables

def row(v, seed, step, dev, held=None, ctx=0.1):
    """A measured row: `dev` / `held` are the per-fine-tuning-seed scores."""
    held = dev if held is None else held
    return {"variant": v, "seed": seed, "step": step, "eval_mlm_loss": None, "ctx_score": ctx, "ctx_doc_score": ctx,
            "wordsim_cooc": 0.5, "wordsim_spearman": float("nan"), **study.score_fields("ft", dev),
            **study.score_fields("ft_heldout", held)}


def test_seeds_table_steps_fraction_and_median():
    """Per seed the first step at which TACO reaches MLM's final score, or "not by"; how many
    seeds do; the median step (a seed that never gets there counts as later than all)."""
    rows = []
    for seed, (taco2, taco4, mlm4) in enumerate([(0.7, 0.8, 0.7), (0.6, 0.8, 0.75), (0.6, 0.7, 0.75)]):
        rows += [row("mlm", seed, 2, [0.6] * 4), row("mlm", seed, 4, [mlm4] * 4),
                 row("taco", seed, 2, [taco2] * 4, ctx=0.3), row("taco", seed, 4, [taco4] * 4, ctx=0.3)]
    table = study_tables.format_seeds_table(rows, [0, 1, 2])
    assert "| 0 | 70.0 | 2 | 70.0 | 2 | 70.0 | 2 | 70.0 | 2 |" in table
    assert "| 2 | 75.0 | not by 4 |" in table
    assert "- taco, held-out pairs, 4 fine-tuning seeds: reaches it with 2 of 3 seeds; median step 4 (1.00" in table
    assert "| taco | 4 | +3.3 ± 7.6 | 2 of 3 |" in table  # paired gap: +10, +5, -5 points
    assert "TACO's is above MLM's at 6 of 6" in table
    rows = [r for r in rows if r["seed"] != 0]
    assert "median step not by 4" in study_tables.format_seeds_table(rows, [1, 2])


def test_seeds_table_with_one_fine_tuning_seed_and_no_held_out_pairs():
    """`--seed 0,1 --ft_seeds 1 --ft_heldout 0`: the crossing steps on the dev pairs; no paired gap
    or spread (they need the held-out pairs or two halves of the fine-tuning seeds)."""
    rows = [row(v, seed, step, [0.6 + 0.05 * step], held=[]) for seed in (0, 1) for v in ("mlm", "taco")
            for step in (2, 4)]
    table = study_tables.format_seeds_table(rows, [0, 1])
    assert "| seed | MLM final, dev 1,000, 1 seeds | taco |" in table and "| 1 | 80.0 | 4 |" in table
    assert "Paired gap" not in table and "spread comes from" not in table


def test_noise_lines_separate_fine_tuning_dev_pairs_and_pre_training():
    """Synthetic scores: the halves of the fine-tuning seeds differ by a known amount, the dev
    pairs are off the held-out score by a known amount, the seeds' held-out means by another."""
    rows = []
    for seed, shift in enumerate([0.0, 0.02, 0.04, 0.06]):
        for step in (2, 4):
            held = [0.7 + shift + d for d in (0.01, -0.01, 0.01, -0.01)]  # halves differ by 0 on average
            rows.append(row("mlm", seed, step, [h + 0.01 for h in held], held))
            rows.append(row("taco", seed, step, [h + 0.04 for h in held], [h + 0.02 for h in held]))
    lines = "\n".join(study_tables.noise_lines(rows, [0, 1, 2, 3], study_tables.scores(rows), ["taco"], 4))
    # per fine-tuning: held-out spread sd of (+1, -1, +1, -1) points = 1.15
    assert "| mlm | 4 | 1.2 | 1.2 | 2.6 | 2.5 | +1.0 ± 0.0 |" in lines  # seeds' means 0, 2, 4, 6 points: sd 2.58
    # the gap: taco - mlm final is +2 held-out, +3 dev, the same for every seed and half
    assert "0.0 points of fine-tuning noise and 0.0 of dev-pair sampling (0.0 together; the dev pairs also " \
        "shift it by +1.0 on average)" in lines
    assert "spreads 0.0 points, 0.0 of them pre-training" in lines


def test_only_the_checkpoints_every_save_every_are_measured(tmp_path):
    """A run stopped by a signal saved an extra checkpoint where it stopped, then resumed: not a row."""
    for step in (150, 300, 42):
        (tmp_path / f"ckpt_{step:08d}.pt").touch()
        (tmp_path / f"ckpt_{step:08d}.json").touch()
    assert [s for s, _ in study.measured_checkpoints(str(tmp_path), {"save_every": 150, "steps": 300})] == [150, 300]
    assert [s for s, _ in study.measured_checkpoints(str(tmp_path), {"save_every": 200, "steps": 300})] == [300]


def test_a_measured_seed_is_reused_only_with_the_same_settings(tmp_path, monkeypatch):
    """`study.py --seed 1 --out OUT/seed1` then `--seed 0,1 --out OUT`: seed 1's rows are reused
    when nothing but where-and-how-fast differs."""
    args = lambda **kw: argparse.Namespace(**{"seed": [1], "out": str(tmp_path), "steps": 1200, "threads": 0,
                                              "jobs": 1, "force": False, **kw})
    monkeypatch.setattr(study, "plot", lambda rows, path: None)
    study.save(str(tmp_path), args(plot=str(tmp_path / "p.png")), {"measure_cpu_s": 5}, [{"seed": 1, "step": 0}], "t")
    assert study.finished(str(tmp_path), args(seed=[0, 1], out="elsewhere", threads=1, jobs=2, plot=None), 1)["rows"] == [
        {"seed": 1, "step": 0}]
    assert study.finished(str(tmp_path), args(seed=[0, 1], plot=None, steps=600), 1) is None  # another budget
    assert study.finished(str(tmp_path), args(seed=[0, 1], plot=None), 0) is None  # another seed


def test_plot_without_matplotlib_is_a_note(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    study_tables.plot([row("mlm", 0, 0, [0.5])], str(tmp_path / "p.png"))
    assert "pip install matplotlib" in capsys.readouterr().out and not (tmp_path / "p.png").exists()


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib is optional")
def test_plot_draws_every_seed_and_the_mean(tmp_path):
    rows = [row(v, s, step, [0.5 + 0.1 * step + 0.01 * s]) for s in (0, 1, 2) for v in ("mlm", "taco") for step in (0, 2)]
    study_tables.plot(rows, str(tmp_path / "p.png"))
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

@pytest.mark.parametrize("taco_args,message", [
    ("--objective mlm", "--taco_args sets --objective, which decides what a variant is"),
    ("--obj mlm", "--taco_args sets --objective"),  # argparse's abbreviations count too
    ("--objective taco", "--taco_args sets --objective"),  # would make the mlm rows TACO
    ("--tc_positions masked", "--taco_args sets --tc_positions"),
    ("--predict_all", "--taco_args sets --predict_all"),
    ("--init runs/x", "--taco_args sets --init"),
    ("--tc_weight 0", "--tc_weight 0 makes 'taco' an MLM run"),
    ("--steps 5", "--taco_args sets --steps, which study.py sets itself; pass --steps to study.py"),
    ("--out elsewhere", "--taco_args sets --out, which study.py sets itself"),
    ("--seed 3", "--taco_args sets --seed, which study.py sets itself"),
    ("--keep_last 2", "--taco_args sets --keep_last, which study.py sets itself"),
    ("--resume", "--taco_args sets --resume, which study.py sets itself"),
    ("--bogus 1", "--taco_args: unrecognized arguments: --bogus 1"),
    ("--warmup 'x", "--taco_args \"--warmup 'x\": No closing quotation"),
])
def test_taco_args_that_change_a_variant_are_refused(taco_args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        study.main(["--out", str(tmp_path / "s"), f"--taco_args={taco_args}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "s").exists()


def test_taco_args_may_tune_what_the_objectives_share():
    args = argparse.Namespace(taco_args="--warmup 100 --negatives 8 --objective taco", seed=[0], size="tiny",
                              data="toy", steps=1200, max_len=None, batch_size=None, lr=None, device=None,
                              cache_dir=None, save_every=150)
    study.check_taco_args(args, ["taco", "taco_masked"])  # --objective taco changes neither
    with pytest.raises(study.UsageError, match="sets --objective, which decides what a variant is \\(here 'mlm'\\)"):
        study.check_taco_args(args, ["mlm", "taco"])
    args.taco_args, args.seed = "--seed 0", [0, 1]  # seed 1's runs would be seed 0's
    with pytest.raises(study.UsageError, match="sets --seed, which study.py sets itself"):
        study.check_taco_args(args, ["mlm"])


@pytest.mark.parametrize("argv", [["--variants", "mlm,bert"], ["--pairs", "no_such_pairs.tsv"],
                                  ["--max_len", "4"], ["--lr", "nan"], ["--size", "huge"]])  # taco.py's parser checks these
def test_study_bad_input_exits_2_before_training(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        study.main(["--out", str(tmp_path / "s"), "--steps", "2", "--save_every", "1", *argv])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: ")
    assert not (tmp_path / "s" / "mlm").exists()


def fake_run(folder, args_json=None, marker=False):
    """A run folder as taco.py leaves it (config.json, one checkpoint and its manifest)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"args": args_json or {"objective": "taco", "steps": 600}}))
    (folder / "ckpt_00000200.pt").write_bytes(b"weights")
    (folder / "ckpt_00000200.json").write_text(json.dumps({"step": 200, "bytes": 7, "sha256": "x"}))
    if marker:
        (folder / study.MARKER).touch()


def test_a_run_study_did_not_create_is_never_replaced(tmp_path, capsys):
    """`study.py --out runs` with runs/taco from `python taco.py`: one error line before any
    training, the run untouched; --force replaces it."""
    fake_run(tmp_path / "runs" / "taco")
    before = sorted(p.name for p in (tmp_path / "runs" / "taco").iterdir())
    with pytest.raises(SystemExit) as e:
        study.main(["--out", str(tmp_path / "runs"), *TINY])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "holds a run that study.py did not create (other settings); pass --force to replace it" in err
    assert sorted(p.name for p in (tmp_path / "runs" / "taco").iterdir()) == before
    assert not (tmp_path / "runs" / "mlm").exists()  # nothing trained


def test_plan_resumes_or_replaces_only_its_own_runs(tmp_path):
    args = argparse.Namespace(
        taco_args="", size="tiny", data="toy", steps=4, max_len=32, batch_size=4, lr=None, device=None,
        cache_dir=None, save_every=2, force=False)
    argv = study.taco_argv("taco", args, 0, str(tmp_path / "x" / "taco"))
    same = vars(flags.get_args(argv))
    fake_run(tmp_path / "mine" / "taco", marker=True)  # ours, other settings: started again
    assert study.plan_run("taco", args, 0, str(tmp_path / "mine"))[1][-1] == "--force"
    fake_run(tmp_path / "theirs" / "taco", same)  # another's, same settings, unfinished
    with pytest.raises(study.UsageError, match="did not create; pass --force"):
        study.plan_run("taco", args, 0, str(tmp_path / "theirs"))
    args.force = True
    assert study.plan_run("taco", args, 0, str(tmp_path / "theirs"))[1][-1] == "--force"
    assert study.plan_run("taco", args, 0, str(tmp_path / "empty"))[1][-1] == str(tmp_path / "empty" / "taco")


def test_a_continuation_is_finished_only_if_its_init_hash_is_read_and_agrees(tmp_path, monkeypatch):
    """A continuation's run counts as done only when the hash of the init it started from can be read
    and equals that of the init's newest checkpoint; an unreadable manifest starts it again."""
    args = argparse.Namespace(
        taco_args="", size="tiny", data="toy", steps=200, max_len=32, batch_size=4, lr=None, device=None,
        cache_dir=None, save_every=2, force=False)
    init, out = tmp_path / "init", tmp_path / "out"
    fake_run(init)
    argv = study.taco_argv("taco", args, 0, str(out / "taco"))
    fake_run(out / "taco", vars(flags.get_args(argv)), marker=True)  # finished: its checkpoint is step 200
    config = json.loads((out / "taco" / "config.json").read_text())
    (out / "taco" / "config.json").write_text(json.dumps({**config, "init": {"sha256": "x"}}))
    monkeypatch.setattr(study.checkpoints, "latest_checkpoint",
                        lambda folder: str(sorted(Path(folder).glob("ckpt_*.pt"))[-1]))
    assert study.plan_run("taco", args, 0, str(out), init=str(init)) == (str(out / "taco"), None)
    (init / "ckpt_00000200.json").write_text(json.dumps({"step": 200}))  # no hash to compare
    assert study.plan_run("taco", args, 0, str(out), init=str(init))[1][-1] == "--force"


# ----------------------------------------------------------------------------- signals

def descendants(pid):
    """Every live process below pid (from /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate, proc, seconds=120):
    deadline = time.time() + seconds
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("phase,sig", [("pre-training", signal.SIGTERM), ("measuring", signal.SIGINT)])
def test_a_signal_ends_every_child_and_releases_the_lock(phase, sig, tmp_path):
    """SIGTERM / SIGINT to study.py alone (as `kill` sends it) while its taco.py runs train, or
    while its worker processes fine-tune: every child ends (taco.py after saving a checkpoint),
    the locks are released, exit 143 / 130 with one line. Run again, study.py resumes its run."""
    out = tmp_path / "s"
    steps = ["--steps", "100000", "--save_every", "50000"] if phase == "pre-training" else \
        ["--steps", "2", "--save_every", "2", "--ft_train", "2000", "--ft_epochs", "50"]
    cmd = [sys.executable, os.path.join(HERE, "tools", "study.py"), "--out", str(out), "--jobs", "2", "--max_len", "32",
           "--batch_size", "4", "--ft_seeds", "1", "--ft_max_len", "32", "--ft_heldout", "0",
           "--taco_args", "--eval_blocks 8 --negatives 8 --log_every 1", *steps]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        if phase == "pre-training":  # both runs past their first step
            wait_for(lambda: all((out / v / "metrics.jsonl").exists() and (out / v / "metrics.jsonl").stat().st_size
                                 for v in ("mlm", "taco")), proc)
        else:  # the pool's two workers fine-tuning
            wait_for(lambda: len([p for p in descendants(proc.pid) if alive(p)]) >= 3
                     and (out / "taco" / "ckpt_00000002.json").exists(), proc)
            time.sleep(2)
        children = [p for p in descendants(proc.pid) if alive(p)]
        assert children
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr and f"study.py stopped by {signal.Signals(sig).name}" in stderr
    deadline = time.time() + 10  # multiprocessing's resource tracker leaves once the study has
    while [p for p in children if alive(p)] and time.time() < deadline:
        time.sleep(0.2)
    assert not [p for p in children if alive(p)]
    assert (out / ".lock").read_text() == ""
    for v in ("mlm", "taco"):
        assert (out / v / ".lock").read_text() == ""
    if phase == "pre-training":  # each run saved where it stopped; the same command resumes them
        args = argparse.Namespace(taco_args="--eval_blocks 8 --negatives 8 --log_every 1", size="tiny", data="toy",
                                  steps=100000, max_len=32, batch_size=4, lr=None, device=None, cache_dir=None,
                                  save_every=50000, force=False)
        for v in ("mlm", "taco"):
            assert "stopped by SIGTERM after step" in (out / v / "pretrain.log").read_text()
            assert study.plan_run(v, args, 0, str(out))[1][-1] == "--resume"


LANDMINE = '''"""study.py, and one SIGTERM to itself that lands inside a __del__, where Python swallows what a handler raises."""
import os, signal, sys, time
sys.path.insert(0, {root!r})
from tools import study


class Landmine:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10000):  # the handler runs here
            pass


real_sleep, fired = time.sleep, []


def sleep(seconds):  # study's wait for its taco.py runs: once both have logged a step
    runs = [os.path.join({out!r}, v, "metrics.jsonl") for v in ("mlm", "taco")]
    if not fired and all(os.path.exists(f) and os.path.getsize(f) for f in runs):
        fired.append(Landmine())
        fired.clear()  # the __del__ runs now
        fired.append(True)
    real_sleep(seconds)


time.sleep = sleep
if __name__ == "__main__":
    study.main(sys.argv[1:])
'''


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_signal_python_swallows_still_stops_the_study(tmp_path):
    """A SIGTERM whose exception Python drops (it landed in a __del__): the study does not go on
    ignoring every later signal until it ends with exit 0; it stops within seconds, exit 143, its line."""
    out = tmp_path / "s"
    script = tmp_path / "landmine.py"
    script.write_text(LANDMINE.format(root=HERE, out=str(out)))
    cmd = [sys.executable, str(script), "--out", str(out), "--jobs", "2", "--max_len", "32", "--batch_size", "4",
           "--ft_seeds", "1", "--ft_heldout", "0", "--taco_args", "--eval_blocks 8 --negatives 8 --log_every 1",
           "--steps", "100000", "--save_every", "50000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    children, deadline = set(), time.time() + 300
    try:
        while proc.poll() is None and time.time() < deadline:  # it stops on its own: the signal is sent from inside
            children.update(p for p in descendants(proc.pid) if alive(p))
            time.sleep(0.2)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert "study.py stopped by SIGTERM" in stderr and "Traceback" not in stderr, stderr
    assert children and not [p for p in children if alive(p)]
    for v in ("mlm", "taco"):
        assert "stopped by SIGTERM after step" in (out / v / "pretrain.log").read_text()
