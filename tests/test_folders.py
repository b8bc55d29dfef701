"""engine/folders.py: a non-empty folder is replaced only with --force, never when it is a run, is or holds the
source or the repository; written in a temp sibling and renamed. Through the scripts a user runs: export.py into
its own source, over a run (live or not), over a folder of the user's; the hand-out over the repository."""
import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from engine import folders
from engine.cli import UsageError
from engine.runs import RunLock
from exercises import handout
from tools import export

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO_STEPS = ["--steps", "2", "--batch_size", "4", "--max_len", "32", "--eval_blocks", "2", "--threads", "1"]


def contents(folder):
    """{relative path: sha256} of every file under `folder` (what must survive)."""
    out = {}
    for top, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(top, name), "rb") as f:
                out[os.path.relpath(os.path.join(top, name), folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def write(tmp, text="a"):
    os.makedirs(os.path.join(tmp, "sub"))
    with open(os.path.join(tmp, "sub", "f.txt"), "w") as f:
        f.write(text)


def refused(main, argv, capsys, message):
    """main(argv) ends with one `error:` line holding `message`, exit 2."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ") and message in err, err


@pytest.fixture(scope="module")
def run(tmp_path_factory, run_taco):
    """A two-step toy run (a source, and a run folder in the way)."""
    out = str(tmp_path_factory.mktemp("runs") / "run")
    assert run_taco(TWO_STEPS + ["--out", out]) == 0
    return out


def test_the_rules(tmp_path):
    out = str(tmp_path / "out")
    with folders.replacing(out, "a.py") as tmp:  # a new folder
        write(tmp)
    assert contents(out).keys() == {"sub/f.txt"}
    with pytest.raises(UsageError, match="is not empty; pass --force to replace it with a.py's output"):
        folders.check(out, "a.py")
    with folders.replacing(out, "a.py", force=True) as tmp:
        write(tmp, "b")
    assert open(os.path.join(out, "sub", "f.txt")).read() == "b"
    for stop in (RuntimeError("a bug"), KeyboardInterrupt()):  # a failure half-way leaves the earlier output
        with pytest.raises(type(stop)):
            with folders.replacing(out, "a.py", force=True) as tmp:
                write(tmp, "c")
                raise stop
        assert open(os.path.join(out, "sub", "f.txt")).read() == "b"
    (tmp_path / "empty").mkdir()
    with folders.replacing(str(tmp_path / "empty"), "a.py") as tmp:  # an empty folder is filled
        write(tmp)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        folders.check(str(tmp_path / "file"), "a.py")
    os.symlink(out, tmp_path / "link")  # the source through a symlink
    with pytest.raises(UsageError, match="is or holds the source"):
        folders.check(str(tmp_path / "link"), "a.py", True, {"the source": os.path.join(out, "sub", "f.txt")})
    assert sorted(os.listdir(tmp_path)) == ["empty", "file", "link", "out"]  # no temp sibling left
    for name in (".lock", "ckpt_00000004.pt"):  # a run, live or not: never, even with --force
        run = tmp_path / "run" / name
        run.parent.mkdir(exist_ok=True)
        run.write_text("")
        with pytest.raises(UsageError, match="holds a taco run"):
            folders.check(str(run.parent), "a.py", force=True)
        run.unlink()


def test_never_the_repository_or_a_folder_above_it():
    for folder in (HERE, os.path.dirname(HERE), "/"):  # only checked: nothing is written
        with pytest.raises(UsageError, match="is or holds the repository"):
            folders.check(folder, "a.py", force=True)


def test_export_into_its_source_or_above_it_is_refused(run, tmp_path, capsys):
    before = contents(run)
    ckpt = sorted(f for f in os.listdir(run) if f.endswith(".pt"))[-1]
    os.symlink(run, tmp_path / "link")
    for source, out in ((run, run), (os.path.join(run, ckpt), run), (run, os.path.dirname(run)),
                        (run, str(tmp_path / "link")), (str(tmp_path / "link"), run)):
        refused(export.main, [source, out, "--force"], capsys, "is or holds SOURCE")
    assert contents(run) == before


def test_export_never_replaces_a_run_and_a_users_folder_only_with_force(run, minilm, tmp_path, capsys):
    live = str(tmp_path / "live")
    with RunLock(live):  # a run (as taco.py takes it) holds it
        refused(export.main, [run, live, "--force"], capsys, f"{live} holds a taco run")
    other = str(tmp_path / "other")  # a finished run
    shutil.copytree(run, other)
    before = contents(other)
    refused(export.main, [run, other, "--force"], capsys, "holds a taco run")
    assert contents(other) == before
    downloaded = tmp_path / "downloaded"  # a sentence-transformers model (modules.json and all)
    shutil.copytree(minilm, downloaded)
    before = contents(downloaded)
    refused(export.main, [run, str(downloaded)], capsys, "is not empty; pass --force")
    assert contents(downloaded) == before
    (downloaded / "mine.txt").write_text("a file of the user's")
    export.main([run, str(downloaded), "--force"])  # replaced whole: nothing of the folder before is left
    assert "mine.txt" not in os.listdir(downloaded) and "model.safetensors" in os.listdir(downloaded)


def test_the_hand_out_never_replaces_the_repository(tmp_path, capsys, monkeypatch):
    for folder in (HERE, os.path.dirname(HERE)):  # the real repository: refused before anything is written
        with pytest.raises(UsageError):
            folders.check(folder, "handout.py", True, {"the repository": HERE})
    refused(handout.main, [HERE, "--force"], capsys, "is inside the repository")
    refused(handout.main, [os.path.dirname(HERE), "--force"], capsys, "is or holds the repository")
    repo = tmp_path / "classes" / "taco"  # a repository of its own, built from: itself and above it refused
    (repo / ".git").mkdir(parents=True)
    (repo / "taco.py").write_text("# taco\n")
    for out in (repo, repo.parent, tmp_path):
        with pytest.raises(UsageError, match="(is inside|is or holds) the repository"):
            handout.build(str(out), root=str(repo), force=True)
    assert contents(repo) == {"taco.py": hashlib.sha256(b"# taco\n").hexdigest()}


def test_a_full_disk_during_an_export_names_the_folder_and_the_sizes(run, tmp_path):
    """A real full disk (a tmpfs of 1.5 exports in a private mount namespace): an export fits, replacing
    it with another does not (both are there until the swap); the first is as it was, no temp folder left."""
    if not sys.platform.startswith("linux") or subprocess.run(
            ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m none /tmp"], capture_output=True).returncode:
        pytest.skip("needs unshare and a private tmpfs (user namespaces)")
    export.main([run, str(tmp_path / "ref")])
    size = sum(os.path.getsize(os.path.join(tmp_path / "ref", f)) for f in contents(str(tmp_path / "ref")))
    full = tmp_path / "full"
    full.mkdir()
    hf = str(full / "hf")
    script = (f"import os, sys; from tools import export; from tests.test_folders import contents\n"
              f"export.main([{run!r}, {hf!r}]); before = contents({hf!r})\n"
              f"try:\n    export.main([{run!r}, {hf!r}, '--force'])\nfinally:\n"
              f"    print(os.listdir({str(full)!r}), contents({hf!r}) == before)")
    mount = f'mount -t tmpfs -o size={size * 3 // 2 // 1024}k none "{full}" && exec "$@"'
    r = subprocess.run(["unshare", "-rm", "sh", "-c", mount, "sh", sys.executable, "-c", script], cwd=HERE,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr == f"error: no space left in {full} for export.py's {hf}: free some space there; {hf} is as it was\n"
    assert r.stdout.splitlines()[-1] == "['hf'] True"
