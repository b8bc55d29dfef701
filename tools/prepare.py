"""Tokenise a corpus once, ahead of a run (as nanoGPT's prepare.py): taco.py then finds it in the
token cache. The paper's corpora take hours; the toy corpus seconds.

    python tools/prepare.py --data toy --vocab toy
    python tools/prepare.py --data wikipedia,bookcorpus --vocab bert-base-uncased --num_proc 16
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # python tools/NAME.py: the root's modules
from engine import cli  # first, before torch loads (engine/__init__.py)
from data import load_tokenizer, make_blocks
from engine.corpus import tokenize_corpus


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--data", required=True, help="comma-separated sources, as taco.py --data takes them (docs/data.md)")
    p.add_argument("--vocab", default="bert-base-uncased",
                   help="toy, a vocab.txt, a folder with one, or a hub model id")
    p.add_argument("--max_len", type=cli.int_range(8, 512), default=128, help="block length to report for --data")
    p.add_argument("--num_proc", type=cli.int_range(1), default=None,
                   help="tokenisation processes (default: one per 100 MB of text, at most one per core)")
    p.add_argument("--cache_dir", default=None, help="default: $TACO_CACHE or ~/.cache/taco")
    args = p.parse_args(argv)
    with cli.errors():
        tok = load_tokenizer(args.vocab, args.cache_dir)
        tokens = tokenize_corpus(args.data, tok, args.cache_dir, args.num_proc)
        blocks = make_blocks(tokens, args.max_len, tok.cls_id, tok.sep_id)
        print(f"{len(tokens):,} tokens ({tokens.dtype}), {len(blocks):,} blocks of {args.max_len}")


if __name__ == "__main__":
    main()
