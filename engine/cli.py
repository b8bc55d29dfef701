"""What every script shares at its command line: flag types and ranges, the device and its precision, CPU threads,
the cache folder, and the one-line error path: a user's mistake is ONE line `error: ...` on stderr and exit
code 2, never a traceback (docs/robustness.md). A traceback means a bug.
"""
import argparse
import contextlib
import errno
import math
import os
import sys
import time
from pathlib import Path

import torch

USAGE, NONFINITE = 2, 3  # exit codes; a stop signal ends a run with 128 + its number (SIGINT 130, SIGTERM 143)


class UsageError(ValueError):
    """A mistake the user can fix (a flag, a path, a file): one `error:` line, exit 2."""


class DataError(UsageError):
    """A user mistake about data (a path, a file, a vocabulary): the message says how to fix it."""


# ----------------------------------------------------------------------------- flags

def int_range(lo, hi=None):
    """argparse `type=`: an integer in [lo, hi] (hi=None: no upper bound)."""
    return float_range(lo, hi, cast=int)


def float_range(lo, hi=None, lo_open=False, hi_open=False, cast=float):
    """argparse `type=`: a finite number (`cast` of the text) in lo..hi, *_open excluding that end."""
    def parse(text):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if cast is int else 'a number'}, "
                                             f"got {text!r}") from None
        above = value > lo if lo_open else value >= lo
        below = hi is None or (value < hi if hi_open else value <= hi)
        if not (math.isfinite(value) and above and below):
            high = "inf)" if hi is None else f"{hi}{')' if hi_open else ']'}"
            raise argparse.ArgumentTypeError(f"{text} is not in {'(' if lo_open else '['}{lo}, {high}")
        return value
    return parse


def list_of(parse, empty_ok=False):
    """argparse `type=`: comma-separated values, each checked by `parse` (e.g. an int_range)."""
    def parse_list(text):
        values = [parse(v.strip()) for v in text.split(",") if v.strip()]
        if not values and not empty_ok:
            raise argparse.ArgumentTypeError("expected comma-separated values, got none")
        return values
    return parse_list


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a flag's default unless it is None/False (those helps say what happens)."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, False) else super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose own errors (unknown flag, bad value) are one `error:` line, exit 2."""

    def error(self, message):
        fail(message)


def add_threads_flag(parser):
    parser.add_argument("--threads", type=int_range(1), default=None,
                        help="PyTorch CPU threads (default: $TACO_THREADS, else PyTorch's: $OMP_NUM_THREADS or one "
                        "per core). Results depend on the thread count: the start line says it")


def set_threads(threads=None):
    """PyTorch's CPU threads: --threads, else $TACO_THREADS, else PyTorch's own choice ($OMP_NUM_THREADS,
    which torchrun sets to 1 per process, or one per core). Float sums depend on the thread count, so the
    default depends on the machine, never on its load. -> the number."""
    value = threads or os.environ.get("TACO_THREADS")
    if value:
        if not str(value).isdecimal() or int(value) < 1:
            raise UsageError(f"$TACO_THREADS {value!r}: expected a whole number of threads, at least 1")
        torch.set_num_threads(int(value))
    return torch.get_num_threads()


def device(spec):
    """--device (None: cuda if available) -> torch.device; one line if it cannot be used here."""
    try:
        dev = torch.device(spec or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        raise UsageError(f"--device {spec}: expected cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {spec}: only cpu and cuda are supported")
    if dev.type == "cuda" and (dev.index or 0) >= (count := torch.cuda.device_count()):
        raise UsageError(f"--device {spec}: " + (f"only {count} CUDA device(s) here" if count else
                                                 "PyTorch sees no CUDA device here; use --device cpu"))
    return dev


def precision(device, dtype=None):
    """--dtype (None: bf16 on capable CUDA, else fp32) -> (its name, the autocast context of the
    forward passes). On CUDA, fp32 matmuls and convolutions use TF32 (what fp32 runs there keep)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    dtype = dtype or ("bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32")
    if dtype == "fp32":
        return dtype, contextlib.nullcontext()
    return dtype, torch.autocast(device.type, dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


def default_cache_dir():
    """Where taco keeps what it generates and caches (toy corpus, token arrays): $TACO_CACHE."""
    return Path(os.environ.get("TACO_CACHE") or Path.home() / ".cache" / "taco")


def output_path(path, flag, folder):
    """Check an output path before any work: a folder (created later if missing), or a file in an
    existing folder. Creates nothing."""
    if os.path.exists(path) and os.path.isdir(path) != folder:
        raise UsageError(f"{flag} {path} is a {'file' if folder else 'folder'}; pass a {'folder' if folder else 'file'}")
    if not folder and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UsageError(f"{flag} {path}: its folder does not exist")
    return path


# ----------------------------------------------------------------------------- the error path

def reason(err):
    """An exception's message in one line: the first detail where PyTorch heads its list of them
    ("Error(s) in loading state_dict for X:" then "size mismatch for ...")."""
    lines = [line.strip() for line in (str(err) or repr(err)).splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0]


def fail(message, code=USAGE):
    """Print `error: <message>` (one line) on stderr and exit. Under torchrun every worker meets the same
    mistake: local rank 0 says it, and torchrun then ends the others; one that is still alive 3 s later
    met a mistake of its own and says it, with its rank."""
    line = f"error: {' '.join(str(message).split())}"
    if os.environ.get("LOCAL_RANK", "0") != "0":
        time.sleep(3)
        line += f" (rank {os.environ.get('RANK')})"
    print(line, file=sys.stderr)
    sys.exit(code)


def cause(err, test):
    """The first exception in err's chain that passes `test`, or None: a library may raise its own error while
    handling the one that matters (torch.save a full disk, datasets' process pool a Ctrl-C)."""
    while err is not None and not test(err):
        err = err.__cause__ or err.__context__
    return err


def disk_full(err):
    """The OSError of a full disk or quota in err's chain, or None."""
    return cause(err, lambda e: isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))


@contextlib.contextmanager
def errors():
    """The error path of every script's main(): a user's mistake (UsageError) or a file that cannot be
    read or written (OSError) -> one line, exit 2; a non-finite loss (FloatingPointError) -> exit 3;
    Ctrl-C outside a training loop -> `interrupted`, exit 130. A standard output that fails (`| head`)
    costs no result: its further lines are dropped."""
    if sys.stdout is sys.__stdout__:  # (not a test's capture)
        sys.stdout = _Output(sys.stdout)
    try:
        yield
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except UsageError as err:
        fail(err)
    except FloatingPointError as err:
        fail(err, NONFINITE)
    except Exception as err:
        if cause(err, lambda e: isinstance(e, KeyboardInterrupt)):
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        peer_lost = ("Connection closed by peer", "Connection reset by peer", "NCCL", "Timed out")  # gloo's, NCCL's
        if os.environ.get("WORLD_SIZE", "1") != "1" and cause(
                err, lambda e: isinstance(e, RuntimeError) and any(why in str(e) for why in peer_lost)):
            print(f"rank {os.environ.get('RANK')}: stopped: another rank ended first or stopped answering (its own "
                  f"lines say why)", file=sys.stderr)
            sys.exit(1)
        if full := disk_full(err):
            where = os.path.dirname(os.path.abspath(full.filename)) if full.filename else "the output or cache folder"
            fail(f"no space left in {where}; free some space there")
        if isinstance(err, OSError):  # a missing file, permission denied, ...: the environment, not a bug
            fail(f"{err.strerror or err}{f': {err.filename}' if err.filename else ''}")
        raise


class _Output:
    """sys.stdout, whose reader may go away: on a closed pipe (EPIPE) or a full device (ENOSPC) its file
    descriptor is pointed at /dev/null, once, with a warning, and the script goes on writing its files."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        self._guarded(self._stream.write, text)
        return len(text)

    def flush(self):
        self._guarded(self._stream.flush)

    def _guarded(self, method, *args):
        try:
            method(*args)
        except OSError as err:
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())  # what is still buffered goes there
            print(f"warning: standard output failed ({err.strerror}): its further lines are dropped; the results "
                  f"are written as usual", file=sys.stderr)

    def __getattr__(self, name):
        return getattr(self._stream, name)
