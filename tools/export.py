"""Export a taco run or checkpoint (any objective) as a Hugging Face folder (docs/model.md: Export).

    python tools/export.py runs/taco hf/taco                       # the newest checkpoint of a run
    python tools/export.py runs/retromae/ckpt_00000600.pt hf/retromae
    python tools/export.py runs/minilm_taco hf/minilm_taco --encoder_only   # a BertModel: no MLM head

OUT gets what transformers' Auto* classes, SentenceTransformer, `finetune.py --model` and `taco.py --init` load:
config.json, model.safetensors (encoder, pooler, MLM head; RetroMAE's decoder left out, as upstream; a run without a
pooler gets a fresh one, so no weight is reported missing), the tokenizer and sentence-transformers' files. It is
written beside and renamed into place: a non-empty OUT only with --force, never a run, the source or the repository.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the root's modules
from engine import checkpoints, cli, folders  # first, before torch loads (engine/__init__.py)
import torch

from model import BertForPreTraining, to_hf_state_dict
from engine.hf import write_safetensors


def export(spec, out, pooling=None, encoder_only=False, force=False):
    """Write the HF folder `out` from a run, checkpoint or HF folder `spec` -> a summary line. A
    non-empty `out` is replaced with `force` (folders.replacing: never the source, a run, ...)."""
    folders.check(out, "export.py", force, {"SOURCE": spec})  # before any work
    source, run = checkpoints.trained_with(spec)
    torch.manual_seed(0)  # a fresh pooler (or a fresh MLM head for an encoder without one) is the same in every export
    init = checkpoints.load_init(spec, "SOURCE")  # the weights, RetroMAE's decoder included
    vocab = checkpoints.vocab_beside(source)
    if not os.path.isfile(vocab):
        raise cli.UsageError(f"{source} has no vocab.txt beside it: put there the one the model was trained with")
    cfg, fresh_pooler = init.config, not init.config.pooler
    cfg.pooler = True
    model = BertForPreTraining(cfg)
    state = {k: v for k, v in init.state.items() if not k.startswith("decoder.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    left = [k for k in missing if not (k.startswith("pooler.") and fresh_pooler) and k != "mlm.decoder.weight"]
    if left or unexpected:
        raise cli.UsageError(f"{source} is not a BERT pre-training checkpoint: missing {left[:3]}, unexpected "
                             f"{unexpected[:3]}")
    objective = (run or {}).get("objective")
    pooling = pooling or ("cls" if objective == "retromae" else "mean")
    with folders.replacing(out, "export.py", force, {"SOURCE": spec}) as tmp:
        model.save_pretrained(tmp, vocab_file=vocab, do_lower_case=lowercase(source, run))
        if encoder_only:  # a BertModel: its keys carry no "bert." prefix, and no MLM head
            sd = {k.removeprefix("bert."): v for k, v in to_hf_state_dict(model).items() if k.startswith("bert.")}
            write_safetensors(os.path.join(tmp, "model.safetensors"), sd)
            checkpoints.write_json(os.path.join(tmp, "config.json"), cfg.to_hf_dict("BertModel"))
        write_sentence_transformers(tmp, cfg, pooling)
    what = f"{objective} run" if objective else "Hugging Face model"
    notes = ["RetroMAE's decoder left out"] * any(k.startswith("decoder.") for k in init.state)
    notes += ["no pooler in the run: a freshly initialised one"] * fresh_pooler
    params = sum(p.numel() for n, p in model.named_parameters() if not (encoder_only and n.startswith("mlm.")))
    return (f"exported {source} ({what}, {cfg.num_hidden_layers} x {cfg.hidden_size}, {params / 1e6:.1f}M params) to "
            f"{out}: {'BertModel' if encoder_only else 'BertForMaskedLM'} + pooler, tokenizer, sentence-transformers "
            f"({pooling} pooling)" + "".join(f"; {n}" for n in notes))


def lowercase(source, run):
    """Does the tokenizer lowercase? A Hugging Face folder says so in tokenizer_config.json; taco.py
    keeps case only for a cased hub vocabulary (--vocab bert-base-cased)."""
    path = os.path.join(source, "tokenizer_config.json")
    if run is None and os.path.isfile(path):
        return checkpoints.read_json(path).get("do_lower_case", True)
    vocab = str((run or {}).get("vocab", "")).lower()
    return not ("cased" in vocab and "uncased" not in vocab)


def write_sentence_transformers(folder, cfg, pooling):
    """modules.json (the transformer, then pooling) and its two configs: what SentenceTransformer reads."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    checkpoints.write_json(os.path.join(folder, "modules.json"), modules)
    checkpoints.write_json(os.path.join(folder, "sentence_bert_config.json"),
                           {"max_seq_length": min(512, cfg.max_position_embeddings), "do_lower_case": False})
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    checkpoints.write_json(os.path.join(folder, "1_Pooling", "config.json"), {
        "word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False})


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=cli.HelpFormatter)
    p.add_argument("source", help="a taco run folder (its newest checkpoint), a checkpoint file, or a "
                   "Hugging Face folder")
    p.add_argument("out", help="the folder to write: a new or empty one, or with --force a non-empty one")
    p.add_argument("--pooling", choices=["mean", "cls"], help="sentence-transformers' pooling "
                   "(default: cls for a retromae run, whose objective trains [CLS]; else mean)")
    p.add_argument("--encoder_only", action="store_true", help="write a BertModel (encoder + pooler) without the "
                   "MLM head: AutoModel and SentenceTransformer load it without a report")
    p.add_argument("--force", action="store_true", help="replace a non-empty OUT (never a run, the source or the "
                   "repository)")
    with cli.errors():
        args = p.parse_args(argv)
        print(export(args.source, args.out, args.pooling, args.encoder_only, args.force))


if __name__ == "__main__":
    main()
