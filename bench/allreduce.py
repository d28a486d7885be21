"""Allreduce bandwidth on the namespace cluster, next to the raw TCP bandwidth of the same link.

    .venv/bin/python bench/allreduce.py                          # 2 and 3 nodes, 4 KiB .. 256 MiB, 5 rounds
    .venv/bin/python bench/allreduce.py --nodes 2 --quick --rounds 1   # 64 KiB, 4 MiB, 64 MiB, once
    .venv/bin/python bench/allreduce.py --nodes 2 --sizes 64M --backends horovod-mpi,mpi4py \\
        --set mca.btl_tcp_sndbuf=4194304 --set mca.btl_tcp_rcvbuf=4194304   # try a knob by hand
    .venv/bin/python bench/allreduce.py --nodes 2 --tuned        # also: hpcbundle tune, then Horovod again
    .venv/bin/python bench/allreduce.py --tuned --tuned-out build/bench/tuned.json   # and keep what tune chose

Needs root (it builds the testbed's namespace cluster, hpcbundle_testbed.netns_cluster: one rank per
node, data0 real, mgmt0 a decoy) and iperf3. Each node runs on a core of its own, as real nodes do
(own_cores: this host's cores dealt out; 3 nodes on 2 cores share one; --shared-cores lets every
node use every core). For each cluster size, in one run:

  link        iperf3 over data0, before and after the backends (the mean of both is used: the
              load of a shared machine drifts during a run; both are in the JSON). Servers are
              started on the nodes and stopped by PID. 2 nodes:
              `iperf3 --bidir` node1 <-> node2, GiB/s each way; 3 nodes: the three ring links
              node1->node2, node2->node3, node3->node1 at once, GiB/s per link. Both are what each
              node's link carries while a ring allreduce runs (every node sends and receives at
              once); "link" below is the mean of those concurrent streams (min and max printed).
              The unidirectional node1->node2 figure is printed too.
  backends    examples/allreduce_bench.py through `hpcbundle launch --site SITE --np N --hosts
              node1:1,... --exec --no-doctor`, run on node1, SITE written by hpcbundle_testbed.sites
              for this cluster (the untuned test site: TCP btl on data0, mpi_yield_when_idle 1):
                horovod-mpi    Horovod, MPI controller, env HOROVOD_CPU_OPERATIONS=mpi
                horovod-gloo   Horovod, Gloo controller and operations (env HOROVOD_CONTROLLER=gloo,
                               HOROVOD_CPU_OPERATIONS=gloo; the program runs Horovod's rendezvous)
                torch-gloo     torch.distributed all_reduce on a Gloo process group
                mpi4py         comm.Allreduce(IN_PLACE) (Open MPI's coll_tuned choice)
              Every site also sets GLOO_SOCKET_IFNAME and HOROVOD_GLOO_IFACE to data0.
  --tuned     first `hpcbundle tune` on the horovod-mpi site, then Horovod again with the tuned site
              (horovod-tuned); the target lines use it when present. With --tuned-out FILE, what
              tune changed per cluster size is written there as KEY=VALUE settings, the form of
              --set, so that bench/train.py --tuned-from FILE trains with them without tuning again
              (the site file itself names this cluster's rsh agent, so it is not reused).

--rounds K (default 5) runs every backend once per round, the rounds one after another, so each
round compares backends measured side by side. Prints a table per cluster size (size, backend,
ops, median seconds, median busbw with its min-max over the rounds, busbw/link), the target
ratios at 64 MiB taken round by round (Horovod busbw >= 0.6 x link, >= 1.0 x torch-gloo and >= 1.0 x
the best of torch-gloo and mpi4py of the same round: median, min-max, rounds met; measured, never
asserted), and one JSON line (metric
allreduce_bench, every round's records). Exit status 1 if a backend failed or summed wrong; bad
options are one line, exit 2. The machine is shared and noisy: compare ratios from one run, never
absolute figures across runs.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from hpcbundle_testbed.bench import OneLineParser, bench_site, hosts_of, positive, run_tune, spread, tuned_settings
from hpcbundle_testbed.cli import hpcbundle_argv
from hpcbundle_testbed.netns_cluster import NetnsCluster, reap_stale
from hpcbundle_testbed.tools import ensure_cluster_tools

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "allreduce_bench.py"
IPERF_PORT = 5201
TARGET_SIZE = 64 << 20
PEERS = ("torch-gloo", "mpi4py")  # what a user would allreduce with instead of Horovod
TARGETS = {  # target key -> (what Horovod's busbw is divided by, the ratio wanted), at 64 MiB
    "over_link": ("link", 0.6),
    "over_torch_gloo": ("torch-gloo busbw", 1.0),
    "over_peers": (f"best peer busbw ({', '.join(PEERS)}, per round)", 1.0),
}
QUICK_SIZES = "64K,4M,64M"
GIB = 2**30


@dataclass(frozen=True)
class Variant:
    """One backend run: the program's --backend and what the site's env adds for it."""

    name: str
    backend: str
    env: dict[str, str] = field(default_factory=dict)


VARIANTS = {
    v.name: v
    for v in (
        Variant("horovod-mpi", "horovod", {"HOROVOD_CPU_OPERATIONS": "mpi"}),
        Variant("horovod-gloo", "horovod", {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}),
        Variant("torch-gloo", "torch-gloo"),
        Variant("mpi4py", "mpi4py"),
    )
}


# ---------------------------------------------------------------------------------- iperf3
def _gib(bits_per_second: float) -> float:
    return bits_per_second / 8 / GIB


def _iperf_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise RuntimeError(f"iperf3 {what}: no JSON: {text[-500:]!r}") from None
    if "error" in data:
        raise RuntimeError(f"iperf3 {what}: {data['error']}")
    return data


def _wait_listening(cluster: NetnsCluster, node: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = cluster.run(node, ["ss", "-Hltn", f"sport = :{IPERF_PORT}"], timeout=10).stdout
        if out.strip():
            return
        time.sleep(0.1)
    raise RuntimeError(f"iperf3 server on {node} not listening after {timeout} s")


def measure_link(cluster: NetnsCluster, seconds: int, logs: Path) -> dict[str, Any]:
    """iperf3 over data0: unidirectional node1->node2, then every node sending and receiving at
    once (2 nodes: --bidir; more: the ring node_i -> node_i+1, all links concurrently). GiB/s."""
    nodes = cluster.nodes
    servers = {
        node: cluster.start(node, ["iperf3", "-s", "-p", str(IPERF_PORT)], log=logs / f"iperf3-server-{node}.log")
        for node in nodes
    }
    try:
        for node in nodes:
            _wait_listening(cluster, node)
        client = ["iperf3", "-c", cluster.address("node2"), "-p", str(IPERF_PORT), "-t", str(seconds), "-J"]
        uni = _iperf_json(cluster.run("node1", client, timeout=seconds + 30).stdout, "node1->node2")
        unidirectional = _gib(uni["end"]["sum_received"]["bits_per_second"])
        if len(nodes) == 2:
            bidir = _iperf_json(cluster.run("node1", [*client, "--bidir"], timeout=seconds + 30).stdout, "--bidir")
            streams = {
                "node1->node2": _gib(bidir["end"]["sum_received"]["bits_per_second"]),
                "node2->node1": _gib(bidir["end"]["sum_received_bidir_reverse"]["bits_per_second"]),
            }
            mode = "bidir"
        else:
            ring = [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]
            procs = [
                (
                    src,
                    dst,
                    cluster.tracker.popen(
                        cluster.node_argv(
                            src, ["iperf3", "-c", cluster.address(dst), "-p", str(IPERF_PORT), "-t", str(seconds), "-J"]
                        ),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    ),
                )
                for src, dst in ring
            ]
            streams = {}
            for src, dst, proc in procs:
                out, _ = proc.communicate(timeout=seconds + 30)
                streams[f"{src}->{dst}"] = _gib(
                    _iperf_json(out.decode(), f"{src}->{dst}")["end"]["sum_received"]["bits_per_second"]
                )
            mode = "ring"
    finally:
        for proc in servers.values():  # stopped by PID: node-exec execs down to iperf3 itself
            proc.terminate()
        for proc in servers.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    values = list(streams.values())
    return {
        "mode": mode,
        "streams": {k: round(v, 4) for k, v in streams.items()},
        "gib": round(statistics.mean(values), 4),
        "min_gib": round(min(values), 4),
        "max_gib": round(max(values), 4),
        "unidirectional_gib": round(unidirectional, 4),
    }


# -------------------------------------------------------------------------------- backends
def run_backend(cluster: NetnsCluster, site: Path, backend: str, sizes: str, timeout: float) -> tuple[list[dict], str]:
    """examples/allreduce_bench.py through the generated command, on node1; (records, error or "")."""
    argv = hpcbundle_argv(
        "launch",
        "--site",
        str(site),
        "--np",
        str(len(cluster.nodes)),
        "--hosts",
        hosts_of(cluster),
        "--exec",
        "--no-doctor",
        "--",
        sys.executable,
        str(PROGRAM),
        "--backend",
        backend,
        "--sizes",
        sizes,
    )
    try:
        result = cluster.run("node1", argv, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"killed after {timeout:.0f} s"
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"metric": "allreduce"')]
    if result.returncode:
        tail = " | ".join(line for line in result.stderr.strip().splitlines()[-4:])
        return records, f"exit {result.returncode}: {tail}"
    return records, ""


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _fmt_size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def bench_cluster(n: int, args: argparse.Namespace, overrides: dict[str, str], work: Path) -> dict[str, Any]:
    """One cluster size: link, then every backend (and tune + tuned Horovod), in one cluster."""
    with NetnsCluster(n, own_cores=not args.shared_cores) as cluster:
        directory = work / f"n{n}"
        directory.mkdir()
        print(f"\n== {n} nodes: iperf3 ({args.iperf_seconds} s per test) ...", file=sys.stderr, flush=True)
        link = measure_link(cluster, args.iperf_seconds, directory)
        print(
            f"   link {link['gib']:.3f} GiB/s ({link['mode']}: {link['streams']}), unidirectional "
            f"{link['unidirectional_gib']:.3f} GiB/s",
            file=sys.stderr,
            flush=True,
        )
        runs: list[tuple[str, Path, str]] = []
        for name in args.backends:
            variant = VARIANTS[name]
            runs.append(
                (
                    name,
                    bench_site(directory, cluster, f"bench-n{n}-{name}", variant.env, overrides, args.timeout),
                    variant.backend,
                )
            )
        chosen: dict[str, str] | None = None
        if args.tuned:
            base = next((site for name, site, _ in runs if name == "horovod-mpi"), None) or bench_site(
                directory, cluster, f"bench-n{n}-horovod-mpi", VARIANTS["horovod-mpi"].env, overrides, args.timeout
            )
            print(f"   hpcbundle tune on {base.name} ...", file=sys.stderr, flush=True)
            tuned = run_tune(cluster, base, directory / "tuned.yaml", timeout=args.tune_timeout)
            runs.insert(0, ("horovod-tuned", tuned, "horovod"))
            chosen = tuned_settings(base, tuned)
            print(f"   tune changed: {chosen or 'nothing'}", file=sys.stderr, flush=True)
        results, errors = [], {}
        for round_ in range(1, args.rounds + 1):  # interleaved: every backend once per round
            for name, site, backend in runs:
                t0 = time.monotonic()
                records, error = run_backend(cluster, site, backend, args.sizes, args.timeout + 60)
                print(
                    f"   round {round_}, {name}: {len(records)} sizes in {time.monotonic() - t0:.0f} s"
                    f"{'; FAILED ' + error if error else ''}",
                    file=sys.stderr,
                    flush=True,
                )
                if error:
                    errors[f"{name} round {round_}"] = error
                results.extend({**r, "variant": name, "round": round_} for r in records)
        print("   iperf3 again ...", file=sys.stderr, flush=True)
        link = combine_links(link, measure_link(cluster, args.iperf_seconds, directory))
        print(
            f"   link after {link['after']['gib']:.3f} GiB/s; used: the mean of before and after, "
            f"{link['gib']:.3f} GiB/s",
            file=sys.stderr,
            flush=True,
        )
    for r in results:
        r["busbw_over_link"] = ratio(r["busbw_gib"], link["gib"])
    found = {"nodes": n, "link": link, "results": results, "errors": errors, "targets": targets(results, link)}
    return found | ({"tuned_settings": chosen} if chosen is not None else {})


def combine_links(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The link measured before and after the backends (the machine's load drifts during a run):
    figures are the means of the two measurements; both are kept under "before" and "after"."""
    mean = {
        key: round((before[key] + after[key]) / 2, 4) for key in ("gib", "min_gib", "max_gib", "unidirectional_gib")
    }
    streams = {k: round((before["streams"][k] + after["streams"][k]) / 2, 4) for k in before["streams"]}
    return {"mode": before["mode"], "streams": streams, **mean, "before": before, "after": after}


def per_round(results: list[dict], variant: str, size: int) -> dict[int, float]:
    """Round -> busbw (GiB/s) of `variant` at `size` bytes."""
    return {r["round"]: r["busbw_gib"] for r in results if r["variant"] == variant and r["bytes"] == size}


def targets(results: list[dict], link: dict[str, Any]) -> dict[str, Any]:
    """The target ratios at 64 MiB, round by round: Horovod (tuned if run, else horovod-mpi) busbw
    over the link, over torch-gloo's busbw of the same round, and over the best of the peers a user
    would pick instead (torch-gloo, mpi4py) in that round; each as median, min-max and rounds met."""
    name = "horovod-tuned" if per_round(results, "horovod-tuned", TARGET_SIZE) else "horovod-mpi"
    horovod = per_round(results, name, TARGET_SIZE)
    peers = [per_round(results, peer, TARGET_SIZE) for peer in PEERS]
    references = {
        "over_link": {round_: link["gib"] for round_ in horovod},
        "over_torch_gloo": per_round(results, "torch-gloo", TARGET_SIZE),
        "over_peers": {r: max(p[r] for p in peers if r in p) for r in horovod if any(r in p for p in peers)},
    }
    found: dict[str, Any] = {"bytes": TARGET_SIZE, "horovod_variant": name if horovod else None}
    for key, reference in references.items():
        ratios = [value / reference[r] for r, value in horovod.items() if reference.get(r)]
        found[key] = spread(ratios) if ratios else None
        found[key + "_met"] = sum(r >= TARGETS[key][1] for r in ratios)
    return found | {"link_gib": link["gib"], "rounds": len(horovod)}


def report(cluster: dict[str, Any]) -> list[str]:
    """The table of one cluster size: per size and backend the median busbw over the rounds, its
    min-max, and the target ratios at 64 MiB with their range and the rounds that met them."""
    link = cluster["link"]
    rounds = max((r["round"] for r in cluster["results"]), default=0)
    lines = [
        f"\n{cluster['nodes']} nodes, {rounds} round(s), link {link['gib']:.3f} GiB/s per direction "
        f"(before {link['before']['gib']:.3f}, after {link['after']['gib']:.3f}; {link['mode']}, concurrent: "
        + ", ".join(f"{k} {v:.3f}" for k, v in link["streams"].items())
        + f"; unidirectional node1->node2 {link['unidirectional_gib']:.3f} GiB/s)",
        f"{'size':>9}  {'backend':<14} {'ops':<5} {'seconds':>10} {'busbw':>7} {'min-max':>13} {'busbw/link':>10} ok",
    ]
    keys = sorted({(r["bytes"], r["variant"]) for r in cluster["results"]})
    for size, variant in keys:
        runs = [r for r in cluster["results"] if r["bytes"] == size and r["variant"] == variant]
        busbw = spread([r["busbw_gib"] for r in runs])
        seconds = statistics.median(r["seconds"] for r in runs)
        lines.append(
            f"{_fmt_size(size):>9}  {variant:<14} {runs[0]['ops']:<5} {seconds:>10.6f} {busbw['median']:>7.3f} "
            f"{busbw['min']:>6.3f}-{busbw['max']:<6.3f} {_fmt(ratio(busbw['median'], link['gib'])):>10} "
            f"{'yes' if all(r['correct'] for r in runs) else 'NO'}"
        )
    for name, error in cluster["errors"].items():
        lines.append(f"  {name} FAILED: {error}")
    t = cluster["targets"]
    for key, (what, want) in TARGETS.items():
        value = t[key]
        figure = (
            "not measured"
            if value is None
            else (
                f"{value['median']:.3f} [{value['min']:.3f}-{value['max']:.3f}] "
                f"(want >= {want}: met in {t[key + '_met']} of {t['rounds']} rounds)"
            )
        )
        lines.append(
            f"target at 64 MiB, {cluster['nodes']} nodes: {t['horovod_variant'] or 'horovod'} busbw / {what} = {figure}"
        )
    return lines


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so the cluster's context manager tears it down


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="bench/allreduce.py", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="2,3", help="cluster sizes, comma-separated (default 2,3)")
    p.add_argument("--sizes", help="message sizes for every backend, e.g. 4K,64M (K/M/G = KiB/MiB/GiB)")
    p.add_argument("--min-bytes", default="4K", help="smallest size when --sizes is not given (default 4K)")
    p.add_argument("--max-bytes", default="256M", help="largest size when --sizes is not given (default 256M)")
    p.add_argument("--quick", action="store_true", help=f"only {QUICK_SIZES}")
    p.add_argument("--rounds", type=positive, default=5, help="rounds; each runs every backend once (default 5)")
    p.add_argument("--iperf-seconds", type=int, default=5, help="duration of each iperf3 test (default 5)")
    p.add_argument("--backends", default=",".join(VARIANTS), help=f"subset of {','.join(VARIANTS)}")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change every site: mca.NAME=VALUE or env.NAME=VALUE (empty VALUE removes the key)",
    )
    p.add_argument("--tuned", action="store_true", help="run hpcbundle tune first and Horovod with the tuned site")
    p.add_argument(
        "--tuned-out",
        type=Path,
        metavar="FILE",
        help="with --tuned: write what tune changed per cluster size (JSON) for bench/train.py --tuned-from",
    )
    p.add_argument(
        "--shared-cores",
        action="store_true",
        help="every node may use every core of this host (default: one core each)",
    )
    p.add_argument("--timeout", type=int, default=600, help="seconds each backend run may take (default 600)")
    p.add_argument("--tune-timeout", type=int, default=1800, help="seconds hpcbundle tune may take (default 1800)")
    args = p.parse_args(argv)
    bench = _program_module()
    option = "--sizes"
    try:
        if args.quick:
            sizes = bench.parse_sizes(QUICK_SIZES)
        elif args.sizes:
            sizes = bench.parse_sizes(args.sizes)
        else:
            option = "--min-bytes"
            low = bench.parse_size(args.min_bytes)
            option = "--max-bytes"
            sizes = bench.size_range(low, bench.parse_size(args.max_bytes), 4)
        option = "--nodes"
        args.nodes = [int(n) for n in args.nodes.split(",") if n.strip()]
    except ValueError as e:
        p.error(f"{option}: {e}")
    if not args.nodes:
        p.error("--nodes: no cluster size; give e.g. 2,3")
    args.sizes = ",".join(str(s) for s in sizes)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in args.backends if b not in VARIANTS]
    if unknown or not args.backends:
        p.error(f"--backends: unknown {unknown}; choose from {','.join(VARIANTS)}")
    if any(n < 2 for n in args.nodes):
        p.error("--nodes: every cluster needs at least 2 nodes")
    if any("=" not in item for item in args.set):
        p.error("--set takes KEY=VALUE")
    if args.tuned_out and not args.tuned:
        p.error("--tuned-out needs --tuned (it keeps what tune chose)")
    return args


def _program_module():
    """examples/allreduce_bench.py as a module (its size parsing is the one the ranks use)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("allreduce_bench", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    signal.signal(signal.SIGTERM, _sigterm)
    ensure_cluster_tools()
    reap_stale()
    clusters = []
    with tempfile.TemporaryDirectory(prefix="hpcbundle-bench-allreduce-") as tmp:
        for n in args.nodes:
            cluster = bench_cluster(n, args, overrides, Path(tmp))
            clusters.append(cluster)
            print("\n".join(report(cluster)), flush=True)
    if args.tuned_out:
        args.tuned_out.parent.mkdir(parents=True, exist_ok=True)
        chosen = {str(c["nodes"]): c["tuned_settings"] for c in clusters}
        args.tuned_out.write_text(json.dumps({"metric": "tuned_settings", "clusters": chosen}, indent=1) + "\n")
    failed = any(c["errors"] or not all(r["correct"] for r in c["results"]) for c in clusters)
    print(
        json.dumps(
            {
                "metric": "allreduce_bench",
                "sizes": [int(s) for s in args.sizes.split(",")],
                "backends": args.backends,
                "tuned": args.tuned,
                "rounds": args.rounds,
                "set": overrides,
                "clusters": clusters,
                "ok": not failed,
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
