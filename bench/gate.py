"""Launch gate time: what `hpcbundle launch --gate` adds before a job, and how soon it says no.

    .venv/bin/python bench/gate.py                     # 3 namespace nodes, 5 rounds
    .venv/bin/python bench/gate.py --nodes 2 --repeat 9

Needs root: it builds the testbed's namespace cluster with shaped links (data0 at --data-mbit,
slow0 at --slow-mbit, both `tc tbf`; mgmt0 the isolated decoy), one core per node where the host
has them, and removes it at the end. Every run starts on node1 with one rank per node, through
the site of hpcbundle_testbed.sites.gate_site (Open MPI's ring allreduce, network.link_gbps the
data link's rate), and runs a trivial job (python -c pass). Variants, interleaved round-robin:

    job        hpcbundle launch --exec --no-doctor -- JOB                (no gate)
    gate+job   the same with --gate, site on data0: the gate passes, then the job runs
    slow       --gate with the site on slow0: the gate fails (busbw below gate.threshold)
    decoy      --gate with the site on mgmt0 (gate.timeout 10 s): the gate is killed; once only,
               as its time is the bound itself

Prints the median seconds of each, the gate's cost (gate+job - job) against the 10 s budget, the
busbw fractions the gate reported, and one JSON line (metric launch_gate). Exit status 1 when a
run did not end as expected.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hpcbundle_testbed.cli import hpcbundle_argv
from hpcbundle_testbed.netns_cluster import NetnsCluster, reap_stale
from hpcbundle_testbed.sites import gate_site
from hpcbundle_testbed.tools import ensure_cluster_tools

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 10.0
DECOY_TIMEOUT = 10
EXPECTED = {"job": 0, "gate+job": 0, "slow": 2, "decoy": 124}


def launch(cluster: NetnsCluster, site: Path, gate: bool) -> tuple[int, float, str]:
    """One `hpcbundle launch` on node1: exit status, wall seconds, stderr."""
    hosts = ",".join(f"{node}:1" for node in cluster.nodes)
    argv = hpcbundle_argv("launch", "--site", str(site))
    argv += ["--np", str(len(cluster.nodes)), "--hosts", hosts, "--no-doctor", "--exec"]
    argv += ["--gate"] if gate else []
    start = time.monotonic()
    ran = cluster.run("node1", [*argv, "--", sys.executable, "-c", "pass"], timeout=120)
    return ran.returncode, time.monotonic() - start, ran.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-mbit", type=int, default=400)
    parser.add_argument("--slow-mbit", type=int, default=20)
    args = parser.parse_args()
    ensure_cluster_tools()
    reap_stale()
    times: dict[str, list[float]] = {name: [] for name in EXPECTED}
    fractions: dict[str, list[float]] = {"gate+job": [], "slow": []}
    failed = 0
    with (
        NetnsCluster(args.nodes, own_cores=True, data_mbit=args.data_mbit, slow_mbit=args.slow_mbit) as cluster,
        tempfile.TemporaryDirectory() as tmp,
    ):
        link = args.data_mbit / 1000
        sites = {
            "job": gate_site(Path(tmp), cluster, cluster.DATA_IFACE, link_gbps=link),
            "gate+job": gate_site(Path(tmp), cluster, cluster.DATA_IFACE, link_gbps=link),
            "slow": gate_site(Path(tmp), cluster, cluster.SLOW_IFACE, link_gbps=link),
            "decoy": gate_site(Path(tmp), cluster, cluster.MGMT_IFACE, link_gbps=link, gate_timeout=DECOY_TIMEOUT),
        }
        launch(cluster, sites["job"], gate=True)  # warm-up: page cache, Python byte code
        for round_ in range(args.repeat):
            names = list(EXPECTED) if round_ == 0 else [name for name in EXPECTED if name != "decoy"]
            names = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in names:
                status, seconds, stderr = launch(cluster, sites[name], gate=name != "job")
                if status != EXPECTED[name]:
                    failed += 1
                    print(f"{name}: exit {status}, expected {EXPECTED[name]}: {stderr.strip()[-400:]}")
                    continue
                times[name].append(seconds)
                found = re.search(r"busbw ([\d.e-]+) of ([\d.]+) Gbit/s", stderr)
                if name in fractions and found:
                    fractions[name].append(float(found.group(1)) / float(found.group(2)))
    median = {name: statistics.median(values) for name, values in times.items() if values}
    for name, values in times.items():
        shown = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:<9} median {median.get(name, float('nan')):6.2f} s   runs: {shown}")
    cost = median.get("gate+job", float("nan")) - median.get("job", float("nan"))
    verdict = "met" if cost <= BUDGET_S else "missed"
    print(f"gate cost (gate+job - job): {cost:.2f} s; budget {BUDGET_S:.0f} s: {verdict}")
    for name, values in fractions.items():
        print(f"busbw / link, {name}: " + " ".join(f"{v:.2f}" for v in values))
    record = {
        "metric": "launch_gate",
        "nodes": args.nodes,
        "median_s": {name: round(value, 3) for name, value in median.items()},
        "gate_cost_s": round(cost, 3),
        "budget_s": BUDGET_S,
        "busbw_fraction": {name: [round(v, 3) for v in values] for name, values in fractions.items()},
        "failed_runs": failed,
    }
    print(json.dumps(record, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
