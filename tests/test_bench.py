"""Tests for bench.py: the step table and its machine-readable lines."""

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
