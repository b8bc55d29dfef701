"""What a run writes and reads back, shared by every script: files written whole (temp file +
rename) and tolerant readers of the project's own JSON files; checkpoints (ckpt_<step>.pt and a
manifest with its size and sha256, verified before use, rotated); and the weights a run or a
script starts from (--init, --model: a run folder, a checkpoint file or a Hugging Face folder).
"""
import contextlib
import hashlib
import itertools
import json
import os
import sys
from typing import NamedTuple

import torch

from engine import cli
from engine.cli import UsageError
from model import SIZES, BertConfig, BertForPreTraining

# ----------------------------------------------------------------------------- files we write ourselves

def atomic_write(path, write, size=None):
    """write(f) into a temp file in the same folder, fsync, rename: readers and a kill at any moment
    see the old file or the new one, never a mix. A full disk is one line naming the folder and
    `size`, the bytes the file needs (the old file stays, the temp file goes)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:  # a full disk, a signal, ...: no temp file left
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)  # (before DiskFull measures the space left)
        if cli.disk_full(err):
            raise cli.DiskFull(os.path.dirname(path), size, os.path.basename(path)) from None
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
    atomic_write(path, lambda f: f.write(data), len(data))


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
            torn = f.read(1) != b"\n"
        if torn:
            write_jsonl(path, read_jsonl(path))
    line = memoryview((json.dumps(record) + "\n").encode())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    size, needed = os.fstat(fd).st_size, len(line)
    try:
        while line:
            line = line[os.write(fd, line):]
    except OSError as err:
        os.ftruncate(fd, size)  # no half line
        if cli.disk_full(err):
            raise cli.DiskFull(os.path.dirname(path), needed, os.path.basename(path)) from None
        raise
    finally:
        os.close(fd)


def json_object(obj, where):
    if not isinstance(obj, dict):
        raise UsageError(f"{where} holds a JSON {type(obj).__name__}, not an object")
    return obj


def read_json(path):
    """A JSON object written by this project; anything else is one clear line."""
    try:
        with open(cli.regular_file(path), encoding="utf-8") as f:
            return json_object(json.load(f), path)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} is not valid JSON ({err}); truncated or edited?") from None


def read_jsonl(path):
    """The objects of a JSON-lines file this project appends to. A last line cut short (no newline:
    a kill during an append) is dropped with a warning; any other bad line is an error."""
    with open(cli.regular_file(path), "rb") as f:
        lines = f.read().split(b"\n")
    records = []
    for no, line in enumerate(lines, 1):
        try:
            if line.strip():
                records.append(json_object(json.loads(line), f"{path} line {no}"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if no < len(lines):  # a newline after it: not torn
                raise UsageError(f"{path} line {no} is not valid JSON ({err})") from None
            print(f"warning: {path}: dropped its last line, cut short ({len(line)} bytes)", file=sys.stderr)
    return records


def sha256(path):
    """The sha256 of a file's content; None for a folder (a Hugging Face model)."""
    if os.path.isdir(path):
        return None
    with open(path, "rb") as f:
        return file_sha256(f)


def file_sha256(f):
    """The sha256 of an open file's content, read from its start in chunks; leaves it at its start.
    (hashlib.file_digest would do it in one call, from Python 3.11; taco runs on 3.10.)"""
    h = hashlib.sha256()
    f.seek(0)
    for chunk in iter(lambda: f.read(1 << 22), b""):
        h.update(chunk)
    f.seek(0)
    return h.hexdigest()


class HashingWriter:
    """A file that hashes what is written to it: a checkpoint's sha256 without reading it back."""

    def __init__(self, f, hash):
        self.f, self.hash, self.flush = f, hash, f.flush

    def write(self, data):
        self.hash.update(data)
        return self.f.write(data)


# ----------------------------------------------------------------------------- checkpoints

WEIGHTS = ("model", "model_config")  # what --init, --model and analyze.py read from a checkpoint
RESUME = WEIGHTS + ("optimizer", "scaler", "step", "args")  # and what --resume reads too


def save_checkpoint(out, state, keep_last):
    """ckpt_<step>.pt, then its manifest ckpt_<step>.json (step, bytes, sha256 hashed as it is written).
    A checkpoint counts only once its manifest exists, so a kill at any moment leaves either the
    previous set of valid checkpoints or the new one; a full disk leaves the previous set and one line.
    Rotation then keeps the newest keep_last valid ones."""
    path, hashed = os.path.join(out, f"ckpt_{state['step']:08d}.pt"), hashlib.sha256()
    try:
        atomic_write(path, lambda f: torch.save(state, HashingWriter(f, hashed)), state_bytes(state))
        manifest = {"step": state["step"], "bytes": os.path.getsize(path), "sha256": hashed.hexdigest()}
        write_json(path[:-3] + ".json", manifest)
    except cli.DiskFull as err:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)  # a checkpoint without its manifest would only take space
        raise UsageError(f"{err}; the earlier checkpoints are intact: run the same command with --resume") from None
    VERIFIED[path] = identity(os.stat(path), manifest)  # hashed as written: rotation need not read it again
    rotate_checkpoints(out, keep_last, path)
    return path


def state_bytes(obj):
    """The bytes of the tensors in a (nested) checkpoint state: about its size on disk."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return sum(map(state_bytes, values))


def rotate_checkpoints(out, keep_last, newest):
    """Delete checkpoints older than the keep_last newest *valid* ones (`newest`, just written, among
    them). Only verified ones count, so an invalid one (a corrupted file that a resume skipped) never
    pushes a valid one out; checkpoints after `newest` (a run resumed from an earlier step) stay."""
    older = [p for p in list_checkpoints(out) if p < newest]  # zero-padded steps: name order is step order
    valid = [newest, *itertools.islice((p for p in older if verify_checkpoint(p) is None), keep_last - 1)]
    for old in (p for p in older if len(valid) == keep_last and p < valid[-1]):
        VERIFIED.pop(old, None)
        for p in (old[:-3] + ".json", old):  # the manifest first: a half-deleted one never counts
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)


def list_checkpoints(out):
    """Checkpoint files that have a manifest, newest first (not yet verified)."""
    names = sorted(os.listdir(out) if os.path.isdir(out) else [], reverse=True)
    return [os.path.join(out, n[:-5] + ".pt") for n in names if n.startswith("ckpt_") and n.endswith(".json")]


VERIFIED = {}  # checkpoint path -> identity() when this process last found it valid (hashed it or wrote it)


def identity(st, manifest):
    """What must stay the same for a verified checkpoint to be still valid without hashing it again."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, json.dumps(manifest, sort_keys=True)


def verify_checkpoint(path, f=None):
    """None if `path` (or `f`, that file opened) matches its manifest, else the reason it does not.
    Reading through the open file checks the very bytes a caller then loads from it, even if
    rotation deletes the file meanwhile. A checkpoint found valid before is not hashed again."""
    try:
        manifest = read_json(path[:-3] + ".json")
        with contextlib.nullcontext(f) if f else open(cli.regular_file(path, "checkpoint"), "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size != manifest.get("bytes"):
                return f"size {st.st_size} != {manifest.get('bytes')} (truncated?)"
            if VERIFIED.get(path) != identity(st, manifest):
                if file_sha256(f) != manifest.get("sha256"):
                    return "checksum mismatch (corrupted)"
                VERIFIED[path] = identity(st, manifest)
    except (OSError, UsageError) as err:
        return f"unreadable ({err})"
    return None


def vanished(path):
    """Did a checkpoint (or its manifest) disappear after it was listed (another run's rotation)?"""
    return not (os.path.exists(path) and os.path.exists(path[:-3] + ".json"))


def latest_checkpoint(out, need=None, tries=20):
    """The newest checkpoint of run folder `out` that matches its manifest at the moment of reading:
    its path, or None; with `need`, (path, state) loaded from the very file verified. A run saving
    beside us, whose rotation deletes what we listed, never fails the read: a vanished checkpoint
    means a newer one was written, so we list again."""
    gone = set()
    for _ in range(tries):
        for path in list_checkpoints(out):
            try:
                f = open(cli.regular_file(path, "checkpoint"), "rb")
            except (OSError, UsageError) as err:
                reason = f"unreadable ({err})"
            else:
                with f:
                    if not (reason := verify_checkpoint(path, f)):
                        return (path, read_state(f, path, need)) if need else path
            if vanished(path) and path not in gone:  # listed again once gone: half of it is left, not rotation
                gone.add(path)
                break
            print(f"warning: skipping checkpoint {path}: {reason}", file=sys.stderr)
        else:
            return None
    raise UsageError(f"{out}: its checkpoints were deleted faster than they could be read ({tries} tries)")


def stopped_before_first_checkpoint(out):
    """(the last step logged, the first checkpoint's step) if `out` holds a run that stopped before
    its first checkpoint (killed, a second signal, an error): a config.json, no checkpoint file, a
    metrics.jsonl that ends before the first save; else None."""
    try:
        if any(n.startswith("ckpt_") and n.endswith((".pt", ".json")) for n in os.listdir(out)):
            return None
        args = read_json(os.path.join(out, "config.json"))["args"]
        metrics = os.path.join(out, "metrics.jsonl")
        last = max((r.get("step", 0) for r in (read_jsonl(metrics) if os.path.exists(metrics) else [])), default=0)
        first = min(args["save_every"], args["steps"])
        return (last, first) if last < first else None
    except (OSError, UsageError, KeyError, TypeError):  # no run there, or not one of ours
        return None


def read_state(f, path, need=WEIGHTS):
    """The state in checkpoint `f` (an open file, or its path: mapped, not read) if it is what taco
    saves: a dict with the keys `need` (weights_only: tensors and plain types), weights that are
    tensors, an integer step; else one line naming `path`."""
    try:
        state = torch.load(f, map_location="cpu", weights_only=True, mmap=isinstance(f, str))
    except Exception as err:  # a truncated or foreign file: say which, not a traceback
        raise UsageError(f"cannot read checkpoint {path}: {err.__class__.__name__}") from err
    if not isinstance(state, dict):
        raise UsageError(f"{path} is not a taco checkpoint: it holds a {type(state).__name__}, not the dict "
                         f"taco saves ({', '.join(need)}, ...)")
    missing = [k for k in need if k not in state]
    wrong = [k for k in need if k in state and k in RESUME and not (  # dicts, and an int step (not a bool)
        type(state[k]) is int if k == "step" else isinstance(state[k], dict))]
    if "model" in need and "model" not in missing + wrong and not all(
            isinstance(v, torch.Tensor) for v in state["model"].values()):
        wrong.append("model")  # weights that are not tensors
    if missing or wrong:
        what = f"lacks {', '.join(missing)}" if missing else f"has a malformed {', '.join(wrong)}"
        raise UsageError(f"{path} is not a taco checkpoint: it {what}")
    return state


def load_checkpoint(path, need=WEIGHTS):
    """read_state of checkpoint file `path`; with a manifest, verified through the open file first."""
    with open(cli.regular_file(path, "checkpoint"), "rb") as f:
        if os.path.exists(path[:-3] + ".json") and (reason := verify_checkpoint(path, f)):
            raise UsageError(f"checkpoint {path} is invalid: {reason}")
        return read_state(f, path, need)


# ----------------------------------------------------------------------------- weights to start from

def find_weights(spec):
    """-> (file or folder to load, is_hf) for a taco run directory (its newest valid
    checkpoint), a checkpoint file, or a Hugging Face directory (config.json + weights)."""
    if not os.path.exists(spec):
        raise UsageError(f"{spec} does not exist: pass a taco run directory, a checkpoint file "
                         f"or a Hugging Face model directory")
    if not os.path.isdir(spec):
        return cli.regular_file(spec, "checkpoint"), False
    if source := latest_checkpoint(spec):
        return source, False
    if os.path.isfile(os.path.join(spec, "config.json")) and any(
            os.path.isfile(os.path.join(spec, w)) for w in ("model.safetensors", "pytorch_model.bin")):
        return spec, True
    raise UsageError(f"{spec} holds no valid taco checkpoint (ckpt_*.pt with its manifest) and is "
                     f"not a Hugging Face directory (config.json + model.safetensors)")


def vocab_beside(source):
    """The vocab.txt that goes with a checkpoint file or a model directory."""
    return os.path.join(source if os.path.isdir(source) else os.path.dirname(source), "vocab.txt")


def trained_with(spec):
    """How the weights `spec` names were trained, read without loading them (a recipe depends on it)
    -> (source, run): the taco run's settings (--size, --data, ...; "recipe": the one it trained
    with), or None for a Hugging Face folder (trained elsewhere)."""
    for _ in range(20):  # a run saving in `spec` may delete the checkpoint we found before we read it
        source, is_hf = find_weights(spec)
        if is_hf:
            return source, None
        try:
            ckpt = read_state(source, source)
            break
        except UsageError:
            if not (os.path.isdir(spec) and vanished(source)):
                raise
    else:
        raise UsageError(f"{spec}: its checkpoints were deleted faster than they could be read")
    run, cfg = dict(ckpt["args"]) if isinstance(ckpt.get("args"), dict) else {}, ckpt["model_config"]
    if "recipe" not in run:  # recorded since recipes depend on --init: --size's, unless the model is not that size
        shape = (cfg.get("num_hidden_layers"), cfg.get("hidden_size"), cfg.get("num_attention_heads"))
        run["recipe"] = run.get("size") if SIZES.get(run.get("size")) == shape else "continue"
    return source, run


def load_taco(spec, source):
    """(source, state) of the taco checkpoint `spec` names (find_weights' `source`): of a run folder,
    its newest valid checkpoint at the moment of reading (a run saving there may rotate `source` away)."""
    return (latest_checkpoint(spec, WEIGHTS) if os.path.isdir(spec) else None) or (source, load_checkpoint(source))


class Init(NamedTuple):
    """The weights --init continues from: the model's config, its state dict, the file or folder."""
    config: BertConfig
    state: dict
    source: str


def load_init(spec, flag="--init"):
    """--init: the weights of a trained BertForPreTraining (encoder + MLM head) to continue from
    -> Init. Weights only: optimizer, schedule and step start anew. A Hugging Face encoder without
    an MLM head gets a fresh head (with a note)."""
    source, is_hf = find_weights(spec)
    try:
        if is_hf:
            model = BertForPreTraining.from_pretrained(source)
            return Init(model.config, model.state_dict(), source)
        source, state = load_taco(spec, source)
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
