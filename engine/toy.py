"""The built-in offline toy corpus: a small grammar over ten topics, its WordPiece vocabulary and its evaluation sets,
each generated once per seed into the cache folder ($TACO_CACHE).

Documents have GLOBAL semantics (one latent topic per document picks most content words) and LOCAL structure (a small
grammar with number agreement, tense, relative clauses). Hyphens mark WordPiece pieces: "light-house" is in the vocab as
"light" + "##house"; inflected forms ("rabbits", "chased") are stem + "##s"/"##es"/"##d"/"##ed".
"""
import filecmp
import json
import os
import random
import re
import tempfile
from pathlib import Path

from engine.cli import default_cache_dir

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # BERT's, first in every vocab.txt
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
    """Sentences about a topic: 85% of content words from it, 8% common, 7% other topics. A number or
    tense left out (None) is drawn: plural half of the time, past 30%."""

    def __init__(self, rng):
        self.rng = rng
        self.lex = {t: [w.replace("-", "").split() for w in pos] for t, pos in [*TOPICS.items(), ("", COMMON)]}

    def content(self, topic, pos):  # pos: 0 noun, 1 verb, 2 adjective
        r = self.rng.random()
        topic = topic if r < 0.85 else "" if r < 0.93 else self.rng.choice(list(TOPICS))  # "": COMMON
        return self.rng.choice(self.lex[topic][pos])

    def noun_phrase(self, topic, plural=None):
        plural = self.rng.random() < 0.5 if plural is None else plural
        noun = self.content(topic, 0)
        words = [self.content(topic, 2)] if self.rng.random() < 0.4 else []
        words.append(_inflect(noun, "s") if plural else noun)
        det = self.rng.choice(DETERMINERS[plural].split())
        return ["an" if det == "a" and words[0][0] in "aeiou" else det] + words

    def verb(self, topic, plural, past):  # agrees with its subject in the present tense
        verb = self.content(topic, 1)
        return _inflect(verb, "ed") if past else verb if plural else _inflect(verb, "s")

    def clause(self, topic, past):
        rng, plural = self.rng, self.rng.random() < 0.5
        subject = self.noun_phrase(topic, plural)
        if rng.random() < 0.2:  # relative clause: the main verb still agrees with the head noun
            subject += [rng.choice(("that", "which")), self.verb(topic, plural, past), *self.noun_phrase(topic)]
        if rng.random() < 0.2:
            copula = ("was", "were") if past else ("is", "are")
            words = subject + [copula[plural], self.content(topic, 2)]
        else:
            words = subject + [self.verb(topic, plural, past)] + self.noun_phrase(topic)
        if rng.random() < 0.5:
            words += [rng.choice(PREPOSITIONS)] + self.noun_phrase(topic)
        return words

    def document(self, lo, hi):
        """(topic, lo to hi sentences about it, all in one tense)."""
        topic, past = self.rng.choice(list(TOPICS)), self.rng.random() < 0.3
        return topic, [self.sentence(topic, past) for _ in range(self.rng.randint(lo, hi))]

    def sentence(self, topic, past=None):
        rng = self.rng
        past = rng.random() < 0.3 if past is None else past
        r = rng.random()
        if r < 0.1:  # question with do-support: "Does the dog chase a cow?"
            plural = rng.random() < 0.5
            aux = "did" if past else ("do" if plural else "does")
            words = [aux] + self.noun_phrase(topic, plural) + [self.content(topic, 1)] + self.noun_phrase(topic) + ["?"]
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
    split = [w.split("-") for pos in [*TOPICS.values(), COMMON, DETERMINERS] for w in " ".join(pos).split()]
    words = {first for first, *_ in split} | set(FUNCTION_WORDS + PREPOSITIONS + OPENERS)
    pieces = {"##" + p for _, *rest in split for p in rest}
    return list(dict.fromkeys(tokens + sorted(words) + sorted(pieces)))


def _write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _two_topics(rng, same):
    t1 = rng.choice(list(TOPICS))
    return t1, t1 if same else rng.choice([t for t in TOPICS if t != t1])


def _write_toy(out, rng, n_docs=3000, n_pairs=(4000, 1000, 1000), n_sim=200):
    grammar = _ToyGrammar(rng)
    _write(out / "vocab.txt", _toy_vocab())
    _write(out / "train.txt", ["\n\n".join("\n".join(grammar.document(6, 15)[1]) for _ in range(n_docs))])
    for split, n in zip(("train", "dev", "test"), n_pairs):
        _write(out / "glue" / f"{split}.tsv", _pair_rows(grammar, n, split == "test"))
    # Word similarity in WordSim353 form over single-token words: same topic scores high.
    single = {t: [w for pos in lists for w in pos.split() if "-" not in w] for t, lists in TOPICS.items()}
    rows = ["# toy word similarity (WordSim353 format): word1<TAB>word2<TAB>score in [0, 10]",
            "# same-topic pairs score 7-10, cross-topic pairs 0-3"]
    for i in range(n_sim):
        t1, t2 = _two_topics(rng, i % 2 == 0)
        w1, w2 = rng.sample(single[t1], 2) if t1 == t2 else map(rng.choice, (single[t1], single[t2]))
        rows.append(f"{w1}\t{w2}\t{rng.uniform(7, 10) if t1 == t2 else rng.uniform(0, 3):.2f}")
    _write(out / "wordsim.txt", rows)


def _pair_rows(grammar, n, test=False):
    """The pair task's TSV: n pairs in random order, half labelled 1 (both sentences about one topic)."""
    labels = [i % 2 for i in range(n)]
    grammar.rng.shuffle(labels)
    rows = ["index\tsentence1\tsentence2" if test else "sentence1\tsentence2\tlabel"]
    for i, label in enumerate(labels):
        s1, s2 = map(grammar.sentence, _two_topics(grammar.rng, label))
        rows.append(f"{i}\t{s1}\t{s2}" if test else f"{s1}\t{s2}\t{label}")
    return rows


def _write_toy_sentence_eval(out, rng, n_docs=1000, n_queries=300, n_sts=1000):
    """Sentence-embedding test sets from the toy grammar (RetroMAE's probes), BEIR and STS layout."""
    grammar = _ToyGrammar(rng)
    # Retrieval: short documents of one topic; a query is one sentence of a document (kept in it: toy documents share
    # nothing else, so a removed sentence would leave no trace of its source). Relevance 2: the source, 1: same topic.
    docs = [grammar.document(2, 4) for _ in range(n_docs)]
    _write(out / "retrieval" / "corpus.jsonl",
           [json.dumps({"_id": f"d{i}", "title": "", "text": " ".join(sents)}) for i, (_, sents) in enumerate(docs)])
    queries, qrels = [], ["query-id\tcorpus-id\tscore"]
    for q in range(n_queries):
        source = rng.randrange(n_docs)
        topic, sents = docs[source]
        queries.append(json.dumps({"_id": f"q{q}", "text": rng.choice(sents)}))
        qrels += [f"q{q}\td{i}\t{2 if i == source else 1}" for i, (t, _) in enumerate(docs) if t == topic]
    _write(out / "retrieval" / "queries.jsonl", queries)
    _write(out / "retrieval" / "qrels" / "test.tsv", qrels)
    # Similarity (STS layout): two-sentence texts, scored by how many of the second's are about the first's topic.
    rows = ["sentence1\tsentence2\tscore"]
    for _ in range(n_sts):
        t1, score = rng.choice(list(TOPICS)), rng.randint(0, 2)
        others = [t for t in TOPICS if t != t1]
        s1 = " ".join(grammar.sentence(t1) for _ in range(2))
        s2 = " ".join(grammar.sentence(t1 if j < score else rng.choice(others)) for j in range(2))
        rows.append(f"{s1}\t{s2}\t{score}")
    _write(out / "sts.tsv", rows)


def _generate_once(cache_dir, name, write, seed):
    """The folder `name` of the cache, filled by write(folder, random.Random(seed)) the first time: in a
    temp folder beside it, then renamed into place, so a reader never sees half of it."""
    final = Path(cache_dir or default_cache_dir()) / name
    if not final.is_dir():
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=final.parent) as tmp:
                write(Path(tmp), random.Random(seed))
                os.rename(tmp, final)
        except OSError:  # the temp folder is gone by now
            if not final.is_dir():  # a concurrent process that won the race is fine
                raise
    return final


def toy_corpus(cache_dir=None, seed=0):
    """Folder with vocab.txt, train.txt, glue/{train,dev,test}.tsv (the labelled pair task: 1 = both
    sentences about one topic) and wordsim.txt, generated once per (seed, TOY_VERSION)."""
    return _generate_once(cache_dir, f"toy-v{TOY_VERSION}-seed{seed}", _write_toy, seed)


def is_toy_vocab(path, cache_dir=None):
    """Is `path` the toy corpus's vocabulary (551 words; a real model's has tens of thousands)?"""
    return os.path.isfile(path) and filecmp.cmp(path, toy_corpus(cache_dir) / "vocab.txt", shallow=False)


def toy_sentence_eval(cache_dir=None, seed=0):
    """Folder with retrieval/{corpus.jsonl, queries.jsonl, qrels/test.tsv} (BEIR layout) and sts.tsv
    (sentence1, sentence2, score), from a random stream of its own (the toy corpus is untouched)."""
    return _generate_once(cache_dir, f"toy-sentence-eval-v{TOY_VERSION}-seed{seed}", _write_toy_sentence_eval,
                          f"sentence-eval-{seed}")


def toy_pair_eval(cache_dir=None, seed=0, n=5000):
    """Folder with dev.tsv: n more pairs of the toy pair task (GLUE dev layout) from a random stream of their own (the
    corpus stays as it is), for study.py: 1,000 pairs leave a binomial spread of about 1.3 points near 80%."""
    write = lambda out, rng: _write(out / "dev.tsv", _pair_rows(_ToyGrammar(rng), n))
    return _generate_once(cache_dir, f"toy-pair-eval-v{TOY_VERSION}-seed{seed}-n{n}", write, f"pair-eval-{seed}")
