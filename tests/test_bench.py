"""Tests for bench.py: the step table and its machine-readable lines, MFU's peaks, and the GPU check that
refuses a machine without a GPU."""
import os
import subprocess
import sys

import pytest

from tools import bench

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "bench.py")
TINY = ["--size", "tiny", "--batch_size", "2", "--max_len", "16", "--steps", "1", "--warmup", "0", "--threads", "1",
        "--device", "cpu"]


def test_bench_prints_table_and_machine_readable_lines(capsys):
    pytest.importorskip("transformers")
    bench.main(TINY)
    out = capsys.readouterr().out.strip().splitlines()
    rows = [line for line in out if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["variant"] + bench.VARIANTS
    assert all(float(r.split("|")[2]) > 0 and r.split("|")[5].strip() == "-" for r in rows[1:])  # peak MB: CUDA only
    # 2 x 16 tokens, K = 50, H = 128: the product route; forward 32 x 32 x 128 + backward 32 x 51 x 128
    flops = next(l for l in out if l.startswith("TC similarities per step"))
    assert f"taco {2 * (32 * 32 + 32 * 51) * 128 / 1e9:.3g} GFLOP by the product route" in flops
    name, value = out[-2].split(": ")
    assert name == "speedup_vs_hf" and float(value) > 0
    name, value = out[-1].split(": ")
    assert name == "tc_overhead" and float(value) > 0


def test_taco_variants_alone_need_no_hugging_face(capsys):
    """docs/speed.md's tc_overhead commands: taco-mlm and taco-tc only; no hf variant, so no speed-up."""
    bench.main(TINY + ["--variants", "taco-mlm,taco-tc"])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2] == "speedup_vs_hf: nan" and out[-1].startswith("tc_overhead: ") and float(out[-1].split()[1]) > 0


def test_peak_by_exact_device_name():
    """The PCIe and NVL parts are not counted as the SXM part; an unknown GPU takes --peak_tflops."""
    args = bench.get_args([])
    assert [bench.peak_flops(args, n) / 1e12 for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
                                                       "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")] == [
        989, 756, 835, 989, 312]
    assert bench.peak_flops(args, "NVIDIA H100 SOMETHING NEW") is None
    assert bench.peak_flops(bench.get_args(["--peak_tflops", "500"]), "anything") == 500e12


@pytest.mark.parametrize("argv", [["--gpu_check", "--device", "cpu"], ["--variants", "taco-mlm,bert"]])
def test_mistakes_and_the_gpu_check_on_a_cpu_are_one_line(argv):
    """--gpu_check knows where it runs: on a CPU it refuses at once, in one line, exit 2."""
    done = subprocess.run([sys.executable, BENCH, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""
