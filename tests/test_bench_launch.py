"""bench/launch.py: every launch variant runs every rank on its node of the real namespace cluster,
and the bench says so in its table and its JSON line. Times are measured there, never asserted here."""

from __future__ import annotations

import sys

import pytest
from bench import launch as bench  # bench/ is importable from the repository root, as tests/ is

from .helpers import ROOT, run_bench

BENCH = ROOT / "bench" / "launch.py"


@pytest.mark.cluster
def test_every_variant_runs_every_rank_on_its_node_and_the_json_line_names_them_all(cluster_tools):
    argv = [sys.executable, str(BENCH), "--repeat", "1", "--warmup", "0"]
    report, out, err = run_bench(argv, 600)
    assert report["metric"] == "launch_overhead" and (report["nodes"], report["np"], report["repeat"]) == (2, 2, 1)
    assert list(report["variants"]) == list(bench.VARIANTS)
    for name, row in report["variants"].items():
        assert (row["runs"], row["ok"], row["errors"]) == (1, 1, []), (name, out[-4000:])
        assert row["hosts"] == [["node1", "node2"]], name
        assert row["first_rank_median_s"] is not None and row["job_end_median_s"] is not None, name
    assert "\nverdict: the generated command is " in out
    assert report["target_met"] in (True, False)


def test_a_failed_launch_counts_for_nothing_and_shows_its_stderr_tail_and_cause():
    err = (
        "Traceback (most recent call last):\n"
        "AttributeError: '_thread.RLock' object has no attribute '_recursion_count'\n"
        "RuntimeError: gave up\n"
    )
    run = bench.judge(1, "bench-t0 100.0\nbench-t1 101.0 1\n", err, ["node1", "node2"])
    assert run.error.startswith("exit status 1\n")
    assert "cause: the venv's python binary" in run.error and "| RuntimeError: gave up" in run.error


def test_ranks_on_the_wrong_node_or_missing_do_not_count():
    out = "bench-t0 100.0\n[1,0]<stdout>:bench-rank 100.25 node1 0\nbench-rank 100.5 node2 1\nbench-t1 101.0 0\n"
    good = bench.judge(0, out, "", ["node1", "node2"])
    assert good.error == "" and good.hosts == ["node1", "node2"]
    assert (good.first_rank, good.job_end) == (0.25, 1.0)
    assert (
        "ranks ran on ['node1', 'node1']"
        in bench.judge(0, out.replace("node2 1", "node1 1"), "", ["node1", "node2"]).error
    )
    assert "ranks [0] stamped" in bench.judge(0, out.replace("node2 1", ""), "", ["node1", "node2"]).error
    assert bench.judge(
        0, out, "+ mpirun -np 3 stamp\n", ["node1", "node2"], echo="mpirun -np 2 stamp"
    ).error.startswith("the CLI ran another command")
