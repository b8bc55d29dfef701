"""Tests for checkpoints.py: files written whole and their tolerant readers, checkpoints (one that does not load
is skipped, rotation), checkpoints taco did not write, a full disk, the recipe a run was trained with
(docs/robustness.md)."""
import errno
import json
import os
import shutil

import pytest
import torch

from engine import cli
from engine import checkpoints
from engine import runs


def test_a_checkpoint_that_does_not_load_is_skipped(tmp_path, capsys, quick, run_taco):
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "8", "--out", run]) == 0
    with open(os.path.join(run, "ckpt_00000008.pt"), "r+b") as f:
        f.truncate(1000)  # a copy cut short
    assert checkpoints.latest_checkpoint(run).endswith("ckpt_00000004.pt")
    assert "warning: skipping checkpoint" in capsys.readouterr().err
    with pytest.raises(cli.UsageError, match="cannot read checkpoint"):
        checkpoints.load_checkpoint(os.path.join(run, "ckpt_00000008.pt"))


def test_keep_last_rotation(tmp_path, quick, run_taco):
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--out", run, "--keep_last", "2"]) == 0
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt_")) == ["ckpt_00000012.pt", "ckpt_00000016.pt"]
    for step in (2, 5):  # resumed from an earlier step: the later checkpoints stay until their steps come again
        checkpoints.save_checkpoint(run, {"step": step}, keep_last=1)
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt_")) == [
        "ckpt_00000005.pt", "ckpt_00000012.pt", "ckpt_00000016.pt"]


def test_torn_and_damaged_run_files_still_resume_exactly(straight, tmp_path, capsys, quick, run_taco, final_weights, same_weights, metrics_of):
    """What a kill or a bad copy can leave (a torn metrics line, a truncated config.json, a newest checkpoint
    cut short), and --vocab naming the run's own vocab.txt."""
    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000016.*"))
    with open(os.path.join(run, "ckpt_00000012.pt"), "r+b") as f:
        f.truncate(1000)  # -> falls back to step 8
    with open(os.path.join(run, "config.json"), "r+") as f:
        f.truncate(100)  # never read on --resume: the checkpoint holds the settings
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write('{"step": 9, "loss": 3.')  # an append cut short
    assert run_taco(quick + ["--out", run, "--resume", "--vocab", os.path.join(run, "vocab.txt")]) == 0
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "dropped its last line, cut short" in err
    assert same_weights(final_weights(straight), final_weights(run))
    assert metrics_of(straight) == metrics_of(run)
    assert json.load(open(os.path.join(run, "config.json")))["args"]["steps"] == 16  # rewritten whole


def test_project_files_tolerant_tail_strict_otherwise(tmp_path, capsys):
    """checkpoints.read_jsonl / read_json / append_jsonl: only a torn last line is forgiven."""
    path = tmp_path / "m.jsonl"
    for text, records, error in [('{"a": 1}\n{"a": 2}\n', 2, None), ('{"a": 1}\n{"a"', 1, None),
                                 ('{"a": 1}\n\n{"a": 2}', 2, None), ('{"a"\n{"a": 2}\n', 0, "line 1 is not valid JSON"),
                                 ('{"a": 1}\n{"a": 2\n', 0, "line 2 is not")]:
        path.write_text(text)
        if error:
            with pytest.raises(cli.UsageError, match=error):
                checkpoints.read_jsonl(str(path))
        else:
            assert len(checkpoints.read_jsonl(str(path))) == records
    path.write_text('{"a": ')
    with pytest.raises(cli.UsageError, match="not valid JSON"):
        checkpoints.read_json(str(path))
    path.write_text('{"a": 1}\n{"a": 2')  # torn: an append after it must not glue to it
    checkpoints.append_jsonl(str(path), {"a": 3})
    assert path.read_text() == '{"a": 1}\n{"a": 3}\n'


def test_trained_with_reads_a_runs_recipe_also_from_older_checkpoints(straight, tmp_path):
    """The recipe a checkpoint's run trained with (recipes depend on --init): recorded since then;
    before, its --size's, unless the model has another shape (an --init of another model)."""
    source, run = checkpoints.trained_with(straight)
    assert source.endswith("ckpt_00000016.pt") and (run["recipe"], run["data"]) == ("tiny", "toy")
    ckpt = torch.load(source, weights_only=True)
    for shape, recipe in (((2, 128, 2), "tiny"), ((6, 384, 12), "continue")):
        old = {**ckpt, "args": {k: v for k, v in ckpt["args"].items() if not k.startswith("recipe")}}
        old["model_config"] = {**ckpt["model_config"], "num_hidden_layers": shape[0], "hidden_size": shape[1],
                               "num_attention_heads": shape[2]}
        torch.save(old, tmp_path / "old.pt")
        assert checkpoints.trained_with(str(tmp_path / "old.pt"))[1]["recipe"] == recipe


def test_disk_full_while_saving_a_checkpoint(straight, tmp_path, monkeypatch, capsys, quick, run_taco, final_weights, same_weights):
    """ENOSPC in the middle of torch.save (injected): one line naming the folder, exit 2, the earlier
    checkpoints intact, no temp file; --resume then ends exactly."""
    real_save = torch.save

    def full_disk_save(state, f):
        if state["step"] == 12:
            f.write(b"x" * 1000)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from OSError(
                errno.ENOSPC, "No space left on device")  # as torch.save reports it
        return real_save(state, f)

    run = str(tmp_path / "run")
    shutil.copytree(straight, run, ignore=shutil.ignore_patterns("ckpt_00000012.*", "ckpt_00000016.*"))
    monkeypatch.setattr(runs.checkpoints.torch, "save", full_disk_save)
    assert run_taco(quick + ["--out", run, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"error: no space left in {run} for ckpt_00000012.pt: free some space there; the earlier "
                       f"checkpoints are intact: run the same command with --resume")
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt_") or ".tmp" in n) == [
        "ckpt_00000004.pt", "ckpt_00000008.pt"]
    monkeypatch.setattr(runs.checkpoints.torch, "save", real_save)
    assert run_taco(quick + ["--out", run, "--resume"]) == 0
    assert same_weights(final_weights(straight), final_weights(run))


def no_space(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_on_the_files_a_run_writes(tmp_path, monkeypatch, capsys):
    """config.json, vocab.txt, summaries (atomic_write) and metrics.jsonl (append_jsonl): ENOSPC leaves the old file
    whole and no temp file, and one line names the folder."""
    path = tmp_path / "config.json"
    checkpoints.write_json(str(path), {"old": 1})
    with pytest.raises(cli.UsageError, match=rf"no space left in {tmp_path} for config.json: free some space there"):
        checkpoints.atomic_write(str(path), no_space)
    assert json.load(open(path)) == {"old": 1} and os.listdir(tmp_path) == ["config.json"]
    metrics = tmp_path / "metrics.jsonl"
    checkpoints.append_jsonl(str(metrics), {"step": 1})
    real_write = os.write

    def half_then_full(fd, data):  # a short write, then ENOSPC, on metrics.jsonl only
        if os.readlink(f"/proc/self/fd/{fd}") != str(metrics):
            return real_write(fd, data)
        if len(data) > 4:
            return real_write(fd, bytes(data[:4]))
        no_space()

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(SystemExit), cli.errors():
        checkpoints.append_jsonl(str(metrics), {"step": 22})
    monkeypatch.setattr(os, "write", real_write)
    assert metrics.read_text() == '{"step": 1}\n'  # no half line
    assert capsys.readouterr().err == f"error: no space left in {tmp_path}; free some space there\n"


def test_checkpoints_that_taco_did_not_write(tmp_path, capsys, quick, run_taco):
    """A bare tensor, a dict missing keys: one line on --resume, --init and finetune.py --model; --resume --force
    with --objective retromae on a taco run, whose model has no decoder, says it cannot continue it."""
    import finetune
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "4", "--out", run]) == 0
    ckpt = os.path.join(run, "ckpt_00000004.pt")
    assert run_taco(quick + ["--steps", "4", "--out", run, "--resume", "--objective", "retromae", "--force"]) == 2
    assert "holds another model or optimizer than this command builds" in capsys.readouterr().err
    good = torch.load(ckpt, weights_only=True)
    for content, why in [(torch.zeros(3), "lacks model"), ({k: v for k, v in good.items() if k != "optimizer"},
                                                           "lacks optimizer")]:
        torch.save(content, ckpt)
        assert run_taco(quick + ["--steps", "8", "--out", run, "--resume"]) == 2
        err = capsys.readouterr().err
        assert f"warning: skipping checkpoint {ckpt}: {ckpt} is not a taco checkpoint: it {why}" in err
        assert err.strip().splitlines()[-1] == f"error: --resume: no checkpoint in {run}"
    torch.save(torch.zeros(3), ckpt)
    assert run_taco(quick + ["--out", str(tmp_path / "b"), "--init", ckpt]) == 2
    assert f"{ckpt} is not a taco checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        finetune.main(["--model", ckpt, "--out", str(tmp_path / "ft")])
    assert stop.value.code == 2 and "is not a taco checkpoint" in capsys.readouterr().err
    shape = {**good, "model": {**good["model"], "bert.embeddings.word.weight": torch.zeros(5, 5)}}
    torch.save(shape, ckpt)  # tensors that do not fit the checkpoint's own config
    assert run_taco(quick + ["--out", str(tmp_path / "c"), "--init", ckpt]) == 2
    assert "does not fit the model: size mismatch for bert.embeddings.word.weight" in capsys.readouterr().err


def test_a_killed_writers_temp_files_go_when_the_run_is_taken_again(tmp_path, quick, run_taco):
    """kill -9 or a second signal while a checkpoint is written leaves ckpt_*.pt.tmp<pid>: the next
    process that takes the folder's lock removes it (and nothing else)."""
    run = tmp_path / "run"
    assert run_taco(quick + ["--steps", "8", "--out", str(run)]) == 0
    (run / "ckpt_00000012.pt.tmp4242").write_bytes(b"half a checkpoint")
    (run / "notes.tmp.txt").write_text("mine")
    assert run_taco(quick + ["--steps", "8", "--out", str(run), "--resume"]) == 0  # already at step 8
    assert not list(run.glob("*.tmp[0-9]*")) and (run / "notes.tmp.txt").exists()
