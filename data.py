"""Data for taco: corpus sources (hub datasets, local text files, the built-in toy corpus),
tokenise-once-and-cache into one flat token array (token_cache.py builds and verifies it),
packing into fixed-length blocks, the batches of each step, and dynamic MLM masking (BERT's
80/10/10; whole-word masking and RetroMAE's decoder views).

    python data.py --data toy --vocab toy                 # build and cache the toy corpus

The tokenizer is tokenizer.py's WordPieceTokenizer; the toy corpus is toy.py's.
"""
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

import cli  # before torch: cli sets how idle CPU threads wait
import numpy as np
import torch

import token_cache
from cli import DataError, default_cache_dir, int_range
from tokenizer import SPECIAL_TOKENS, WordPieceTokenizer
from toy import toy_corpus

# name -> (hub dataset id, config, split, text column, rows joined into one document).
# All are data-only repos (Parquet or Arrow files) that load with datasets >= 3, unlike the
# old script-based "bookcorpus" and "wikitext". SamuelYang/bookcorpus is an Arrow dump of
# the original 74M rows: one sentence per row and no book boundaries, so runs of 100 rows
# are joined into one pseudo-document rather than putting a [SEP] after every sentence.
SOURCES = {
    "wikipedia": ("wikimedia/wikipedia", "20231101.en", "train", "text", 1),
    "bookcorpus": ("SamuelYang/bookcorpus", None, "train", "text", 100),
    "wikitext103": ("Salesforce/wikitext", "wikitext-103-raw-v1", "train", "text", 1),
    "toy": None,  # built offline by toy.toy_corpus()
}


# ----------------------------------------------------------------------------- the tokenizer of a run

def load_tokenizer(spec, cache_dir=None):
    """spec: "toy", a vocab.txt, a folder holding one, or a hub model id such as
    bert-base-uncased (downloaded into the Hugging Face cache). Cased hub models
    (id has "cased" but not "uncased") keep case; everything else is lowercased."""
    spec = str(spec)
    if spec == "toy":
        return WordPieceTokenizer(toy_corpus(cache_dir) / "vocab.txt")
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "vocab.txt"
    if path.exists() or spec.endswith(".txt") or spec.startswith((".", "/", "~")):
        return WordPieceTokenizer(path)
    try:
        from huggingface_hub import hf_hub_download
        path = hf_hub_download(spec, "vocab.txt")
    except Exception as e:  # offline, unknown repo, no vocab.txt in it, ...
        raise DataError(f"could not fetch vocab.txt of {spec!r} from the Hugging Face hub ({type(e).__name__}): "
                        f"pass a local vocab.txt (or a folder holding one) as --vocab, or --data toy "
                        f"for the offline toy corpus") from None
    lower = not ("cased" in spec.lower() and "uncased" not in spec.lower())
    return WordPieceTokenizer(path, do_lower_case=lower)


# ----------------------------------------------------------------------------- corpora

_BLANK_LINE = re.compile(r"\n[ \t\r]*\n")


def read_documents(path):
    """Documents of a local text file: blank-line-separated paragraph groups, or one per
    line if the file has no blank line. Bytes that are not UTF-8 become U+FFFD (which the
    tokenizer drops) with one warning per file; NUL bytes mean binary and are refused."""
    raw = Path(cli.regular_file(path, "data file")).read_bytes()
    if b"\x00" in raw[:8192]:
        raise DataError(f"{path} looks binary (NUL bytes): pass UTF-8 text files")
    text = raw.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - raw.count("\ufffd".encode())  # minus genuine U+FFFD
    if bad:
        print(f"warning: {path} is not UTF-8; {bad} bad byte sequence(s) dropped", file=sys.stderr)
    docs = _BLANK_LINE.split(text) if _BLANK_LINE.search(text) else text.splitlines()
    docs = [d.strip() for d in docs if d.strip()]
    if not docs:
        raise DataError(f"{path} is empty: pass a file with text in it")
    return docs


def looks_like_vocabulary(path, head=1 << 16):
    """True if a text file reads as a WordPiece vocabulary rather than text: one token per line
    (no spaces), with BERT's special tokens ([PAD], [CLS], ...) or many "##" pieces. Judged on
    its first 64 KB."""
    with open(path, "rb") as f:
        lines = f.read(head).decode("utf-8", errors="replace").splitlines()
    words = [w.strip() for w in lines[:-1] or lines if w.strip()]  # the last line may be cut short
    if len(words) < 5 or sum(len(w.split()) > 1 for w in words) > len(words) // 100:
        return False
    specials = sum(w in SPECIAL_TOKENS for w in words)
    pieces = sum(w.startswith("##") and len(w) > 2 for w in words)
    return specials >= 2 or pieces >= len(words) // 20


class Sources(NamedTuple):
    """--data resolved: parts ("file", Path) / ("hub", name), a label for each part of the
    spec (for the summary line), warnings about what a folder held that is not read."""
    parts: list
    labels: list
    warnings: list


def _resolve(data_spec, cache_dir):
    """'toy,wikipedia,notes.txt,dir/' -> Sources. A folder gives its own *.txt files, sorted
    (not its subfolders, not hidden files), less those that look like a vocabulary (a vocab.txt
    beside the text): those are skipped with a warning. A file named in --data is always read."""
    parts, labels, warnings = [], [], []
    for name in (s.strip() for s in str(data_spec).split(",") if s.strip()):
        path = Path(name).expanduser()
        if name == "toy":
            parts.append(("file", toy_corpus(cache_dir) / "train.txt"))
            labels.append("toy")
        elif name in SOURCES:
            parts.append(("hub", name))
            labels.append(name)
        elif path.is_dir():
            entries = sorted(p for p in path.iterdir() if not p.name.startswith("."))
            texts = [p for p in entries if p.suffix.lower() == ".txt" and not p.is_dir()]
            others = [p.name + "/" * p.is_dir() for p in entries if p not in texts]
            if not texts:
                held = f" (it holds {', '.join(others[:3])}{', ...' * (len(others) > 3)})" if others else ""
                raise DataError(f"folder {path} has no *.txt files{held}: --data reads a folder's *.txt files; "
                                f"rename them, or name the files in --data")
            vocabs = [p for p in texts if looks_like_vocabulary(cli.regular_file(p, "data file"))]
            if vocabs:
                warnings.append(f"{path}: skipped {', '.join(p.name for p in vocabs)}: "
                                f"{'it looks' if len(vocabs) == 1 else 'they look'} like a vocabulary (one token "
                                f"a line, [PAD]/[CLS] or ## pieces), not text; name it in --data to read it anyway")
            texts = [p for p in texts if p not in vocabs]
            if not texts:
                raise DataError(f"folder {path} holds only a vocabulary ({', '.join(p.name for p in vocabs)}), "
                                f"no text: put the training text in it as *.txt files")
            parts += [("file", p) for p in texts]
            unread = f"; not read: {', '.join(others[:3])}{', ...' * (len(others) > 3)}" if others else ""
            labels.append(f"{path}/ ({len(texts)} *.txt file{'s' * (len(texts) > 1)}{unread})")
        elif os.path.lexists(path):  # a file, or a FIFO / symlink loop: say which
            parts.append(("file", Path(cli.regular_file(path, "data file"))))
            labels.append(str(path))
            if looks_like_vocabulary(path):
                warnings.append(f"{path} looks like a vocabulary (one token a line, [PAD]/[CLS] or ## pieces), "
                                f"not text; it is read as training text because --data names it")
        else:
            raise DataError(f"unknown data source {name!r}: use {', '.join(SOURCES)}, a file or a folder")
    if not parts:
        raise DataError("no data source given: pass toy, a hub source name, a file or a folder")
    return Sources(parts, labels, warnings)


def load_documents(data_spec, cache_dir=None):
    """A datasets.Dataset with one "text" column, one document per row. data_spec is a
    comma-separated list of SOURCES names, text files and folders (see _resolve for what a
    folder gives); read_documents says how a text file splits into documents."""
    return _load(_resolve(data_spec, cache_dir).parts)


def _load(parts):
    import datasets
    sets = []
    for kind, what in parts:
        if kind == "file":
            sets.append(datasets.Dataset.from_dict({"text": read_documents(what)}))
            continue
        repo, config, split, column, rows_per_doc = SOURCES[what]
        try:
            ds = datasets.load_dataset(repo, config, split=split).select_columns([column])
        except Exception as e:  # offline, hub unreachable, dataset moved, ...
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise DataError(f"could not load {what} ({repo}) from the Hugging Face hub: {reason}; pass "
                            f"local text files or folders of them as --data, or --data toy for the "
                            f"offline toy corpus") from None
        if column != "text":
            ds = ds.rename_column(column, "text")
        if rows_per_doc > 1:
            ds = ds.map(lambda b: {"text": [" ".join(b["text"])]}, batched=True,
                        batch_size=rows_per_doc)
        sets.append(ds)
    return sets[0] if len(sets) == 1 else datasets.concatenate_datasets(sets)


def unavailable(data_spec, cache_dir=None):
    """Why data_spec cannot be loaded now, found without loading it (None if nothing is found):
    a name that is no source, or hub sources out of reach (offline and not cached). Asked when
    the vocabulary is missing too, so that one message names everything missing."""
    try:
        parts = _resolve(data_spec, cache_dir).parts
    except DataError as err:
        return str(err)
    import datasets
    missing = []
    for name in (what for kind, what in parts if kind == "hub"):
        try:
            datasets.load_dataset_builder(*SOURCES[name][:2])  # the hub's metadata or the local cache
        except Exception as e:
            missing.append(f"{name}: {(str(e).strip().splitlines() or [type(e).__name__])[0]}")
    return (f"nor can --data {data_spec} be loaded ({'; '.join(missing)}): pass local text files or folders "
            f"of them as --data" if missing else None)


def token_cache_path(data_spec, tokenizer, cache_dir=None):
    """Where tokenize_corpus caches data_spec's tokens: a key hashed from the sources (a local
    file by path, size and mtime), the vocabulary and the array format."""
    return _cache_path(_resolve(data_spec, cache_dir).parts, tokenizer, cache_dir)


def _cache_path(parts, tokenizer, cache_dir):
    cache_dir = Path(cache_dir or default_cache_dir())
    sources = []
    for kind, what in parts:
        if kind == "file":
            st = what.stat()
            sources.append([str(what.resolve()), st.st_size, st.st_mtime_ns])
        else:
            sources.append(list(SOURCES[what]))
    vocab = hashlib.sha256(Path(tokenizer.vocab_file).read_bytes()).hexdigest()
    recipe = {"format": token_cache.FORMAT, "sources": sources, "vocab": vocab, "lower": tokenizer.do_lower_case}
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()
    return cache_dir / "tokens" / f"{key[:20]}.npy"


def tokenize_corpus(data_spec, tokenizer, cache_dir=None, num_proc=None, say=None):
    """Tokenise every document once into one flat array, documents separated (and ended)
    by [SEP]; cached as .npy (with a manifest, .json) under a key of what made it, verified
    before every use (a damaged cache is rebuilt, with a warning), returned as a read-only
    memmap. Warnings and a line saying what was read go to `say` (default: stderr); so does a
    line naming the cache when it is reused, if `say` is given (a run's log; other scripts stay
    quiet). Under DDP rank 0 builds it; the others wait for cached_tokens."""
    quiet_reuse, say = say is None, say or (lambda line: print(line, file=sys.stderr))
    cache_dir = Path(cache_dir or default_cache_dir())
    sources = _resolve(data_spec, cache_dir)
    for warning in sources.warnings:
        say(f"warning: {warning}")
    path = _cache_path(sources.parts, tokenizer, cache_dir)
    what = ", ".join(sources.labels)
    tokens = token_cache.verified(path, tokenizer, say)
    if tokens is None:
        fingerprints = token_cache.source_fingerprints(sources.parts)  # taken before the text is read
        token_cache.build(path, _load(sources.parts), fingerprints, tokenizer, num_proc,
                          lambda line: say(f"data: {what}: {line}"))
        tokens = np.load(path, mmap_mode="r")
    elif not quiet_reuse:
        say(f"data: {what}: {len(tokens):,} tokens, tokenized before: reusing the token cache {path}")
    return tokens


def cached_tokens(data_spec, tokenizer, cache_dir=None):
    """data_spec's cached token array if it verifies (token_cache.verified), else None; says nothing and
    removes nothing (what DDP's other ranks wait for while rank 0 builds it)."""
    return token_cache.verified(token_cache_path(data_spec, tokenizer, cache_dir), tokenizer)


def tokens_sha256(data_spec, tokenizer, cache_dir=None):
    """The checksum of data_spec's token array, from the manifest tokenize_corpus verified: what a
    run trains on (runs.Run records it, so that --resume can refuse other data)."""
    manifest = token_cache_path(data_spec, tokenizer, cache_dir).with_suffix(".json")
    return json.loads(manifest.read_text())["sha256"]


class Blocks:
    """Fixed-length blocks [CLS] + the next max_len-2 tokens + [SEP] of a flat token array,
    cut on demand: blocks[index_array] (or a slice) -> (k, max_len) array of just those
    blocks, the same dtype as the tokens. Block i is tokens[i*body:(i+1)*body] with body =
    max_len-2; no padding, no [CLS] mid-block, the final partial chunk is dropped. Nothing is
    copied up front, so on a memory-mapped token cache memory does not grow with the corpus."""

    def __init__(self, tokens, max_len, cls_id, sep_id, first=0, count=None):
        self.tokens, self.max_len, self.cls_id, self.sep_id = tokens, max_len, cls_id, sep_id
        self.body = max_len - 2
        self.first = first  # index of our block 0 among all blocks of `tokens`
        self.count = len(tokens) // self.body - first if count is None else count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        """index: a slice or an array of block numbers in [0, len)."""
        if isinstance(index, slice):
            rows = np.arange(*index.indices(self.count))
        else:
            rows = np.asarray(index, dtype=np.int64).reshape(-1)
            if len(rows) and not (0 <= rows.min() and rows.max() < self.count):
                raise IndexError(f"block numbers must lie in [0, {self.count})")
        rows = rows + self.first  # (k,) among all blocks of the tokens
        body = self.tokens[rows[:, None] * self.body + np.arange(self.body)]  # (k, body) gather
        out = np.empty((len(rows), self.max_len), dtype=self.tokens.dtype)
        out[:, 0], out[:, 1:-1], out[:, -1] = self.cls_id, body, self.sep_id
        return out

    def split(self, at):
        """(blocks[:at], blocks[at:]) as Blocks over the same tokens (the held-out tail)."""
        if not 0 <= at <= self.count:
            raise IndexError(f"split point {at} outside [0, {self.count}]")
        head = Blocks(self.tokens, self.max_len, self.cls_id, self.sep_id, self.first, at)
        return head, Blocks(self.tokens, self.max_len, self.cls_id, self.sep_id, self.first + at, self.count - at)


def make_blocks(tokens, max_len, cls_id, sep_id):
    """Blocks of max_len over tokens (see Blocks), after checking that max_len fits BERT and
    that the corpus holds at least one block."""
    if not 8 <= max_len <= 512:
        raise DataError(f"max_len {max_len} is outside [8, 512]: pass a --max_len in that range")
    if len(tokens) < max_len - 2:
        raise DataError(f"the corpus has {len(tokens)} tokens, fewer than one block of {max_len}: "
                        "use more text or a smaller --max_len")
    return Blocks(tokens, max_len, cls_id, sep_id)


class Batches:
    """The training blocks of each optimizer step: a fresh permutation per epoch, seeded by
    (seed, epoch) and so the same on every rank and after a resume; each rank takes its share
    of the global batch and reads it as micro-batches of `micro` sequences."""

    def __init__(self, blocks, batch_size, micro, seed, rank=0, world=1):
        self.blocks, self.batch_size, self.micro, self.seed = blocks, batch_size, micro, seed
        self.per_rank, self.rank = batch_size // world, rank
        self.accumulation = self.per_rank // micro  # micro-batches per step on each rank
        self.per_epoch = len(blocks) // batch_size  # optimizer steps per epoch
        if self.per_epoch == 0:
            raise DataError(f"the corpus gives {len(blocks)} training blocks of {blocks.max_len} tokens, "
                            f"fewer than one batch of {batch_size}; lower --batch_size or add data")
        self.epoch, self.order = None, None

    def at(self, step):
        """This rank's micro-batches of optimizer step `step`: a list of int64 tensors (micro, max_len)."""
        epoch, i = divmod(step, self.per_epoch)
        if epoch != self.epoch:  # int32 (the same order as int64): 4 bytes a block, the one buffer that grows
            self.order = torch.randperm(len(self.blocks), generator=torch.Generator().manual_seed(self.seed + epoch),
                                        dtype=torch.int32)
            self.epoch = epoch
        mine = self.order[i * self.batch_size:(i + 1) * self.batch_size][self.rank * self.per_rank:
                                                                         (self.rank + 1) * self.per_rank]
        rows = [np.sort(mine[j:j + self.micro].numpy()) for j in range(0, self.per_rank, self.micro)]  # file order
        return [torch.from_numpy(self.blocks[r].astype(np.int64)) for r in rows]


# ----------------------------------------------------------------------------- masking

def mask_tokens(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """BERT's dynamic masking (Devlin et al. 2019, sec. 3.1): each non-special token is
    chosen with probability p; of those 80% -> [MASK], 10% -> a random non-special token,
    10% kept. Returns new int64 (inputs, labels), labels -100 where nothing is predicted.
    Random numbers come only from `generator`, drawn on its device and then moved."""
    input_ids = input_ids.long()
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids, device=input_ids.device))
    selected = (rand(generator, input_ids.device, *input_ids.shape) < mlm_probability) & ~special
    return mask_selected(input_ids, selected, tokenizer, generator)


def mask_selected(input_ids, selected, tokenizer, generator=None):
    """BERT's 80/10/10 at the `selected` (B, T) positions -> int64 (inputs, labels): 80% become
    [MASK], 10% a random non-special token, 10% stay; labels -100 where not selected."""
    device = input_ids.device
    input_ids = input_ids.long()
    normal = torch.ones(tokenizer.vocab_size, dtype=torch.bool)
    normal[tokenizer.special_ids] = False
    normal_ids = normal.nonzero().squeeze(1).to(device)  # allowed random replacements
    action = rand(generator, device, *input_ids.shape)
    where = generator.device if generator is not None else torch.device("cpu")
    pick = torch.randint(len(normal_ids), input_ids.shape, generator=generator, device=where)
    labels = torch.where(selected, input_ids, -100)
    inputs = torch.where(selected & (action < 0.8), tokenizer.mask_id, input_ids)
    randomize = selected & (action >= 0.8) & (action < 0.9)
    inputs = torch.where(randomize, normal_ids[pick.to(device)], inputs)
    return inputs, labels


def rand(generator, device, *shape):
    """Uniform [0, 1) numbers drawn on the generator's device (on `device` without one), moved to
    `device`; the masks here and TACO's samplers draw with it."""
    where = generator.device if generator is not None else device
    return torch.rand(*shape, generator=generator, device=where).to(device)


def whole_word_mask(input_ids, tokenizer, probability, generator=None, n=1):
    """Whole-word masking as Hugging Face's DataCollatorForWholeWordMask chooses (RetroMAE's
    encoder and decoder masks): n independent masks per sequence -> (B, n, T) bool, True = chosen.

    A word is a piece plus the "##" pieces after it (a "##" right after a mid-block [SEP] joins
    the word before the [SEP], as in HF); [CLS], [SEP] and padding are never chosen, [UNK] is a
    word like any other (HF skips only "[CLS]" and "[SEP]"). k = round(L * p)
    (at least 1, at most 512) with L the non-padding length, specials included. Words are
    visited in a random order (the argsort of one uniform draw per position, (B*n, T)); a word
    is taken if it still fits in k, skipped if it would overflow, until k tokens are chosen.
    Vectorised: the first prefix of the order that fits is taken at once, then each round jumps
    to the next word that fits the budget left; the budget shrinks every round, so there are at
    most (longest word) rounds.
    """
    ids = input_ids.long()
    B, T = ids.shape
    device = ids.device
    candidate = ~torch.isin(ids, torch.tensor(frame_ids(tokenizer), device=device))
    cont = tokenizer.is_continuation.to(device)[ids] & candidate
    after_word = (candidate.long().cumsum(1) - candidate.long()) > 0  # a candidate lies before it
    start = candidate & ~(cont & after_word)  # the first piece of a word
    pos = torch.arange(T, device=device)
    word = torch.where(start, pos, -1).cummax(1).values.clamp(min=0)  # (B, T) its word's first piece
    length = torch.zeros(B, T, dtype=torch.long, device=device).scatter_add_(1, word, candidate.long())
    real = (ids != tokenizer.pad_id).sum(1).double()
    k = (real * probability).round().clamp(1, 512).long()  # Python's round(): half to even

    start, word, length, k = (t.repeat_interleave(n, 0) for t in (start, word, length, k))  # (B*n, ...)
    key = torch.where(start, rand(generator, device, B * n, T), 2.0)  # word starts first, shuffled
    order = key.argsort(1)  # (B*n, T)
    size = torch.where(start, length, T + 1).gather(1, order)  # word lengths in visiting order; never-fitting tail
    taken = torch.zeros(B * n, T, dtype=torch.bool, device=device)
    left, ptr = k, torch.zeros(B * n, dtype=torch.long, device=device)
    rows = torch.arange(B * n, device=device)  # rows where another word may still fit
    while rows.numel():
        s, l = size[rows], left[rows]
        fits = (pos >= ptr[rows, None]) & (s <= l[:, None])
        go = fits.any(1)
        rows, s, l, fits = rows[go], s[go], l[go], fits[go]
        first = fits.long().argmax(1)  # the next word that fits
        rest = pos >= first[:, None]
        take = rest & ((s * rest).cumsum(1) <= l[:, None])  # the longest prefix from it that fits
        taken[rows] |= take
        left[rows] = l - (s * take).sum(1)
        ptr[rows] = first + take.sum(1)  # the word that overflowed: skipped
    chosen_word = torch.zeros_like(taken).scatter_(1, order, taken)  # back to positions of first pieces
    chosen = chosen_word.gather(1, word) & candidate.repeat_interleave(n, 0)
    return chosen.view(B, n, T)


def decoder_visible(input_ids, tokenizer, probability, generator=None, pool=256):
    """RetroMAE's enhanced-decoding attention matrix -> (B, T, T) bool, True = row i may see key j.
    A pool of min(T, pool) whole-word masks at `probability` is drawn per sequence; each row picks
    one (uniformly, with replacement), hides its own position too, and sees everything else
    except padding. [CLS] (key 0, the sentence embedding) is special, so always visible to the
    other rows."""
    ids = input_ids.long()
    B, T = ids.shape
    masks = whole_word_mask(ids, tokenizer, probability, generator, n=min(T, pool))  # (B, M, T)
    where = generator.device if generator is not None else torch.device("cpu")
    pick = torch.randint(masks.size(1), (B, T), generator=generator, device=where).to(ids.device)
    hidden = masks[torch.arange(B, device=ids.device)[:, None], pick]  # (B, T, T): row i's mask
    hidden |= torch.eye(T, dtype=torch.bool, device=ids.device)  # a row never sees its own token
    return ~hidden & (ids != tokenizer.pad_id)[:, None, :]


def retromae_batch(input_ids, tokenizer, enc_probability=0.3, dec_probability=0.5, generator=None, pool=256):
    """One RetroMAE batch -> (inputs, labels, visible, dec_labels): the encoder's whole-word-masked
    input and its MLM labels; the decoder's (B, T, T) visibility over the *unmasked* ids and its
    labels, every token but [CLS], [SEP] and padding (RetroMAE's collator, staoxiao/RetroMAE
    src/pretrain/data.py). [UNK] as there: a word the masks may choose, never masked in the encoder
    (HF's torch_mask_tokens drops every special position, [UNK] among them, after the word walk),
    hidden from decoder rows and a decoder target like any other token."""
    ids = input_ids.long()
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids, device=ids.device))
    selected = whole_word_mask(ids, tokenizer, enc_probability, generator)[:, 0] & ~special
    inputs, labels = mask_selected(ids, selected, tokenizer, generator)
    visible = decoder_visible(ids, tokenizer, dec_probability, generator, pool)
    frame = torch.isin(ids, torch.tensor(frame_ids(tokenizer), device=ids.device))
    return inputs, labels, visible, torch.where(frame, -100, ids)


def frame_ids(tokenizer):
    """[CLS], [SEP], [PAD]: the tokens that frame a text, not part of it (HF's whole-word walk skips them)."""
    return [tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id]


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--data", required=True, help="comma-separated sources: toy, "
                   f"{', '.join(s for s in SOURCES if s != 'toy')}, text files or folders")
    p.add_argument("--vocab", default="bert-base-uncased",
                   help="toy, a vocab.txt, a folder with one, or a hub model id")
    p.add_argument("--max_len", type=int_range(8, 512), default=128, help="block length to report for --data")
    p.add_argument("--num_proc", type=int_range(1), default=None,
                   help="tokenisation processes (default: one per 100 MB of text, at most one per core)")
    p.add_argument("--cache_dir", default=None, help="default: $TACO_CACHE or ~/.cache/taco")
    args = p.parse_args(argv)
    with cli.errors():
        tok = load_tokenizer(args.vocab, args.cache_dir)
        tokens = tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc)
        blocks = make_blocks(tokens, args.max_len, tok.cls_id, tok.sep_id)
        print(f"{len(tokens):,} tokens ({tokens.dtype}), {len(blocks):,} blocks of {args.max_len}")


if __name__ == "__main__":
    main()
