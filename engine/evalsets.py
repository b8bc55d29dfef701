"""Readers of the evaluation sets' files, as analyze.py and study.py probe them: word pairs (WordSim353 layout), BEIR
retrieval folders, STS tables. A line that cannot be read is one `error:` line naming the file and the line.
read_lines is the line reader of every data file (tasks.py reads GLUE's splits with it)."""
import json
import os

from engine.cli import UsageError, reason


def read_lines(path):
    """(line number, line) of a UTF-8 text file, a byte-order mark allowed."""
    try:
        with open(path, "rb") as f:
            for no, raw in enumerate(f, 1):
                try:
                    yield no, raw.decode("utf-8-sig" if no == 1 else "utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise UsageError(f"{path} line {no} is not UTF-8: save it as UTF-8") from None
    except OSError as err:
        raise UsageError(f"cannot read {path}: {reason(err)}") from None


def _table(path, hint, fields, kind=float, comments=False):
    """[(text 1, text 2, number)] of a table (fields(line) -> the two texts and the number's text), blank
    lines (with `comments` '#' lines too) left out; a first line without a number is a header."""
    rows, first = [], True
    for no, line in read_lines(path):
        if not line.strip() or comments and line.lstrip().startswith("#"):
            continue
        try:
            a, b, value = fields(line)
            rows.append((a, b, kind(value)))
        except (ValueError, IndexError):
            if not first:
                raise UsageError(f"{path} line {no}: expected {hint}, got {line[:60]!r}") from None
        first = False
    return rows


def read_pairs(path):
    """[(word1, word2, score)] of a WordSim353-format file: `word1<TAB>word2<TAB>score` (or comma or
    space separated), a header line, '#' comments and blank lines allowed."""
    split = lambda line: line.split("\t") if "\t" in line else line.split(",") if "," in line else line.split()
    fields = lambda line: [c.strip() for c in split(line)]  # not three: _table's unpacking fails
    return _table(path, "word1<TAB>word2<TAB>score", fields, comments=True)


def read_sts(path):
    """[(sentence1, sentence2, score)] of an STS TSV: the columns a header so names (STS-B's), else the first three."""
    names = ("sentence1", "sentence2", "score")
    first = next((line.split("\t") for _, line in read_lines(path) if line.strip()), [])
    at = [first.index(c) for c in names] if set(names) <= set(first) else [0, 1, 2]
    return _table(path, "sentence1<TAB>sentence2<TAB>score", lambda line: [line.split("\t")[i] for i in at])


def _read_jsonl(path):
    """[(_id, text)] of a BEIR corpus or queries file, title and text joined."""
    rows = {}
    for no, line in read_lines(path):
        try:
            if line.strip():
                row = json.loads(line)
                rows[str(row["_id"])] = f"{row['title']} {row['text']}" if row.get("title") else row["text"]
        except (ValueError, KeyError, AttributeError):
            raise UsageError(f'{path} line {no}: expected {{"_id": ..., "title": ..., "text": ...}}, got '
                             f'{line[:60]!r}') from None
    return list(rows.items())


def read_beir(folder, split="test"):
    """A BEIR folder -> (corpus [(id, text)], queries [(id, text)], qrels {query id: {document id: grade}}) from its
    corpus.jsonl, queries.jsonl, qrels/<split>.tsv (query-id, corpus-id, integer score after a header; or 4 columns)."""
    qrels, cols = {}, lambda line: line.split("\t") if "\t" in line else line.split()
    fields = lambda line: (cols(line)[0], *cols(line)[-2:]) if len(cols(line)) in (3, 4) else ()
    for qid, did, grade in _table(os.path.join(folder, "qrels", f"{split}.tsv"),
                                  "query-id<TAB>corpus-id<TAB>integer score", fields, kind=int):
        qrels.setdefault(qid, {})[did] = grade
    return _read_jsonl(os.path.join(folder, "corpus.jsonl")), _read_jsonl(os.path.join(folder, "queries.jsonl")), qrels
