"""Tests for bench.py: the step table and its machine-readable lines, and every other mode (--loop, --gpu_check,
--tokenizer, --wait_policy)."""

import os

import pytest

from tools import bench



def test_bench_prints_table_and_machine_readable_lines(capsys):
    pytest.importorskip("transformers")
    bench.main(["--size", "tiny", "--batch_size", "2", "--max_len", "16", "--steps", "1", "--warmup", "0",
                "--threads", "1", "--device", "cpu"])
    out = capsys.readouterr().out.strip().splitlines()
    rows = [line for line in out if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["variant"] + bench.VARIANTS
    assert all(float(r.split("|")[5].replace(",", "")) > 0 for r in rows[1:])  # peak MB measured
    # 2 x 16 tokens, K = 50, H = 128: the product route; forward 32 x 32 x 128 + backward 32 x 51 x 128
    flops = next(l for l in out if l.startswith("TC similarities per step"))
    assert f"taco {2 * (32 * 32 + 32 * 51) * 128 / 1e9:.3g} GFLOP by the product route" in flops
    name, value = out[-2].split(": ")
    assert name == "speedup_vs_hf" and float(value) > 0
    name, value = out[-1].split(": ")
    assert name == "tc_overhead" and float(value) > 0


def test_bench_profile_keeps_the_machine_readable_lines_last(capsys):
    bench.main(["--size", "tiny", "--batch_size", "2", "--max_len", "16", "--steps", "1", "--warmup", "0",
                "--threads", "1", "--device", "cpu", "--variants", "taco-mlm,taco-tc", "--no-memory", "--profile"])
    out = capsys.readouterr().out
    assert "where the time of one taco-tc step goes" in out and "aten::mm" in out and "Self CPU" in out
    assert out.strip().splitlines()[-2].startswith("speedup_vs_hf: nan")  # no hf variant asked for
    assert float(out.strip().splitlines()[-1].split(": ")[1]) > 0


def test_peak_by_exact_device_name():
    """The PCIe and NVL parts are not counted as the SXM part; an unknown GPU takes --peak_tflops."""
    args = bench.get_args(["--device", "cpu"])
    assert [bench.peak_flops(args, n) / 1e12 for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
                                                       "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")] == [
        989, 756, 835, 989, 312]
    assert bench.peak_flops(args, "NVIDIA H100 SOMETHING NEW") is None
    assert bench.peak_flops(bench.get_args(["--device", "cpu", "--peak_tflops", "500"]), "anything") == 500e12


def test_gpu_check_on_the_cpu(tmp_path, capsys):
    """--gpu_check at a tiny size on the CPU: one table, every row measured or saying why not, also
    written to --out as markdown and JSON."""
    import json
    bench.main(["--gpu_check", "--size", "tiny", "--device", "cpu", "--batch_size", "4", "--max_len", "64",
                "--steps", "1", "--warmup", "0", "--threads", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "gpu_check.json").read_text())["rows"]
    assert [r["check"] for r in rows] == ["step 4 x 64", "step 4 x 64 --compile", "largest micro-batch", "peak memory",
                                          "training loop step", "checkpoint save", "--negatives_from global"]
    measured = {r["check"]: r for r in rows if r["value"] != "n/a"}
    assert set(measured) == {"step 4 x 64", "peak memory", "training loop step", "checkpoint save",
                             "--negatives_from global"}, rows
    assert "tc_overhead" in measured["step 4 x 64"]["detail"] and "skipped on the CPU" in rows[1]["detail"]
    assert "host syncs per step: 0 in the method" in measured["training loop step"]["detail"]
    table = (tmp_path / "gpu_check.md").read_text()
    assert all(f"| {r['check']} | {r['value']} |" in table and f"| {r['check']} | {r['value']} |" in out for r in rows)


def test_the_loop_mode_times_the_real_loop(capsys):
    bench.main(["--loop", "--size", "tiny", "--device", "cpu", "--batch_size", "4", "--max_len", "64", "--steps", "2",
                "--threads", "1"])
    out = capsys.readouterr().out
    assert "0 recompiles after step 1" in out and "host syncs per step: 0 in the method" in out


def test_retromae_on_request_prints_its_batch_cost_and_overhead(capsys):
    bench.main(["--size", "tiny", "--batch_size", "2", "--max_len", "16", "--steps", "1", "--warmup", "0",
                "--threads", "1", "--device", "cpu", "--variants", "taco-mlm,taco-retromae", "--no-memory"])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2].startswith("retromae batch (whole-word masks + decoder visibility, CPU, not in the step): ")
    name, value = out[-1].split(": ")
    assert name == "retromae_overhead" and float(value) > 0


def test_tokenizer_mode_compares_with_hugging_face(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tokenizers")
    for name in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):  # set by the mode; restored after the test
        monkeypatch.setenv(name, "")
    text = tmp_path / "text.txt"
    text.write_text("the farmer chased a muddy goat near the barn\n\nthe sailor steered a boat across the harbor\n")
    bench.main(["--tokenizer", str(text), "--vocab", "toy", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "2 documents" in out and out.count("ids differ on 0 documents") == 2, out
    assert "taco / hf fast (encode_batch, 1 thread): " in out and "taco / hf slow (python): " in out


def test_wait_policy_runs_the_repositorys_taco_py(monkeypatch, capsys):
    """1 thread, then one per core spinning and sleeping, alternating; one row each (the runs recorded, not made)."""
    ran = []
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, env, **kw: ran.append((cmd, env["OMP_WAIT_POLICY"])))
    bench.main(["--wait_policy", "--steps", "3", "--busy", "0", "--device", "cpu"])
    assert len(ran) == 9 and all(os.path.isfile(cmd[1]) and cmd[1].endswith("taco.py") for cmd, _ in ran)
    assert [policy for _, policy in ran[:3]] == ["PASSIVE", "ACTIVE", "PASSIVE"]
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[2].strip() for r in rows[1:]] == ["sleep (OMP_WAIT_POLICY=PASSIVE)",
                                                           "spin (OMP_WAIT_POLICY=ACTIVE)",
                                                           "sleep (OMP_WAIT_POLICY=PASSIVE)"]
