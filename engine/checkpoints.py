"""What a run writes and reads back, shared by every script: files written whole (temp file, fsync, rename) and
tolerant readers of the project's own JSON files; checkpoints (OUT/ckpt_<step>.pt, rotated; one that cannot be
loaded is skipped with a warning); and the weights a script starts from (--init, --model: a run folder, a
checkpoint file or a Hugging Face folder).
"""
import contextlib
import json
import os
import sys
from typing import NamedTuple

import torch

from engine import cli, hf
from engine.cli import UsageError
from model import SIZES, BertConfig, BertForPreTraining

# ----------------------------------------------------------------------------- files we write ourselves

def atomic_write(path, write):
    """write(f) into a temp file in the same folder, fsync, rename: readers and a kill at any moment see
    the old file or the new one, never a mix. A full disk leaves the old file, no temp file, and one line."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:  # a full disk, a signal, ...: no temp file left
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if cli.disk_full(err):
            raise UsageError(f"no space left in {os.path.dirname(os.path.abspath(path))} for "
                             f"{os.path.basename(path)}: free some space there") from None
        raise
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    os.fsync(dir_fd)  # the rename itself survives a power cut
    os.close(dir_fd)


def remove_leftovers(folder):
    """Delete the temp files of a writer killed mid-write (kill -9): by the folder's lock holder."""
    for name in os.listdir(folder):
        stem, _, pid = name.rpartition(".tmp")
        if stem and pid.isdigit():
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(folder, name))


def write_bytes(path, data):
    atomic_write(path, lambda f: f.write(data))


def write_json(path, obj):
    write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def write_jsonl(path, records):
    write_bytes(path, "".join(json.dumps(r) + "\n" for r in records).encode())


def append_jsonl(path, record):
    """Append one record as a line, after dropping a torn last line (a kill during an earlier append)
    that would glue itself to it. A full disk leaves the file as it was."""
    if os.path.exists(path) and os.path.getsize(path):
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                write_jsonl(path, read_jsonl(path))
    line = memoryview((json.dumps(record) + "\n").encode())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    size = os.fstat(fd).st_size
    try:
        while line:
            line = line[os.write(fd, line):]
    except OSError as err:
        os.ftruncate(fd, size)  # no half line
        raise OSError(err.errno, err.strerror, path) from None
    finally:
        os.close(fd)


def read_json(path):
    """A JSON file written by this project; one that is not valid JSON is one clear line."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} is not valid JSON ({err}); truncated or edited?") from None


def read_jsonl(path):
    """The records of a JSON-lines file this project appends to. A last line cut short (no newline: a kill
    during an append) is dropped with a warning; any other bad line is an error naming it."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    records = []
    for no, line in enumerate(lines, 1):
        try:
            if line.strip():
                records.append(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if no < len(lines):  # a newline after it: not torn
                raise UsageError(f"{path} line {no} is not valid JSON ({err})") from None
            print(f"warning: {path}: dropped its last line, cut short ({len(line)} bytes)", file=sys.stderr)
    return records


# ----------------------------------------------------------------------------- checkpoints

WEIGHTS = ("model", "model_config")  # what --init, --model and analyze.py read from a checkpoint
RESUME = WEIGHTS + ("optimizer", "scaler", "step", "args")  # and what --resume reads too


def save_checkpoint(out, state, keep_last):
    """OUT/ckpt_<step>.pt, written whole; then only the keep_last newest up to it are kept (those of later
    steps, left by a run resumed from an earlier one, are replaced as their steps come again)."""
    path = os.path.join(out, f"ckpt_{state['step']:08d}.pt")
    try:
        atomic_write(path, lambda f: torch.save(state, f))
    except UsageError as err:
        raise UsageError(f"{err}; the earlier checkpoints are intact: run the same command with --resume") from None
    for old in [p for p in list_checkpoints(out) if p < path][keep_last - 1:]:  # zero-padded: name order is step order
        os.remove(old)
    return path


def list_checkpoints(out):
    """The checkpoint files of run folder `out`, newest first."""
    names = sorted(os.listdir(out) if os.path.isdir(out) else [], reverse=True)
    return [os.path.join(out, n) for n in names if n.startswith("ckpt_") and n.endswith(".pt")]


def latest_checkpoint(out, need=None):
    """The newest checkpoint of run folder `out` that loads: its path, or with `need` (path, state); None if
    there is none. One that cannot be loaded (cut short, damaged, foreign) is skipped with a warning."""
    for path in list_checkpoints(out):
        try:
            state = read_state(path, need or WEIGHTS)
            return (path, state) if need else path
        except (OSError, UsageError) as err:
            print(f"warning: skipping checkpoint {path}: {err}", file=sys.stderr)
    return None


def read_state(path, need=WEIGHTS):
    """The state in checkpoint file `path` (mapped, not read) if it is what taco saves: a dict with the keys
    `need`; else one line naming it."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except OSError:
        raise
    except Exception as err:  # a truncated or foreign file: say which, not a traceback
        raise UsageError(f"cannot read checkpoint {path}: {cli.reason(err)}") from err
    missing = [k for k in need if k not in state] if isinstance(state, dict) else need
    if missing:
        raise UsageError(f"{path} is not a taco checkpoint: it lacks {', '.join(missing)}")
    return state


load_checkpoint = read_state


# ----------------------------------------------------------------------------- weights to start from

def find_weights(spec):
    """-> (file or folder to load, is_hf) for a taco run directory (its newest checkpoint), a checkpoint
    file, or a Hugging Face directory (config.json + weights)."""
    if not os.path.exists(spec):
        raise UsageError(f"{spec} does not exist: pass a taco run directory, a checkpoint file "
                         f"or a Hugging Face model directory")
    if not os.path.isdir(spec):
        return spec, False
    if source := latest_checkpoint(spec):
        return source, False
    if os.path.isfile(os.path.join(spec, "config.json")) and any(
            os.path.isfile(os.path.join(spec, w)) for w in ("model.safetensors", "pytorch_model.bin")):
        return spec, True
    raise UsageError(f"{spec} holds no taco checkpoint (ckpt_*.pt) and is not a Hugging Face directory "
                     f"(config.json + model.safetensors)")


def vocab_beside(source):
    """The vocab.txt that goes with a checkpoint file or a model directory."""
    return os.path.join(source if os.path.isdir(source) else os.path.dirname(source), "vocab.txt")


def trained_with(spec):
    """How the weights `spec` names were trained, read without loading them (a recipe depends on it)
    -> (source, run): the taco run's settings (--size, --data, ...; "recipe": the one it trained
    with), or None for a Hugging Face folder (trained elsewhere)."""
    source, is_hf = find_weights(spec)
    if is_hf:
        return source, None
    ckpt = read_state(source)
    run, cfg = dict(ckpt.get("args") or {}), ckpt["model_config"]
    if "recipe" not in run:  # recorded since recipes depend on --init: --size's, unless the model is not that size
        shape = (cfg.get("num_hidden_layers"), cfg.get("hidden_size"), cfg.get("num_attention_heads"))
        run["recipe"] = run.get("size") if SIZES.get(run.get("size")) == shape else "continue"
    return source, run


class Init(NamedTuple):
    """The weights --init continues from: the model's config, its state dict, the file or folder, and whether
    it has an MLM head of its own (a sentence encoder has none)."""
    config: BertConfig
    state: dict
    source: str
    head: bool = True


def load_init(spec, flag="--init"):
    """--init: the weights of a trained BertForPreTraining (encoder + MLM head) to continue from
    -> Init. Weights only: optimizer, schedule and step start anew. A Hugging Face encoder without
    an MLM head gets a fresh head (with a note)."""
    source, is_hf = find_weights(spec)
    try:
        if is_hf:
            model = BertForPreTraining.from_pretrained(source)
            head = any(k.startswith("cls.predictions.") for k in hf.read_model_dir(source)[1])
            return Init(model.config, model.state_dict(), source, head)
        state = read_state(source)
        return Init(BertConfig.from_dict(state["model_config"]), state["model"], source)
    except UsageError:
        raise
    except Exception as err:  # a foreign file, missing keys, wrong shapes: which file, in one line
        raise UsageError(f"cannot load {flag} {spec}: {cli.reason(err)}") from err


def load_weights(model, state, spec, flag="--init"):
    """--init's weights into `model`. Tied embeddings share the input matrix (an untied init's
    decoder is dropped); RetroMAE's decoder continues if the init has one, else stays fresh
    (seeded), and is dropped for other objectives. Anything else that does not fit: one line."""
    if model.config.tie_word_embeddings:
        state = {**state, "mlm.decoder.weight": state["bert.embeddings.word.weight"]}
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # tensors of other shapes than the init's own config says
        raise UsageError(f"{flag} {spec} does not fit the model: {cli.reason(err)}") from err
    if stray := [k for k in missing + unexpected if not k.startswith("decoder.")]:
        raise UsageError(f"{flag} {spec} does not fit the model: {', '.join(stray[:4])}")
