"""`hpcbundle tune`: the sweep keeps only clear winners, the tuned copy is a valid site carrying its
figures, bad flags are one-line errors, and on the namespace cluster it really measures and writes."""

from __future__ import annotations

import json
import shlex
import sys

import pytest
import yaml

from hpcbundle.config.errors import UserError
from hpcbundle.config.loading import parse_yaml, read_yaml, validate
from hpcbundle.config.sites import Site
from hpcbundle.execute import Captured
from hpcbundle.launch import RankLayout, load_site
from hpcbundle.perf.tune.run import Benchmark, TuneJob, busbw_of, failure_line, run_sweep
from hpcbundle.perf.tune.sweep import (
    KNOBS,
    SMALL,
    Candidate,
    Knob,
    Trial,
    TuneResult,
    Workload,
    apply_settings,
    changed_text,
    choose,
    choose_both,
    current_settings,
    sweep,
    tuned_site_text,
)

from .helpers import GOLDEN, ROOT, assert_golden, hpcbundle, hpcbundle_argv

LINKS = next(k for k in KNOBS if k.name == "tcp-links")
YIELD = next(k for k in KNOBS if k.name == "yield")


def _site(**over) -> Site:
    data = {
        "name": "t",
        "description": "d",
        "mpi": {"flavour": "openmpi", "version": "4.1.4"},
        "launcher": {"name": "mpirun"},
        "node": {"cores": 2},
        "network": {"fabric": "ethernet"},
        **over,
    }
    return validate(Site, data, "t.yaml")


def test_a_challenger_must_beat_the_kept_value_by_more_than_the_noise_margin():
    kept = Trial("k", "default", (), (1.0, 1.0, 1.0))
    assert choose(kept, [Trial("k", "ring", (), (1.05, 1.05, 1.05))]).candidate == "default"
    assert choose(kept, [Trial("k", "ring", (), (1.06, 1.01, 1.2))]).candidate == "ring"


def test_a_challenger_that_loses_any_back_to_back_pair_is_noise_and_the_kept_value_stays():
    # The pairs of btl_tcp_links 2 in a real tune on 2 namespace nodes: median 1.38, one pair lost.
    kept = Trial("tcp-links", "1", (), (0.473, 0.521, 0.725))
    noisy = Trial("tcp-links", "2", (), (0.423, 0.821, 1.003))
    assert choose(kept, [noisy]).candidate == "1"
    assert choose(kept, [noisy, Trial("tcp-links", "4", (), (0.52, 0.6, 0.8))]).candidate == "4"


def test_a_candidate_with_any_failed_run_never_wins():
    kept = Trial("k", "default", (), (1.0,))
    assert choose(kept, [Trial("k", "gloo", (), (9.0, None))]).candidate == "default"
    assert choose(Trial("k", "default", (), (None,)), [Trial("k", "ring", (), (0.5,))]).candidate == "ring"


def test_sweep_interleaves_candidates_and_carries_each_winner_into_the_next_knob():
    calls: list[tuple[str | None, str | None]] = []

    def measure(settings):
        links, yield_ = settings.get("mca.btl_tcp_links"), settings.get("mca.mpi_yield_when_idle")
        calls.append((links, yield_))
        return {None: 1.0, "2": 1.5, "4": 1.2}[links] * (1.3 if yield_ == "1" else 1.0)

    result = sweep([LINKS, YIELD], measure, repeat=2, start=current_settings(_site(), [LINKS, YIELD]))
    assert calls == [(None, None), ("2", None), ("4", None)] * 2 + [("2", None), ("2", "1")] * 2
    assert result.winners == {"tcp-links": "2", "yield": "1"}
    assert result.changed() == {"mca.btl_tcp_links": "2", "mca.mpi_yield_when_idle": "1"}
    assert result.baseline() == 1.0 and result.final() == pytest.approx(1.95)


def test_the_sites_own_value_is_the_kept_candidate():
    site = _site(mca={"btl_tcp_links": "3"})
    result = sweep([LINKS], lambda s: 1.0, repeat=1, start=current_settings(site, [LINKS]))
    assert [t.candidate for t in result.trials] == ["site: btl_tcp_links=3", "1", "2", "4"]
    assert result.changed() == {}


def test_a_value_equal_to_a_candidate_is_that_candidate_kept_first():
    site = _site(mca={"mpi_yield_when_idle": "1"})
    result = sweep([YIELD], lambda s: 1.0, repeat=1, start=current_settings(site, [YIELD]))
    assert [t.candidate for t in result.trials] == ["1", "0"]


def test_mpi_or_gloo_is_a_knob_of_horovodrun_sites_and_sets_launcher_gloo():
    site = _site(launcher={"name": "horovodrun"})
    knobs = [k for k in KNOBS if k.applies(site)]
    assert [k.name for k in knobs] == ["controller", "fusion", "cycle"]
    knobs = [knobs[0]]
    result = sweep(knobs, lambda s: 2.0 if s["launcher.gloo"] else 1.0, repeat=1, start=current_settings(site, knobs))
    assert result.changed() == {"launcher.gloo": True}
    tuned = apply_settings({"launcher": {"name": "horovodrun"}}, result.changed())
    assert tuned["launcher"] == {"name": "horovodrun", "gloo": True}


def test_apply_settings_sets_removes_and_explains_without_touching_the_input():
    data = {"name": "x", "mca": {"btl": "tcp", "btl_tcp_links": "2"}, "why": {"mca.btl_tcp_links": "old"}}
    out = apply_settings(
        data, {"mca.btl_tcp_links": None, "env.HOROVOD_CYCLE_TIME": "5"}, {"env.HOROVOD_CYCLE_TIME": "measured"}
    )
    assert out == {
        "name": "x",
        "mca": {"btl": "tcp"},
        "why": {"env.HOROVOD_CYCLE_TIME": "measured"},
        "env": {"HOROVOD_CYCLE_TIME": "5"},
    }
    assert data["mca"] == {"btl": "tcp", "btl_tcp_links": "2"}


def _fixed_result() -> TuneResult:
    knob = Knob(
        "tcp-links",
        "links",
        (Candidate("1", (("mca.btl_tcp_links", None),)), Candidate("2", (("mca.btl_tcp_links", "2"),))),
    )
    return sweep(
        [knob, YIELD],
        lambda s: 0.4 + 0.2 * (s.get("mca.btl_tcp_links") == "2") + 0.1 * (s.get("mca.mpi_yield_when_idle") == "1"),
        repeat=2,
        start={},
    )


def test_tuned_copy_is_a_valid_site_with_the_winners_and_their_figures():
    data = yaml.safe_load((ROOT / "site_configs" / "local.yaml").read_text())
    text = tuned_site_text(
        data,
        "local-tuned",
        "site_configs/local.yaml",
        _fixed_result(),
        Workload(bytes=64 << 20, tensors=1, ranks=2, hosts="node1:1,node2:1", repeat=2),
        "2026-11-22",
    )
    assert_golden(GOLDEN / "tune" / "local-tuned.yaml", text)
    site = validate(Site, parse_yaml(text, "local-tuned.yaml"), "local-tuned.yaml")
    assert site.name == "local-tuned"
    assert site.mca == {"btl_tcp_links": "2", "mpi_yield_when_idle": "1"}
    assert site.why["mca.btl_tcp_links"].endswith("busbw 0.400 -> 0.700 GiB/s (1.75x) at 64 MiB on 2 ranks")
    assert "# busbw: site as it was 0.400 GiB/s, tuned 0.700 GiB/s (1.75x)." in text


CYCLE = next(k for k in KNOBS if k.name == "cycle")
SMALL_BUSBW = {None: 0.010, "0.1": 0.040, "0.5": 0.0102, "5": 0.002}  # busbw of 64 x 4 KiB per cycle time


def _cycle_sweep(large: dict, repeat: int) -> TuneResult:
    """The cycle knob swept with busbw `large` (cycle time -> GiB/s) at the --size end, SMALL_BUSBW at the small end."""
    return sweep(
        [CYCLE],
        lambda s: large[s.get("env.HOROVOD_CYCLE_TIME")],
        measure_small=lambda s: SMALL_BUSBW[s.get("env.HOROVOD_CYCLE_TIME")],
        repeat=repeat,
        start={},
    )


def test_cycle_time_is_judged_at_both_ends_and_written_with_both_figures():
    """0.1 ms quadruples the small end and costs the large end 2 % (within the noise margin): kept.
    5 ms wins 20 % at the large end but loses the small end: never chosen."""
    result = _cycle_sweep({None: 1.0, "0.1": 0.98, "0.5": 1.0, "5": 1.2}, repeat=2)
    assert result.winners == {"cycle": "0.1 ms"} and result.changed() == {"env.HOROVOD_CYCLE_TIME": "0.1"}
    assert [(t.end, t.candidate) for t in result.trials][:2] == [("large", "1 ms"), ("large", "0.1 ms")]
    assert {t.end for t in result.trials} == {"large", "small"} and len(result.trials) == 8
    data = yaml.safe_load((ROOT / "site_configs" / "local.yaml").read_text())
    workload = Workload(64 << 20, 1, 2, "n1:1,n2:1", 2, small_bytes=256 << 10, small_tensors=64)
    site = validate(Site, parse_yaml(tuned_site_text(data, "l", "l.yaml", result, workload, "d"), "l"), "l")
    assert site.env["HOROVOD_CYCLE_TIME"] == "0.1"
    assert site.why["env.HOROVOD_CYCLE_TIME"].endswith(
        "busbw 1.000 -> 0.980 GiB/s (0.98x) at 64 MiB on 2 ranks; small end (64 x 4096 B): 0.010 -> 0.040 GiB/s (4.00x)"
    )


def test_a_knob_with_a_loss_at_either_end_keeps_the_sites_value():
    result = _cycle_sweep({None: 1.0, "0.1": 0.90, "0.5": 1.0, "5": 1.2}, repeat=1)  # 0.1 ms loses 10 % large
    assert result.winners == {"cycle": "1 ms"} and result.changed() == {}


def test_a_small_end_gain_that_lost_one_pair_keeps_the_sites_cycle_time():
    kept = (Trial("cycle", "1 ms", (), (1.0, 1.0, 1.0)), Trial("cycle", "1 ms", (), (0.2, 0.2, 0.2), SMALL))
    fast = (Trial("cycle", "0.1 ms", (), (1.0, 1.0, 1.0)), Trial("cycle", "0.1 ms", (), (0.5, 0.5, 0.19), SMALL))
    assert choose_both([kept[0], fast[0]], [kept[1], fast[1]]).candidate == "1 ms"
    steady = Trial("cycle", "0.1 ms", (), (0.4, 0.45, 0.21), SMALL)
    assert choose_both([kept[0], fast[0]], [kept[1], steady]).candidate == "0.1 ms"


def test_tuned_copy_proposes_a_link_speed_for_the_gate_only_where_the_site_has_none():
    data = yaml.safe_load((ROOT / "site_configs" / "local.yaml").read_text())
    workload = Workload(bytes=64 << 20, tensors=1, ranks=2, hosts="node1:1,node2:1", repeat=2)
    proposal = "# Proposed network.link_gbps: 6.01 (the best busbw here, in Gbit/s, for `launch --gate`;"
    assert proposal in tuned_site_text(data, "a", "local.yaml", _fixed_result(), workload, "2026-11-22")
    rated = {**data, "network": {**data["network"], "link_gbps": 10}}
    assert "Proposed" not in tuned_site_text(rated, "b", "local.yaml", _fixed_result(), workload, "2026-11-22")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--knobs", "algorithm,nope"], "--knobs: no knob 'nope' (choose from controller, algorithm"),
        (["--size", "64Q"], "--size: '64Q' is not a size"),
        (
            ["--site", "stampede2-knl", "--knobs", "algorithm"],
            "knob 'algorithm' is for sites whose ranks run Open MPI under mpirun or srun",
        ),
        (["--knobs", "fusion"], "--knobs: knob 'fusion' needs --tensors 2 or more (one tensor is never fused)"),
        (["--small-size", "0"], "--small-size: '0' is not a size up to 16G"),
        (["--small-size", "100", "--small-tensors", "64"], "--small-tensors: 100 bytes do not split into 64 float32"),
    ],
)
def test_bad_flags_are_one_line_errors_and_nothing_is_written(tmp_path, args, message):
    out = tmp_path / "tuned.yaml"
    res = hpcbundle("tune", "--np", "2", "-o", str(out), *args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


def test_an_output_name_that_is_no_site_name_is_refused_before_any_run(tmp_path):
    out = tmp_path / "bad name.yaml"
    res = hpcbundle("tune", "--np", "2", "-o", str(out))
    assert res.returncode == 2 and f"{out}: name:" in res.stderr, res.stderr
    assert "tune:" not in res.stderr and not out.exists()


def test_plan_prints_the_knobs_and_the_generated_command_and_runs_nothing(tmp_path):
    res = hpcbundle(
        "tune",
        "--np",
        "2",
        "--knobs",
        "yield,cycle",
        "--tensors",
        "8",
        "--python",
        "py",
        "--bench",
        "b.py",
        "-o",
        str(tmp_path / "x.yaml"),
        "--plan",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "yield: a rank waiting in MPI gives its core away (mpi_yield_when_idle), "
        "for nodes with more busy threads than cores: 0 | 1",
        "cycle: how often Horovod's background thread looks for ready tensors (HOROVOD_CYCLE_TIME ms; default 1): "
        "1 ms | 0.1 ms | 0.5 ms | 5 ms (also judged on the small end)",
        "mpirun --allow-run-as-root -np 2 --oversubscribe --bind-to none --map-by slot -x OMP_NUM_THREADS=1 "
        "py b.py --backend horovod --sizes 67108864 --tensors 8",
        "mpirun --allow-run-as-root -np 2 --oversubscribe --bind-to none --map-by slot -x OMP_NUM_THREADS=1 "
        "py b.py --backend horovod --sizes 262144 --tensors 64",
    ]
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.cluster
def test_tune_on_two_namespace_nodes_writes_a_site_that_runs(netns_cluster, tmp_path):
    from hpcbundle_testbed.sites import netns_site

    site = netns_site(tmp_path, netns_cluster)
    out = tmp_path / "netns-tuned.yaml"
    hosts = "node1:1,node2:1"
    cli = hpcbundle_argv()
    res = netns_cluster.run(
        "node1",
        [
            *cli,
            "tune",
            "--site",
            str(site),
            "--np",
            "2",
            "--hosts",
            hosts,
            "--size",
            "4M",
            "--knobs",
            "yield,tcp-links",
            "--repeat",
            "1",
            "--python",
            sys.executable,
            "-o",
            str(out),
        ],
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    tuned = validate(Site, parse_yaml(out.read_text(), str(out)), str(out))
    assert tuned.name == "netns-tuned"
    assert tuned.network.interfaces == ["data0"]
    text = out.read_text()
    assert "# Workload: allreduce of 4 MiB in 1 float32 tensor(s), Horovod, 2 ranks on node1:1,node2:1" in text
    rows = [line for line in text.splitlines() if line.startswith(("# yield ", "# tcp-links "))]
    assert len(rows) == 2 + 3 and all("GiB/s" not in r and "failed" not in r for r in rows), rows
    run = netns_cluster.run(
        "node1",
        [
            *cli,
            "launch",
            "--site",
            str(out),
            "--np",
            "2",
            "--hosts",
            hosts,
            "--exec",
            "--no-doctor",
            "--",
            sys.executable,
            str(ROOT / "examples" / "allreduce_bench.py"),
            "--backend",
            "horovod",
            "--sizes",
            "1M",
        ],
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert '"correct": true' in run.stdout


def _job(knobs: tuple[Knob, ...] = (YIELD,), tensors: int = 1) -> tuple[TuneJob, Site]:
    """A tune of the shipped local site (mpirun, no container) on 2 ranks of this node."""
    path = ROOT / "site_configs" / "local.yaml"
    site = load_site("local", ROOT / "site_configs")
    benchmark = Benchmark("py", "b.py", 4 << 20, tensors, 4096, 4)
    return TuneJob(read_yaml(path), str(path), RankLayout(np=2), None, knobs, benchmark), site


def _fake_bench(log: list[list[str]], failing: bool = False):
    """A runner that answers like allreduce_bench.py: 2 GiB/s where the yield knob is on, else 1."""

    def run(argv, timeout):
        log.append(list(argv))
        if failing:
            return Captured(1, "", "mpirun: no ranks\n")
        size = int(argv[argv.index("--sizes") + 1])
        busbw = 2.0 if "mpi_yield_when_idle" in argv else 1.0
        line = json.dumps({"metric": "allreduce", "bytes": size, "correct": True, "busbw_gib": busbw})
        return Captured(0, f"warm-up\n{line}\n", "")

    return run


MPIRUN = "mpirun --allow-run-as-root -np 2 --oversubscribe --bind-to none --map-by slot"
THREADS = "-x OMP_NUM_THREADS=1"  # the local site's 2 cores over its 2 ranks


def test_a_tune_job_runs_the_benchmark_through_the_sites_command_with_each_candidates_settings():
    job, site = _job()
    assert job.plan_lines(current_settings(site, job.knobs)) == [
        "yield: a rank waiting in MPI gives its core away (mpi_yield_when_idle), "
        "for nodes with more busy threads than cores: 0 | 1",
        f"{MPIRUN} {THREADS} py b.py --backend horovod --sizes 4194304",
    ]
    assert shlex.join(job.command({"mca.mpi_yield_when_idle": "1"}, SMALL)) == (
        f"{MPIRUN} --mca mpi_yield_when_idle 1 {THREADS} py b.py --backend horovod --sizes 4096 --tensors 4"
    )
    assert job.announce(3) == "tune: 1 knobs, 6 runs of 4194304 bytes in 1 tensor(s) on 2 ranks"


def test_run_sweep_keeps_the_faster_value_and_says_a_line_per_run():
    job, site = _job()
    log: list[list[str]] = []
    said: list[str] = []
    result = run_sweep(job, current_settings(site, job.knobs), 2, 30, said.append, _fake_bench(log))
    assert result.winners == {"yield": "1"} and result.changed() == {"mca.mpi_yield_when_idle": "1"}
    assert len(log) == 4 and sum("mpi_yield_when_idle" in argv for argv in log) == 2
    assert (
        said
        == [
            "tune: yield        0                    1.000 GiB/s",
            "tune: yield        1                    2.000 GiB/s",
        ]
        * 2
    )
    assert changed_text(result) == "mca.mpi_yield_when_idle=1"


def test_a_knob_judged_at_both_ends_runs_the_small_workload_too():
    cycle = next(k for k in KNOBS if k.name == "cycle")
    job, site = _job((cycle,), tensors=8)
    log: list[list[str]] = []
    run_sweep(job, current_settings(site, job.knobs), 1, 30, [].append, _fake_bench(log))
    sizes = [argv[argv.index("--sizes") + 1] for argv in log]
    assert sizes == ["4194304", "4096"] * len(cycle.candidates)
    assert job.workload("the allocation", 1).small_bytes == 4096


def test_when_every_run_fails_tune_names_the_site_and_says_each_failure():
    job, site = _job()
    said: list[str] = []
    with pytest.raises(UserError, match="launcher: every benchmark run failed, nothing to compare"):
        run_sweep(job, current_settings(site, job.knobs), 1, 30, said.append, _fake_bench([], failing=True))
    assert said == [
        "tune:   failed (exit 1): mpirun: no ranks",
        "tune: yield        0                    failed",
        "tune:   failed (exit 1): mpirun: no ranks",
        "tune: yield        1                    failed",
    ]


def test_a_small_end_that_does_not_split_into_float32_tensors_is_refused():
    with pytest.raises(UserError, match="--small-tensors: 100 bytes do not split into 64 float32 tensors"):
        Benchmark("py", "b.py", 4096, 1, 100, 64)


def test_busbw_is_read_only_from_a_correct_line_of_the_size_asked_for():
    lines = [
        {"metric": "allreduce", "bytes": 8, "correct": False, "busbw_gib": 9.0},
        {"metric": "allreduce", "bytes": 16, "correct": True, "busbw_gib": 8.0},
        {"metric": "allreduce", "bytes": 8, "correct": True, "busbw_gib": 1.25},
    ]
    stdout = "{not json\n" + "".join(json.dumps(line) + "\n" for line in lines)
    assert busbw_of(stdout, 8) == 1.25
    assert busbw_of(stdout, 32) is None
    assert failure_line(Captured(None, "a\nb\n", "")) == "tune:   failed (killed at --timeout): a / b"
