"""Tests for RetroMAE (`--objective retromae`): whole-word masking, the decoder, the loss, runs.

python -m pytest -q test_retromae.py
"""
import json
import math
import os
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine import cli
import data
from engine import toy
from data import decoder_visible, mask_selected, retromae_batch, whole_word_mask
from engine.evalsets import read_beir, read_sts
from model import BertConfig, RetroMAEForPreTraining
from taco import DecoderInputs, retromae_loss


@pytest.fixture(scope="module")
def tok(cache_dir):
    """The toy vocabulary (551 tokens) of the session's toy corpus."""
    return data.load_tokenizer("toy", cache_dir)


def plain_ids(tok, B, T, gen):
    """[CLS] + random whole-word-free ids (no "##" piece, no special) + [SEP]."""
    words = torch.tensor([i for i in range(tok.vocab_size)
                          if i not in tok.special_ids and not tok.is_continuation[i]])
    ids = words[torch.randint(len(words), (B, T), generator=gen)]
    ids[:, 0], ids[:, -1] = tok.cls_id, tok.sep_id
    return ids


def random_ids(tok, B, T, gen, p_piece=0.3):
    """Rows with "##" pieces (some right after [CLS], a mid-block [SEP] or an [UNK]), mid-block
    [SEP]s, [UNK]s and trailing padding: every corner of the word rule."""
    normal = [i for i in range(tok.vocab_size) if i not in tok.special_ids]
    pieces = torch.tensor([i for i in normal if tok.is_continuation[i]])
    words = torch.tensor([i for i in normal if not tok.is_continuation[i]])
    ids = words[torch.randint(len(words), (B, T), generator=gen)]
    piece = torch.rand(B, T, generator=gen) < p_piece
    ids = torch.where(piece, pieces[torch.randint(len(pieces), (B, T), generator=gen)], ids)
    ids = torch.where(torch.rand(B, T, generator=gen) < 0.05, tok.unk_id, ids)
    ids = torch.where(torch.rand(B, T, generator=gen) < 0.05, tok.sep_id, ids)
    ids[:, 0] = tok.cls_id
    for b in range(B):
        n = int(torch.randint(4, T + 1, (1,), generator=gen))  # real length; the rest is padding
        ids[b, n - 1], ids[b, n:] = tok.sep_id, tok.pad_id
    return ids


def hf_whole_word_mask(tokens, keys, probability):
    """A loop written from Hugging Face's DataCollatorForWholeWordMask._whole_word_mask: words
    ("##" pieces joined to the word before, across [CLS]/[SEP]), visited in the order of the
    keys at their first piece; a word that would overflow k is skipped. -> chosen positions."""
    cand = []
    for i, t in enumerate(tokens):
        if t in ("[CLS]", "[SEP]"):
            continue
        if cand and t.startswith("##"):
            cand[-1].append(i)
        else:
            cand.append([i])
    cand.sort(key=lambda w: keys[w[0]])
    k = min(512, max(1, int(round(len(tokens) * probability))))
    chosen = []
    for w in cand:
        if len(chosen) >= k:
            break
        if len(chosen) + len(w) > k:
            continue
        chosen += w
    return set(chosen)


# ----------------------------------------------------------------------------- whole-word masking

@pytest.mark.parametrize("probability", [0.15, 0.3, 0.5, 0.9])
def test_whole_word_mask_equals_the_loop_reference(tok, probability):
    gen = torch.Generator().manual_seed(int(probability * 100))
    B, T, n = 24, 40, 3
    ids = random_ids(tok, B, T, gen)
    got = whole_word_mask(ids, tok, probability, torch.Generator().manual_seed(7), n=n)
    keys = torch.rand(B * n, T, generator=torch.Generator().manual_seed(7))  # the same word order
    for r in range(B * n):
        row = ids[r // n]
        tokens = [tok.ids_to_tokens[i] for i in row.tolist() if i != tok.pad_id]  # unpadded, as upstream
        want = hf_whole_word_mask(tokens, keys[r].tolist(), probability)
        assert set(got[r // n, r % n].nonzero().squeeze(1).tolist()) == want, (r, tokens)
    frame = torch.tensor([tok.cls_id, tok.sep_id, tok.pad_id])
    assert not (got & torch.isin(ids, frame)[:, None]).any() and (got & (ids == tok.unk_id)[:, None]).any()


def test_whole_word_mask_counts_and_whole_words(tok):
    gen = torch.Generator().manual_seed(0)
    ids = plain_ids(tok, 16, 128, gen)
    for p, k in ((0.15, 19), (0.3, 38), (0.5, 64)):  # round(128 p), specials counted in the length
        assert (whole_word_mask(ids, tok, p, gen, n=2).sum(-1) == k).all()
    ids = random_ids(tok, 16, 64, gen)
    m = whole_word_mask(ids, tok, 0.4, gen)[:, 0]
    cont = tok.is_continuation[ids]
    # a "##" piece that follows a normal token is chosen exactly when that token is
    follows = cont[:, 1:] & ~torch.isin(ids[:, :-1], torch.tensor(tok.special_ids))
    assert torch.equal(m[:, 1:][follows], m[:, :-1][follows])


def test_mask_selected_statistics(tok):
    gen = torch.Generator().manual_seed(0)
    ids = plain_ids(tok, 64, 128, gen)
    selected = torch.rand(ids.shape, generator=gen) < 0.5
    selected[:, [0, -1]] = False  # [CLS] / [SEP]
    inputs, labels = mask_selected(ids, selected, tok, gen)
    assert torch.equal(labels != -100, selected) and torch.equal(labels[selected], ids[selected])
    assert torch.equal(inputs[~selected], ids[~selected])
    n = selected.sum().item()
    masked = (inputs[selected] == tok.mask_id).sum().item() / n
    kept = (inputs[selected] == ids[selected]).sum().item() / n
    assert abs(masked - 0.8) < 0.02 and abs(kept - 0.1) < 0.015
    assert not torch.isin(inputs[selected & (inputs != tok.mask_id)], torch.tensor(tok.special_ids)).any()


# ----------------------------------------------------------------------------- the decoder's batch

def test_decoder_visibility_matrix(tok):
    gen = torch.Generator().manual_seed(1)
    T = 128
    ids = plain_ids(tok, 4, T, gen)
    vis = decoder_visible(ids, tok, 0.5, gen)  # k = 64 hidden by the mask
    assert not vis.diagonal(dim1=1, dim2=2).any()  # never its own token
    assert vis[:, 1:, 0].all() and vis[:, :-1, -1].all()  # [CLS] and [SEP] always visible to the others
    seen = vis.sum(-1)
    assert ((seen == T - 64 - 1) | (seen == T - 64)).all()  # 63 if its own position was not masked, else 64
    pool = decoder_visible(ids, tok, 0.5, gen, pool=8)
    for b in range(4):  # rows share <= pool masks: compare rows >= 64 on columns < 64 (own position aside)
        rows = {tuple((~pool[b, i, :64]).tolist()) for i in range(64, T)}
        assert len(rows) <= 8
    padded = random_ids(tok, 8, 48, gen)
    vis = decoder_visible(padded, tok, 0.5, gen)
    assert (vis.sum(-1) > 0).all()  # no empty row: SDPA would give NaN
    assert not vis.masked_select((padded == tok.pad_id)[:, None, :]).any()  # padding is never a key


def test_retromae_batch_labels(tok):
    gen = torch.Generator().manual_seed(2)
    ids = random_ids(tok, 8, 64, gen)
    inputs, labels, visible, dec_labels = retromae_batch(ids, tok, 0.3, 0.5, gen)
    special = torch.isin(ids, torch.tensor(tok.special_ids))
    frame = torch.isin(ids, torch.tensor([tok.cls_id, tok.sep_id, tok.pad_id]))
    assert torch.equal(dec_labels, torch.where(frame, -100, ids))  # every other token is a target, [UNK] too
    assert (dec_labels == tok.unk_id).any()
    assert not (labels != -100)[special].any() and torch.equal(labels[labels != -100], ids[labels != -100])
    assert visible.shape == (8, 64, 64)


def test_unk_as_hugging_face_and_the_official_collator_treat_it(tok):
    """[UNK] against the installed transformers. Whole-word masking: the tokenizer's own special
    mask marks [CLS] and [SEP] only, so [UNK] is a word (its word id is not -1), as in RetroMAE's
    pinned 4.34 `_whole_word_mask`, which skips only "[CLS]" and "[SEP]": taco's masks choose among
    the same positions. BERT's 80/10/10 step (torch_mask_tokens) takes its special mask from
    get_special_tokens_mask, which holds [UNK]: never masked, in HF and in taco's encoder. The
    official decoder labels are every position but the first and last: [UNK] is a target."""
    transformers = pytest.importorskip("transformers")
    from transformers import DataCollatorForLanguageModeling as Collator
    if not hasattr(Collator, "_calc_word_ids_and_prob_mask"):
        pytest.skip("this transformers has another whole-word masking")
    hf = transformers.BertTokenizerFast(tok.vocab_file)
    text = "the ωω cat sat ψ the catωx"  # words with a letter the vocabulary lacks: [UNK]
    enc = hf(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids = torch.tensor([enc["input_ids"]])
    assert enc["input_ids"][1:-1] == tok.encode(text) and (ids == tok.unk_id).sum() >= 2
    word_ids, _ = Collator._calc_word_ids_and_prob_mask(np.array([enc["offset_mapping"]]),
                                                       np.array([enc["special_tokens_mask"]]))
    every_word = whole_word_mask(ids, tok, 1.0)[:, 0]  # k > the words: every candidate is chosen
    assert torch.equal(every_word, torch.from_numpy(word_ids != -1))
    collator = Collator(hf, mlm_probability=1.0, mask_replace_prob=1.0, random_replace_prob=0.0)
    _, hf_labels = collator.torch_mask_tokens(ids.clone())
    _, labels, _, dec_labels = retromae_batch(ids, tok, 1.0, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(labels != -100, hf_labels != -100)  # every token but [CLS], [SEP] and [UNK]
    assert torch.equal(dec_labels[0, 1:-1], ids[0, 1:-1]) and (dec_labels[0, [0, -1]] == -100).all()


# ----------------------------------------------------------------------------- the model

def tiny_retromae(vocab_size):
    torch.manual_seed(0)
    return RetroMAEForPreTraining(BertConfig.from_size("tiny", vocab_size=vocab_size)).eval()


def batch(tok, B=4, T=32, seed=3):
    gen = torch.Generator().manual_seed(seed)
    ids = plain_ids(tok, B, T, gen)
    inputs, labels, visible, dec_labels = retromae_batch(ids, tok, 0.3, 0.5, gen)
    return ids, inputs, labels, DecoderInputs(ids, visible, dec_labels)


def test_streams_are_the_papers(tok):
    model = tiny_retromae(tok.vocab_size)
    ids, inputs, labels, dec = batch(tok)
    seen = {}
    model.decoder.register_forward_hook(lambda m, a, kw, out: seen.update(q=a[0], ctx=kw["context"]), with_kwargs=True)
    with torch.no_grad():
        h, _ = model.bert(inputs)
        model(inputs, labels=labels, dec_ids=dec.ids, dec_visible=dec.visible)
        emb = model.bert.embeddings(ids)
    T = ids.size(1)
    assert torch.equal(seen["ctx"][:, 0], h[:, 0]) and torch.equal(seen["ctx"][:, 1:], emb[:, 1:])
    assert torch.equal(seen["q"], model.bert.embeddings.position.weight[:T] + h[:, :1])


def test_decoder_layer_equals_a_loop_over_rows(tok):
    """The batched layer against the paper's equations, row by row, head by head, in float64."""
    model = tiny_retromae(tok.vocab_size).double()
    ids, inputs, labels, dec = batch(tok, B=2, T=12)
    with torch.no_grad():
        h, _ = model.bert(inputs)
        got = model.decode(h[:, :1], ids, dec.visible)
        emb = model.bert.embeddings(ids)
    sd, cfg = model.decoder.state_dict(), model.config
    H, nh = cfg.hidden_size, cfg.num_attention_heads
    hs = H // nh
    Wq, Wk, Wv = sd["attn.qkv.weight"].split(H)
    bq, bk, bv = sd["attn.qkv.bias"].split(H)
    ln = lambda x, p: F.layer_norm(x, (H,), sd[p + ".weight"], sd[p + ".bias"], cfg.layer_norm_eps)
    for b in range(2):
        content = torch.cat([h[b, :1], emb[b, 1:]])  # H2 = [h_X, e_1, ..., e_N]
        for i in range(ids.size(1)):
            query = model.bert.embeddings.position.weight[i] + h[b, 0]  # H1_i = p_i + h_X
            heads = []
            for hd in range(nh):
                sl = slice(hd * hs, (hd + 1) * hs)
                q = (Wq[sl] @ query + bq[sl])
                scores = [(q @ (Wk[sl] @ content[j] + bk[sl])) / math.sqrt(hs) for j in range(ids.size(1))
                          if dec.visible[b, i, j]]
                values = [Wv[sl] @ content[j] + bv[sl] for j in range(ids.size(1)) if dec.visible[b, i, j]]
                w = torch.softmax(torch.stack(scores), 0)
                heads.append(sum(wj * vj for wj, vj in zip(w, values)))
            a = sd["attn.proj.weight"] @ torch.cat(heads) + sd["attn.proj.bias"]
            x = ln(query + a, "attn_norm")  # residual on the query stream
            m = sd["mlp.proj.weight"] @ F.gelu(sd["mlp.fc.weight"] @ x + sd["mlp.fc.bias"]) + sd["mlp.proj.bias"]
            assert torch.allclose(got[b, i], ln(x + m, "mlp_norm"), atol=1e-10)


def test_no_leakage(tok):
    """Changing decoder token j changes row i exactly where j is visible to i (never j = i)."""
    model = tiny_retromae(tok.vocab_size)
    ids, inputs, labels, dec = batch(tok, B=2, T=24)
    with torch.no_grad():
        base = model(inputs, labels=labels, dec_ids=ids, dec_visible=dec.visible)[1]  # (B, T, V)
        for j in (1, 5, 11, 23):
            other = ids.clone()
            other[:, j] = (ids[:, j] + 1 - 5) % (tok.vocab_size - 5) + 5  # another non-special id
            out = model(inputs, labels=labels, dec_ids=other, dec_visible=dec.visible)[1]
            changed = (out - base).abs().amax(-1) > 1e-6  # (B, T)
            assert torch.equal(changed, dec.visible[:, :, j]), j
            assert not changed[:, j].any()


def test_decoder_sees_the_encoder_only_through_cls(tok):
    model = tiny_retromae(tok.vocab_size)
    ids, inputs, labels, dec = batch(tok)

    def run(edit=None):
        hook = None if edit is None else model.bert.register_forward_hook(lambda m, a, out: (edit(out[0]), out[1]))
        with torch.no_grad():
            out = model(inputs, labels=labels, dec_ids=ids, dec_visible=dec.visible, dec_labels=dec.labels)
        if hook:
            hook.remove()
        return out

    base = run()
    tail = run(lambda h: torch.cat([h[:, :1], h[:, 1:] + torch.randn_like(h[:, 1:])], 1))
    head = run(lambda h: torch.cat([h[:, :1] + 1, h[:, 1:]], 1))
    assert torch.equal(tail[1], base[1]) and not torch.equal(tail[0], base[0])
    assert not torch.allclose(head[1], base[1])


def test_zeroed_mlm_head_gives_two_ln_v(tok):
    model = tiny_retromae(tok.vocab_size).train()
    with torch.no_grad():
        for t in (model.mlm.dense.weight, model.mlm.dense.bias, model.mlm.norm.weight, model.mlm.norm.bias,
                  model.mlm.bias):
            t.zero_()
    ids, inputs, labels, dec = batch(tok)
    loss, enc, rebuild = retromae_loss(model, inputs, labels, dec)
    assert enc.item() == pytest.approx(math.log(551)) and rebuild.item() == pytest.approx(math.log(551))
    assert loss.item() == pytest.approx(12.6234, abs=1e-4)  # 2 ln 551: the toy vocabulary


# ----------------------------------------------------------------------------- end to end

FAST = ["--objective", "retromae", "--steps", "8", "--batch_size", "8", "--max_len", "32", "--save_every", "4",
        "--eval_every", "8", "--eval_blocks", "8", "--log_every", "2", "--keep_last", "10"]


def ckpt(out, step):
    return torch.load(os.path.join(out, f"ckpt_{step:08d}.pt"), weights_only=True)


def test_resume_is_exact_and_export_loads_in_transformers(tmp_path, tok, run_taco):
    straight, crashed = str(tmp_path / "straight"), str(tmp_path / "crashed")
    assert run_taco(FAST + ["--out", straight]) == 0
    shutil.copytree(straight, crashed)
    for name in os.listdir(crashed):
        if name.startswith("ckpt_00000008"):
            os.remove(os.path.join(crashed, name))
    assert run_taco(FAST + ["--out", crashed, "--resume"]) == 0
    a, b = ckpt(straight, 8)["model"], ckpt(crashed, 8)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(0)  # the decoder trains: it moved from its seeded init
    fresh = RetroMAEForPreTraining(BertConfig(**json.load(open(os.path.join(straight, "config.json")))["model_config"]))
    assert not torch.equal(a["decoder.attn.qkv.weight"], fresh.decoder.attn.qkv.weight)
    assert json.load(open(os.path.join(straight, "config.json")))["args"]["mlm_probability"] == 0.3

    transformers = pytest.importorskip("transformers")
    fresh.load_state_dict(a)
    fresh.eval().save_pretrained(str(tmp_path / "hf"), vocab_file=os.path.join(straight, "vocab.txt"))
    hf = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    assert not any("decoder.attn" in k or k.startswith("decoder.") for k in hf.state_dict())
    ids = plain_ids(tok, 2, 16, torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = fresh(ids)[0]
        theirs = hf(input_ids=ids).logits
    assert torch.allclose(ours, theirs, atol=1e-4)


def test_init_across_objectives(tmp_path, capsys, tok, run_taco):
    mlm, retro, back = (str(tmp_path / n) for n in ("mlm", "retro", "back"))
    assert run_taco(FAST[2:] + ["--objective", "mlm", "--steps", "2", "--out", mlm]) == 0
    assert run_taco(FAST + ["--steps", "2", "--out", retro, "--init", mlm]) == 0  # fresh decoder
    trained, cont = ckpt(mlm, 2)["model"], ckpt(retro, 2)["model"]
    assert any(k.startswith("decoder.") for k in cont) and cont.keys() - trained.keys() == {
        k for k in cont if k.startswith("decoder.")}
    assert run_taco(FAST[2:] + ["--objective", "mlm", "--steps", "2", "--out", back, "--init", retro]) == 0  # dropped
    assert not any(k.startswith("decoder.") for k in ckpt(back, 2)["model"])
    capsys.readouterr()
    assert run_taco(FAST + ["--predict_all", "--out", str(tmp_path / "x")]) == 2
    assert run_taco(FAST + ["--decoder_mlm_probability", "1.5", "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--predict_all" in err


# ----------------------------------------------------------------------------- sentence-embedding probes

def test_retrieval_metrics_by_hand():
    from tools import analyze
    scores = torch.tensor([[0.9, 0.1, 0.5, 0.3],   # ranks d0 d2 d3 d1
                           [0.2, 0.8, 0.4, 0.6]])  # ranks d1 d3 d2 d0
    relevance = [{2: 2, 1: 1}, {0: 1}]
    # q0 grades by rank: 0 2 0 1 -> DCG = 2/log2(3) + 1/log2(5), ideal 2/log2(2) + 1/log2(3)
    ndcg0 = (2 / math.log2(3) + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
    ndcg1 = (1 / math.log2(5)) / 1  # q1: its one relevant document at rank 4
    got = analyze.retrieval_metrics(scores, relevance, k_recall=2)
    assert got["ndcg@10"] == pytest.approx((ndcg0 + ndcg1) / 2)
    assert got["mrr@10"] == pytest.approx((1 / 2 + 1 / 4) / 2)
    assert got["recall@2"] == pytest.approx((1 / 2 + 0) / 2)
    assert analyze.retrieval_metrics(scores, relevance, k_mrr=3)["mrr@3"] == pytest.approx(1 / 4)
    tied = analyze.retrieval_metrics(torch.zeros(1, 3), [{1: 1}], k_ndcg=1, k_mrr=1, k_recall=1)
    assert tied["mrr@1"] == 0 and tied["ndcg@1"] == 0  # ties: the earlier document (d0) first


def test_embed_ignores_padding_and_reads_beir(tmp_path, tok):
    from tools import analyze
    model = tiny_retromae(tok.vocab_size)
    texts = ["the dog chased a cow .", "a ship sails", "the comet orbits one distant planet near the moon ."]
    got = analyze.embed(model.bert, tok, texts, batch_size=2)
    for i, t in enumerate(texts):  # alone, unpadded
        ids = torch.tensor([[tok.cls_id] + tok.encode(t) + [tok.sep_id]])
        assert torch.allclose(got[i], model.bert(ids)[0][0, 0], atol=1e-5)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": f"d{i}", "title": "", "text": t})
                                                 for i, t in enumerate(texts)) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": texts[2]}) + "\n"
                                        + json.dumps({"_id": "unjudged", "text": "x"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td2\t1\n")
    r = analyze.dense_retrieval(model.bert, tok, read_beir(str(beir)), similarity="cos")
    assert r["queries"] == 1 and r["documents"] == 3
    assert r["mrr@10"] == 1.0 and r["ndcg@10"] == pytest.approx(1.0)  # cosine: the document itself is first
    with pytest.raises(cli.UsageError, match="integer score"):
        (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td2\n")
        read_beir(str(beir))


def test_toy_sentence_eval_sets(tok):
    folder = toy.toy_sentence_eval()
    before = sorted(os.listdir(toy.toy_corpus()))
    corpus, queries, qrels = read_beir(os.path.join(folder, "retrieval"))
    docs = dict(corpus)
    for qid, text in queries[:50]:
        source = [d for d, g in qrels[qid].items() if g == 2]
        assert len(source) == 1 and text in docs[source[0]]  # the query is a sentence of its source
        assert set(qrels[qid].values()) == {1, 2}
    pairs = read_sts(os.path.join(folder, "sts.tsv"))
    assert len(pairs) == 1000 and {p[2] for p in pairs} == {0.0, 1.0, 2.0}
    assert sorted(os.listdir(toy.toy_corpus())) == before  # the toy corpus is untouched
