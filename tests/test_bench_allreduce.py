"""bench/allreduce.py for real, tiny: 2 namespace nodes, two small sizes, 2 rounds, 1 s of iperf3.

Asserts outcomes only (every backend ran through the generated command and summed right, the
link was measured, the JSON line parses and carries the ratios); never timings.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys

import pytest

from .helpers import ROOT, assert_refused_in_one_line

BENCH = ROOT / "bench" / "allreduce.py"


@pytest.mark.cluster
def test_bench_runs_every_backend_in_each_round_and_prints_medians_and_ratios_to_the_link(cluster_tools):
    argv = [sys.executable, str(BENCH), "--nodes", "2", "--sizes", "4K,64K", "--rounds", "2", "--iperf-seconds", "1"]
    argv += ["--timeout", "180"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the bench tears its cluster down on SIGTERM
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"bench/allreduce.py did not finish in 600 s\n{out[-3000:]}\n{err[-3000:]}")
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    lines = [line for line in out.splitlines() if line.startswith('{"metric": "allreduce_bench"')]
    assert len(lines) == 1, out
    summary = json.loads(lines[0])
    assert summary["ok"] is True and summary["sizes"] == [4096, 65536]
    (cluster,) = summary["clusters"]
    assert cluster["nodes"] == 2 and cluster["errors"] == {}
    link = cluster["link"]
    assert link["mode"] == "bidir" and set(link["streams"]) == {"node1->node2", "node2->node1"}
    assert link["gib"] > 0 and link["unidirectional_gib"] > 0
    got = {(r["variant"], r["bytes"], r["round"]): r for r in cluster["results"]}
    variants = ("horovod-mpi", "horovod-gloo", "torch-gloo", "mpi4py")
    assert set(got) == {(v, b, k) for v in variants for b in (4096, 65536) for k in (1, 2)}
    for (variant, _, _), r in got.items():
        assert r["correct"] is True and r["ranks"] == 2
        assert (
            r["ops"] == {"horovod-mpi": "mpi", "horovod-gloo": "gloo", "torch-gloo": "gloo", "mpi4py": "mpi"}[variant]
        )
        assert r["busbw_over_link"] == pytest.approx(r["busbw_gib"] / link["gib"], rel=0.01, abs=0.002)
    assert "2 nodes, 2 round(s)" in out and "min-max" in out and "busbw/link" in out
    assert "target at 64 MiB, 2 nodes" in out  # no 64 MiB here: "not measured"
    assert "not measured" in out


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--rounds", "0"], "argument --rounds: 0 is below 1"),
        (["--nodes", "1"], "--nodes: every cluster needs at least 2 nodes"),
        (["--sizes", "3X"], "'3X' is not a size"),
        (["--backends", "nccl"], "--backends: unknown ['nccl']"),
        (["--tuned-out", "t.json"], "--tuned-out needs --tuned"),
    ],
)
def test_bad_allreduce_bench_options_are_one_line_and_exit_2(option, message):
    assert_refused_in_one_line(BENCH, option, message)


@pytest.fixture(scope="module")
def bench():
    """bench/allreduce.py as a module, for its pure parts (bench/ is importable from the repository root)."""
    return importlib.import_module("bench.allreduce")


def test_tuned_settings_are_what_tune_changed_in_mca_and_env_with_removed_keys_empty(tmp_path, bench):
    base, tuned = tmp_path / "base.yaml", tmp_path / "tuned.yaml"
    base.write_text("mca: {btl: 'self,tcp', mpi_yield_when_idle: '1'}\nenv: {OMP_WAIT_POLICY: PASSIVE}\n")
    tuned.write_text(
        "# tuned by hpcbundle tune\nmca: {btl: 'self,tcp', btl_tcp_links: '4'}\n"
        "env: {OMP_WAIT_POLICY: PASSIVE, HOROVOD_CYCLE_TIME: '0.1'}\nwhy: {mca.btl_tcp_links: 1.07x}\n"
    )
    assert bench.tuned_settings(base, tuned) == {
        "mca.btl_tcp_links": "4",
        "mca.mpi_yield_when_idle": "",
        "env.HOROVOD_CYCLE_TIME": "0.1",
    }


def test_64_mib_targets_divide_horovod_by_each_rounds_own_peers(bench):
    size = 64 << 20
    busbw = {  # variant -> busbw per round
        "horovod-tuned": (1.2, 0.9, 1.0),
        "torch-gloo": (1.0, 1.0, 0.5),
        "mpi4py": (0.6, 0.8, 1.25),
        "horovod-mpi": (9.0, 9.0, 9.0),  # Horovod's own variants are not peers
    }
    results = [
        {"variant": v, "bytes": size, "round": r, "busbw_gib": b}
        for v, row in busbw.items()
        for r, b in enumerate(row, 1)
    ]
    t = bench.targets(results, {"gib": 1.5})
    assert t["horovod_variant"] == "horovod-tuned" and t["rounds"] == 3
    assert t["over_torch_gloo"] == {"median": 1.2, "min": 0.9, "max": 2.0} and t["over_torch_gloo_met"] == 2
    assert t["over_peers"] == {"median": 0.9, "min": 0.8, "max": 1.2} and t["over_peers_met"] == 1
    assert t["over_link"]["median"] == pytest.approx(0.6667, abs=1e-4) and t["over_link_met"] == 3
