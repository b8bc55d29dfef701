"""Tests for model.py: the encoder against an independent float64 reference and against
Hugging Face's `transformers` on the same weights; import and export of checkpoints."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

from model import Bert, BertConfig, BertForPreTraining, BertForSequenceClassification, load_hf_state_dict, to_hf_state_dict
from engine.hf import read_safetensors, write_safetensors



def naive_bert(model, ids, attention_mask, token_type_ids):
    """An independent, loop-over-heads BERT forward in float64 from the same weights."""
    sd = {k: v.double() for k, v in model.state_dict().items()}
    cfg = model.config
    B, T = ids.shape
    H, nh = cfg.hidden_size, cfg.num_attention_heads

    def ln(x, w, b):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + cfg.layer_norm_eps) * w + b

    def gelu(x):
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))

    x = sd["bert.embeddings.word.weight"][ids] + sd["bert.embeddings.position.weight"][:T] \
        + sd["bert.embeddings.token_type.weight"][token_type_ids]
    x = ln(x, sd["bert.embeddings.norm.weight"], sd["bert.embeddings.norm.bias"])
    add_mask = (1.0 - attention_mask.double())[:, None, :] * -1e9  # (B, 1, T)
    for i in range(cfg.num_hidden_layers):
        p = f"bert.layers.{i}."
        qkv = x @ sd[p + "attn.qkv.weight"].T + sd[p + "attn.qkv.bias"]
        q, k, v = qkv.split(H, dim=-1)
        heads = []
        hs = H // nh
        for hd in range(nh):
            sl = slice(hd * hs, (hd + 1) * hs)
            att = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(hs) + add_mask
            heads.append(torch.softmax(att, -1) @ v[..., sl])
        a = torch.cat(heads, -1) @ sd[p + "attn.proj.weight"].T + sd[p + "attn.proj.bias"]
        x = ln(x + a, sd[p + "attn_norm.weight"], sd[p + "attn_norm.bias"])
        m = gelu(x @ sd[p + "mlp.fc.weight"].T + sd[p + "mlp.fc.bias"]) @ sd[p + "mlp.proj.weight"].T \
            + sd[p + "mlp.proj.bias"]
        x = ln(x + m, sd[p + "mlp_norm.weight"], sd[p + "mlp_norm.bias"])
    t = ln(gelu(x @ sd["mlm.dense.weight"].T + sd["mlm.dense.bias"]), sd["mlm.norm.weight"], sd["mlm.norm.bias"])
    return t @ sd["bert.embeddings.word.weight"].T + sd["mlm.bias"]


def small_model(**kw):
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig.from_size("tiny", vocab_size=97, **kw)).eval()


def test_sizes_and_bad_size():
    assert BertConfig.from_size("base").intermediate_size == 3072
    assert (BertConfig.from_size("small").num_hidden_layers, BertConfig.from_size("small").hidden_size) == (4, 512)
    with pytest.raises(ValueError, match="tiny, mini, small"):
        BertConfig.from_size("huge")
    n = sum(p.numel() for p in BertForPreTraining(BertConfig.from_size("base")).parameters())
    assert 109e6 < n < 111e6  # BERT-base: 110M with the tied decoder counted once


def test_model_matches_naive_reference():
    model = small_model()
    torch.manual_seed(1)
    for p in model.parameters():  # non-trivial LayerNorm and biases too
        p.data += 0.02 * torch.randn_like(p)
    ids = torch.randint(0, 97, (3, 19))
    mask = torch.ones(3, 19, dtype=torch.long)
    mask[1, 12:] = 0
    types = torch.zeros_like(ids)
    types[:, 9:] = 1
    with torch.no_grad():
        logits, h, e = model(ids, attention_mask=mask, token_type_ids=types)
    ref = naive_bert(model, ids, mask, types)
    real = mask.bool()
    assert (logits[real].double() - ref[real]).abs().max() < 1e-5
    # the sparse head: logits only at labelled rows, identical to the dense ones there
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[2, 17] = 5, 7
    with torch.no_grad():
        sparse, _, _ = model(ids, labels=labels, attention_mask=mask, token_type_ids=types)
    assert sparse.shape == (2, 97)
    assert torch.allclose(sparse, logits[labels != -100], atol=1e-6)
    assert e.shape == h.shape == (3, 19, 128)


def test_embedding_output_is_layer_zero():
    model = small_model()
    ids = torch.randint(0, 97, (2, 7))
    _, _, e = model(ids)
    emb = model.bert.embeddings
    ref = F.layer_norm(emb.word.weight[ids] + emb.position.weight[:7] + emb.token_type.weight[0], (128,),
                       emb.norm.weight, emb.norm.bias, eps=1e-12)
    assert torch.allclose(e, ref, atol=1e-6)


def test_tied_and_untied_decoder():
    tied, untied = small_model(), small_model(tie_word_embeddings=False)
    assert tied.mlm.decoder.weight is tied.bert.embeddings.word.weight
    assert untied.mlm.decoder.weight is not untied.bert.embeddings.word.weight


def test_hf_state_dict_round_trip_and_errors():
    model = small_model(tie_word_embeddings=False)
    sd = to_hf_state_dict(model)
    assert "bert.encoder.layer.1.attention.self.key.weight" in sd
    assert "cls.predictions.transform.LayerNorm.bias" in sd
    other = small_model(tie_word_embeddings=False)
    for p in other.parameters():
        p.data.zero_()
    assert load_hf_state_dict(other, sd) == []
    for a, b in zip(model.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b)
    broken = dict(sd)
    del broken["bert.encoder.layer.0.output.dense.weight"]
    with pytest.raises(ValueError, match="missing 1 weights: bert.encoder.layer.0.output.dense.weight"):
        load_hf_state_dict(other, broken)
    with pytest.raises(ValueError, match="unexpected weights: bert.extra"):
        load_hf_state_dict(other, {**sd, "bert.extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape mismatch"):
        load_hf_state_dict(BertForPreTraining(BertConfig.from_size("mini", vocab_size=97)), sd)


def test_bare_encoder_checkpoint_keeps_fresh_heads():
    enc = Bert(BertConfig.from_size("tiny", vocab_size=97))
    sd = to_hf_state_dict(enc)
    assert "embeddings.word_embeddings.weight" in sd  # BertModel keys carry no prefix
    clf = BertForSequenceClassification(BertConfig.from_size("tiny", vocab_size=97), num_labels=3)
    fresh = load_hf_state_dict(clf, sd)
    assert sorted(fresh) == ["classifier.bias", "classifier.weight", "pooler.bias", "pooler.weight"]
    assert torch.equal(clf.bert.embeddings.word.weight, enc.embeddings.word.weight)


def test_safetensors_round_trip(tmp_path):
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5), "c": torch.randn(2).bfloat16()}
    write_safetensors(str(tmp_path / "x.safetensors"), tensors)
    back = read_safetensors(str(tmp_path / "x.safetensors"))
    assert all(torch.equal(tensors[k], back[k]) for k in tensors)


def test_save_pretrained_round_trip(tmp_path):
    model = small_model()
    model.save_pretrained(str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForMaskedLM"]
    back = BertForPreTraining.from_pretrained(str(tmp_path)).eval()
    ids = torch.randint(0, 97, (2, 9))
    assert torch.equal(model(ids)[0], back(ids)[0])


def test_real_hf_checkpoint_matches_transformers(minilm):
    path = minilm
    transformers = pytest.importorskip("transformers")
    ours = Bert.from_pretrained(path).eval()
    ref = transformers.BertModel.from_pretrained(path).eval()
    ids = torch.randint(1000, 30000, (2, 33))
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0
    with torch.no_grad():
        h, _ = ours(ids, attention_mask=mask)
        h_ref = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (h - h_ref)[mask.bool()].abs().max() < 1e-5


def test_export_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = small_model()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]) + "\n")
    model.save_pretrained(str(tmp_path / "hf"), vocab_file=str(vocab))
    ref = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    ids = torch.randint(0, 97, (2, 11))
    with torch.no_grad():
        assert (ref(input_ids=ids).logits - model(ids)[0]).abs().max() < 1e-5
    tok = transformers.BertTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tok.convert_tokens_to_ids(["w3"]) == [8]


def test_pooler_of_a_hugging_face_model_is_kept_frozen_and_exported(tmp_path):
    """An HF encoder's [CLS] pooler travels through BertForPreTraining (frozen: no pre-training loss
    uses it) and back out; a model without one has none, and config.json never says either."""
    hf = str(tmp_path / "hf")
    clf = BertForSequenceClassification(BertConfig.from_size("tiny", vocab_size=97), num_labels=2)
    clf.save_pretrained(hf)  # an HF checkpoint with bert.pooler.dense.*
    model = BertForPreTraining.from_pretrained(hf)
    assert model.config.pooler and not model.pooler.weight.requires_grad
    assert torch.equal(model.pooler.weight, clf.pooler.weight)
    model.save_pretrained(str(tmp_path / "back"))
    sd = read_safetensors(str(tmp_path / "back" / "model.safetensors"))
    assert torch.equal(sd["bert.pooler.dense.bias"], clf.pooler.bias)
    assert "pooler" not in json.loads((tmp_path / "back" / "config.json").read_text())
    plain = small_model()
    assert not hasattr(plain, "pooler") and not any("pooler" in k for k in to_hf_state_dict(plain))
