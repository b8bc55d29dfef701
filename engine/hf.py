"""Hugging Face's file formats, without the `transformers` package: the key map between our parameter names and BERT's
(`to_hf_state_dict`, `load_hf_state_dict`, public in model.py) and the weight files of a model directory
(model.safetensors by a small reader and writer of its documented format, or pytorch_model.bin)."""
import json
import os
import shutil
from pathlib import Path

import torch


# Our names -> Hugging Face BERT's, per layer; the fused qkv maps to three HF tensors.
_LAYER = (("attn.qkv", ("attention.self.query", "attention.self.key", "attention.self.value")),
          ("attn.proj", ("attention.output.dense",)), ("attn_norm", ("attention.output.LayerNorm",)),
          ("mlp.fc", ("intermediate.dense",)), ("mlp.proj", ("output.dense",)), ("mlp_norm", ("output.LayerNorm",)))
_HEADS = (("mlm.dense", "cls.predictions.transform.dense"), ("mlm.norm", "cls.predictions.transform.LayerNorm"),
          ("pooler", "bert.pooler.dense"), ("classifier", "classifier"))  # each where the model has the head


def _key_map(model):
    """[(our parameter name, [Hugging Face names])] of the model's weights."""
    enc = "bert." if hasattr(model, "bert") else ""  # an encoder alone: no prefix
    pairs = [(f"{enc}embeddings.{ours}.weight", [f"bert.embeddings.{ours}_embeddings.weight"])
             for ours in ("word", "position", "token_type")]
    modules = [(f"{enc}embeddings.norm", ["bert.embeddings.LayerNorm"])]
    modules += [(f"{enc}layers.{i}.{ours}", [f"bert.encoder.layer.{i}.{hf}" for hf in hfs])
                for i in range(model.config.num_hidden_layers) for ours, hfs in _LAYER]
    modules += [(ours, [hf]) for ours, hf in _HEADS if hasattr(model, ours.split(".")[0])]
    pairs += [(f"{ours}.{p}", [f"{hf}.{p}" for hf in hfs]) for ours, hfs in modules for p in ("weight", "bias")]
    if hasattr(model, "mlm"):
        pairs += [("mlm.bias", ["cls.predictions.bias"])]
        if not model.config.tie_word_embeddings:
            pairs += [("mlm.decoder.weight", ["cls.predictions.decoder.weight"])]
    return pairs


# Keys of other BERT variants that none of our models use (NSP head, buffers, ...).
_IGNORED = ("cls.seq_relationship.", "bert.embeddings.position_ids", "cls.predictions.decoder.")


def to_hf_state_dict(model):
    """Our state dict under Hugging Face BERT names (BertModel / BertForMaskedLM / ...)."""
    ours = model.state_dict()
    out = {hf: t.detach().clone() for name, hf_names in _key_map(model)
           for hf, t in zip(hf_names, ours[name].chunk(len(hf_names), dim=0))}
    if not hasattr(model, "bert"):  # a bare BertModel's keys carry no "bert." prefix
        out = {k.removeprefix("bert."): v for k, v in out.items()}
    if hasattr(model, "mlm"):
        out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"].clone()
        if model.config.tie_word_embeddings:  # loaders that do not tie still get the matrix
            out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"].clone()
    return out


def load_hf_state_dict(model, state_dict):
    """Copy a Hugging Face BERT state dict (BertModel's or BertFor*'s) into `model` -> the heads left fresh. Every
    encoder weight must be there, of its shape; a head missing keeps its init, another task's is skipped."""
    sd = {(k if k.startswith(("bert.", "cls.", "classifier.")) else "bert." + k): v for k, v in state_dict.items()}
    ours, used, missing, fresh, loaded = model.state_dict(), set(), [], [], {}
    for name, hf_names in _key_map(model):
        if absent := [k for k in hf_names if k not in sd]:
            head = name.startswith(("mlm.", "pooler.", "classifier."))
            (fresh if head else missing).extend([name] if head else absent)
            continue
        t = torch.cat([sd[k] for k in hf_names], dim=0)
        if t.shape != ours[name].shape:
            raise ValueError(f"shape mismatch for {hf_names[0]}: checkpoint {tuple(t.shape)}, "
                             f"model {tuple(ours[name].shape)} (is the model size right?)")
        loaded[name] = t
        used.update(hf_names)
    if missing:
        raise ValueError(f"checkpoint is missing {len(missing)} weights: {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}")
    heads = (("cls.", "mlm"), ("bert.pooler.", "pooler"), ("classifier.", "classifier"))
    skipped = _IGNORED + tuple(prefix for prefix, head in heads if not hasattr(model, head))  # heads it has not
    unexpected = [k for k in sd if k not in used and not k.startswith(skipped)]
    if unexpected:
        raise ValueError(f"checkpoint has {len(unexpected)} unexpected weights: "
                         f"{', '.join(unexpected[:5])}{' ...' if len(unexpected) > 5 else ''}")
    model.load_state_dict(loaded, strict=False)  # the rest of its state as it is
    return fresh


# ----------------------------------------------------------------------------- weight files

# safetensors: 8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets":
# [begin, end]}, "__metadata__": {...}}, then the raw little-endian tensor bytes (offsets from the header's end).
_ST_DTYPES = dict(F64=torch.float64, F32=torch.float32, F16=torch.float16, BF16=torch.bfloat16, I64=torch.int64,
                  I32=torch.int32, I16=torch.int16, I8=torch.int8, U8=torch.uint8, BOOL=torch.bool)


def read_safetensors(path):
    data = bytearray(Path(path).read_bytes())  # writable, as torch.frombuffer wants
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    raw = torch.frombuffer(data, dtype=torch.uint8)[8 + n:]  # each tensor a copy of its bytes: aligned, its own
    return {name: raw[begin:end].clone().view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
            for name, info in header.items() for begin, end in [info["data_offsets"]]}


def write_safetensors(path, tensors):
    names = {v: k for k, v in _ST_DTYPES.items()}
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8-byte alignment
    with open(path, "wb") as f:  # the callers write into a temp folder that is renamed into place
        f.write(len(head).to_bytes(8, "little") + head)
        f.writelines(blobs)


def read_weights(path):
    """The state dict in a Hugging Face directory: model.safetensors or pytorch_model.bin."""
    if os.path.exists(st := os.path.join(path, "model.safetensors")):
        return read_safetensors(st)
    if os.path.exists(pt := os.path.join(path, "pytorch_model.bin")):
        return torch.load(pt, map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{path} holds neither model.safetensors nor pytorch_model.bin")


def read_model_dir(path):
    """-> (config.json as a dict, the state dict) of a Hugging Face model directory."""
    return json.loads(Path(path, "config.json").read_text()), read_weights(path)


def write_model_dir(path, config, state_dict, vocab_file=None, do_lower_case=True):
    """A directory `transformers` loads: config.json, model.safetensors, with a vocab_file vocab.txt and
    BertTokenizer's tokenizer_config.json."""
    os.makedirs(path, exist_ok=True)
    Path(path, "config.json").write_text(json.dumps(config, indent=2))
    write_safetensors(os.path.join(path, "model.safetensors"), state_dict)
    if vocab_file is not None:
        shutil.copyfile(vocab_file, os.path.join(path, "vocab.txt"))
        Path(path, "tokenizer_config.json").write_text(json.dumps(  # BertTokenizer's special tokens
            {"tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
             "model_max_length": config["max_position_embeddings"]}, indent=2))
