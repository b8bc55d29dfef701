"""Strict readers of the evaluation sets' files, as analyze.py and study.py probe them: word pairs
(WordSim353 layout), BEIR retrieval folders, STS tables. Every mistake in a file is one `error:`
line naming the file and line (docs/robustness.md); doubtful but usable input is a `warning:`.
"""
import json
import math
import os
import sys

from engine import cli
from engine.cli import UsageError


def _lines(path, what):
    """(line number, line) of a UTF-8 text file (a byte-order mark allowed); a FIFO, a folder or
    bytes that are not UTF-8 are one error line naming where."""
    cli.regular_file(path, what)
    with open(path, "rb") as f:
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


def read_pairs(path):
    """[(word1, word2, score)] of a WordSim353-format file: `word1<TAB>word2<TAB>score`,
    '#' comments and blank lines ignored; a first line whose score is no number is a header
    (a `nan` score is a number: refused like any non-finite score)."""
    if not os.path.lexists(path):
        raise UsageError(f"word-pair file {path} not found: pass a WordSim353-format file (word1<TAB>word2<TAB>score)")
    pairs, first = [], True
    for no, line in _lines(path, "word-pair file"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split("\t") if "\t" in line else line.split(",") if "," in line else line.split()
        score = _score(cols[2], path, no) if len(cols) == 3 else None
        if score is None and first:  # WordSim353's own files open with "Word 1<TAB>Word 2<TAB>Human (mean)"
            first = False
            continue
        first = False
        if score is None:
            raise UsageError(f"{path} line {no}: expected word1<TAB>word2<TAB>score, got {line[:60]!r}")
        pairs.append((cols[0].strip(), cols[1].strip(), score))
    if not pairs:
        raise UsageError(f"word-pair file {path} holds no pairs: add lines word1<TAB>word2<TAB>score")
    return pairs


def _read_jsonl(path, what, whats):
    """[(_id, text)] of a BEIR corpus or queries file, title and text joined. A line repeated
    (same _id, same text) counts once, with a warning; the same _id with another text is an error."""
    rows, line_of, repeats, empty = {}, {}, 0, 0
    for no, line in _lines(path, f"BEIR {whats} file"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise UsageError(f"{path} line {no}: not JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise UsageError(f'{path} line {no}: a JSON {type(row).__name__}; a BEIR {what} is one object '
                             f'{{"_id": ..., "title": ..., "text": ...}} per line')
        rid = str(row["_id"]) if type(row.get("_id")) is int else row.get("_id")  # BEIR's ids are strings
        title = row.get("title") or ""  # absent, null or ""
        for key, value in (("_id", rid), ("text", row.get("text")), ("title", title)):
            if not isinstance(value, str) or key == "_id" and not value:
                got = f"is {json.dumps(row[key])[:40]}" if key in row else "is missing"
                raise UsageError(f'{path} line {no}: "{key}" {got}, not a string; a BEIR {what} is one '
                                 f'object {{"_id": ..., "title": ..., "text": ...}} per line')
        text = f"{title} {row['text']}" if title else row["text"]
        if rid in rows:
            if rows[rid] != text:
                raise UsageError(f"{path} lines {line_of[rid]} and {no}: two {whats} with _id {rid!r} and different "
                                 f"texts; keep one")
            repeats += 1
            continue
        rows[rid], line_of[rid] = text, no
        empty += not text.strip()
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
    qrels, line_of, header = {}, {}, True
    for no, line in _lines(paths[2], "BEIR qrels file"):
        if not line.strip():
            continue
        cols = line.split("\t") if "\t" in line else line.split()
        if len(cols) == 4:  # trec_eval's qrels: query, iteration, document, grade
            cols = [cols[0], cols[2], cols[3]]
        try:
            grade = int(cols[-1])
        except ValueError:
            grade = None
        if header and grade is None:
            header = False
            continue
        header = False
        if len(cols) != 3 or grade is None:
            raise UsageError(f"{paths[2]} line {no}: expected query-id<TAB>corpus-id<TAB>integer score")
        qid, did = cols[:2]
        if qrels.setdefault(qid, {}).get(did, grade) != grade:
            raise UsageError(f"{paths[2]} lines {line_of[qid, did]} and {no}: query {qid!r} judges document "
                             f"{did!r} twice, {qrels[qid][did]} and {grade}; keep one")
        qrels[qid][did] = grade
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
    if not os.path.lexists(path):
        raise UsageError(f"STS file {path} not found: pass a TSV with sentence1, sentence2, score columns")
    rows = [(no, line.split("\t")) for no, line in _lines(path, "STS file") if line.strip()]
    cols = [0, 1, 2]
    if rows and {"sentence1", "sentence2", "score"} <= set(rows[0][1]):
        header = rows.pop(0)[1]
        cols = [header.index(c) for c in ("sentence1", "sentence2", "score")]
    elif rows and (len(rows[0][1]) < 3 or _score(rows[0][1][2], path, rows[0][0]) is None):
        rows.pop(0)  # a header with other names
    pairs = []
    for no, row in rows:
        score = _score(row[cols[2]], path, no) if len(row) > max(cols) else None
        if score is None:
            got = "\t".join(row)[:60]
            raise UsageError(f"{path} line {no}: expected sentence1<TAB>sentence2<TAB>score, got {got!r}")
        pairs.append((row[cols[0]], row[cols[1]], score))
    if len(pairs) < 2:
        raise UsageError(f"STS file {path} holds fewer than two pairs")
    if len({p[2] for p in pairs}) == 1:
        raise UsageError(f"every score of {path} is {pairs[0][2]:g}: a correlation needs scores that differ")
    return pairs
