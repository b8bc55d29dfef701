"""BERT's WordPiece tokenizer, written out: the same ids as Hugging Face's BertTokenizer.

    tok = WordPieceTokenizer("vocab.txt")
    tok.encode("Hello, world!")   # ids, without [CLS] / [SEP]

data.load_tokenizer finds the vocab.txt (a file, a folder, "toy" or a hub id).
"""
import os
import re
import unicodedata
from pathlib import Path

import torch

import cli
from cli import DataError

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
        if not os.path.lexists(path):
            raise DataError(f"vocab file {path} not found: pass a vocab.txt (one token per line)")
        cli.regular_file(path, "vocab file")
        try:  # utf-8-sig: a byte-order mark left by an editor is not part of the first token
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError:
            raise DataError(f"vocab file {path} is not UTF-8: pass a BERT-style vocab.txt") from None
        tokens = text.replace("\r\n", "\n").split("\n")  # Windows line ends too
        if tokens[-1] == "":
            tokens.pop()
        if not tokens:
            raise DataError(f"vocab file {path} is empty: pass a BERT-style vocab.txt")
        missing = [t for t in SPECIAL_TOKENS if t not in tokens]
        if missing:
            raise DataError(f"vocab file {path} lacks {', '.join(missing)}: add them, one per line")
        self.vocab_file = str(path)
        self.do_lower_case = do_lower_case
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ids_to_tokens = tokens
        self.vocab_size = len(tokens)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.vocab[t] for t in SPECIAL_TOKENS)
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
        if "[" in text:  # special tokens are matched on the raw text, before any cleaning
            parts = self._special_re.split(text)
            if len(parts) > 1:
                ids = []
                for i, part in enumerate(parts):
                    ids += [self.vocab[part]] if i % 2 else self._encode_plain(part)
                return ids
        return self._encode_plain(text)

    def tokenize(self, text):
        return [self.ids_to_tokens[i] for i in self.encode(text)]

    def decode(self, ids):
        """Ids -> text: "##" pieces are glued to the previous piece and [PAD] is skipped.
        Other special tokens are kept and no space clean-up is done (" ," stays " ,")."""
        tokens = [self.ids_to_tokens[int(i)] for i in ids if int(i) != self.pad_id]
        return " ".join(tokens).replace(" ##", "")

    def _encode_plain(self, text):
        if _SPLIT_BUT_CONTROL.search(text):
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
            if _ASCII_CONTROL.search(chunk):
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
        # Per-character lowercasing, like BERT's fast tokenizer (Rust char::to_lowercase):
        # str.lower() alone would turn a word-final "Σ" into "ς" instead of "σ".
        return (text.replace("Σ", "σ").lower() if lower else text).split()

    def _wordpiece(self, word):
        """Greedy longest-match-first split into vocab pieces; [UNK] if any part fails."""
        if len(word) > self.max_word_chars:
            return [self.unk_id]
        vocab = self.vocab
        i = vocab.get(word)
        if i is not None:
            return [i]
        ids, start = [], 0
        while start < len(word):
            longest = self._max_first if start == 0 else self._max_next
            for end in range(min(len(word), start + longest), start, -1):
                i = vocab.get(word[start:end] if start == 0 else "##" + word[start:end])
                if i is not None:
                    break
            else:
                return [self.unk_id]
            ids.append(i)
            start = end
        return ids
