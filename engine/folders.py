"""Output folders a script writes whole (export.py's Hugging Face folder, finetune.py's best classifier, the
hand-out): written into a temp sibling, then renamed into place, so a kill, a bug or a full disk half-way
leaves the earlier folder as it was and no temp folder. A non-empty folder in the way is replaced only with
`force`, and never when it is a run (it holds a run's lock or checkpoints), is or holds what the command
reads (`protect`), or the repository.
"""
import contextlib
import os
import shutil
from pathlib import Path

from engine import cli
from engine.cli import UsageError

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # taco.py's folder


def inside(path, folder):
    """Is `path` the folder or inside it? samefile on each of its parents: symlinks and bind mounts too."""
    real = Path(os.path.realpath(path))
    for parent in (real, *real.parents):
        with contextlib.suppress(OSError):
            if os.path.samefile(folder, parent):
                return True
    return False


def check(out, tool, force=False, protect=None):
    """Raise UsageError unless `tool` may write the folder `out` (the module docstring's rules)."""
    if os.path.lexists(out) and not os.path.isdir(out):
        raise UsageError(f"{out} is a file; pass a folder")
    for what, path in [*(protect or {}).items(), ("the repository", REPOSITORY)]:
        if path and os.path.exists(path) and inside(path, out):
            raise UsageError(f"{out} is or holds {what} {path}: writing there would replace it; pick another folder")
    found = os.listdir(out) if os.path.isdir(out) else []
    if ".lock" in found or any(n.startswith("ckpt_") for n in found):
        raise UsageError(f"{out} holds a taco run; pick another folder")
    if found and not force:
        raise UsageError(f"{out} is not empty; pass --force to replace it with {tool}'s output, or pick another "
                         f"folder")


@contextlib.contextmanager
def replacing(out, tool, force=False, protect=None):
    """`with replacing(out, tool) as tmp:` write the folder's files into tmp; at the end it becomes `out`,
    replacing what was there only as `check` allows. A failure or a signal leaves `out` as it was."""
    out = os.path.normpath(out)
    check(out, tool, force, protect)  # before any work
    tmp, old = f"{out}.tmp{os.getpid()}", f"{out}.old{os.getpid()}"
    try:
        os.makedirs(tmp)
        yield tmp
        if os.path.isdir(out):
            os.rename(out, old)
        os.rename(tmp, out)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.isdir(old) and not os.path.exists(out):
            os.rename(old, out)
        if cli.disk_full(err):
            raise UsageError(f"no space left in {os.path.dirname(os.path.abspath(out))} for {tool}'s {out}: free "
                             f"some space there; {out} is as it was") from None
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
