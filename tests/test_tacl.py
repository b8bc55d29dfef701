"""Tests for TaCL (--objective tacl): the loss, the frozen teacher, per-layer self-similarity.
python -m pytest -q test_tacl.py"""
import json
import math
import os
import shutil
import sys

import pytest
import torch

from tools import analyze
from engine import fast
from engine import flags
from tools import study
import taco
from data import load_tokenizer
from model import Bert, BertConfig, BertForPreTraining
from taco import tacl_loss



# ----------------------------------------------------------------------------- the loss

def official_loop(student_h, teacher_h, anchors, temperature):
    """What the official code computes (yxuansu/TaCL, pretraining/bert_contrastive.py: the cosine
    scores of `forward` and `label_smoothed_nll_loss`), re-derived here one anchor at a time in
    float64: row i of sequence b is s_i against every teacher state t_j of the same sequence, the
    target is j = i, and the sum over anchors is divided by their number."""
    B, T, _ = student_h.shape
    total, count = 0.0, 0
    for b in range(B):
        for i in range(T):
            if not anchors[b, i]:
                continue
            s = student_h[b, i].double()
            s = s / s.norm()
            scores = []
            for j in range(T):
                t = teacher_h[b, j].double()
                scores.append(float(s @ (t / t.norm())) / temperature)
            top = max(scores)
            log_sum = top + math.log(sum(math.exp(x - top) for x in scores))
            total += log_sum - scores[i]  # -log softmax(scores)_i
            count += 1
    return total / count


def test_closed_form_identical_constant_vectors():
    """Every cosine is 1: the softmax is uniform over T positions, loss = ln T for any tau."""
    h = torch.ones(3, 4, 8)
    anchors = torch.ones(3, 4, dtype=torch.bool)
    for tau in (1.0, 0.07, 0.01):
        assert tacl_loss(h, h, anchors, tau).item() == pytest.approx(math.log(4), abs=1e-6)  # 1.386294


def test_closed_form_orthonormal_vectors():
    """Rows of the identity: cos(i, i) = 1, cos(i, j) = 0, so loss = ln(1 + (T - 1) e^(-1/tau))."""
    T = 4
    h = torch.eye(6)[:T].expand(2, T, 6)
    anchors = torch.ones(2, T, dtype=torch.bool)
    assert tacl_loss(h, h, anchors, 1.0).item() == pytest.approx(math.log(1 + 3 / math.e), abs=1e-6)  # 0.743668
    assert tacl_loss(h, h, anchors, 0.01).item() == pytest.approx(0.0, abs=1e-6)  # 3 e^-100


def test_matches_a_loop_over_anchors():
    torch.manual_seed(0)
    for tau in (0.01, 0.2):
        s, t = torch.randn(3, 9, 16), torch.randn(3, 9, 16)
        anchors = torch.rand(3, 9) < 0.3
        anchors[0, 0] = True
        assert tacl_loss(s, t, anchors, tau).item() == pytest.approx(official_loop(s, t, anchors, tau), rel=1e-6)


def test_only_anchor_rows_of_the_student_get_a_gradient():
    torch.manual_seed(0)
    s = torch.randn(2, 7, 8, requires_grad=True)
    t = torch.randn(2, 7, 8, requires_grad=True)
    anchors = torch.zeros(2, 7, dtype=torch.bool)
    anchors[0, 2] = anchors[1, 5] = True
    tacl_loss(s, t, anchors).backward()
    assert (s.grad[~anchors] == 0).all() and (s.grad[anchors].abs().sum(-1) > 0).all()
    assert t.grad is None  # the teacher's states are targets: detached
    moved = s.detach().clone()
    moved[~anchors] += torch.randn_like(moved[~anchors])  # other rows are irrelevant
    assert torch.equal(tacl_loss(moved, t, anchors), tacl_loss(s.detach(), t, anchors))


def test_negatives_come_only_from_the_same_sequence():
    torch.manual_seed(0)
    s, t = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    anchors = torch.zeros(2, 6, dtype=torch.bool)
    anchors[0] = True  # anchors in sequence 0 only
    other = t.clone()
    other[1] = torch.randn(6, 8)
    assert torch.equal(tacl_loss(s, t, anchors), tacl_loss(s, other, anchors))


def test_fp32_under_bf16_autocast():
    """tau = 0.01 puts logits at +-100: the similarities and the CE stay in fp32."""
    torch.manual_seed(0)
    s, t = torch.randn(2, 8, 16).bfloat16(), torch.randn(2, 8, 16).bfloat16()
    anchors = torch.ones(2, 8, dtype=torch.bool)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = tacl_loss(s, t, anchors)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(official_loop(s.float(), t.float(), anchors, 0.01), rel=1e-5)


def test_hidden_states_are_every_layer():
    torch.manual_seed(0)
    bert = Bert(BertConfig.from_size("tiny", vocab_size=50)).eval()
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        states = bert.hidden_states(ids)
        h, e = bert(ids)
        first = bert.layers[0](e)
    assert len(states) == 3 and torch.equal(states[0], e) and torch.equal(states[-1], h)
    assert torch.equal(states[1], first)


# ----------------------------------------------------------------------------- training with a teacher

@pytest.fixture(scope="module")
def init_run(tmp_path_factory, quick, run_taco):
    """A short MLM run to continue from."""
    out = str(tmp_path_factory.mktemp("init") / "mlm")
    assert run_taco(quick + ["--objective", "mlm", "--steps", "4", "--out", out]) == 0
    return out


def ckpt(out, step):
    return torch.load(os.path.join(out, f"ckpt_{step:08d}.pt"), weights_only=True)


def test_weight_decay_follows_the_objective(capsys, init_run):
    """TaCL's official AdamW has no weight decay: tacl's default is 0 (as its temperature is its
    own), the other objectives keep TACO's 0.01; an explicit --weight_decay wins; --help says so."""
    assert flags.get_args(["--objective", "tacl", "--init", init_run]).weight_decay == 0
    assert flags.get_args(["--objective", "tacl", "--init", init_run, "--weight_decay", "0.1"]).weight_decay == 0.1
    assert all(flags.get_args(["--objective", o]).weight_decay == 0.01 for o in ("taco", "mlm", "retromae"))
    with pytest.raises(SystemExit):
        flags.get_args(["--help"])
    assert "(default: 0.01; 0 for tacl, as its official code)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("extra,message", [
    (["--objective", "tacl"], "pass --init"),
    (["--objective", "tacl", "--init", "INIT", "--window", "3", "--negatives", "8"], "--window, --negatives do not apply"),
    (["--objective", "tacl", "--init", "INIT", "--predict_all"], "--predict_all does not apply"),
    (["--objective", "mlm", "--teacher_dropout", "off"], "--teacher_dropout applies only"),
])
def test_usage_mistakes_are_one_line_and_exit_2(tmp_path, capsys, init_run, extra, message, quick, run_taco):
    out = tmp_path / "run"
    extra = [init_run if a == "INIT" else a for a in extra]
    assert run_taco(quick + ["--out", str(out)] + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert not out.exists()


def test_teacher_reads_unmasked_ids_never_changes_and_is_never_saved(tmp_path, monkeypatch, init_run, quick, run_taco):
    calls = []  # (is the teacher, training mode, grad enabled, input ids) of every encoder call
    forward = Bert.forward

    def spy(self, input_ids, *args, **kwargs):
        frozen = not any(p.requires_grad for p in self.parameters())
        calls.append((self if frozen else None, self.training, torch.is_grad_enabled(), input_ids.clone()))
        return forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(Bert, "forward", spy)
    out = str(tmp_path / "tacl")
    assert run_taco(quick + ["--objective", "tacl", "--init", init_run, "--steps", "4", "--out", out]) == 0
    monkeypatch.undo()

    train_calls = [c for c in calls if c[0] is not None or c[2]]  # teacher calls and the student's training calls
    teacher_calls, student_calls = train_calls[1::2], train_calls[0::2]  # the student first, then its teacher
    assert len(teacher_calls) == len(student_calls) == 4
    mask_id = load_tokenizer(os.path.join(init_run, "vocab.txt")).mask_id
    for (t, t_training, _, t_ids), (s, _, _, s_ids) in zip(teacher_calls, student_calls):
        assert t is not None and s is None and t_training  # the official default: teacher dropout on
        changed = t_ids != s_ids
        assert changed.any() and not (t_ids == mask_id).any()  # the teacher sees the original block
        assert (s_ids[changed] == mask_id).float().mean() > 0.5  # the student the masked one (80 % [MASK])
    teacher = teacher_calls[0][0]
    assert all(c[0] is teacher for c in teacher_calls)  # one teacher for the whole run
    dropouts = [m for m in teacher.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(type(m) is fast.Dropout for m in dropouts)  # the student's CPU dropout, as before
    init = ckpt(init_run, 4)["model"]
    assert all(torch.equal(v, init["bert." + k]) for k, v in teacher.state_dict().items())  # never changed
    assert all(p.grad is None for p in teacher.parameters())
    state = ckpt(out, 4)
    student = BertForPreTraining(BertConfig(**state["model_config"]))
    assert state["model"].keys() == student.state_dict().keys()  # no teacher in the checkpoint
    assert len(state["optimizer"]["state"]) == len(list(student.parameters()))  # nor in the optimizer

    calls.clear()
    monkeypatch.setattr(Bert, "forward", spy)
    assert run_taco(quick + ["--objective", "tacl", "--init", init_run, "--steps", "1", "--teacher_dropout", "off",
                            "--out", str(tmp_path / "eval_teacher")]) == 0
    assert [c[1] for c in calls if c[0] is not None] == [False]  # --teacher_dropout off: eval mode


def test_tacl_resume_is_bit_for_bit(tmp_path, init_run, capsys, quick, run_taco):
    """The teacher is rebuilt from --init on resume; its dropout draws are reseeded per step."""
    straight, crashed, init = str(tmp_path / "straight"), str(tmp_path / "crashed"), str(tmp_path / "init")
    shutil.copytree(init_run, init)
    tacl = ["--objective", "tacl", "--init", init]
    assert run_taco(quick + tacl + ["--out", straight]) == 0
    shutil.copytree(straight, crashed)  # as if the run had died right after step 8's checkpoint
    for name in os.listdir(crashed):
        if name.startswith(("ckpt_00000012", "ckpt_00000016")):
            os.remove(os.path.join(crashed, name))
    assert run_taco(quick + tacl + ["--out", crashed, "--resume"]) == 0
    a, b = ckpt(straight, 16)["model"], ckpt(crashed, 16)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = lambda d: [json.loads(l)["tc"] for l in open(os.path.join(d, "metrics.jsonl"))]
    assert losses(straight) == losses(crashed) and all(tc > 0 for tc in losses(straight))

    # the init changed since (its run went on to a newer checkpoint): refused, the run left as it was
    assert run_taco(quick + ["--objective", "mlm", "--steps", "5", "--out", init, "--resume", "--force"]) == 0
    config = open(os.path.join(crashed, "config.json")).read()
    os.remove(os.path.join(crashed, "ckpt_00000016.pt"))
    capsys.readouterr()
    assert run_taco(quick + tacl + ["--out", crashed, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--init (now " in err and "ckpt_00000005.pt, then " in err and "ckpt_00000004.pt); pass --force" in err
    assert open(os.path.join(crashed, "config.json")).read() == config


# ----------------------------------------------------------------------------- analysis

def test_self_similarity_per_layer_matches_a_loop_over_pairs():
    """TaCL's analysis: sum of cos over unordered pairs of distinct tokens of one sequence,
    pooled over sequences, divided by the number of pairs; layer L's is the contextual intra."""
    torch.manual_seed(0)
    bert = Bert(BertConfig.from_size("tiny", vocab_size=50))
    batches = [torch.randint(0, 50, (3, 6)), torch.randint(0, 50, (2, 6))]
    got = analyze.self_similarity(bert, batches)
    assert bert.training  # its mode is restored
    with torch.no_grad():
        states = [bert.eval().hidden_states(ids)[1:] for ids in batches]
    for layer in range(2):
        total = count = 0
        for per_batch in states:
            h = per_batch[layer].double()
            for b in range(h.shape[0]):
                for i in range(6):
                    for j in range(i + 1, 6):
                        total += torch.nn.functional.cosine_similarity(h[b, i], h[b, j], dim=0).item()
                        count += 1
        assert got[layer] == pytest.approx(total / count, abs=1e-9)
    assert got[-1] == pytest.approx(taco.contextual_score(bert, batches)["intra"], abs=1e-6)  # it normalises in fp32


def test_heatmap_png_or_a_note_without_matplotlib(tmp_path, monkeypatch, capsys, init_run):
    png = tmp_path / "h.png"
    result = analyze.main(["--model", init_run, "--eval_blocks", "8", "--batch_size", "4", "--heatmap", str(png)])
    assert len(result["self_similarity"]) == 2
    out = capsys.readouterr().out
    assert "self-similarity per layer (TaCL): 1 " in out
    assert png.stat().st_size > 0  # matplotlib is a requirement; without it a note says how to get the picture:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    analyze.plot_heatmaps({"x": torch.eye(3).numpy()}, ["[CLS]", "a", "[SEP]"], str(tmp_path / "none.png"))
    assert "pip install matplotlib" in capsys.readouterr().out and not (tmp_path / "none.png").exists()


def test_study_tacl_miniature_smoke(tmp_path, capsys):
    """MLM, then tacl and mlm continued from its final checkpoint; a second call reuses all three runs."""
    out = tmp_path / "study"
    argv = ["--tacl", "--out", str(out), "--steps", "4", "--continue_steps", "2", "--save_every", "2",
            "--max_len", "32", "--batch_size", "4", "--ft_seeds", "", "--taco_args", "--eval_blocks 8"]
    rows = study.main(argv)
    assert [(r["variant"], r["step"]) for r in rows] == [("mlm (init)", 4), ("tacl", 2), ("mlm_continued", 2)]
    assert all(len(r["self_similarity"]) == 2 for r in rows)
    config = json.load(open(out / "tacl" / "config.json"))
    assert config["init"].endswith("ckpt_00000004.pt") and config["args"]["weight_decay"] == 0
    assert "| tacl | 2 |" in (out / "tacl_table.md").read_text()
    assert (out / "tacl_heatmap.png").exists()
    study.main(argv)
    assert capsys.readouterr().out.count("reusing the finished run") == 3
