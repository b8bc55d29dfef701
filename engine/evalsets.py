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


def _table(path, what, hint, fields, split=lambda line: line.split("\t"), kind=float, comments=False):
    """[(line number, text 1, text 2, number)] of a table's lines (split(line) -> columns;
    fields(columns) -> the two texts and the number's text, or None when the line does not fit),
    blank lines and with `comments` '#' lines ignored. A first line without a `kind` number is a
    header (WordSim353's own files open with "Word 1<TAB>Word 2<TAB>Human (mean)"); any other is
    one error line, `hint` saying what a line holds. NaN and infinities are refused, never dropped
    (nor a header): a correlation over the other rows would be reported as if it were over all."""
    rows, first = [], True
    for no, line in read_lines(path, what):
        if not line.strip() or comments and line.lstrip().startswith("#"):
            continue
        row, header, first = fields(split(line)), first, False
        try:
            value = kind(row[2])
        except (TypeError, ValueError):  # no number: a header's words, or a mistake
            if header:
                continue
            raise UsageError(f"{path} line {no}: expected {hint}, got {line[:60]!r}") from None
        if not math.isfinite(value):
            raise UsageError(f"{path} line {no}: score {row[2].strip()!r} is not a finite number; "
                             f"fix or remove the line")
        rows.append((no, row[0], row[1], value))
    return rows


def read_pairs(path):
    """[(word1, word2, score)] of a WordSim353-format file: `word1<TAB>word2<TAB>score` (or comma or
    space separated), '#' comments and blank lines ignored; a first line whose score is no number is
    a header (a `nan` score is a number: refused like any non-finite score)."""
    split = lambda line: line.split("\t") if "\t" in line else line.split(",") if "," in line else line.split()
    fields = lambda c: (c[0].strip(), c[1].strip(), c[2]) if len(c) == 3 else None
    hint = "word1<TAB>word2<TAB>score"
    pairs = [row[1:] for row in _table(path, "word-pair file", hint, fields, split, comments=True)]
    if not pairs:
        raise UsageError(f"word-pair file {path} holds no pairs: add lines {hint}")
    return pairs


def _read_jsonl(path, what, whats):
    """[(_id, text)] of a BEIR corpus or queries file, title and text joined. A line repeated
    (same _id, same text) counts once, with a warning; the same _id with another text is an error."""
    rows, line_of, repeats = {}, {}, 0
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
        if rows.setdefault(rid, text) != text:
            raise UsageError(f"{path} lines {line_of[rid]} and {no}: two {whats} with _id {rid!r} and different "
                             f"texts; keep one")
        repeats += rid in line_of
        line_of.setdefault(rid, no)
    empty = sum(not text.strip() for text in rows.values())
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
    paths = [os.path.join(folder, *n) for n in (["corpus.jsonl"], ["queries.jsonl"], ["qrels", f"{split}.tsv"])]
    for path in paths:
        if not os.path.lexists(path):
            raise UsageError(f"{path} not found: --retrieval takes a BEIR folder (corpus.jsonl, queries.jsonl, "
                             f"qrels/{split}.tsv)")
    corpus, queries = _read_jsonl(paths[0], "document", "documents"), _read_jsonl(paths[1], "query", "queries")
    hint = "query-id<TAB>corpus-id<TAB>integer score"
    split = lambda line: line.split("\t") if "\t" in line else line.split()
    qrels, line_of = {}, {}
    fields = lambda c: (c[0], c[-2], c[-1]) if len(c) in (3, 4) else (None, None, c[-1])  # trec_eval's: 4
    for no, qid, did, g in _table(paths[2], "BEIR qrels file", hint, fields, split, kind=int):
        if qid is None:  # a grade but not 3 columns: never a header
            raise UsageError(f"{paths[2]} line {no}: expected {hint}")
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


def read_sts(path):
    """[(sentence1, sentence2, score)] of an STS-format TSV: STS-B's columns sentence1, sentence2
    and score when a header names them, else the first three columns, after a header line if the
    first line's score is no number. Scores must be finite and not all equal."""
    names = ("sentence1", "sentence2", "score")
    first = next((line.split("\t") for _, line in read_lines(path, "STS file") if line.strip()), [])
    at = [first.index(c) for c in names] if set(names) <= set(first) else [0, 1, 2]
    fields = lambda c: [c[i] for i in at] if len(c) > max(at) else None
    pairs = [row[1:] for row in _table(path, "STS file", "sentence1<TAB>sentence2<TAB>score", fields)]
    if len(pairs) < 2:
        raise UsageError(f"STS file {path} holds fewer than two pairs")
    if len({p[2] for p in pairs}) == 1:
        raise UsageError(f"every score of {path} is {pairs[0][2]:g}: a correlation needs scores that differ")
    return pairs
