"""What every script shares at its command line: flag types and ranges, the device and the
CPU threads, the cache folder, paths given by the user, and the one-line error path.

User mistakes end with ONE line `error: ...` on stderr and exit code 2, never a traceback
(docs/robustness.md). A run's engineering (files, locks, checkpoints, signals) is in runs.py.
Scripts import cli before torch (see OMP_WAIT_POLICY below), so it imports torch only inside
the functions that need it.
"""
import argparse
import contextlib
import math
import os
import signal
import stat
import sys
import time
from pathlib import Path

USAGE, NONFINITE = 2, 3  # exit codes; a signal stops a run with 128 + its number (SIGINT 130, SIGTERM 143)


class UsageError(ValueError):
    """A mistake the user can fix (a flag, a path, a file): one `error:` line, exit 2."""


class DataError(UsageError):
    """A user mistake about data (a path, a file, a vocabulary): the message says how to fix it."""


class Interrupted(Exception):
    """A run stopped by a signal after saving its state: exit 128 + the signal's number."""

    def __init__(self, signum, message=""):
        super().__init__(message)
        self.signum = signum


# Idle CPU threads of PyTorch (OpenMP) sleep instead of spinning. libgomp reads this once, when torch
# loads: every script imports cli before torch. On a busy machine spinning threads stall each other
# (60 steps of `python taco.py`, 2 threads: 99-127 s spinning, 25-31 s sleeping); on an idle one
# it made no difference (11.7 and 11.6 s, medians of 3). README: Threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# ----------------------------------------------------------------------------- flags

def int_range(lo, hi=None):
    """argparse `type=`: an integer in [lo, hi] (hi=None: no upper bound)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{value} is not in {_interval(lo, hi, False, False)}")
        return value
    parse.__name__ = "integer"  # argparse names the type in some messages
    return parse


def float_range(lo, hi=None, lo_open=False, hi_open=False):
    """argparse `type=`: a finite float in the interval lo..hi; *_open excludes that end.
    NaN and infinities are never accepted."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        too_low = value <= lo if lo_open else value < lo
        too_high = hi is not None and (value >= hi if hi_open else value > hi)
        if not math.isfinite(value) or too_low or too_high:
            raise argparse.ArgumentTypeError(f"{text} is not in {_interval(lo, hi, lo_open, hi_open)}")
        return value
    parse.__name__ = "number"
    return parse


def list_of(parse, empty_ok=False):
    """argparse `type=`: comma-separated values, each checked by `parse` (e.g. an int_range)."""
    def parse_list(text):
        values = [parse(v.strip()) for v in text.split(",") if v.strip()]
        if not values and not empty_ok:
            raise argparse.ArgumentTypeError("expected comma-separated values, got none")
        return values
    parse_list.__name__ = "list"
    return parse_list


def _interval(lo, hi, lo_open, hi_open):
    return f"{'(' if lo_open else '['}{lo}, {'inf)' if hi is None else str(hi) + (')' if hi_open else ']')}"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a flag's default unless it is None/False (those helps say what happens)."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, False) else super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose own errors (unknown flag, bad value) are one `error:` line, exit 2."""

    def error(self, message):
        fail(message)


def device(spec):
    """--device (None: cuda if available) -> torch.device; one line if it cannot be used here."""
    import torch
    try:
        dev = torch.device(spec or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        raise UsageError(f"--device {spec}: expected cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {spec}: only cpu and cuda are supported")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {spec}: PyTorch sees no CUDA device here; use --device cpu")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) here")
    return dev


def add_threads_flag(parser):
    parser.add_argument("--threads", type=int_range(1), default=None,
                        help="PyTorch CPU threads (default: $TACO_THREADS, else PyTorch's: $OMP_NUM_THREADS or one "
                        "per core). Results depend on the thread count: the start line says it")


def set_threads(threads=None):
    """Set PyTorch's CPU threads -> (number, where it came from): the --threads flag, else
    $TACO_THREADS, else PyTorch's own choice ($OMP_NUM_THREADS, which torchrun sets to 1 per
    process, or one per core). Float sums depend on the thread count, so the same count gives
    the same numbers: the default depends on the machine, never on its load."""
    import torch
    for name, value in (("--threads", threads), ("$TACO_THREADS", os.environ.get("TACO_THREADS"))):
        if value not in (None, ""):
            try:
                number = int(value)
            except ValueError:
                raise UsageError(f"{name} {value!r}: expected a whole number of threads") from None
            if number < 1:
                raise UsageError(f"{name} {value!r}: expected at least 1 thread")
            torch.set_num_threads(number)
            return number, name
    return torch.get_num_threads(), "$OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS") else "PyTorch's default"


def default_cache_dir():
    """Where taco keeps what it generates and caches (toy corpus, token arrays): $TACO_CACHE."""
    return Path(os.environ.get("TACO_CACHE", Path.home() / ".cache" / "taco"))


# ----------------------------------------------------------------------------- the error path

def fail(message, code=USAGE):
    """Print `error: <message>` (one line) on stderr and exit. Under torchrun every worker meets
    the same mistake: the first of each machine (local rank 0) says it, the others exit alike
    without a word (wait_to_be_stopped), or name their rank if the mistake is theirs alone."""
    line = f"error: {' '.join(str(message).split())}"
    if os.environ.get("LOCAL_RANK", "0") != "0":
        wait_to_be_stopped(code)
        line += f" (rank {os.environ.get('RANK', '?')})"
    print(line, file=sys.stderr)
    sys.exit(code)


RANK_WAIT = 30  # seconds; see wait_to_be_stopped


def wait_to_be_stopped(code):
    """A torchrun worker other than local rank 0 after a mistake: once local rank 0 exits with it,
    torchrun stops the other workers (SIGTERM; SIGINT on Ctrl-C): exit then with `code`, quietly.
    Exiting first would have torchrun stop rank 0 before it said anything. If no stop comes within
    RANK_WAIT s, rank 0 did not meet the mistake: return, and the caller says it."""
    def stopped(signum, frame):
        sys.exit(code)

    old = {s: signal.signal(s, stopped) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        time.sleep(RANK_WAIT)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def errors():
    """The error path of every script's main(): user mistakes and unusable files -> one line,
    exit 2; a non-finite loss (FloatingPointError) -> exit 3; a run stopped by a signal ->
    128 + its number (130, 143); Ctrl-C anywhere else -> exit 130. Never a traceback for these."""
    try:
        yield
    except UsageError as err:
        fail(err)
    except OSError as err:  # permission denied, disk full, ...: the environment, not a bug
        fail(f"{err.strerror or err}{f': {err.filename}' if err.filename else ''}")
    except FloatingPointError as err:
        fail(err, NONFINITE)
    except Interrupted as err:
        if str(err):
            print(err, file=sys.stderr)
        sys.exit(128 + err.signum)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)


# ----------------------------------------------------------------------------- paths

def regular_file(path, what="file"):
    """`path` if it is a regular file (after symlinks); else one line saying what it is.
    FIFOs and devices would block a read, a symlink loop would raise: none is ever opened."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist") from None
    except OSError as err:  # a symlink loop (ELOOP), a permission problem, ...
        raise UsageError(f"{what} {path} cannot be read: {err.strerror}") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{what} {path} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{what} {path} is not a regular file (a FIFO, socket or device)")
    return path


def output_path(path, flag, folder):
    """Check an output path before any work: a folder (created later if missing), or a file
    in an existing folder; either must be writable. Creates nothing."""
    if os.path.exists(path) and os.path.isdir(path) != folder:
        want, got = ("folder", "file") if folder else ("file", "folder")
        raise UsageError(f"{flag} {path} is a {got}; pass a {want}")
    existing = os.path.abspath(path) if folder else os.path.dirname(os.path.abspath(path))
    if not folder and not os.path.isdir(existing):
        raise UsageError(f"{flag} {path}: its folder {existing} does not exist")
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: cannot write to {existing}")
    return path
