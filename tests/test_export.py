"""Tests of export.py: a run of every objective, or a checkpoint, exported once loads in transformers
(AutoConfig, AutoTokenizer, AutoModel, AutoModelForMaskedLM) and sentence-transformers with no
weight missing, and computes what taco's model computes."""
import json
import os

import pytest
import torch
import torch.nn.functional as F

from tools import export
from engine import checkpoints
from data import load_tokenizer
from model import BertForPreTraining
from engine.hf import read_weights

transformers = pytest.importorskip("transformers")
TWO_STEPS = ["--steps", "2", "--batch_size", "4", "--max_len", "32", "--eval_blocks", "2",
             "--threads", "1"]
SENTENCES = ["the farmer chased a muddy goat near the barn", "the sailor steered a boat across the harbor"]


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory, run_taco):
    """A two-step toy run of each objective (TaCL continues the MLM one) -> {objective: run folder}."""
    root = tmp_path_factory.mktemp("runs")
    out = {o: str(root / o) for o in ("mlm", "taco", "tacl", "retromae")}
    for objective in ("mlm", "taco", "retromae"):
        assert run_taco(TWO_STEPS + ["--objective", objective, "--out", out[objective]]) == 0
    assert run_taco(TWO_STEPS + ["--objective", "tacl", "--init", out["mlm"], "--out", out["tacl"]]) == 0
    return out


def ours(source):
    """taco's own model of a run or checkpoint (RetroMAE's decoder dropped) and its tokenizer."""
    init = checkpoints.load_init(source)
    model = BertForPreTraining(init.config)
    model.load_state_dict({k: v for k, v in init.state.items() if not k.startswith("decoder.")}, strict=False)
    return model.eval(), load_tokenizer(checkpoints.vocab_beside(checkpoints.find_weights(source)[0]))


def loaded(cls, path):
    """cls.from_pretrained(path) -> model; no weight missing or of another shape."""
    model, info = cls.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"], info["missing_keys"]
    assert not info["mismatched_keys"], info["mismatched_keys"]
    return model.eval(), info


@pytest.mark.parametrize("objective", ["mlm", "taco", "tacl", "retromae"])
def test_every_objective_exports_and_loads_in_transformers(objective, toy_runs, tmp_path, capsys):
    hf = str(tmp_path / "hf")
    export.main([toy_runs[objective], hf])
    line = capsys.readouterr().out
    assert f"({objective} run, 2 x 128" in line and "no pooler in the run: a freshly initialised one" in line
    assert ("RetroMAE's decoder left out" in line) == (objective == "retromae")
    model, tok = ours(toy_runs[objective])
    config = transformers.AutoConfig.from_pretrained(hf)
    assert (config.model_type, config.architectures, config.hidden_size) == ("bert", ["BertForMaskedLM"], 128)
    hf_tok = transformers.AutoTokenizer.from_pretrained(hf)
    ids = [tok.cls_id] + tok.encode(SENTENCES[0]) + [tok.sep_id]
    assert hf_tok(SENTENCES[0])["input_ids"] == ids
    x = torch.tensor([ids])
    mlm, _ = loaded(transformers.AutoModelForMaskedLM, hf)
    encoder, info = loaded(transformers.AutoModel, hf)
    assert all(k.startswith("cls.") for k in info["unexpected_keys"])  # the MLM head, which BertModel lacks
    with torch.no_grad():
        logits, h, _ = model(x)
        assert (mlm(input_ids=x).logits - logits).abs().max() < 1e-4
        assert (encoder(input_ids=x).last_hidden_state - h).abs().max() < 1e-5
    pooling = json.load(open(os.path.join(hf, "1_Pooling", "config.json")))
    assert pooling["pooling_mode_cls_token"] == (objective == "retromae")  # RetroMAE trains [CLS]


def test_sentence_transformers_encodes_as_taco_does(toy_runs, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    for objective, pooled in (("taco", "mean"), ("retromae", "cls")):
        hf = str(tmp_path / objective)
        export.main([toy_runs[objective], hf])
        vectors = torch.tensor(st.SentenceTransformer(hf, device="cpu").encode(SENTENCES))
        model, tok = ours(toy_runs[objective])
        for sentence, v in zip(SENTENCES, vectors):
            with torch.no_grad():
                h, _ = model.bert(torch.tensor([[tok.cls_id] + tok.encode(sentence) + [tok.sep_id]]))
            ref = h[0, 0] if pooled == "cls" else h[0].mean(0)
            assert F.cosine_similarity(v, ref, dim=0) > 0.9999


def test_a_continued_hugging_face_model_keeps_its_pooler(minilm, real_text, tmp_path, run_taco):
    """--init of a sentence encoder, continued and exported: AutoModel finds its pooler (as it was:
    no objective trains it); --encoder_only writes a BertModel that loads without a report."""
    run = str(tmp_path / "run")
    no_head = ["--init", minilm, "--force"]  # MiniLM has no MLM head: continuing it needs --force
    assert run_taco(TWO_STEPS + no_head + ["--data", real_text[0], "--objective", "mlm", "--out", run]) == 0
    hf, bare = str(tmp_path / "hf"), str(tmp_path / "bare")
    export.main([run, hf])
    export.main([run, bare, "--encoder_only"])
    pooler = read_weights(minilm)["pooler.dense.weight"]
    encoder, info = loaded(transformers.AutoModel, hf)
    assert torch.equal(encoder.pooler.dense.weight, pooler)
    encoder, info = loaded(transformers.AutoModel, bare)
    assert not info["unexpected_keys"] and torch.equal(encoder.pooler.dense.weight, pooler)
    assert transformers.AutoTokenizer.from_pretrained(hf).do_lower_case  # MiniLM's, kept


def test_an_encoder_without_mlm_head_exports_the_same_bytes_twice(minilm, tmp_path, capsys):
    """MiniLM has no MLM head: the fresh one (like a fresh pooler) is seeded, so two exports are one file."""
    for out in ("a", "b"):
        export.main([minilm, str(tmp_path / out)])
    assert "(Hugging Face model, 6 x 384" in capsys.readouterr().out
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


def test_export_mistakes_are_one_line_exit_2(toy_runs, tmp_path, capsys):
    """A missing or broken source, a file as OUT, a non-empty OUT without --force: one line, exit 2, nothing
    touched; with --force an earlier export is replaced, and no temporary folder is left behind."""
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    broken = tmp_path / "broken"  # an HF folder whose files are not what they say
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "model.safetensors").write_text("junk")
    again = str(tmp_path / "again")
    export.main([toy_runs["taco"], again])
    assert "taco run" in capsys.readouterr().out
    for argv in ([str(tmp_path / "none"), str(tmp_path / "a")], [str(broken), str(tmp_path / "a")],
                 [toy_runs["taco"], str(full)], [toy_runs["taco"], str(full / "notes.txt")], [toy_runs["mlm"], again]):
        with pytest.raises(SystemExit) as exit:
            export.main(argv)
        err = capsys.readouterr().err
        assert exit.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert (full / "notes.txt").read_text() == "mine"
    assert checkpoints.read_json(os.path.join(again, "1_Pooling", "config.json"))["pooling_mode_mean_tokens"]
    export.main([toy_runs["retromae"], again, "--force"])
    assert "retromae run" in capsys.readouterr().out.splitlines()[-1]
    assert checkpoints.read_json(os.path.join(again, "1_Pooling", "config.json"))["pooling_mode_cls_token"]
    assert sorted(os.listdir(tmp_path)) == ["again", "broken", "full"]
