"""Tests for evalsets.py: the readers of word-pair, BEIR and STS files refuse what they cannot use
in one line, warn about what they accept with doubt, and read the rest."""
import re

import pytest

from engine import cli
from engine import evalsets


def test_read_pairs_comments_header_and_separators(tmp_path):
    path = tmp_path / "ws.tsv"
    path.write_text("# a comment\nWord 1\tWord 2\tHuman (mean)\n\ncat\tdog\t7.5\n  # indented comment\ncar,bus,6\n")
    assert evalsets.read_pairs(str(path)) == [("cat", "dog", 7.5), ("car", "bus", 6.0)]


def write_beir(folder, corpus, queries, qrels):
    """A BEIR folder from the bytes (or text) of its three files."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    for name, content in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels/test.tsv", qrels)):
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(folder)


CORPUS = '{"_id": "d1", "title": "", "text": "the dog runs"}\n{"_id": "d2", "text": "a cat sleeps"}\n'


QUERIES = '{"_id": "q1", "text": "dog"}\n'


QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\n"


@pytest.mark.parametrize("corpus,queries,qrels,message", [
    (b'{"_id": "d1", "text": "caf\xe9"}\n', QUERIES, QRELS, "corpus.jsonl line 1 is not UTF-8 (byte 0xe9)"),
    ('[{"_id": "d1", "text": "x"}]\n', QUERIES, QRELS, "line 1: a JSON list; a BEIR document is one object"),
    ('{"_id": "d1", "text": null}\n', QUERIES, QRELS, 'line 1: "text" is null, not a string'),
    ('{"_id": "d1", "text": NaN}\n', QUERIES, QRELS, '"text" is NaN, not a string'),
    ('{"_id": "d1", "title": 5, "text": "x"}\n', QUERIES, QRELS, '"title" is 5, not a string'),
    ('{"text": "x"}\n', QUERIES, QRELS, '"_id" is missing'),
    ('{"_id": "d1", "text": "x"\n', QUERIES, QRELS, "corpus.jsonl line 1: not JSON"),
    (CORPUS + '{"_id": "d1", "text": "another text"}\n', QUERIES, QRELS,
     "lines 1 and 3: two documents with _id 'd1' and different texts"),
    (CORPUS, QUERIES + '{"_id": "q1", "text": "cat"}\n', QRELS, "two queries with _id 'q1'"),
    (CORPUS, QUERIES, QRELS + "q1\td1\t2\n", "lines 2 and 3: query 'q1' judges document 'd1' twice, 1 and 2"),
    (CORPUS, QUERIES, QRELS + "q1\td2\t1.5\n", "line 3: expected query-id<TAB>corpus-id<TAB>integer score"),
    (CORPUS, QUERIES, "q1\t1\nq1\td1\t1\n", "line 1: expected query-id<TAB>corpus-id<TAB>integer score"),
    (CORPUS, QUERIES, b"\xff\xfe\x00", "test.tsv line 1 is not UTF-8"),
    (CORPUS, QUERIES, "query-id\tcorpus-id\tscore\nq9\td1\t1\n", "is judged in"),
])
def test_malformed_beir_files_are_one_line(tmp_path, corpus, queries, qrels, message):
    with pytest.raises(cli.UsageError, match=re.escape(message)):
        evalsets.read_beir(write_beir(tmp_path / "beir", corpus, queries, qrels))


def test_beir_repeats_count_once_and_doubtful_input_warns(tmp_path, capsys):
    """A repeated line (same _id, same text) counts once; a BOM, CRLF ends, trec_eval's four-column
    qrels and integer _ids are read; judgements of absent documents and queries are warned about."""
    corpus = "\ufeff" + CORPUS.replace("\n", "\r\n") + '{"_id": "d1", "title": "", "text": "the dog runs"}\n' \
        + '{"_id": 7, "text": ""}\n'
    qrels = "q1 0 d1 1\nq1 0 d9 2\nq1 0 d2 0\nq5 0 d1 1\n"
    corpus, queries, qrels = evalsets.read_beir(write_beir(tmp_path / "beir", corpus, QUERIES, qrels))
    assert corpus == [("d1", "the dog runs"), ("d2", "a cat sleeps"), ("7", "")]
    assert qrels == {"q1": {"d1": 1, "d9": 2, "d2": 0}, "q5": {"d1": 1}}
    err = capsys.readouterr().err
    assert "1 line(s) repeat the _id and text of an earlier one; counted once" in err
    assert "1 of its documents have no text" in err
    assert "1 query id(s)" in err and "1 relevant judgement(s)" in err and "count as not retrieved" in err


def test_sts_file_header_nan_and_constant_scores(tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("a dog\ta cat\t1\nthe sun\tthe moon\t3\n")  # no header: the first pair is data
    assert evalsets.read_sts(str(path)) == [("a dog", "a cat", 1.0), ("the sun", "the moon", 3.0)]
    path.write_text("s1\ts2\tgold\na\tb\t1\nc\td\t2\n")  # another header: skipped
    assert len(evalsets.read_sts(str(path))) == 2
    path.write_text("idx\tsentence2\tscore\tsentence1\n0\tb\t1\ta\n1\td\t2\tc\n")  # STS-B's names, any order
    assert evalsets.read_sts(str(path)) == [("a", "b", 1.0), ("c", "d", 2.0)]
    for text, message in (("s1\ts2\tscore\na\tb\t1\n\nc\td\tnan\ne\tf\t2\n", "line 4: score 'nan' is not a finite"),
                          ("a\tb\tnan\nc\td\t1\ne\tf\t2\n", "line 1: score 'nan'"),  # never a header
                          ("a\tb\t1\nc\td\tinf\n", "line 2: score 'inf'"),
                          ("a\tb\t2\nc\td\t2\n", "every score of"),
                          ("a\tb\t2\nc\td\n", "line 2: expected sentence1<TAB>sentence2<TAB>score")):
        path.write_text(text)
        with pytest.raises(cli.UsageError, match=re.escape(message)):
            evalsets.read_sts(str(path))
    path.write_bytes(b"a\tb\t1\ncaf\xe9\td\t2\n")
    with pytest.raises(cli.UsageError, match="line 2 is not UTF-8"):
        evalsets.read_sts(str(path))


def test_a_nan_word_pair_score_is_refused_never_a_header(tmp_path):
    path = tmp_path / "ws.tsv"
    path.write_text("cat\tdog\tnan\ncar\tbus\t6\n")
    with pytest.raises(cli.UsageError, match="line 1: score 'nan' is not a finite number"):
        evalsets.read_pairs(str(path))
    path.write_text("Word 1\tWord 2\tHuman (mean)\ncat\tdog\t7\ncar\tbus\t-inf\n")
    with pytest.raises(cli.UsageError, match="line 3: score '-inf'"):
        evalsets.read_pairs(str(path))
