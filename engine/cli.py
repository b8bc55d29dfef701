"""What every script shares at its command line: flag types and ranges, the device and the
CPU threads, the cache folder, paths given by the user, and the one-line error path.

User mistakes end with ONE line `error: ...` on stderr and exit code 2, never a traceback
(docs/robustness.md). A run's engineering (files, locks, checkpoints, signals) is in runs.py.
Every script calls start() before it imports torch, so cli imports torch only inside the
functions that need it.
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


class UsageError(ValueError):
    """A mistake the user can fix (a flag, a path, a file): one `error:` line, exit 2."""


class DataError(UsageError):
    """A user mistake about data (a path, a file, a vocabulary): the message says how to fix it."""


class Interrupted(Exception):
    """A run stopped by a signal after saving its state: exit 128 + the signal's number."""

    def __init__(self, signum, message=""):
        super().__init__(message)
        self.signum = signum


STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill / a scheduler, a closed terminal or ssh


def start(name):
    """Every script's first call, before it imports torch: `cli.start(__name__)`.

    Idle CPU threads of PyTorch (OpenMP) sleep instead of spinning (libgomp reads this once, when
    torch loads). On a busy machine spinning threads stall each other (60 steps of `python taco.py`,
    2 threads: 99-127 s spinning, 25-31 s sleeping); on an idle one it made no difference (11.7 and
    11.6 s, medians of 3). README: Threads. Run as a script, also: a stop signal before main()'s
    errors() is one line and exit 128 + its number (nothing to clean up yet); the script leads a
    process group (_end_children); a closed or full stdout drops its lines, never the run."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if name != "__main__":  # imported (a test, another script): the importer owns its signals and streams
        return
    for s in STOPS:
        if signal.getsignal(s) is not signal.SIG_IGN:  # nohup, a background job's SIGINT: stays ignored
            signal.signal(s, _stopped_early)
    with contextlib.suppress(OSError):  # a terminal's foreground job keeps its group: Ctrl-C reaches it
        if os.getpgrp() != os.getpid() and not _in_foreground():
            os.setpgid(0, 0)
    if os.getpgrp() == os.getpid():
        _group.append(os.getpid())
    sys.stdout = _Output(sys.stdout)


def _stopped_early(signum, frame):
    print("interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}", file=sys.stderr)
    os._exit(128 + signum)


def _in_foreground():
    try:
        with open("/dev/tty") as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:  # no terminal
        return False


class _Output:
    """sys.stdout, whose reader may go away: on a closed pipe (EPIPE) or a full device (ENOSPC) its
    file descriptor is pointed at /dev/null, once, with a warning; the run and its files go on."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as err:
            self._lost(err)
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except OSError as err:
            self._lost(err)

    def _lost(self, err):
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())  # what the stream still buffers goes there
        print(f"warning: standard output failed ({err.strerror or err}): its further lines are dropped; "
              f"the results are written as usual", file=sys.stderr)

    def __getattr__(self, name):
        return getattr(self._stream, name)


class Stop(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP outside a training loop, raised where the program is, so that every
    `with` and `finally` on the way out runs: child processes are ended, a lock is released, a
    temp file removed. A KeyboardInterrupt, so libraries treat it as Ctrl-C."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
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
        from torch._inductor import cpp_builder, exc
        try:
            cxx = cpp_builder.get_cpp_compiler()  # PyTorch's own search ($CXX, else g++): runs `--version`
        except (exc.InvalidCxxCompiler, OSError):
            raise UsageError(f"--compile needs a working C++ compiler on CPU and found none (tried "
                             f"{os.environ.get('CXX') or 'g++'}): install one (e.g. apt install g++), point $CXX "
                             f"at it, or run without --compile") from None
        import subprocess
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:  # one that answers --version may still not compile
            try:
                subprocess.run([cxx, "-x", "c++", "-c", "-", "-o", os.path.join(tmp, "a.o")], input="int f() { return 0; }",
                               capture_output=True, text=True, timeout=120, check=True)
            except (OSError, subprocess.SubprocessError) as err:
                said = (getattr(err, "stderr", None) or str(err)).strip().splitlines() or ["no output"]
                raise UsageError(f"--compile needs a working C++ compiler on CPU, and {cxx} cannot compile a test "
                                 f"file ({said[0]}): fix it, point $CXX at another, or run without --compile") from None
        return
    if importlib.util.find_spec("triton") is None:
        raise UsageError("--compile on CUDA needs Triton (pip install triton), or run without --compile")
    if not any(shutil.which(c) for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c):
        raise UsageError("--compile on CUDA needs a C compiler for Triton's launcher and found none "
                         "($CC, cc, gcc, clang): install one, or run without --compile")


def add_threads_flag(parser):
    parser.add_argument("--threads", type=int_range(1), default=None,
                        help="PyTorch CPU threads (default: $TACO_THREADS, else PyTorch's: $OMP_NUM_THREADS or one "
                        "per core). Results depend on the thread count: the start line says it")


def set_threads(threads=None):
    """Set PyTorch's CPU threads -> (number, where it came from): the --threads flag, else
    $TACO_THREADS, else PyTorch's own choice ($OMP_NUM_THREADS, which torchrun sets to 1 per
    process, or one per core). Float sums depend on the thread count, so the same count gives
    the same numbers: the default depends on the machine, never on its load. More than 4 per core
    is refused: it only slows a run down, and thousands crash OpenMP."""
    import torch
    for name, value in (("--threads", threads), ("$TACO_THREADS", os.environ.get("TACO_THREADS"))):
        if value not in (None, ""):
            try:
                number = int(value)
            except ValueError:
                raise UsageError(f"{name} {value!r}: expected a whole number of threads") from None
            if number < 1:
                raise UsageError(f"{name} {value!r}: expected at least 1 thread")
            if number > 4 * (cores := os.cpu_count() or 1):
                raise UsageError(f"{name} {value}: far more threads than the {cores} cores here; pass at most "
                                 f"{4 * cores} (one per core is fastest)")
            torch.set_num_threads(number)
            return number, name
    return torch.get_num_threads(), "$OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS") else "PyTorch's default"


def free_cores():
    """Cores this process may use, less the machine's current load (1-minute average); at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return max(1, min(cores, round(cores - load)))


def default_cache_dir():
    """Where taco keeps what it generates and caches (toy corpus, token arrays): $TACO_CACHE."""
    path = Path(os.environ.get("TACO_CACHE") or Path.home() / ".cache" / "taco")
    if path.exists() and not path.is_dir():
        raise UsageError(f"$TACO_CACHE {path} is not a folder: point it at a folder (or unset it)")
    return path


# ----------------------------------------------------------------------------- the error path

def reason(err):
    """An exception's message in one line: the first detail where PyTorch heads its list of them
    ("Error(s) in loading state_dict for X:" then "size mismatch for ...")."""
    lines = [line.strip() for line in (str(err) or repr(err)).splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0]


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
    128 + its number (130, 143, 129). Never a traceback for these.

    While it is active, SIGINT, SIGTERM and SIGHUP raise Stop where the program is (a training loop
    installs its own, gentler handlers: runs.StopSignals); whatever exception a library turns
    the stop into, the exit is the signal's, after every child process has ended (`interrupted`
    / `stopped by SIGTERM`, exit 130 / 143)."""
    handlers, unraisablehook = _stop_on_signals(), sys.unraisablehook
    sys.unraisablehook = _unraisable(unraisablehook)
    try:
        yield
    except SystemExit:
        raise
    except BaseException as err:
        _exit_for(err)
        raise
    finally:
        sys.unraisablehook = unraisablehook
        if handlers:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in handlers.items():
            signal.signal(s, handler)


def _exit_for(err):
    """Exit as errors() promises for `err`; return (and the caller re-raises) if it is a bug."""
    signal.setitimer(signal.ITIMER_REAL, 0)  # the Stop has arrived: no second one (_on_alarm)
    if _received or isinstance(err, KeyboardInterrupt):
        signum = _received[0] if _received else getattr(err, "signum", signal.SIGINT)
        _end_children()
        print("interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}",
              file=sys.stderr)
        sys.exit(128 + signum)
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
    if isinstance(err, Interrupted):
        if str(err):
            print(err, file=sys.stderr)
        sys.exit(128 + err.signum)


# ----------------------------------------------------------------------------- signals and child processes

_received = []  # the signals that asked this process to stop; the first one sets the exit code
_group = []  # the process group the script leads (start())
_owner = [None]  # the process whose handlers these are (a forked child inherits them)


def _stop_on_signals():
    """Install errors()' handlers for STOPS (not where they are ignored, e.g. under nohup or in
    a background job) and for SIGALRM (_on_alarm); -> the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    _received.clear()
    _owner[0] = os.getpid()
    handlers = {s: signal.signal(s, _on_signal) for s in STOPS if signal.getsignal(s) is not signal.SIG_IGN}
    return {**handlers, signal.SIGALRM: signal.signal(signal.SIGALRM, _on_alarm)} if handlers else {}


def _unraisable(hook):
    """sys.unraisablehook, quiet about a Stop that Python could not raise (_on_alarm raises it again)."""
    return lambda info: None if isinstance(info.exc_value, Stop) else hook(info)


def _on_signal(signum, frame):
    if os.getpid() != _owner[0]:  # a forked worker (datasets.map's pool): its parent ends it. Ctrl-C reaches
        if signum == signal.SIGTERM:  # the whole group: ignored here (dying now could leave the pool's queue
            os._exit(128 + signum)  # locked); SIGTERM (the pool's terminate()) ends it, quietly
        return
    _received.append(signum)
    signal.setitimer(signal.ITIMER_REAL, 1.0)  # _on_alarm: in case the Stop below gets swallowed
    raise Stop(_received[0])


def _on_alarm(signum, frame):
    """Python ignores an exception raised where the signal happened to land in some places (an
    at-fork hook of os.fork, a __del__): a Stop lost there would let the program go on. A second
    later, if no Stop is on its way out (being handled, or the cause of what is), raise it again."""
    if os.getpid() != _owner[0] or not _received:
        return
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    err = sys.exc_info()[1]
    while err is not None and not isinstance(err, Stop):
        err = err.__cause__ or err.__context__
    if err is None:
        raise Stop(_received[0])


def _end_children(grace=30.0):
    """After a signal, the processes this script started that are still alive (a pool that was
    never ended, a subprocess) get SIGTERM, and SIGKILL if still there after `grace` seconds:
    nothing this process started outlives it. They are the other members of its process group,
    which start() makes it lead (in a shell pipeline it starts, `python taco.py | tee log`, the
    pipeline's other commands too); where it does not lead one (a terminal's foreground job, not
    its first command), the terminal's Ctrl-C reaches them itself."""
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
