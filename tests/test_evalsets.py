"""Tests for evalsets.py: the readers of word-pair, BEIR and STS files read what the sets hold, and a line
they cannot read is one UsageError naming the file and the line."""
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


CORPUS = '{"_id": "d1", "title": "", "text": "the dog runs"}\n{"_id": "d2", "title": "Cats", "text": "a cat sleeps"}\n'
QUERIES = '{"_id": "q1", "text": "dog"}\n'
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\n"


def test_beir_with_a_bom_crlf_four_column_qrels_and_integer_ids(tmp_path):
    corpus = "\ufeff" + CORPUS.replace("\n", "\r\n") + '{"_id": 7, "text": ""}\n'
    corpus, queries, qrels = evalsets.read_beir(write_beir(tmp_path, corpus, QUERIES, "q1 0 d1 1\nq1 0 d9 2\n"))
    assert corpus == [("d1", "the dog runs"), ("d2", "Cats a cat sleeps"), ("7", "")]
    assert queries == [("q1", "dog")] and qrels == {"q1": {"d1": 1, "d9": 2}}


@pytest.mark.parametrize("corpus,qrels,message", [
    (b'{"_id": "d1", "text": "caf\xe9"}\n', QRELS, "corpus.jsonl line 1 is not UTF-8"),
    (CORPUS + '{"_id": "d3", "text": "x"\n', QRELS, "corpus.jsonl line 3: expected"),
    ('{"text": "x"}\n', QRELS, "corpus.jsonl line 1: expected"),
    (CORPUS, QRELS + "q1\td2\t1.5\n", "test.tsv line 3: expected query-id<TAB>corpus-id<TAB>integer score"),
    (CORPUS, "q1\t1\nq1\td1\t1\nq1\td2\n", "test.tsv line 3: expected"),
])
def test_a_malformed_beir_line_is_one_line_naming_it(tmp_path, corpus, qrels, message):
    with pytest.raises(cli.UsageError, match=re.escape(message)):
        evalsets.read_beir(write_beir(tmp_path, corpus, QUERIES, qrels))


def test_a_missing_beir_file_is_one_line(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(QRELS)
    with pytest.raises(cli.UsageError, match="cannot read .*corpus.jsonl"):
        evalsets.read_beir(str(tmp_path))


def test_sts_columns_by_header_or_the_first_three(tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("a dog\ta cat\t1\nthe sun\tthe moon\t3\n")  # no header: the first pair is data
    assert evalsets.read_sts(str(path)) == [("a dog", "a cat", 1.0), ("the sun", "the moon", 3.0)]
    path.write_text("s1\ts2\tgold\na\tb\t1\nc\td\t2\n")  # another header: skipped
    assert len(evalsets.read_sts(str(path))) == 2
    path.write_text("idx\tsentence2\tscore\tsentence1\n0\tb\t1\ta\n1\td\t2\tc\n")  # STS-B's names, any order
    assert evalsets.read_sts(str(path)) == [("a", "b", 1.0), ("c", "d", 2.0)]
    path.write_text("a\tb\t2\nc\td\n")
    with pytest.raises(cli.UsageError, match=re.escape("line 2: expected sentence1<TAB>sentence2<TAB>score")):
        evalsets.read_sts(str(path))


def test_a_malformed_word_pair_is_one_line(tmp_path):
    path = tmp_path / "ws.tsv"
    path.write_text("dog\tcow\t8.0\ndog\tcow\tvery\n")
    with pytest.raises(cli.UsageError, match=re.escape(f"{path} line 2: expected word1<TAB>word2<TAB>score")):
        evalsets.read_pairs(str(path))
