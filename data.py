"""The data loader of TACO: BERT's WordPiece tokenizer, packed blocks, each step's batches, and
dynamic MLM masking (BERT's 80/10/10; whole-word masking and RetroMAE's decoder views).

    tok = load_tokenizer("toy")           # or a vocab.txt, a folder with one, or a hub id
    tok.encode("Hello, world!")           # ids, without [CLS] / [SEP]
    blocks = make_blocks(tokens, 128, tok.cls_id, tok.sep_id)
    inputs, labels = mask_tokens(torch.from_numpy(blocks[0:8].astype(np.int64)), tok)

Where the tokens come from (hub datasets, local files, the toy corpus) and the token cache that
holds them once tokenised are the engineering's: engine/corpus.py (tokenize_corpus).
"""
import re
import unicodedata
from pathlib import Path

import numpy as np
import torch

from engine.cli import DataError
from engine.corpus import hub_reachable
from engine.toy import toy_corpus


# ----------------------------------------------------------------------------- the WordPiece tokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
# Python's str.split() also splits on these, but BERT deletes them as control characters
# (so "a\x1cb" is one word); remove them before splitting into whitespace chunks.
_SPLIT_BUT_CONTROL = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
_ASCII_CONTROL = re.compile("[\x00-\x1f\x7f]")
_ASCII_PIECES = re.compile("[0-9A-Za-z]+|.")  # every other printable ASCII char is punctuation
_ASCII_PUNCT = frozenset(chr(c) for c in range(33, 127) if not chr(c).isalnum())  # also not P*


def _is_cjk(cp):  # BERT's "Chinese character": CJK Unified/Compatibility Ideographs
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


class WordPieceTokenizer:
    """BERT's tokenizer: basic tokenization, then greedy longest-match-first WordPiece.

    Ids equal Hugging Face's BertTokenizer, including special tokens typed in the text
    ("[MASK]" stays one token). Its two versions disagree in corners; we follow the Rust one
    (transformers' default) on a word-final capital sigma (σ, where Python's str.lower()
    gives ς) and the pure-Python one on code points that Rust's older Unicode tables lack
    (unassigned or recent characters, which Rust keeps as [UNK] and Python drops or splits).
    Speed comes from caching the ids of each whitespace-separated chunk of raw text: text
    repeats its chunks, so the slow Unicode path runs about once per distinct chunk.
    """

    max_word_chars = 100  # longer words become [UNK], as in BERT
    max_cache = 1 << 20  # chunks cached before the cache is cleared (bounds memory)

    def __init__(self, vocab_file, do_lower_case=True):
        path = Path(vocab_file)
        try:  # utf-8-sig: a byte-order mark left by an editor is not part of the first token
            text = path.read_text(encoding="utf-8-sig")  # Windows line ends read as "\n" too
        except UnicodeDecodeError:
            raise DataError(f"vocab file {path} is not UTF-8: pass a BERT-style vocab.txt") from None
        tokens = text.removesuffix("\n").split("\n")  # the last line's "\n" ends it, starts no token
        if missing := [t for t in SPECIAL_TOKENS if t not in tokens]:
            raise DataError(f"vocab file {path} lacks {', '.join(missing)}: add them, one per line")
        self.vocab_file = str(path)
        self.do_lower_case = do_lower_case
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ids_to_tokens = tokens
        self.vocab_size = len(tokens)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = map(self.vocab.get, SPECIAL_TOKENS)
        self.special_ids = sorted({self.vocab[t] for t in SPECIAL_TOKENS})
        self.is_continuation = torch.tensor([t.startswith("##") for t in tokens])  # per id: a "##" piece
        self._special_re = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
        # The longest word-initial and "##" pieces bound WordPiece's longest-match search.
        self._max_first = max(len(t) for t in tokens if not t.startswith("##"))
        self._max_next = max((len(t) - 2 for t in tokens if t.startswith("##")), default=0)
        self._cache = {}

    def __len__(self):
        return self.vocab_size

    def encode(self, text):
        """Text -> ids, without [CLS]/[SEP] around it."""
        parts = self._special_re.split(text)  # special tokens are matched on the raw text, before any cleaning
        return [i for k, part in enumerate(parts) for i in ([self.vocab[part]] if k % 2 else self._encode_plain(part))]

    def tokenize(self, text):
        return [self.ids_to_tokens[i] for i in self.encode(text)]

    def decode(self, ids):
        """Ids -> text: "##" pieces are glued to the previous piece and [PAD] is skipped.
        Other special tokens are kept and no space clean-up is done (" ," stays " ,")."""
        tokens = [self.ids_to_tokens[int(i)] for i in ids if int(i) != self.pad_id]
        return " ".join(tokens).replace(" ##", "")

    def _encode_plain(self, text):
        text = _SPLIT_BUT_CONTROL.sub("", text)
        cache, ids = self._cache, []
        for chunk in text.split():
            piece = cache.get(chunk)
            if piece is None:
                piece = [i for word in self._basic_tokenize(chunk) for i in self._wordpiece(word)]
                if len(cache) >= self.max_cache:
                    cache.clear()
                cache[chunk] = piece
            ids += piece
        return ids

    def _basic_tokenize(self, chunk):
        """One whitespace-free chunk -> words: drop control characters, space out CJK
        ideographs, strip accents (NFD, drop Mn) and lowercase, split off punctuation."""
        if chunk.isascii():  # fast path: no accents, CJK or Unicode punctuation possible
            chunk = _ASCII_CONTROL.sub("", chunk)
            if self.do_lower_case:
                chunk = chunk.lower()
            return [chunk] if chunk.isalnum() else _ASCII_PIECES.findall(chunk)
        category, lower = unicodedata.category, self.do_lower_case
        text = "".join(c for c in chunk if c != "\ufffd" and category(c)[0] != "C")  # \0 is Cc
        if lower:
            text = unicodedata.normalize("NFD", text)
        out = []
        for c in text:
            cat = category(c)
            if lower and cat == "Mn":
                continue
            if cat[0] == "P" or c in _ASCII_PUNCT or cat == "Lo" and _is_cjk(ord(c)):
                out += (" ", c, " ")
            else:
                out.append(c)
        text = "".join(out)
        # lowercase per character (Rust's char::to_lowercase): str.lower() makes a word-final "Σ" "ς", not "σ"
        return (text.replace("Σ", "σ").lower() if lower else text).split()

    def _wordpiece(self, word):
        """Greedy longest-match-first split into vocab pieces; [UNK] if any part fails."""
        if len(word) > self.max_word_chars:
            return [self.unk_id]
        ids, start = [], 0
        while start < len(word):
            longest = self._max_first if start == 0 else self._max_next
            for end in range(min(len(word), start + longest), start, -1):
                i = self.vocab.get(word[start:end] if start == 0 else "##" + word[start:end])
                if i is not None:
                    break
            else:
                return [self.unk_id]
            ids.append(i)
            start = end
        return ids


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
        hub_reachable()  # if not, only the local cache is asked
        path = hf_hub_download(spec, "vocab.txt")
    except Exception as e:  # offline, unknown repo, no vocab.txt in it, ...
        raise DataError(f"could not fetch vocab.txt of {spec!r} from the Hugging Face hub ({type(e).__name__}): "
                        f"pass a local vocab.txt (or a folder holding one) as --vocab, or --data toy "
                        f"for the offline toy corpus") from None
    lower = not ("cased" in spec.lower() and "uncased" not in spec.lower())
    return WordPieceTokenizer(path, do_lower_case=lower)


# ----------------------------------------------------------------------------- packed blocks and batches

class Blocks:
    """Fixed-length blocks of a flat token array: block i is [CLS] + tokens[i*body:(i+1)*body] + [SEP],
    body = max_len-2; no padding, no [CLS] mid-block, the final partial chunk dropped. Cut on demand:
    blocks[index_array] (or a slice) -> a (k, max_len) array of just those blocks, the tokens' dtype.
    Nothing is copied up front, so on a memory-mapped token cache memory does not grow with the corpus."""

    def __init__(self, tokens, max_len, cls_id, sep_id, first=0, count=None):
        self.tokens, self.max_len, self.cls_id, self.sep_id = tokens, max_len, cls_id, sep_id
        self.body = max_len - 2
        self.first = first  # index of our block 0 among all blocks of `tokens`
        self.count = len(tokens) // self.body - first if count is None else count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
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
        first = i * self.batch_size + self.rank * self.per_rank  # this rank's share of the step's batch
        mine = self.order[first:first + self.per_rank]
        rows = [np.sort(mine[j:j + self.micro].numpy()) for j in range(0, self.per_rank, self.micro)]  # file order
        return [torch.from_numpy(self.blocks[r].astype(np.int64)) for r in rows]


# ----------------------------------------------------------------------------- masking

def mask_tokens(input_ids, tokenizer, mlm_probability=0.15, generator=None):
    """BERT's dynamic masking (Devlin et al. 2019, sec. 3.1) -> new int64 (inputs, labels), labels
    -100 where nothing is predicted: each non-special token is chosen with probability p, then
    mask_selected's 80/10/10. Random numbers come only from `generator`, drawn on its device, then moved."""
    input_ids = input_ids.long()
    special = torch.isin(input_ids, torch.tensor(tokenizer.special_ids, device=input_ids.device))
    selected = (rand(generator, input_ids.device, *input_ids.shape) < mlm_probability) & ~special
    return mask_selected(input_ids, selected, tokenizer, generator)


def mask_selected(input_ids, selected, tokenizer, generator=None):
    """BERT's 80/10/10 at the `selected` (B, T) positions -> int64 (inputs, labels): 80% become
    [MASK], 10% a random non-special token (taco's choice, as TaCL's: BERT and Hugging Face draw it
    from the whole vocabulary), 10% stay; labels -100 where not selected."""
    device = input_ids.device
    input_ids = input_ids.long()
    normal_ids = torch.from_numpy(np.setdiff1d(np.arange(tokenizer.vocab_size), tokenizer.special_ids)).to(device)
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

    A word is a piece plus the "##" pieces after it (a "##" right after a mid-block [SEP] joins the word
    before the [SEP], as in HF); [CLS], [SEP] and padding are never chosen, [UNK] is a word like any
    other (HF skips only "[CLS]" and "[SEP]"). k = round(L * p) (at least 1, at most 512) with L the
    non-padding length, specials included. Words are visited in a random order (the argsort of one
    uniform draw per position, (B*n, T)); a word is taken if it still fits in k, skipped if it would
    overflow, until k tokens are chosen. Vectorised: the first prefix of the order that fits is taken
    at once, then each round jumps to the next word that fits the budget left; the budget shrinks
    every round, so there are at most (longest word) rounds.
    """
    ids = input_ids.long()
    B, T = ids.shape
    device = ids.device
    candidate = ~is_frame(ids, tokenizer)
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
    return inputs, labels, visible, torch.where(is_frame(ids, tokenizer), -100, ids)


def is_frame(ids, tokenizer):
    """(B, T) bool: [CLS], [SEP], [PAD], which frame a text but are no part of it (HF's word walk skips them)."""
    frame = [tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id]
    return torch.isin(ids, torch.tensor(frame, device=ids.device))
