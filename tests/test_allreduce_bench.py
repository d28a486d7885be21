"""examples/allreduce_bench.py: its arithmetic exactly (sizes, iterations, bandwidths, the JSON
record, Horovod's slot plan), then real 2-rank runs of every backend through plain mpirun.

The real runs need `.venv` (Horovod, torch, mpi4py) and Open MPI's mpirun; they fail, never skip,
when those are missing. Every run is bounded and its whole process group killed on timeout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "allreduce_bench.py"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def _load():
    spec = importlib.util.spec_from_file_location("allreduce_bench", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


# ------------------------------------------------------------------------------ arithmetic
def test_sizes_take_kib_mib_gib_suffixes():
    assert bench.parse_size("4096") == 4096
    assert bench.parse_size("4K") == 4 * KIB
    assert bench.parse_size("64M") == 64 * MIB
    assert bench.parse_size("1G") == GIB
    assert bench.parse_size("256m") == 256 * MIB
    assert bench.parse_size("1KiB") == KIB
    assert bench.parse_size(" 8MB ") == 8 * MIB


@pytest.mark.parametrize("text", ["", "M", "1.5M", "-4K", "0", "0M", "6", "4T", "64 M B", "4,096"])
def test_sizes_that_are_not_whole_float32_buffers_are_refused(text):
    with pytest.raises(ValueError):
        bench.parse_size(text)


def test_a_size_list_is_ascending_without_repeats():
    assert bench.parse_sizes("64M,1M") == [MIB, 64 * MIB]
    assert bench.parse_sizes("4K,4096,1M,") == [4 * KIB, MIB]
    with pytest.raises(ValueError):
        bench.parse_sizes(",")


@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=4096), st.sampled_from(["", "K", "M", "G", "k", "m", "g"])),
        min_size=1,
        max_size=8,
    )
)
def test_size_lists_parse_to_the_bytes_they_name(items):
    multiplier = {"": 1, "K": KIB, "M": MIB, "G": GIB}
    texts, expected = [], set()
    for number, suffix in items:
        value = number * multiplier[suffix.upper()]
        if value % 4:
            number, value = number * 4, value * 4
        texts.append(f"{number}{suffix}")
        expected.add(value)
    assert bench.parse_sizes(",".join(texts)) == sorted(expected)
    for text in texts:
        assert bench.parse_size(text) in expected


def test_default_range_is_4kib_to_256mib_by_four():
    assert bench.size_range(4 * KIB, 256 * MIB, 4) == [
        4 * KIB,
        16 * KIB,
        64 * KIB,
        256 * KIB,
        MIB,
        4 * MIB,
        16 * MIB,
        64 * MIB,
        256 * MIB,
    ]
    assert bench.size_range(4 * KIB, 10 * KIB, 2) == [4 * KIB, 8 * KIB]
    for bad in ((0, 4096, 4), (8192, 4096, 4), (4096, 8192, 1)):
        with pytest.raises(ValueError):
            bench.size_range(*bad)


def test_auto_iterations_move_about_a_gib_within_5_to_200():
    assert bench.auto_iters(64 * MIB) == 16
    assert bench.auto_iters(16 * MIB) == 64
    assert bench.auto_iters(4 * MIB) == 200
    assert bench.auto_iters(4 * KIB) == 200
    assert bench.auto_iters(256 * MIB) == 5
    assert bench.auto_iters(GIB) == 5
    assert bench.auto_iters(100 * MIB) == 11  # ceil(1024 / 100)


def test_bandwidths_follow_the_nccl_tests_definitions():
    assert bench.bandwidths(64 * MIB, 0.5, 2) == (0.125, 0.125)
    assert bench.bandwidths(64 * MIB, 0.5, 4) == (0.125, 0.1875)
    assert bench.bandwidths(GIB, 2.0, 3) == (0.5, 0.5 * 4 / 3)
    assert bench.bandwidths(GIB, 1.0, 1) == (1.0, 0.0)


def test_time_is_the_median_over_iterations_of_the_slowest_rank():
    assert bench.median_of_slowest([[1.0, 5.0, 3.0], [2.0, 1.0, 3.5]]) == 3.5
    assert bench.median_of_slowest([[0.1, 0.2], [0.3, 0.1]]) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        bench.median_of_slowest([[1.0, 2.0], [1.0]])


def test_the_json_record_is_the_contract():
    record = bench.result_record("horovod", "mpi", 64 * MIB, 2, 16, 0.125, True)
    assert record == {
        "metric": "allreduce",
        "backend": "horovod",
        "ops": "mpi",
        "bytes": 67108864,
        "ranks": 2,
        "iters": 16,
        "seconds": 0.125,
        "algbw_gib": 0.5,
        "busbw_gib": 0.5,
        "correct": True,
    }
    assert list(record) == [
        "metric",
        "backend",
        "ops",
        "bytes",
        "ranks",
        "iters",
        "seconds",
        "algbw_gib",
        "busbw_gib",
        "correct",
    ]
    small = bench.result_record("mpi4py", "mpi", 4096, 3, 200, 6.43361e-05, False)
    assert small["seconds"] == 6.43361e-05 and small["algbw_gib"] == 0.05929 and small["busbw_gib"] == 0.07906
    assert small["correct"] is False
    assert json.loads(json.dumps(record)) == record


def test_expected_sum_is_one_plus_two_up_to_n():
    assert [bench.expected_sum(n) for n in (1, 2, 3, 8)] == [1, 3, 6, 36]


def test_rank_and_size_come_from_whichever_launcher_set_them():
    assert bench.launcher_rank_size({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"}) == (1, 3)
    assert bench.launcher_rank_size({"PMI_RANK": "2", "PMI_SIZE": "4"}) == (2, 4)
    assert bench.launcher_rank_size({"PMIX_RANK": "0", "SLURM_NTASKS": "2", "SLURM_PROCID": "0"}) == (0, 2)
    assert bench.launcher_rank_size({"SLURM_PROCID": "5", "SLURM_NTASKS": "8"}) == (5, 8)
    assert bench.launcher_rank_size({"RANK": "0", "WORLD_SIZE": "2"}) == (0, 2)
    assert bench.launcher_rank_size({"PMIX_RANK": "0"}) is None
    assert bench.launcher_rank_size({}) is None


def test_slot_plan_matches_what_horovodrun_hands_each_rank():
    plan = bench.slot_plan(["n1", "n1", "n2", "n2"])
    assert [(s["rank"], s["local_rank"], s["local_size"], s["cross_rank"], s["cross_size"]) for s in plan] == [
        (0, 0, 2, 0, 2),
        (1, 1, 2, 0, 2),
        (2, 0, 2, 1, 2),
        (3, 1, 2, 1, 2),
    ]
    assert {s["size"] for s in plan} == {4}
    uneven = bench.slot_plan(["n1", "n2", "n1"])
    assert [(s["local_rank"], s["local_size"], s["cross_rank"], s["cross_size"]) for s in uneven] == [
        (0, 2, 0, 2),
        (0, 1, 1, 2),
        (1, 2, 0, 1),
    ]


# ------------------------------------------------------------------------------ real runs
def _mpirun(
    backend: str, *args: str, env: dict[str, str] | None = None, timeout: float = 150
) -> subprocess.CompletedProcess:
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} does not exist: these tests need the project venv (run `make setup`)")
    cmd = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        "2",
        "--oversubscribe",
        "--bind-to",
        "none",
        "--mca",
        "btl",
        "self,tcp",
        "-x",
        "OMP_NUM_THREADS=1",
    ]
    for key, value in (env or {}).items():
        cmd += ["-x", f"{key}={value}"]
    cmd += [str(VENV_PYTHON), str(PROGRAM), "--backend", backend, *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_", "PMIX_"))},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"metric": "allreduce"')]


@pytest.mark.parametrize(
    "backend,env,ops",
    [
        ("mpi4py", {}, "mpi"),
        ("torch-gloo", {}, "gloo"),
        ("horovod", {"HOROVOD_CPU_OPERATIONS": "mpi"}, "mpi"),
        ("horovod", {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}, "gloo"),
    ],
    ids=["mpi4py", "torch-gloo", "horovod-mpi", "horovod-gloo-controller"],
)
@pytest.mark.full_setup
def test_every_backend_sums_correctly_and_rank0_prints_one_record_per_size(backend, env, ops):
    result = _mpirun(backend, "--sizes", "1M,4K", "--iters", "5", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    records = _records(result.stdout)
    assert [r["bytes"] for r in records] == [4096, 1048576], result.stdout
    for r in records:
        assert (r["backend"], r["ops"], r["ranks"], r["iters"], r["correct"]) == (backend, ops, 2, 5, True)
        assert r["seconds"] > 0 and r["algbw_gib"] > 0
        assert r["busbw_gib"] == pytest.approx(r["algbw_gib"], rel=1e-3)  # 2(n-1)/n = 1 for 2 ranks
        assert r["algbw_gib"] == pytest.approx(r["bytes"] / r["seconds"] / 2**30, rel=1e-3)


@pytest.mark.full_setup
def test_horovod_reduces_a_size_split_in_tensors_submitted_together():
    result = _mpirun("horovod", "--sizes", "1M", "--iters", "3", "--tensors", "8")
    assert result.returncode == 0, result.stdout + result.stderr
    [record] = _records(result.stdout)
    assert (record["bytes"], record["tensors"], record["correct"]) == (1 << 20, 8, True)


@pytest.mark.full_setup
def test_tensors_are_for_horovod_and_must_split_each_size_evenly():
    for args, message in (
        (["--backend", "mpi4py", "--tensors", "2"], "only with --backend horovod"),
        (["--backend", "horovod", "--sizes", "4K", "--tensors", "3"], "split into 3 whole float32 tensors"),
    ):
        result = subprocess.run(
            [str(VENV_PYTHON), str(PROGRAM), *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 2 and message in result.stderr


@pytest.mark.full_setup
def test_gloo_operations_under_the_mpi_controller_are_refused_before_horovod_crashes():
    result = _mpirun("horovod", "--sizes", "4K", "--iters", "1", env={"HOROVOD_CPU_OPERATIONS": "gloo"})
    assert result.returncode != 0 and _records(result.stdout) == []
    assert "set HOROVOD_CONTROLLER=gloo as well" in result.stderr
    assert "Segmentation fault" not in result.stdout + result.stderr


@pytest.mark.full_setup
def test_bad_sizes_are_a_usage_error():
    result = subprocess.run(
        [str(VENV_PYTHON), str(PROGRAM), "--backend", "mpi4py", "--sizes", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "multiple of 4" in result.stderr
