"""Strict readers of the evaluation sets' files, as analyze.py and study.py probe them: word pairs
(WordSim353 layout), BEIR retrieval folders, STS tables. Every mistake in a file is one `error:`
line naming the file and line (docs/robustness.md); doubtful but usable input is a `warning:`.
read_lines is the line reader of every data file (tasks.py reads GLUE's splits with it too).
"""
import json
import math
import os
import sys

from engine import cli
from engine.cli import UsageError


def read_lines(path, what="file"):
    """(line number, line) of a UTF-8 text file (a byte-order mark allowed); a FIFO, a folder or
    bytes that are not UTF-8 are one error line naming where."""
    with open(cli.regular_file(path, what), "rb") as f:
        for no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if no == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise UsageError(f"{what} {path} line {no} is not UTF-8 (byte 0x{raw[err.start]:02x}): "
                                 f"save it as UTF-8") from None
            yield no, line.rstrip("\r\n")


def _score(text, path, no):
    """A gold score -> float, or None when `text` is no number at all (a header's word). NaN and
    infinities are refused, never dropped: a correlation over the other rows would be reported as
    if it were over all of them."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        raise UsageError(f"{path} line {no}: score {text.strip()!r} is not a finite number; fix or remove the line")
    return value


def _table(path, what, hint, split, value, comments=False):
    """[(line number, columns, value)] of a table's lines (split(line) -> columns, value(columns,
    line number) -> a number, or None for no number), blank lines and with `comments` '#' lines
    ignored, less a header: a first line whose value is None. Any other line without a value is
    one error line; `hint` says what a line holds."""
    rows = [(no, line, split(line)) for no, line in read_lines(path, what)
            if line.strip() and not (comments and line.lstrip().startswith("#"))]
    rows = [(no, line, cols, value(cols, no)) for no, line, cols in rows]
    if rows and rows[0][3] is None:  # WordSim353's own files open with "Word 1<TAB>Word 2<TAB>Human (mean)"
        rows.pop(0)
    for no, line, _, v in rows:
        if v is None:
            raise UsageError(f"{path} line {no}: expected {hint}, got {line[:60]!r}")
    return [(no, cols, v) for no, _, cols, v in rows]


def read_pairs(path):
    """[(word1, word2, score)] of a WordSim353-format file: `word1<TAB>word2<TAB>score` (or comma or
    space separated), '#' comments and blank lines ignored; a first line whose score is no number is
    a header (a `nan` score is a number: refused like any non-finite score)."""
    split = lambda line: line.split("\t") if "\t" in line else line.split(",") if "," in line else line.split()
    score = lambda cols, no: _score(cols[2], path, no) if len(cols) == 3 else None
    pairs = [(cols[0].strip(), cols[1].strip(), s) for _, cols, s in
             _table(path, "word-pair file", "word1<TAB>word2<TAB>score", split, score, comments=True)]
    if not pairs:
        raise UsageError(f"word-pair file {path} holds no pairs: add lines word1<TAB>word2<TAB>score")
    return pairs


def _read_jsonl(path, what, whats):
    """[(_id, text)] of a BEIR corpus or queries file, title and text joined. A line repeated
    (same _id, same text) counts once, with a warning; the same _id with another text is an error."""
    rows, line_of, repeats, empty = {}, {}, 0, 0
    layout = f'a BEIR {what} is one object {{"_id": ..., "title": ..., "text": ...}} per line'
    for no, line in read_lines(path, f"BEIR {whats} file"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise UsageError(f"{path} line {no}: not JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise UsageError(f"{path} line {no}: a JSON {type(row).__name__}; {layout}")
        rid = str(row["_id"]) if type(row.get("_id")) is int else row.get("_id")  # BEIR's ids are strings
        title = row.get("title") or ""  # absent, null or ""
        for key, value in (("_id", rid), ("text", row.get("text")), ("title", title)):
            if not isinstance(value, str) or key == "_id" and not value:
                got = f"is {json.dumps(row[key])[:40]}" if key in row else "is missing"
                raise UsageError(f'{path} line {no}: "{key}" {got}, not a string; {layout}')
        text = f"{title} {row['text']}" if title else row["text"]
        if rows.get(rid, text) != text:
            raise UsageError(f"{path} lines {line_of[rid]} and {no}: two {whats} with _id {rid!r} and different "
                             f"texts; keep one")
        repeats += rid in rows
        empty += rid not in rows and not text.strip()
        rows.setdefault(rid, text)
        line_of.setdefault(rid, no)
    if repeats:
        print(f"warning: {path}: {repeats} line(s) repeat the _id and text of an earlier one; counted once",
              file=sys.stderr)
    if empty:
        print(f"warning: {path}: {empty} of its {whats} have no text; each embeds as [CLS] [SEP] alone", file=sys.stderr)
    return list(rows.items())


def read_beir(folder, split="test"):
    """A BEIR data set folder -> (corpus [(id, text)], queries [(id, text)], qrels {qid: {doc id: grade}}).
    Layout: corpus.jsonl ({"_id", "title", "text"}), queries.jsonl ({"_id", "text"}),
    qrels/<split>.tsv (query-id, corpus-id, integer score; a header line; trec_eval's four-column
    qrels are read too). Title and text are joined. Duplicates: see _read_jsonl; a judgement given
    twice with two grades is an error."""
    layout = f"a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{split}.tsv)"
    if not os.path.isdir(folder):
        raise UsageError(f"--retrieval {folder} is not a folder: pass {layout}")
    paths = [os.path.join(folder, n) for n in ("corpus.jsonl", "queries.jsonl", os.path.join("qrels", f"{split}.tsv"))]
    for path in paths:
        if not os.path.lexists(path):
            raise UsageError(f"{path} not found: --retrieval takes {layout}")
    corpus, queries = _read_jsonl(paths[0], "document", "documents"), _read_jsonl(paths[1], "query", "queries")
    qrels, line_of = {}, {}
    for no, cols, g in _table(paths[2], "BEIR qrels file", QRELS_LINE, _qrels_columns, lambda cols, no: _int(cols[-1])):
        if len(cols) != 3:
            raise UsageError(f"{paths[2]} line {no}: expected {QRELS_LINE}")
        qid, did, _ = cols
        if qrels.setdefault(qid, {}).setdefault(did, g) != g:
            raise UsageError(f"{paths[2]} lines {line_of[qid, did]} and {no}: query {qid!r} judges document "
                             f"{did!r} twice, {qrels[qid][did]} and {g}; keep one")
        line_of.setdefault((qid, did), no)
    query_ids, doc_ids = {qid for qid, _ in queries}, {did for did, _ in corpus}
    if not corpus:
        raise UsageError(f"{paths[0]} holds no documents")
    if not query_ids & qrels.keys():
        raise UsageError(f"no query of {paths[1]} is judged in {paths[2]}: do their query ids match?")
    unknown = len(qrels.keys() - query_ids)
    absent = sum(g > 0 and did not in doc_ids for qid in qrels.keys() & query_ids for did, g in qrels[qid].items())
    if unknown:
        print(f"warning: {unknown} query id(s) of {paths[2]} are not in queries.jsonl: left out", file=sys.stderr)
    if absent:
        print(f"warning: {absent} relevant judgement(s) of {paths[2]} name documents that are not in corpus.jsonl: "
              f"they count as not retrieved, as in BEIR and trec_eval", file=sys.stderr)
    return corpus, queries, qrels


QRELS_LINE = "query-id<TAB>corpus-id<TAB>integer score"


def _qrels_columns(line):
    cols = line.split("\t") if "\t" in line else line.split()
    return [cols[0], cols[2], cols[3]] if len(cols) == 4 else cols  # trec_eval's: query, iteration, document, grade


def _int(text):
    try:
        return int(text)
    except ValueError:
        return None


def read_sts(path):
    """[(sentence1, sentence2, score)] of an STS-format TSV: STS-B's columns sentence1, sentence2
    and score when a header names them, else the first three columns, after a header line if the
    first line's score is no number. Scores must be finite and not all equal."""
    names = ("sentence1", "sentence2", "score")
    first = next((line.split("\t") for _, line in read_lines(path, "STS file") if line.strip()), [])
    at = [first.index(c) for c in names] if set(names) <= set(first) else [0, 1, 2]
    score = lambda cols, no: _score(cols[at[2]], path, no) if len(cols) > max(at) else None
    pairs = [(cols[at[0]], cols[at[1]], s) for _, cols, s in
             _table(path, "STS file", "sentence1<TAB>sentence2<TAB>score", lambda line: line.split("\t"), score)]
    if len(pairs) < 2:
        raise UsageError(f"STS file {path} holds fewer than two pairs")
    if len({p[2] for p in pairs}) == 1:
        raise UsageError(f"every score of {path} is {pairs[0][2]:g}: a correlation needs scores that differ")
    return pairs
