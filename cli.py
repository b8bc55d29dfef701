"""What every script shares at its edges: flag ranges, the one-line error path, and
(below) the files the project writes itself. See docs/robustness.md.

User mistakes end with ONE line `error: ...` on stderr and exit code 2, never a traceback.
"""
import argparse
import math
import sys

USAGE, NONFINITE, SIGINT_EXIT, SIGTERM_EXIT = 2, 3, 130, 143  # exit codes


class UsageError(ValueError):
    """A mistake the user can fix (a flag, a path, a file): one `error:` line, exit 2."""


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


def _interval(lo, hi, lo_open, hi_open):
    return f"{'(' if lo_open else '['}{lo}, {'inf)' if hi is None else str(hi) + (')' if hi_open else ']')}"


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose own errors (unknown flag, bad value) are one `error:` line, exit 2."""

    def error(self, message):
        fail(message)


# ----------------------------------------------------------------------------- the error path

def fail(message, code=USAGE):
    """Print `error: <message>` (one line) on stderr and exit."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(code)


def run(body, *argv):
    """Call body(*argv) as a script's main: user mistakes and unusable files -> one line and
    exit 2; a non-finite loss (FloatingPointError) -> exit 3; Ctrl-C -> exit 130, no traceback."""
    try:
        return body(*argv)
    except UsageError as err:
        fail(err)
    except OSError as err:  # permission denied, disk full, not a file: the environment, not a bug
        fail(f"{err.strerror or err}{f': {err.filename}' if err.filename else ''}")
    except FloatingPointError as err:
        fail(err, NONFINITE)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(SIGINT_EXIT)
