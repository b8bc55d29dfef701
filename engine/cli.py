"""What every script shares at its command line: flag types and ranges, the device and the CPU threads,
the cache folder, paths given by the user, the stop signals and the one-line error path.

User mistakes end with ONE line `error: ...` on stderr and exit code 2, never a traceback
(docs/robustness.md). Every script calls start() before it imports torch, so cli imports torch only
inside the functions that need it.
"""
import argparse
import contextlib
import errno
import importlib.util
import math
import os
import shutil
import signal
import stat
import sys
import threading
import time
from pathlib import Path

USAGE, NONFINITE = 2, 3  # exit codes; a signal stops a run with 128 + its number (SIGINT 130, SIGTERM 143)
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill / a scheduler, a closed terminal or ssh


class UsageError(ValueError):
    """A mistake the user can fix (a flag, a path, a file): one `error:` line, exit 2."""


class DataError(UsageError):
    """A user mistake about data (a path, a file, a vocabulary): the message says how to fix it."""


class Stop(KeyboardInterrupt):
    """A stop signal, raised where the program is, so that every `with` and `finally` on the way out
    runs (children ended, a lock released, a temp file removed); errors() then prints its `message`
    and exits 128 + the signal's number. A KeyboardInterrupt, so libraries treat it as Ctrl-C."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.message = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"


class Interrupted(Exception):
    """A training loop's stop once it has saved (runs.Run): exit 128 + `signum` after the message (what is
    on disk). Not a KeyboardInterrupt: a pool worker's run returns it to its parent like any error."""

    def __init__(self, signum, message=""):
        super().__init__(message)
        self.signum = signum


class DiskFull(UsageError):
    """No space left (ENOSPC, EDQUOT) while writing `what` into `folder`: one line naming the
    folder, the space needed and the space free. Whatever was being written has been removed."""

    def __init__(self, folder, needed, what, after=""):
        folder = where = os.path.abspath(folder or ".")
        while not os.path.isdir(where):  # a folder removed again: its disk is its parent's
            where = os.path.dirname(where)
        try:
            free = f"{_mb(shutil.disk_usage(where).free)} free"
        except OSError:
            free = "free space unknown"
        super().__init__(f"no space left in {folder} for {what}: it needs {_mb(needed) if needed else 'more'}, "
                         f"{free}; free some space there{after}")


def _mb(n):
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n:,} bytes"


def disk_full(err):
    """True for the OSError of a full disk or an exhausted quota, also where a library wrapped
    it in an error of its own (torch.save: a RuntimeError raised while handling it)."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        err = err.__cause__ or err.__context__
    return False


def start(name):
    """Every script's first call, before it imports torch: `cli.start(__name__)`. Idle OpenMP threads
    sleep, not spin (libgomp reads it once, as torch loads; on a busy machine spinning ones stall each
    other: docs/robustness.md). Run as a script, also: a stop signal from here on is one line and exit
    128 + its number; the script leads a process group (_end_children); a failing stdout drops its lines."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if name != "__main__":  # imported (a test, another script): the importer owns its signals and streams
        return
    for s in STOPS:
        if signal.getsignal(s) is not signal.SIG_IGN:  # nohup, a background job's SIGINT: stays ignored
            signal.signal(s, _on_signal)
    foreground = False
    with contextlib.suppress(OSError), open("/dev/tty") as tty:  # a terminal's foreground job keeps its group:
        foreground = os.tcgetpgrp(tty.fileno()) == os.getpgrp()  # its Ctrl-C reaches all of it (OSError: no tty)
    if not foreground:
        with contextlib.suppress(OSError):  # (a session leader cannot, and leads its group already)
            os.setpgid(0, 0)
    if os.getpgrp() == os.getpid():
        _group.append(os.getpid())
    sys.stdout = _Output(sys.stdout)


class _Output:
    """sys.stdout, whose reader may go away: on a closed pipe (EPIPE) or a full device (ENOSPC) its
    file descriptor is pointed at /dev/null, once, with a warning; the run and its files go on."""

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
            print(f"warning: standard output failed ({err.strerror or err}): its further lines are dropped; "
                  f"the results are written as usual", file=sys.stderr)

    def __getattr__(self, name):
        return getattr(self._stream, name)


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


def device(spec):
    """--device (None: cuda if available) -> torch.device; one line if it cannot be used here."""
    import torch
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
    import torch
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    dtype = dtype or ("bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32")
    if dtype == "fp32":
        return dtype, contextlib.nullcontext()
    return dtype, torch.autocast(device.type, dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


def check_compile(device):
    """--compile: torch.compile (inductor) builds C++ kernels on CPU and Triton kernels on CUDA;
    say up front, in one line, when what it needs is missing, not after minutes of work."""
    if device.type == "cpu":
        import subprocess
        cxx, need = os.environ.get("CXX") or "g++", "--compile needs a working C++ compiler on CPU"  # inductor's
        try:  # (one that answers --version may still not compile)
            subprocess.run([cxx, "-x", "c++", "-c", "-", "-o", os.devnull], input="int f() { return 0; }",
                           capture_output=True, text=True, timeout=120, check=True)
        except OSError:
            raise UsageError(f"{need} and found none (tried {cxx}): install one (e.g. apt install g++), point "
                             f"$CXX at it, or run without --compile") from None
        except subprocess.SubprocessError as err:
            said = (getattr(err, "stderr", None) or str(err)).strip().splitlines() or ["no output"]
            raise UsageError(f"{need}, and {cxx} cannot compile a test file ({said[0]}): fix it, point $CXX "
                             f"at another, or run without --compile") from None
    elif importlib.util.find_spec("triton") is None:
        raise UsageError("--compile on CUDA needs Triton (pip install triton), or run without --compile")
    elif not any(shutil.which(c) for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c):
        raise UsageError("--compile on CUDA needs a C compiler for Triton's launcher and found none "
                         "($CC, cc, gcc, clang): install one, or run without --compile")


def add_threads_flag(parser):
    parser.add_argument("--threads", type=int_range(1), default=None,
                        help="PyTorch CPU threads (default: $TACO_THREADS, else PyTorch's: $OMP_NUM_THREADS or one "
                        "per core). Results depend on the thread count: the start line says it")


def set_threads(threads=None):
    """Set PyTorch's CPU threads -> (number, where it came from): --threads, else $TACO_THREADS, else
    PyTorch's own choice ($OMP_NUM_THREADS, which torchrun sets to 1 per process, or one per core).
    Float sums depend on the thread count, so the default depends on the machine, never on its load.
    More than 4 per core is refused: it only slows a run down, and thousands crash OpenMP."""
    import torch
    for name, value in (("--threads", threads), ("$TACO_THREADS", os.environ.get("TACO_THREADS"))):
        if value in (None, ""):
            continue
        if not str(value).isdecimal() or int(value) < 1:
            raise UsageError(f"{name} {value!r}: expected a whole number of threads, at least 1")
        if int(value) > 4 * (cores := os.cpu_count() or 1):
            raise UsageError(f"{name} {value}: far more threads than the {cores} cores here; pass at most "
                             f"{4 * cores} (one per core is fastest)")
        torch.set_num_threads(int(value))
        return int(value), name
    return torch.get_num_threads(), "$OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS") else "PyTorch's default"


def free_cores():
    """Cores this process may use, less the machine's current load (1-minute average); at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # (macOS)
    return max(1, min(cores, round(cores - os.getloadavg()[0])))


def default_cache_dir():
    """Where taco keeps what it generates and caches (toy corpus, token arrays): $TACO_CACHE."""
    path = Path(os.environ.get("TACO_CACHE") or Path.home() / ".cache" / "taco")
    if path.exists() and not path.is_dir():
        raise UsageError(f"$TACO_CACHE {path} is not a folder: point it at a folder (or unset it)")
    return path


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
        raise UsageError(f"{flag} {path} is a {'file' if folder else 'folder'}; pass a {'folder' if folder else 'file'}")
    existing = os.path.abspath(path) if folder else os.path.dirname(os.path.abspath(path))
    if not folder and not os.path.isdir(existing):
        raise UsageError(f"{flag} {path}: its folder {existing} does not exist")
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: cannot write to {existing}")
    return path


# ----------------------------------------------------------------------------- the error path

def reason(err):
    """An exception's message in one line: the first detail where PyTorch heads its list of them
    ("Error(s) in loading state_dict for X:" then "size mismatch for ...")."""
    lines = [line.strip() for line in (str(err) or repr(err)).splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0]


RANK_WAIT = 30  # seconds a torchrun worker other than local rank 0 waits to be stopped (fail)


def fail(message, code=USAGE):
    """Print `error: <message>` (one line) on stderr and exit. Every torchrun worker meets the same
    mistake: local rank 0 says it; another waits until torchrun stops it (SIGTERM, or SIGINT on
    Ctrl-C; exiting first would have torchrun stop rank 0 before it said anything) and exits alike,
    without a word. Not stopped within RANK_WAIT s, the mistake is its own: it says it, with its rank."""
    line = f"error: {' '.join(str(message).split())}"
    if os.environ.get("LOCAL_RANK", "0") != "0":
        old = {s: signal.signal(s, lambda *_: sys.exit(code)) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            time.sleep(RANK_WAIT)
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
        line += f" (rank {os.environ.get('RANK', '?')})"
    print(line, file=sys.stderr)
    sys.exit(code)


_received = []  # the signals that asked errors()' process to stop; the first one sets the exit code
_group = []  # the process group the script leads (start())
_owner = [None]  # the process whose errors() is active (a forked child inherits its handlers), else None


@contextlib.contextmanager
def errors():
    """The error path of every script's main(): user mistakes and unusable files -> one line, exit 2;
    a non-finite loss (FloatingPointError) -> exit 3; a stop signal -> 128 + its number (130, 143,
    129), after every child process has ended. Never a traceback for these. While it is active, a stop
    signal (not an ignored one) raises Stop where the program is (a training loop installs gentler
    handlers: runs.StopSignals); whatever a library turns the Stop into, the exit is the signal's."""
    owner, hook, old = _owner[0], sys.unraisablehook, {}
    if threading.current_thread() is threading.main_thread():  # (the one thread that may set handlers)
        _received.clear()
        _owner[0] = os.getpid()
        old = {s: signal.signal(s, _on_signal) for s in STOPS if signal.getsignal(s) is not signal.SIG_IGN}
    sys.unraisablehook = _dropped(hook)
    try:
        yield
    except SystemExit:
        raise
    except BaseException as err:
        if _received or isinstance(err, KeyboardInterrupt):
            _owner[0] = None  # a second signal while the children end: one line, exit at once (_on_signal)
            stop = Stop(_received[0]) if _received else err if isinstance(err, Stop) else Stop(signal.SIGINT)
            _end_children()
            print(stop.message, file=sys.stderr)
            sys.exit(128 + stop.signum)
        if isinstance(err, UsageError):
            fail(err)
        if disk_full(err):
            name = getattr(err, "filename", None)
            fail(f"No space left on device{f': {name}' if name else ''}; free some space in "
                 f"{os.path.dirname(os.path.abspath(name)) if name else 'the output or cache folder'}")
        if isinstance(err, OSError):  # permission denied, ...: the environment, not a bug
            fail(f"{err.strerror or err}{f': {err.filename}' if err.filename else ''}")
        if isinstance(err, FloatingPointError):
            fail(err, NONFINITE)
        if isinstance(err, Interrupted):  # (nothing it started runs still: no children to end)
            if str(err):
                print(err, file=sys.stderr)
            sys.exit(128 + err.signum)
        raise  # a bug: its traceback
    finally:
        sys.unraisablehook, _owner[0] = hook, owner
        for s, handler in old.items():
            signal.signal(s, handler)


# ----------------------------------------------------------------------------- signals and child processes

def _on_signal(signum, frame):
    """A stop signal. Outside errors() (torch loading: nothing to clean up yet): one line, exit 128 +
    its number. In errors()' process: raise Stop. In a forked worker (datasets.map's pool), which its
    parent ends: Ctrl-C, which reaches the whole group, is ignored (dying now could leave the pool's
    queue locked); SIGTERM (the pool's terminate()) ends it, quietly."""
    if _owner[0] is None:
        print(Stop(signum).message, file=sys.stderr)
        os._exit(128 + signum)
    if os.getpid() != _owner[0]:
        if signum == signal.SIGTERM:
            os._exit(128 + signum)
        return
    _received.append(signum)
    raise Stop(_received[0])


def _dropped(hook):
    """sys.unraisablehook under errors(). Python drops an exception raised where a signal happened to land
    in a few places (an at-fork hook of os.fork, a __del__): a Stop lost there would let the program go
    on. It is not printed; a thread sends the same signal again, raising it once the program is past there."""
    def unraisable(info):
        if not isinstance(info.exc_value, Stop):
            return hook(info)
        threading.Timer(0.1, os.kill, (os.getpid(), info.exc_value.signum)).start()
    return unraisable


def _end_children(grace=30.0):
    """After a signal, the processes this script started that are still alive (a pool never ended,
    a subprocess) get SIGTERM, and SIGKILL after `grace` s: the other members of the process group
    start() makes it lead (docs/robustness.md, Signals)."""
    group = os.getpgrp()
    if group not in _group or group != os.getpid():  # not the script's own group (a test's process, a fork)
        return
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # not this process itself
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGTERM)
    signal.signal(signal.SIGTERM, old)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.waitpid(-group, os.WNOHANG)  # reaps one that ended; raises once none is left
        except ChildProcessError:
            return
        time.sleep(0.05)
    if os.fork() == 0:  # SIGKILL cannot spare its sender: a child leaves the group, and kills it once this process is gone
        os.setpgid(0, 0)
        while os.getppid() == group:
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
        os._exit(0)
