"""
Data for taco: a WordPiece tokenizer identical to BERT's, corpus sources (hub datasets,
local text files, a built-in offline toy corpus), tokenise-once-and-cache into one flat
token array, packing into fixed-length blocks, and dynamic MLM masking.

    python data.py --data toy --vocab toy                 # build and cache the toy corpus
    python data.py --bench big.txt --vocab path/to/vocab.txt   # speed vs Hugging Face
"""
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import numpy as np
import torch

import cli
from cli import int_range

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# name -> (hub dataset id, config, split, text column, rows joined into one document).
# All are data-only repos (Parquet or Arrow files) that load with datasets >= 3, unlike the
# old script-based "bookcorpus" and "wikitext". SamuelYang/bookcorpus is an Arrow dump of
# the original 74M rows: one sentence per row and no book boundaries, so runs of 100 rows
# are joined into one pseudo-document rather than putting a [SEP] after every sentence.
SOURCES = {
    "wikipedia": ("wikimedia/wikipedia", "20231101.en", "train", "text", 1),
    "bookcorpus": ("SamuelYang/bookcorpus", None, "train", "text", 100),
    "wikitext103": ("Salesforce/wikitext", "wikitext-103-raw-v1", "train", "text", 1),
    "toy": None,  # built offline by toy_corpus()
}
TOKENS_FORMAT = 1  # bump when the cached token-array layout changes


class DataError(cli.UsageError):
    """A user mistake (bad path, file or vocab); the one-line message says how to fix it."""


def default_cache_dir():
    return Path(os.environ.get("TACO_CACHE", Path.home() / ".cache" / "taco"))


# ----------------------------------------------------------------------------- tokenizer

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


# ----------------------------------------------------------------------------- toy corpus
# Documents have GLOBAL semantics (one latent topic per document picks most content words)
# and LOCAL structure (a small grammar with number agreement, tense, relative clauses).
# Hyphens mark WordPiece pieces: "light-house" is in the vocab as "light" + "##house";
# inflected forms ("rabbits", "chased") are stem + "##s"/"##es"/"##d"/"##ed".

TOY_VERSION = 1  # bump when the generator's output changes
TOPICS = {  # topic -> (nouns, verbs, adjectives)
    "farm": ("dog horse cow goat rabbit duck pig hen barn field fence farmer tractor meadow bucket mub-ble-wort",
             "chase graze herd guard pull follow gather milk plough shear",
             "muddy woolly lazy brown noisy sleepy rustic hungry"),
    "sea": ("ship sailor wave harbor island whale captain boat net shell reef light-house storm crab anchor zor-bla-quin",
            "sail row steer fish dive float wreck drift haul rescue",
            "salty stormy deep blue calm wet coastal rocky"),
    "space": ("planet star rocket comet orbit moon astronaut telescope nebula satellite crater asteroid capsule probe module quo-ri-vex",
              "launch observe land explore detect circle measure track beam orbit",
              "distant bright cosmic lunar silent frozen vast orbital"),
    "music": ("song band guitar drum singer piano violin chord concert stage ticket record note choir trumpet fen-dra-lok",
              "play perform tune strum whistle compose rehearse conduct applaud sample",
              "loud soft jazzy musical classical catchy lively acoustic"),
    "kitchen": ("bread soup cake oven chef spoon kettle onion pepper cheese apple dough recipe plate bowl gru-mel-tash",
                "bake cook slice boil roast taste mix serve peel season",
                "fresh spicy warm sweet crispy tasty salted sour"),
    "medicine": ("doctor nurse patient clinic fever pill wound bandage surgeon ward virus vaccine heart bone syringe pel-tro-vin",
                 "treat heal examine cure inject prescribe test monitor diagnose rest",
                 "sick healthy sterile pale medical chronic gentle weak"),
    "computing": ("computer program server screen key-board file network robot chip code data-base cable pixel laptop printer kra-xi-dol",
                  "compute download install compile encrypt print upload crash render type",
                  "digital binary fast virtual wireless broken modern smart"),
    "mountain": ("mountain river cloud snow rain wind valley glacier forest hill rock lake thunder peak trail vu-lo-mir",
                 "climb hike melt flood flow pour wander cross camp descend",
                 "icy foggy steep misty windy green wild cold"),
    "sport": ("ball team coach player goal match racket referee stadium medal runner helmet court jersey league sto-bri-gan",
              "kick pass score jump tackle train defend cheer race block",
              "fit quick strong athletic rival final tired proud"),
    "school": ("teacher student book lesson class-room pencil desk page exam poem essay chapter letter word class nim-bo-thral",
               "learn spell explain answer memorize recite grade borrow review question",
               "clever quiet curious academic thick boring famous careful"),
}
COMMON = ("friend neighbor morning place group thing day year town village",
          "like watch want need help show move visit enjoy share",
          "good new small big little nice old great")
DETERMINERS = ("the a this that every one", "the some these those many two three several")
PREPOSITIONS = "near with behind under beside across into over from for along around".split()
OPENERS = "today yesterday later suddenly often sometimes meanwhile again".split()
FUNCTION_WORDS = "an is are was were does do did and but while because that which".split()


def _inflect(word, suffix):
    """Regular English inflection: "box"+"s" -> "boxes", "chase"+"ed" -> "chased"."""
    if suffix == "s" and word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if suffix == "ed" and word.endswith("e"):
        return word + "d"
    return word + suffix


class _ToyGrammar:
    """Sentences about a topic: 85% of content words from it, 8% common, 7% other topics."""

    def __init__(self, rng):
        self.rng = rng
        self.lex = {t: [w.replace("-", "").split() for w in pos] for t, pos in TOPICS.items()}
        self.common = [pos.replace("-", "").split() for pos in COMMON]

    def content(self, topic, pos):  # pos: 0 noun, 1 verb, 2 adjective
        r = self.rng.random()
        if r < 0.85:
            return self.rng.choice(self.lex[topic][pos])
        if r < 0.93:
            return self.rng.choice(self.common[pos])
        return self.rng.choice(self.lex[self.rng.choice(list(TOPICS))][pos])

    def noun_phrase(self, topic, plural):
        rng = self.rng
        noun = self.content(topic, 0)
        words = [self.content(topic, 2)] if rng.random() < 0.4 else []
        words.append(_inflect(noun, "s") if plural else noun)
        det = rng.choice(DETERMINERS[plural].split())
        if det == "a" and words[0][0] in "aeiou":
            det = "an"
        return [det] + words

    def verb(self, topic, plural, past):  # agrees with its subject in the present tense
        verb = self.content(topic, 1)
        return _inflect(verb, "ed") if past else verb if plural else _inflect(verb, "s")

    def clause(self, topic, past):
        rng, plural = self.rng, self.rng.random() < 0.5
        subject = self.noun_phrase(topic, plural)
        if rng.random() < 0.2:  # relative clause: the main verb still agrees with the head noun
            subject += [rng.choice(("that", "which")), self.verb(topic, plural, past)]
            subject += self.noun_phrase(topic, rng.random() < 0.5)
        if rng.random() < 0.2:
            copula = ("was", "were") if past else ("is", "are")
            words = subject + [copula[plural], self.content(topic, 2)]
        else:
            words = subject + [self.verb(topic, plural, past)]
            words += self.noun_phrase(topic, rng.random() < 0.5)
        if rng.random() < 0.5:
            words += [rng.choice(PREPOSITIONS)] + self.noun_phrase(topic, rng.random() < 0.5)
        return words

    def sentence(self, topic, past):
        rng, r = self.rng, self.rng.random()
        if r < 0.1:  # question with do-support: "Does the dog chase a cow?"
            plural = rng.random() < 0.5
            aux = "did" if past else ("do" if plural else "does")
            words = [aux] + self.noun_phrase(topic, plural) + [self.content(topic, 1)]
            words += self.noun_phrase(topic, rng.random() < 0.5) + ["?"]
        elif r < 0.25:
            words = self.clause(topic, past) + [",", rng.choice(("and", "but", "while", "because"))]
            words += self.clause(topic, past) + ["."]
        elif r < 0.35:
            words = [rng.choice(OPENERS), ","] + self.clause(topic, past) + [rng.choice(".!")]
        else:
            words = self.clause(topic, past) + ["."]
        text = re.sub(r" ([,.?!])", r"\1", " ".join(words))
        return text[0].upper() + text[1:]


def _toy_vocab():
    """Specials, a few [unused], ASCII characters (so nothing is [UNK]), suffix pieces, words."""
    chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    tokens = list(SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(5)] + chars
    tokens += ["##" + c for c in chars if c.isalnum()] + ["##es", "##ed"]
    words, pieces = set(FUNCTION_WORDS + PREPOSITIONS + OPENERS), set()
    for pos_lists in list(TOPICS.values()) + [COMMON] + [DETERMINERS]:
        for word in " ".join(pos_lists).split():
            first, *rest = word.split("-")
            words.add(first)
            pieces.update("##" + p for p in rest)
    return list(dict.fromkeys(tokens + sorted(words) + sorted(pieces)))


def _write_toy(out, rng, n_docs=3000, n_pairs=(4000, 1000, 1000), n_sim=200):
    grammar, topics = _ToyGrammar(rng), list(TOPICS)
    (out / "vocab.txt").write_text("\n".join(_toy_vocab()) + "\n", encoding="utf-8")
    docs = []
    for _ in range(n_docs):
        topic, past = rng.choice(topics), rng.random() < 0.3
        docs.append("\n".join(grammar.sentence(topic, past) for _ in range(rng.randint(6, 15))))
    (out / "train.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    # Labelled pairs: 1 = both sentences come from documents of the same topic.
    (out / "glue").mkdir()
    for split, n in zip(("train", "dev", "test"), n_pairs):
        labels = [i % 2 for i in range(n)]
        rng.shuffle(labels)
        rows = ["index\tsentence1\tsentence2" if split == "test" else "sentence1\tsentence2\tlabel"]
        for i, label in enumerate(labels):
            t1 = rng.choice(topics)
            t2 = t1 if label else rng.choice([t for t in topics if t != t1])
            s1, s2 = (grammar.sentence(t, rng.random() < 0.3) for t in (t1, t2))
            rows.append(f"{i}\t{s1}\t{s2}" if split == "test" else f"{s1}\t{s2}\t{label}")
        (out / "glue" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    # Word similarity in WordSim353 form over single-token words: same topic scores high.
    single = {t: [w for pos in TOPICS[t] for w in pos.split() if "-" not in w] for t in topics}
    rows = ["# toy word similarity (WordSim353 format): word1<TAB>word2<TAB>score in [0, 10]",
            "# same-topic pairs score 7-10, cross-topic pairs 0-3"]
    for i in range(n_sim):
        t1 = rng.choice(topics)
        t2 = t1 if i % 2 == 0 else rng.choice([t for t in topics if t != t1])
        w1, w2 = rng.sample(single[t1], 2) if t1 == t2 else map(rng.choice, (single[t1], single[t2]))
        score = rng.uniform(7, 10) if t1 == t2 else rng.uniform(0, 3)
        rows.append(f"{w1}\t{w2}\t{score:.2f}")
    (out / "wordsim.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")


def toy_corpus(cache_dir=None, seed=0):
    """Directory with vocab.txt, train.txt, glue/{train,dev,test}.tsv and wordsim.txt, generated
    once per (seed, TOY_VERSION) and published atomically (temp dir + rename)."""
    final = Path(cache_dir or default_cache_dir()) / f"toy-v{TOY_VERSION}-seed{seed}"
    return _generate_once(final, lambda tmp: _write_toy(tmp, random.Random(seed)))


def _generate_once(final, write):
    """The folder `final`, filled by write(folder) the first time: in a temp folder beside it,
    then renamed into place, so a reader never sees half of it."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        write(tmp)
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():  # a concurrent process that won the race is fine
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_toy_sentence_eval(out, rng, n_docs=1000, n_queries=300, n_sts=1000):
    """Sentence-embedding test sets from the toy grammar (RetroMAE's probes), BEIR and STS layout."""
    grammar, topics = _ToyGrammar(rng), list(TOPICS)
    # Retrieval: short documents of one topic; a query is one sentence of a document (kept in it:
    # toy documents share nothing else, so a removed sentence would leave no trace of its source).
    # Relevance 2 = the source document, 1 = another document of the same topic.
    (out / "retrieval" / "qrels").mkdir(parents=True)
    docs = []
    for _ in range(n_docs):
        topic, past = rng.choice(topics), rng.random() < 0.3
        docs.append((topic, [grammar.sentence(topic, past) for _ in range(rng.randint(2, 4))]))
    corpus = [json.dumps({"_id": f"d{i}", "title": "", "text": " ".join(sents)}) for i, (_, sents) in enumerate(docs)]
    queries, qrels = [], ["query-id\tcorpus-id\tscore"]
    for q in range(n_queries):
        source = rng.randrange(n_docs)
        topic, sents = docs[source]
        queries.append(json.dumps({"_id": f"q{q}", "text": rng.choice(sents)}))
        qrels += [f"q{q}\td{i}\t{2 if i == source else 1}" for i, (t, _) in enumerate(docs) if t == topic]
    for name, lines in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels/test.tsv", qrels)):
        (out / "retrieval" / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    # Similarity (STS layout): two-sentence texts; the score counts the second text's sentences
    # that are about the first text's topic (0, 1 or 2).
    rows = ["sentence1\tsentence2\tscore"]
    for _ in range(n_sts):
        t1, score = rng.choice(topics), rng.randint(0, 2)
        others = [t for t in topics if t != t1]
        s1 = " ".join(grammar.sentence(t1, rng.random() < 0.3) for _ in range(2))
        s2 = " ".join(grammar.sentence(t1 if j < score else rng.choice(others), rng.random() < 0.3) for j in range(2))
        rows.append(f"{s1}\t{s2}\t{score}")
    (out / "sts.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def toy_sentence_eval(cache_dir=None, seed=0):
    """Directory with retrieval/{corpus.jsonl, queries.jsonl, qrels/test.tsv} (BEIR layout) and
    sts.tsv (sentence1, sentence2, score), generated from the toy grammar with a random stream of
    its own (the toy corpus and its numbers are untouched), published atomically."""
    final = Path(cache_dir or default_cache_dir()) / f"toy-sentence-eval-v{TOY_VERSION}-seed{seed}"
    return _generate_once(final, lambda tmp: _write_toy_sentence_eval(tmp, random.Random(f"sentence-eval-{seed}")))


# ----------------------------------------------------------------------------- corpora

_BLANK_LINE = re.compile(r"\n[ \t\r]*\n")


def _read_documents(path):
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


def _resolve(data_spec, cache_dir):
    """'toy,wikipedia,notes.txt,dir/' -> list of ("file", Path) / ("hub", name)."""
    parts = []
    for name in (s.strip() for s in str(data_spec).split(",") if s.strip()):
        path = Path(name).expanduser()
        if name == "toy":
            parts.append(("file", toy_corpus(cache_dir) / "train.txt"))
        elif name in SOURCES:
            parts.append(("hub", name))
        elif path.is_dir():
            files = sorted(path.glob("*.txt"))
            if not files:
                raise DataError(f"folder {path} has no *.txt files: put text files in it")
            parts += [("file", Path(cli.regular_file(f, "data file"))) for f in files]
        elif os.path.lexists(path):  # a file, or a FIFO / symlink loop: say which
            parts.append(("file", Path(cli.regular_file(path, "data file"))))
        else:
            raise DataError(f"unknown data source {name!r}: use {', '.join(SOURCES)}, a file or a folder")
    if not parts:
        raise DataError("no data source given: pass toy, a hub source name, a file or a folder")
    return parts


def load_documents(data_spec, cache_dir=None):
    """A datasets.Dataset with one "text" column, one document per row. data_spec is a
    comma-separated list of SOURCES names, text files and folders (their *.txt files, sorted);
    _read_documents says how a text file splits into documents."""
    import datasets
    sets = []
    for kind, what in _resolve(data_spec, cache_dir):
        if kind == "file":
            sets.append(datasets.Dataset.from_dict({"text": _read_documents(what)}))
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


def token_cache_path(data_spec, tokenizer, cache_dir=None):
    """Where tokenize_corpus caches data_spec's tokens: a key hashed from the sources (a local
    file by path, size and mtime), the vocabulary and the array format."""
    cache_dir = Path(cache_dir or default_cache_dir())
    sources = []
    for kind, what in _resolve(data_spec, cache_dir):
        if kind == "file":
            st = what.stat()
            sources.append([str(what.resolve()), st.st_size, st.st_mtime_ns])
        else:
            sources.append(list(SOURCES[what]))
    vocab = hashlib.sha256(Path(tokenizer.vocab_file).read_bytes()).hexdigest()
    recipe = {"format": TOKENS_FORMAT, "sources": sources, "vocab": vocab, "lower": tokenizer.do_lower_case}
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()
    return cache_dir / "tokens" / f"{key[:20]}.npy"


def tokenize_corpus(data_spec, tokenizer, cache_dir=None, num_proc=None):
    """Tokenise every document once into one flat array, documents separated (and ended)
    by [SEP]; cached as .npy under a key of what made it, returned as a read-only memmap.
    Under DDP call it on rank 0 first, then on the other ranks after a barrier."""
    cache_dir = Path(cache_dir or default_cache_dir())
    path = token_cache_path(data_spec, tokenizer, cache_dir)
    key = path.stem
    if not path.exists():
        import datasets
        dtype = np.uint16 if tokenizer.vocab_size <= 65535 else np.int32
        sep, control = tokenizer.sep_id, set(tokenizer.special_ids) - {tokenizer.unk_id}

        def encode(batch):
            # Text that spells "[CLS]" or "[SEP]" (say, an article about BERT) must not inject
            # control tokens; an empty document adds nothing rather than a lone [SEP].
            ids = [tokenizer.encode(t) for t in batch["text"]]
            ids = [[i for i in x if i not in control] if "[" in t else x
                   for t, x in zip(batch["text"], ids)]
            return {"ids": [x + [sep] if x else x for x in ids], "n": [len(x) + bool(x) for x in ids]}

        docs = load_documents(data_spec, cache_dir)
        mb = docs.data.nbytes / 1e6  # the UTF-8 text (and 4 bytes of offset per document)
        if num_proc is None:  # a process per 100 MB of text (each costs a start-up), at most one per core
            num_proc = max(1, min(os.cpu_count() or 1, round(mb / 100)))
        features = datasets.Features({"n": datasets.Value("int64"),  # small ids: 4x less disk
                                      "ids": datasets.Sequence(datasets.Value(np.dtype(dtype).name))})
        t0 = time.perf_counter()
        ds = docs.map(encode, batched=True, remove_columns=docs.column_names, num_proc=num_proc,
                      features=features, new_fingerprint=key, desc="tokenizing")
        secs = time.perf_counter() - t0
        total = int(np.sum(ds.with_format("numpy")["n"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}-{os.getpid()}.npy")
        out, pos = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(total,)), 0
        for batch in ds.select_columns(["ids"]).with_format("numpy").iter(batch_size=4096):
            chunk = np.concatenate(list(batch["ids"]))  # a 2-D array when all lengths agree
            out[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        out.flush()
        del out
        os.replace(tmp, path)
        print(f"tokenized {len(ds):,} documents, {mb:,.1f} MB of text, into {total:,} tokens in {secs:,.1f} s: "
              f"{mb / secs:.2f} MB/s with {num_proc} process{'es' if num_proc > 1 else ''} "
              f"({mb / secs / num_proc:.2f} MB/s each); cached in {path}", file=sys.stderr)
    return np.load(path, mmap_mode="r")


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
    the word before the [SEP], as in HF); special tokens are never chosen. k = round(L * p)
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
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids, device=device))
    candidate = ~special
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
    labels, every non-special token (RetroMAE's collator, staoxiao/RetroMAE src/pretrain/data.py)."""
    ids = input_ids.long()
    selected = whole_word_mask(ids, tokenizer, enc_probability, generator)[:, 0]
    inputs, labels = mask_selected(ids, selected, tokenizer, generator)
    visible = decoder_visible(ids, tokenizer, dec_probability, generator, pool)
    special = torch.isin(ids, torch.tensor(tokenizer.special_ids, device=ids.device))
    return inputs, labels, visible, torch.where(special, -100, ids)


# ----------------------------------------------------------------------------- command line

def bench(path, vocab_spec, repeats=3):
    """Single-thread MB/s of this tokenizer vs Hugging Face's fast (Rust) and slow (Python)
    ones on the same documents, median of alternating runs, and whether the ids agree."""
    os.environ["RAYON_NUM_THREADS"] = "1"  # must be set before tokenizers is imported
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    docs = _read_documents(Path(path))
    mb = sum(len(d.encode()) for d in docs) / 1e6
    tok = load_tokenizer(vocab_spec)

    def run_taco(ds):  # a fresh tokenizer per run, so its chunk cache starts empty
        fresh = WordPieceTokenizer(tok.vocab_file, tok.do_lower_case)
        return [fresh.encode(d) for d in ds]

    runners = {"taco": run_taco}
    try:
        from tokenizers import BertWordPieceTokenizer
        fast = BertWordPieceTokenizer(tok.vocab_file, lowercase=tok.do_lower_case)
        runners["hf fast (encode_batch, 1 thread)"] = lambda ds: [
            e.ids for e in fast.encode_batch(ds, add_special_tokens=False)]
    except ImportError:
        print("tokenizers not installed: skipping Hugging Face's fast tokenizer")
    try:  # transformers >= 5 renamed the pure-Python tokenizer
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Slow
    except ImportError:
        try:
            from transformers import BertTokenizer as Slow
        except ImportError:
            Slow = None
    if Slow is not None:
        slow = Slow(tok.vocab_file, do_lower_case=tok.do_lower_case)
        runners["hf slow (python)"] = lambda ds: [
            slow.encode(d, add_special_tokens=False) for d in ds]
    times, ids = {name: [] for name in runners}, {}
    for _ in range(repeats):  # alternate so that machine noise hits every tokenizer alike
        for name, run in runners.items():
            t0 = time.perf_counter()
            ids[name] = run(docs)
            times[name].append(time.perf_counter() - t0)
    print(f"{path}: {mb:.2f} MB, {len(docs):,} documents, vocab {tok.vocab_file}")
    speed = {name: mb / float(np.median(t)) for name, t in times.items()}
    for name, s in speed.items():
        differ = sum(a != b for a, b in zip(ids[name], ids["taco"]))
        agree = "" if name == "taco" else f"  ids differ on {differ:,} documents"
        print(f"  {name:34s} {s:8.2f} MB/s{agree}")
    for name in list(runners)[1:]:
        print(f"  taco / {name}: {speed['taco'] / speed[name]:.2f}x")


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--data", default=None, help="comma-separated sources: toy, "
                   f"{', '.join(s for s in SOURCES if s != 'toy')}, text files or folders")
    p.add_argument("--vocab", default="bert-base-uncased",
                   help="toy, a vocab.txt, a folder with one, or a hub model id")
    p.add_argument("--max_len", type=int_range(8, 512), default=128, help="block length to report for --data")
    p.add_argument("--num_proc", type=int_range(1), default=None,
                   help="tokenisation processes (default: one per 100 MB of text, at most one per core)")
    p.add_argument("--bench", metavar="FILE", help="time tokenizers on this text file instead")
    p.add_argument("--cache_dir", default=None, help="default: $TACO_CACHE or ~/.cache/taco")
    args = p.parse_args(argv)
    if args.data is None and not args.bench:
        p.error("pass --data or --bench")
    with cli.errors():
        if args.bench:
            return bench(args.bench, args.vocab)
        tok = load_tokenizer(args.vocab, args.cache_dir)
        tokens = tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc)
        blocks = make_blocks(tokens, args.max_len, tok.cls_id, tok.sep_id)
        print(f"{len(tokens):,} tokens ({tokens.dtype}), {len(blocks):,} blocks of {args.max_len}")


if __name__ == "__main__":
    main()
