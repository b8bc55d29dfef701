"""What every script shares at its edges: flag ranges, the one-line error path, and
(below) the files the project writes itself. See docs/robustness.md.

User mistakes end with ONE line `error: ...` on stderr and exit code 2, never a traceback.
"""
import argparse
import contextlib
import fcntl
import json
import math
import os
import signal
import socket
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
                        help="PyTorch CPU threads (default: $TACO_THREADS, else $OMP_NUM_THREADS, else the cores "
                        "that other work leaves free: all on an idle machine, 1 on a busy one)")


def set_threads(threads=None):
    """Set PyTorch's CPU threads -> (number, where it came from). threads: the --threads flag;
    None: $TACO_THREADS, else $OMP_NUM_THREADS (torchrun sets 1 per process), else the cores
    that other processes leave idle now, at least 1. On a busy machine a process with a thread
    per core waits for its slowest thread at every operation: one thread runs 2x faster there."""
    import torch
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    for name, value in (("--threads", threads), ("$TACO_THREADS", os.environ.get("TACO_THREADS")),
                        ("$OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"))):
        if value not in (None, ""):
            try:
                number = int(value)
            except ValueError:
                raise UsageError(f"{name} {value!r}: expected a whole number of threads") from None
            if number < 1:
                raise UsageError(f"{name} {value!r}: expected at least 1 thread")
            torch.set_num_threads(number)
            return number, name
    busy = busy_cores(cores)
    number = max(1, min(cores, round(cores - busy)))
    torch.set_num_threads(number)
    return number, f"{cores} cores, {busy:.1f} busy"


def busy_cores(cores, seconds=0.2):
    """How many of `cores` other processes keep busy now: the non-idle share of /proc/stat's CPU
    time over `seconds` (Linux), else the 1-minute load average."""
    def sample():
        with open("/proc/stat") as f:
            ticks = [int(t) for t in f.readline().split()[1:9]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + waiting for I/O
    try:
        (all0, idle0), _, (all1, idle1) = sample(), time.sleep(seconds), sample()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return cores * (1 - (idle1 - idle0) / max(1, all1 - all0))


def default_cache_dir():
    """Where taco keeps what it generates and caches (toy corpus, token arrays): $TACO_CACHE."""
    return Path(os.environ.get("TACO_CACHE", Path.home() / ".cache" / "taco"))


# ----------------------------------------------------------------------------- the error path

def fail(message, code=USAGE):
    """Print `error: <message>` (one line) on stderr and exit."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(code)


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


# ----------------------------------------------------------------------------- files we write ourselves

def atomic_write(path, write):
    """write(f) into a temp file in the same folder, fsync, rename: readers and a kill at
    any moment see the old file or the new one, never a mix."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def write_json(path, obj):
    atomic_write(path, lambda f: f.write((json.dumps(obj, indent=2) + "\n").encode()))


def write_jsonl(path, records):
    atomic_write(path, lambda f: f.write("".join(json.dumps(r) + "\n" for r in records).encode()))


def append_jsonl(path, record):
    """Append one record as a line; a torn last line (a kill during an earlier append) is
    dropped first, so that it cannot glue itself to the new line."""
    if os.path.exists(path) and os.path.getsize(path):
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        if torn:
            write_jsonl(path, read_jsonl(path))
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_json(path):
    """A JSON object written by this project; anything else is one clear line."""
    regular_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (ValueError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} is not valid JSON ({err}); truncated or edited?") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{path} holds a JSON {type(obj).__name__}, not an object")
    return obj


def read_jsonl(path):
    """The records (objects) of a JSON-lines file this project appends to. A last line cut
    short (no newline: a kill during an append) is dropped with a warning; any other bad
    line is an error."""
    regular_file(path)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    records = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError) as err:
            if no == len(lines):  # no newline after it: torn
                print(f"warning: {path}: dropped its last line, cut short ({len(line)} bytes)", file=sys.stderr)
                break
            raise UsageError(f"{path} line {no} is not valid JSON ({err})") from None
        if not isinstance(record, dict):
            raise UsageError(f"{path} line {no} holds a JSON {type(record).__name__}, not an object")
        records.append(record)
    return records


# ----------------------------------------------------------------------------- one run per folder

class RunLock:
    """Exclusive use of a run folder: flock on FOLDER/.lock, which the kernel drops when its
    owner dies (even by kill -9), so a lock is never stuck: a dead owner's is taken over with
    a note. Under torchrun only rank 0 takes it. Creates the folder if needed; if the run
    ends having written nothing else, it removes the folder again."""

    def __init__(self, folder, flag="--out"):
        output_path(folder, flag, folder=True)
        self.folder, self.created = folder, not os.path.exists(folder)
        try:
            os.makedirs(folder, exist_ok=True)
            self.fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise UsageError(f"cannot write to {flag} {folder}: {err.strerror}") from None
        owner = os.pread(self.fd, 200, 0).decode(errors="replace").strip()
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise UsageError(f"{flag} {folder} is in use by another run (process {owner or '?'}); "
                             f"wait for it to end, or pick another {flag}") from None
        if owner:
            print(f"note: {folder}: taking over the lock of process {owner}, which ended without "
                  f"releasing it (killed?)", file=sys.stderr)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self):
        os.ftruncate(self.fd, 0)  # empty: released cleanly
        os.close(self.fd)
        if self.created and os.listdir(self.folder) == [".lock"]:
            os.remove(os.path.join(self.folder, ".lock"))
            os.rmdir(self.folder)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


# ----------------------------------------------------------------------------- signals

class StopSignals:
    """While active, SIGINT / SIGTERM only set `signum`: the loop saves and stops at the next
    step boundary. A second SIGINT acts at once (KeyboardInterrupt)."""

    def __enter__(self):
        self.signum = 0
        self.old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum, frame):
        self.signum = self.signum or signum
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exc):
        for s, handler in self.old.items():
            signal.signal(s, handler)
