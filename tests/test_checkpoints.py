"""Tests for checkpoints.py: files written whole and their tolerant readers, checkpoints (manifests,
verification, rotation that never loses the newest valid one), checkpoints taco did not write, a
full disk, the recipe a run was trained with (docs/robustness.md)."""
import errno
import json
import os
import shutil
import signal

import pytest
import torch

from engine import cli
from engine import checkpoints
from engine import runs
import taco
from taco import get_lr

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root


def test_corrupted_checkpoint_falls_back(tmp_path, capsys, quick, run_taco):
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--steps", "8", "--out", run]) == 0
    newest = os.path.join(run, "ckpt_00000008.pt")
    with open(newest, "r+b") as f:  # flip a byte in the middle
        f.seek(os.path.getsize(newest) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert checkpoints.latest_checkpoint(run).endswith("ckpt_00000004.pt")
    assert "checksum mismatch" in capsys.readouterr().err
    with open(os.path.join(run, "ckpt_00000004.pt"), "r+b") as f:
        f.truncate(100)
    assert checkpoints.latest_checkpoint(run) is None or not checkpoints.latest_checkpoint(run).endswith("4.pt")
    with pytest.raises(cli.UsageError, match="invalid"):
        checkpoints.load_checkpoint(os.path.join(run, "ckpt_00000004.pt"))


def test_keep_last_rotation(tmp_path, quick, run_taco):
    run = str(tmp_path / "run")
    assert run_taco(quick + ["--out", run, "--keep_last", "2"]) == 0
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt_")) == [
        "ckpt_00000012.json", "ckpt_00000012.pt", "ckpt_00000016.json", "ckpt_00000016.pt"]


def test_torn_and_invalid_run_files_still_resume_exactly(straight, tmp_path, capsys, quick, run_taco, final_weights, same_weights, metrics_of):
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
    """checkpoints.read_jsonl / read_json / append_jsonl: only a torn last line is forgiven."""
    path = tmp_path / "m.jsonl"
    for text, records, error in [('{"a": 1}\n{"a": 2}\n', 2, None), ('{"a": 1}\n{"a"', 1, None),
                                 ('{"a": 1}\n\n{"a": 2}', 2, None), ('{"a"\n{"a": 2}\n', 0, "line 1 is not valid JSON"),
                                 ('[1]\n', 0, "line 1 holds a JSON list"), ('{"a": 1}\n{"a": 2\n', 0, "line 2 is not")]:
        path.write_text(text)
        if error:
            with pytest.raises(cli.UsageError, match=error):
                checkpoints.read_jsonl(str(path))
        else:
            assert len(checkpoints.read_jsonl(str(path))) == records
    for text, error in [("[]", "holds a JSON list, not an object"), ('{"a": ', "not valid JSON"), ("7", "JSON int")]:
        path.write_text(text)
        with pytest.raises(cli.UsageError, match=error):
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


def flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_rotation_counts_only_valid_checkpoints(straight, tmp_path, monkeypatch, capsys, quick, run_taco, final_weights, same_weights):
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
        checkpoints.save_checkpoint(out, {"step": step, "w": torch.ones(3) * step}, keep_last=10)
    flip_byte(os.path.join(out, "ckpt_00000006.pt"))
    checkpoints.save_checkpoint(out, {"step": 5, "w": torch.zeros(3)}, keep_last=2)  # resumed from 4, saved 5
    assert sorted(os.listdir(out)) == ["ckpt_00000004.json", "ckpt_00000004.pt", "ckpt_00000005.json",
                                       "ckpt_00000005.pt", "ckpt_00000006.json", "ckpt_00000006.pt",
                                       "ckpt_00000008.json", "ckpt_00000008.pt"]


def no_space(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_while_saving_a_checkpoint(straight, tmp_path, monkeypatch, capsys, quick, run_taco, final_weights, same_weights):
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
    checkpoints.write_json(str(path), {"old": 1})
    with pytest.raises(cli.DiskFull, match=rf"no space left in {tmp_path} for config.json: it needs 16 bytes"):
        checkpoints.atomic_write(str(path), no_space, 16)
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
    with pytest.raises(cli.DiskFull, match="for metrics.jsonl: it needs 13 bytes"):
        checkpoints.append_jsonl(str(metrics), {"step": 22})
    monkeypatch.setattr(os, "write", real_write)
    assert metrics.read_text() == '{"step": 1}\n'  # no half line


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
        checkpoints.write_json(ckpt[:-3] + ".json", {"step": 4, "bytes": os.path.getsize(ckpt), "sha256": checkpoints.sha256(ckpt)})
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
    checkpoints.write_json(ckpt[:-3] + ".json", {"step": 4, "bytes": os.path.getsize(ckpt), "sha256": checkpoints.sha256(ckpt)})
    assert run_taco(quick + ["--out", str(tmp_path / "c"), "--init", ckpt]) == 2
    assert "does not fit the model: size mismatch for bert.embeddings.word.weight" in capsys.readouterr().err
    torch.save({**good, "depends": "not a record"}, ckpt)  # nothing usable recorded: nothing to compare
    checkpoints.write_json(ckpt[:-3] + ".json", {"step": 4, "bytes": os.path.getsize(ckpt), "sha256": checkpoints.sha256(ckpt)})
    assert run_taco(quick + ["--steps", "4", "--out", run, "--resume"]) == 0


def test_a_killed_writers_temp_files_go_when_the_run_is_taken_again(tmp_path, quick, run_taco):
    """kill -9 or a second signal while a checkpoint is written leaves ckpt_*.pt.tmp<pid>: the next
    process that takes the folder's lock removes it (and nothing else)."""
    run = tmp_path / "run"
    assert run_taco(quick + ["--steps", "8", "--out", str(run)]) == 0
    (run / "ckpt_00000012.pt.tmp4242").write_bytes(b"half a checkpoint")
    (run / "notes.tmp.txt").write_text("mine")
    assert run_taco(quick + ["--steps", "8", "--out", str(run), "--resume"]) == 0  # already at step 8
    assert not list(run.glob("*.tmp[0-9]*")) and (run / "notes.tmp.txt").exists()


@pytest.mark.parametrize("when", ["listed", "opened"])
def test_reading_a_run_that_saves_every_step(tmp_path, monkeypatch, capsys, when):
    """--init, export and finetune read the newest valid checkpoint of a run whose rotation (keep_last 2)
    deletes what the reader found (issue 29: FileNotFoundError in 4 of 6 tries): here the run saves
    two steps right after every other time the reader listed the checkpoints, or right after it opened the newest."""
    out, step, saving, calls = str(tmp_path), [0], [], []
    state = {"model": {"w": torch.randn(1000)}, "model_config": {}, "args": {"size": "tiny"}}

    def run_saves(n=2):
        saving.append(1)
        for _ in range(n):
            step[0] += 1
            checkpoints.save_checkpoint(out, {**state, "step": step[0]}, keep_last=2)
        saving.clear()
    run_saves()
    real = {"listed": checkpoints.list_checkpoints, "opened": checkpoints.file_sha256}[when]

    def then_the_run_saves(*args):
        result = real(*args)
        if not saving:  # the reader's call, not the run's own rotation: every other one
            calls.append(1)
            if len(calls) % 2:
                run_saves()
        return result
    monkeypatch.setattr(checkpoints, {"listed": "list_checkpoints", "opened": "file_sha256"}[when], then_the_run_saves)
    for _ in range(3):
        checkpoints.VERIFIED.clear()  # another process: it hashes what it reads
        source = checkpoints.load_init(out).source
        assert os.path.basename(source) in [f"ckpt_{s:08d}.pt" for s in range(step[0] - 5, step[0] + 1)]
        assert checkpoints.trained_with(out)[1]["size"] == "tiny"
        assert checkpoints.latest_checkpoint(out) is not None
    assert "skipping" not in capsys.readouterr().err


def test_a_checkpoint_is_hashed_once(tmp_path, monkeypatch):
    """Saving hashes the checkpoint as it is written; rotation and --resume's verification hash
    nothing this process already verified, yet a checkpoint changed since is verified again."""
    out, hashed = str(tmp_path), []
    real = checkpoints.file_sha256
    monkeypatch.setattr(checkpoints, "file_sha256", lambda f: hashed.append(f.name) or real(f))
    for step in range(1, 7):
        checkpoints.save_checkpoint(out, {"step": step, "w": torch.ones(3) * step}, keep_last=3)
    assert hashed == [] and len(checkpoints.list_checkpoints(out)) == 3
    newest = checkpoints.latest_checkpoint(out)
    assert newest.endswith("ckpt_00000006.pt") and hashed == []
    checkpoints.VERIFIED.clear()  # a new process (a resume): hashes the newest once, then loads it unhashed
    assert checkpoints.latest_checkpoint(out, need=("w",))[0] == newest and hashed == [newest]
    checkpoints.load_checkpoint(newest, need=("w",))
    assert hashed == [newest]
    flip_byte(os.path.join(out, "ckpt_00000005.pt"))
    os.utime(os.path.join(out, "ckpt_00000005.pt"), ns=(1, 1))  # another time, even on a coarse clock
    checkpoints.save_checkpoint(out, {"step": 7, "w": torch.zeros(3)}, keep_last=3)  # 5 is invalid: 4 stays
    assert sorted(n for n in os.listdir(out) if n.endswith(".pt")) == [
        "ckpt_00000004.pt", "ckpt_00000005.pt", "ckpt_00000006.pt", "ckpt_00000007.pt"]
