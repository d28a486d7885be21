"""Launch overhead: time to the first rank and to job end, hpcbundle's mpirun vs plain mpirun vs horovodrun.

    .venv/bin/python bench/launch.py                       # 2 namespace nodes, 1 rank each, 5 rounds
    .venv/bin/python bench/launch.py --nodes 3 --np 6 --repeat 9
    .venv/bin/python bench/launch.py --variants plain,generated,cli --repeat 20

Needs root: it builds the testbed's namespace cluster (hpcbundle_testbed.netns_cluster: data0 real,
mgmt0 a decoy that hangs, an rsh agent instead of sshd) and removes it at the end. Everything is
launched from node1 with the same ranks and hosts (-H node1:K,node2:K,...). Each rank runs a bash
script that prints $EPOCHREALTIME (CLOCK_REALTIME: one clock for every namespace on this host),
its hostname and its rank, with builtins only. A bash wrapper on node1 stamps t0 just before it
starts the launcher and t1 once the launcher has exited:

    first rank = earliest rank stamp - t0        job end = t1 - t0

Variants, run interleaved round-robin after --warmup unrecorded rounds (the machine is noisy;
each round starts one variant later than the one before):

    plain       the minimal Open MPI 4 line that works here: --allow-run-as-root -np -H, the rsh
                agent (plm_rsh_agent, plm_rsh_no_tree_spawn), btl/oob_tcp_if_include data0
    generated   the argv hpcbundle.launch.build_command makes for the namespace site
                (hpcbundle_testbed.sites netns_site), executed directly
    cli         hpcbundle launch --site SITE --np N --hosts ... --exec --no-doctor -- PROGRAM
                (its `+ command` echo must be exactly the generated argv)
    cli-doctor  the same with the doctor pre-checks (probes every node through the rsh agent)
    horovodrun  horovodrun -np N -H ... --network-interface data0 --disable-cache, with the rsh
                agent and oob_tcp_if_include for its mpirun through --mpi-args; horovodrun's own
                `ssh HOST true` check goes through a temporary `ssh` shim (a temp dir put first on
                PATH for this variant only) that calls the agent. --disable-cache: every launch
                pays the host check, as the first one of the hour does.

A run counts when it exits 0 with every rank stamped on the node it was placed on; a failed run
is reported with its stderr tail (and the cause, when known). Prints medians and minima, the
difference to plain mpirun and the ratio, a verdict for the target (the generated command within
0.3 s of plain mpirun), and one JSON line (metric launch_overhead). Exit status 1 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from hpcbundle.launch import RankLayout, build_command, load_site
from hpcbundle_testbed.netns_cluster import NetnsCluster, reap_stale
from hpcbundle_testbed.sites import netns_site
from hpcbundle_testbed.tools import ensure_cluster_tools

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("plain", "generated", "cli", "cli-doctor", "horovodrun")
BASELINE, TARGET, TARGET_S = "plain", "generated", 0.3
IFACE = NetnsCluster.DATA_IFACE

# Every rank: builtins only, so the stamp is taken as soon as bash runs.
STAMP_PROGRAM = """#!/bin/bash
echo "bench-rank ${EPOCHREALTIME/,/.} $HOSTNAME ${OMPI_COMM_WORLD_RANK:-${HOROVOD_RANK:--1}}"
"""
# On node1, around the launcher: t0 just before it starts, t1 and its status once it has exited.
HARNESS = 'echo "bench-t0 ${EPOCHREALTIME/,/.}"; "$@"; rc=$?; echo "bench-t1 ${EPOCHREALTIME/,/.} $rc"; exit "$rc"'
# `ssh` for horovodrun: the cluster's rsh agent. OpenSSH also reads options after HOST (horovodrun
# puts -o ConnectTimeout=10 there); the agent stops reading options at HOST, so they go here.
SSH_SHIM = """#!/bin/sh
host=
while [ $# -gt 0 ]; do
    case $1 in
        -[BbcDEeFIiJLlmOopQRSWw]) shift 2 ;;
        -*) shift ;;
        *) [ -z "$host" ] || break; host=$1; shift ;;
    esac
done
exec "{agent}" "$host" "$@"
"""
_RANK = re.compile(r"bench-rank (\d+\.\d+) (\S+) (-?\d+)")
_T0 = re.compile(r"^bench-t0 (\d+\.\d+)$", re.M)
_T1 = re.compile(r"^bench-t1 (\d+\.\d+) (\d+)$", re.M)


def hints() -> tuple[tuple[str, str], ...]:
    """Known causes of a failed run, recognised by a text in its output: (text, cause)."""
    return (
        (
            "object has no attribute '_recursion_count'",
            "the venv's python binary is not the one whose standard library it loads (pyvenv.cfg), so "
            "multiprocessing's spawn fails, and horovodrun needs it; make the venv again "
            "(scripts/setup/python-env.sh does when it sees this)",
        ),
        (
            "could not connect to some hosts via ssh",
            "horovodrun's `ssh HOST true` failed (the ssh shim calls the cluster's rsh agent)",
        ),
    )


@dataclass
class Run:
    """One launch: its two times (s from t0), the host of each rank, or why it does not count."""

    first_rank: float | None = None
    job_end: float | None = None
    hosts: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class Variant:
    name: str
    argv: list[str]
    env: dict[str, str]
    echo: str | None = None  # the `+ command` line the hpcbundle CLI must print
    runs: list[Run] = field(default_factory=list)

    @property
    def good(self) -> list[Run]:
        return [r for r in self.runs if not r.error]


def expected_hosts(nodes: list[str], np_: int) -> list[str]:
    """The node of each rank: -H node1:K,node2:K,... fills node1's K slots first."""
    per = np_ // len(nodes)
    return [nodes[rank // per] for rank in range(np_)]


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join("      | " + line for line in text.strip().splitlines()[-lines:])


def judge(status: int, out: str, err: str, expect: list[str], echo: str | None = None) -> Run:
    """The times and the outcome of one launch, from its exit status and output."""
    run = Run()
    t0, t1 = _T0.search(out), _T1.search(out)
    stamps = sorted((int(rank), float(t), host) for t, host, rank in _RANK.findall(out))
    run.hosts = [host for _, _, host in stamps]
    if t0 and stamps:
        run.first_rank = min(t for _, t, _ in stamps) - float(t0.group(1))
    if t0 and t1:
        run.job_end = float(t1.group(1)) - float(t0.group(1))
    ranks = [rank for rank, _, _ in stamps]
    if status != 0:
        run.error = f"exit status {status}"
    elif not (t0 and t1):
        run.error = "the harness stamps are missing"
    elif ranks != list(range(len(expect))):
        run.error = f"ranks {ranks} stamped, expected 0..{len(expect) - 1}"
    elif run.hosts != expect:
        run.error = f"ranks ran on {run.hosts}, expected {expect}"
    elif echo is not None and f"+ {echo}" not in err.splitlines():
        run.error = "the CLI ran another command than the generated argv"
    if run.error:
        causes = "".join(f"\n      cause: {cause}" for text, cause in hints() if text in out + err)
        run.error += causes + "\n" + _tail(err or out)
    return run


def launch(cluster: NetnsCluster, variant: Variant, expect: list[str], timeout: float) -> Run:
    """Run one variant on node1 inside the timing harness."""
    try:
        result = cluster.run(
            "node1", ["bash", "-c", HARNESS, "bench-harness", *variant.argv], timeout=timeout, env=variant.env
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return Run(error=f"no end within {timeout:g} s (killed)\n{_tail(stderr)}")
    return judge(result.returncode, result.stdout, result.stderr, expect, variant.echo)


def variants(cluster: NetnsCluster, work: Path, np_: int, names: list[str]) -> list[Variant]:
    """The argv and environment of each variant named, for the same ranks and hosts."""
    program = work / "stamp"
    program.write_text(STAMP_PROGRAM)
    program.chmod(0o755)
    per = np_ // len(cluster.nodes)
    hosts = tuple((node, per) for node in cluster.nodes)
    host_list = ",".join(f"{node}:{slots}" for node, slots in hosts)
    site_path = netns_site(work, cluster, IFACE, timeout=300)
    generated = build_command(load_site(str(site_path), work), RankLayout(np=np_, hosts=hosts), [str(program)])
    bin_dir = Path(sys.executable).parent
    cli = [str(bin_dir / "hpcbundle")] if (bin_dir / "hpcbundle").exists() else [sys.executable, "-m", "hpcbundle"]
    cli_launch = [
        *cli,
        "--bundle",
        str(ROOT),
        "launch",
        "--site",
        str(site_path),
        "--np",
        str(np_),
        "--hosts",
        host_list,
        "--exec",
    ]
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    shim = work / "ssh-shim"
    shim.mkdir()
    (shim / "ssh").write_text(SSH_SHIM.format(agent=cluster.rsh_agent))
    (shim / "ssh").chmod(0o755)
    horovodrun, hvd_env = [str(bin_dir / "horovodrun")], {"PATH": f"{shim}{os.pathsep}{path}"}
    agent = cluster.mpirun_agent_args()
    table = {
        "plain": Variant(
            "plain",
            [
                "mpirun",
                "--allow-run-as-root",
                "-np",
                str(np_),
                "-H",
                host_list,
                *agent,
                "--mca",
                "btl_tcp_if_include",
                IFACE,
                "--mca",
                "oob_tcp_if_include",
                IFACE,
                str(program),
            ],
            {"PATH": path},
        ),
        "generated": Variant("generated", generated.argv, {"PATH": path}),
        "cli": Variant(
            "cli", [*cli_launch, "--no-doctor", "--", str(program)], {"PATH": path}, echo=generated.display()
        ),
        "cli-doctor": Variant(
            "cli-doctor", [*cli_launch, "--", str(program)], {"PATH": path}, echo=generated.display()
        ),
        "horovodrun": Variant(
            "horovodrun",
            [
                *horovodrun,
                "-np",
                str(np_),
                "-H",
                host_list,
                "--network-interface",
                IFACE,
                "--disable-cache",
                "--mpi-args",
                shlex.join([*agent, "--mca", "oob_tcp_if_include", IFACE]),
                str(program),
            ],
            hvd_env,
        ),
    }
    return [table[name] for name in names]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summary(variant: Variant, base: Variant | None) -> dict:
    """One variant's numbers, and its difference and ratio to the baseline's medians."""
    row: dict = {"runs": len(variant.runs), "ok": len(variant.good), "argv": variant.argv}
    for what in ("first_rank", "job_end"):
        values = [getattr(r, what) for r in variant.good]
        own = _median(values)
        other = _median([getattr(r, what) for r in base.good]) if base else None
        row[f"{what}_median_s"] = own
        row[f"{what}_min_s"] = min(values, default=None)
        row[f"{what}_diff_s"] = own - other if own is not None and other is not None else None
        row[f"{what}_ratio"] = own / other if own is not None and other else None
    row["hosts"] = [r.hosts for r in variant.runs]
    row["errors"] = [r.error.splitlines()[0] for r in variant.runs if r.error]
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in row.items()}


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def report(chosen: list[Variant], args: argparse.Namespace, nodes: list[str]) -> int:
    """Print the table, the commands, the failures, the verdict and the JSON line; 1 if a run failed."""
    base = next((v for v in chosen if v.name == BASELINE), None)
    rows = {v.name: summary(v, base) for v in chosen}
    print(
        f"\nlaunch overhead: {args.np} rank(s) on {', '.join(nodes)}, launched from node1; "
        f"{args.repeat} round(s) after {args.warmup} warm-up; seconds from launcher start, median / min; "
        f"diff and ratio of medians vs {BASELINE}"
    )
    print(
        f"{'variant':<12}{'ok':>5}  {'first rank':>15}{'diff':>9}{'ratio':>8}  {'job end':>15}{'diff':>9}{'ratio':>8}"
    )
    for name, row in rows.items():
        cells = [f"{name:<12}{row['ok']:>3}/{row['runs']}"]
        for what in ("first_rank", "job_end"):
            cells.append(
                f"  {_num(row[f'{what}_median_s']):>7} / {_num(row[f'{what}_min_s']):<5}"
                f"{_num(row[f'{what}_diff_s'], '{:+.3f}'):>9}{_num(row[f'{what}_ratio'], '{:.2f}x'):>8}"
            )
        print("".join(cells))
    print("commands:")
    for variant in chosen:
        print(f"  {variant.name:<11} {shlex.join(variant.argv)}")
    failed = [v for v in chosen if len(v.good) < len(v.runs)]
    for variant in failed:
        print(f"FAILED {variant.name}: {len(variant.runs) - len(variant.good)} of {len(variant.runs)} run(s)")
        first_round: dict[str, int] = {}
        for number, run in enumerate(variant.runs, 1):
            if run.error in first_round:
                print(f"  round {number}: {run.error.splitlines()[0]} (as round {first_round[run.error]})")
            elif run.error:
                first_round[run.error] = number
                print(f"  round {number}: {run.error}")
    target, met = rows.get(TARGET), None
    if target and target["job_end_diff_s"] is not None:
        met = max(target["job_end_diff_s"], target["first_rank_diff_s"]) <= TARGET_S
        print(
            f"verdict: the generated command is {target['first_rank_diff_s']:+.3f} s to the first rank and "
            f"{target['job_end_diff_s']:+.3f} s to job end vs plain mpirun (target: within {TARGET_S} s): "
            f"{'MET' if met else 'MISSED'}"
        )
    else:
        print(f"verdict: none (needs good runs of both {BASELINE} and {TARGET})")
    print(
        json.dumps(
            {
                "metric": "launch_overhead",
                "nodes": len(nodes),
                "np": args.np,
                "repeat": args.repeat,
                "warmup": args.warmup,
                "baseline": BASELINE,
                "target": TARGET,
                "target_s": TARGET_S,
                "target_met": met,
                "variants": rows,
            }
        )
    )
    return 1 if failed else 0


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through the cluster's `with`, which tears it down


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="variants: " + ", ".join(VARIANTS))
    parser.add_argument("--nodes", type=int, default=2, help="namespace nodes (default 2)")
    parser.add_argument("--np", type=int, help="ranks, spread evenly over the nodes (default: one per node)")
    parser.add_argument("--repeat", type=int, default=5, help="recorded rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded rounds first (default 1)")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated subset, in table order (default: all)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120, help="seconds one launch may take before it is killed (default 120)"
    )
    args = parser.parse_args(argv)
    args.np = args.np or args.nodes
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown or not names:
        parser.error(f"unknown variant(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(VARIANTS)}")
    if args.nodes < 1 or args.np % args.nodes or args.repeat < 1 or args.warmup < 0:
        parser.error("--np must be a multiple of --nodes (>= 1), --repeat >= 1, --warmup >= 0")
    signal.signal(signal.SIGTERM, _sigterm)
    ensure_cluster_tools()
    reap_stale()
    work = Path(tempfile.mkdtemp(prefix="hpcbundle-bench-launch-"))
    try:
        with NetnsCluster(args.nodes) as cluster:
            chosen = variants(cluster, work, args.np, names)
            expect = expected_hosts(cluster.nodes, args.np)
            for round_ in range(-args.warmup, args.repeat):
                shift = round_ % len(chosen)
                for variant in chosen[shift:] + chosen[:shift]:
                    run = launch(cluster, variant, expect, args.timeout)
                    if round_ >= 0:
                        variant.runs.append(run)
                    label = "warm-up" if round_ < 0 else f"round {round_ + 1}/{args.repeat}"
                    outcome = (
                        f"FAILED: {run.error.splitlines()[0]}"
                        if run.error
                        else f"first rank {run.first_rank:.3f} s, end {run.job_end:.3f} s"
                    )
                    print(f"{label:<12} {variant.name:<11} {outcome}", file=sys.stderr, flush=True)
            return report(chosen, args, cluster.nodes)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
