"""Output folders that a script writes whole and may later replace (export.py's Hugging Face folder,
finetune.py's best classifier, the hand-out): written in a temp sibling, then renamed into place.

A folder in the way is replaced only when all of these hold; else one line, and nothing is touched:
- this tool wrote it: MARKER, written inside when the tool made it, names the tool and every file it
  wrote, and nothing has been added since (a guess from file names would take a downloaded model);
- no run holds its lock (runs.RunLock's flock on FOLDER/.lock), tried, and held while replacing;
- it is not, and does not hold, what the command reads (`protect`) or the repository;
- `force` (the user's --force; finetune.py's own best classifier is replaced by design).
An empty folder is simply filled.
"""
import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path

from engine import cli
from engine.cli import UsageError

MARKER = ".taco-output.json"
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # taco.py's folder (with .git)


def inside(path, folder):
    """Is `path` the folder or inside it? samefile on each of its parents: symlinks and bind mounts too."""
    real = Path(os.path.realpath(path))
    for parent in (real, *real.parents):
        with contextlib.suppress(OSError):
            if os.path.samefile(folder, parent):
                return True
    return False


def _entries(folder):
    """Every file and folder under `folder`, as paths relative to it."""
    return sorted(os.path.relpath(os.path.join(top, name), folder)
                  for top, dirs, files in os.walk(folder) for name in dirs + files)


def check(out, tool, force=False, protect=None):
    """Raise UsageError unless `out` may be written by `tool` (the module docstring's rules)."""
    with _checked(out, tool, force, protect):
        pass


@contextlib.contextmanager
def _checked(out, tool, force, protect):
    """check's rules, holding OUT/.lock where there is one (so that no run starts there meanwhile)."""
    with contextlib.ExitStack() as held:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # no run was ever there
            lock = held.enter_context(open(os.path.join(out, ".lock"), "rb"))
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = lock.read(200).decode(errors="replace").strip() or "?"
                raise UsageError(f"{out} is in use by a run (process {owner}); wait for it to end, or pick another "
                                 f"folder") from None
        if os.path.lexists(out) and not os.path.isdir(out):
            raise UsageError(f"{out} is a file; pass a folder")
        for what, path in [*(protect or {}).items(), ("the repository", REPOSITORY)]:
            if path and os.path.exists(path) and inside(path, out):
                raise UsageError(f"{out} is or holds {what} {path}: writing there would replace it; pick another "
                                 f"folder")
        ours = set()
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError), open(os.path.join(out, MARKER)) as f:
            mark = json.load(f)
            ours = set(mark["files"]) if mark["tool"] == tool else set()
        found = [e for e in _entries(out) if e != ".lock"]
        foreign = [e for e in found if e not in ours | {MARKER}]
        if foreign:
            raise UsageError(f"{out} holds files that {tool} did not write ({', '.join(foreign[:3])}"
                             f"{', ...' * (len(foreign) > 3)}); pick another folder, or move them out")
        if found and not force:
            raise UsageError(f"{out} holds an earlier output of {tool}; pass --force to replace it, or pick another "
                             f"folder")
        yield


@contextlib.contextmanager
def replacing(out, tool, force=False, protect=None, size=None):
    """`with replacing(out, tool) as tmp:` write the folder's files into tmp; at the end it becomes `out`,
    replacing what was there only as `check` allows. A failure (a full disk: one line with the space
    needed, `size` bytes, and free) or a signal leaves `out` as it was and no temp folder."""
    out = os.path.normpath(out)
    tmp, old = f"{out}.tmp{os.getpid()}", f"{out}.old{os.getpid()}"
    check(out, tool, force, protect)  # before any work
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        yield tmp
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump({"tool": tool, "files": _entries(tmp)}, f, indent=1)
        with _checked(out, tool, force, protect):  # again, locked until the swap: a run may have started there
            if os.path.isdir(out):
                os.rename(out, old)
            try:
                os.rename(tmp, out)
            except BaseException:
                if os.path.isdir(old):
                    os.rename(old, out)  # (a rename can meet a full disk too)
                raise
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)  # (before DiskFull measures the space left)
        if cli.disk_full(err):
            raise cli.DiskFull(os.path.dirname(os.path.abspath(out)), size, f"{tool}'s {out}",
                               f"; {out} is as it was" * os.path.isdir(out)) from None
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
