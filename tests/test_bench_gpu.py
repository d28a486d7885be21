"""bench/gpu.py, run once small on the CPU (--device cpu: the same code, gloo for NCCL), so the
GPU machine's one call finds it working: every side trains, the ratios are those of its own
figures, and the JSON lands in --out. Times are measured there, never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import ROOT, assert_refused_in_one_line

pytestmark = pytest.mark.full_setup  # bench/gpu.py imports Horovod and torch before it reads its options
BENCH = ROOT / "bench" / "gpu.py"


def test_the_gpu_bench_runs_every_side_on_the_cpu_and_writes_its_json(tmp_path):
    argv = [sys.executable, str(BENCH), "--device", "cpu", "--model", "resnet-wide", "--batch-size", "2"]
    argv += ["--rounds", "2", "--steps", "1", "--warmup", "1", "--sizes", "4K,64K", "--out", str(tmp_path)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-bench.json").read_text())
    assert report == json.loads(run.stdout.strip().splitlines()[-1])
    training = report["training"]
    assert {side: len(rates) for side, rates in training["per_round"].items()} == {"plain": 2, "horovod": 2, "ddp": 2}
    rounds = training["per_round"]
    per_round = [h / p for h, p in zip(rounds["horovod"], rounds["plain"], strict=True)]
    assert training["ratios"]["horovod/plain"]["min"] == min(per_round)
    assert [row["bytes"] for row in report["allreduce"]] == [4096, 65536]
    assert "torch DDP (gloo)" in run.stdout


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--rounds", "0"], "argument --rounds: 0 is below 1"),
        (["--sizes", "4Q"], "argument --sizes: '4Q' is not a list like 4K,1M,64M"),
        (["--sizes", "2"], "argument --sizes: each size must be at least 4 bytes"),
    ],
)
def test_bad_gpu_bench_options_are_one_line_and_exit_2(option, message):
    assert_refused_in_one_line(BENCH, option, message)
