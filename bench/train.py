"""Training throughput on the namespace cluster: Horovod as hpcbundle launches it vs torch DDP, side by side.

    .venv/bin/python bench/train.py                              # 2 and 3 nodes, cnn and resnet, 5 rounds
    .venv/bin/python bench/train.py --tuned                      # also Horovod with `hpcbundle tune`'s site
    .venv/bin/python bench/train.py --tuned-from build/bench/tuned.json   # with what allreduce.py's tune chose
    .venv/bin/python bench/train.py --nodes 2 --models cnn --rounds 1 --iters 1   # one small pass

What a user choosing between Horovod and PyTorch's own DistributedDataParallel compares: the same
model on the same synthetic data (examples/pytorch_synthetic_benchmark.py), started by the same
generated launch line of the same site (`hpcbundle launch --site SITE --np N --hosts ... [--torch] --exec
--no-doctor`, on node1), one rank per node, each node on a core of its own (as bench/allreduce.py):

  horovod         Horovod's DistributedOptimizer, the testbed's untuned site (TCP btl on data0)
  horovod-tuned   the same after `hpcbundle tune` (--tuned; tune runs once per cluster size), or
                  with the settings a tune of the same cluster size chose in `bench/allreduce.py
                  --tuned --tuned-out FILE` (--tuned-from FILE: no second tune; `make bench` does this)
  ddp             the program with --ddp env:// through `launch --torch`: torch DDP over gloo on data0,
                  RANK/WORLD_SIZE and MASTER_ADDR (node 1's data address) set by the generated line
  ddp-torchrun    the same through `launch --torchrun`: one torchrun agent per node starts the rank

Every round runs each variant once, in turn, so the drift of a shared machine hits all alike. Per
model and cluster size it prints img/s per rank (median and min-max over the rounds) and the ratio
Horovod / DDP per round (median and min-max; goal >= 1.0 in every round), then one JSON line (metric
train_bench). Measured, never asserted: compare ratios from one run, not figures across runs.
Exit status 1 if a run failed.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from hpcbundle.config.errors import UserError
from hpcbundle.config.loading import parse_json, read_text
from hpcbundle_testbed.bench import OneLineParser, bench_site, hosts_of, positive, run_tune, spread
from hpcbundle_testbed.cli import hpcbundle_argv
from hpcbundle_testbed.netns_cluster import NetnsCluster, reap_stale
from hpcbundle_testbed.tools import ensure_cluster_tools

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "pytorch_synthetic_benchmark.py"
MODELS = ("cnn", "resnet", "mlp")


def run_variant(
    cluster: NetnsCluster, site: Path, model: str, args: argparse.Namespace, wiring: str | None
) -> tuple[dict[str, Any] | None, str]:
    """One training run through the generated launch line on node1 (`--torch` or `--torchrun`: DDP): (its JSON
    record, error or "")."""
    program = [sys.executable, str(PROGRAM), "--model", model, "--num-iters", str(args.iters)]
    program += ["--num-warmup-batches", str(args.warmup), "--batch-size", str(args.batch_size)]
    program += ["--ddp", "env://"] if wiring else []
    argv = hpcbundle_argv(
        "launch", "--site", str(site), "--np", str(len(cluster.nodes)), "--hosts", hosts_of(cluster),
        *([f"--{wiring}"] if wiring else []), "--exec", "--no-doctor", "--", *program,
    )  # fmt: skip
    try:
        result = cluster.run("node1", argv, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, f"killed after {args.timeout} s"
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"metric": "img_per_sec"')]
    if result.returncode or not records:
        return None, f"exit {result.returncode}: {why_failed(result.stderr) or 'no img_per_sec line'}"
    return records[-1], ""


def why_failed(stderr: str) -> str:
    """The lines of a failed run's stderr that say why: the program's errors rather than the tail of
    mpirun's dashed banner, which only says that a rank stopped."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("-----")]
    said = [line for line in lines if re.search(r"Error|error:|what\(\)|Traceback|terminate|Abort", line)]
    return " | ".join((said or lines)[-4:])


def bench_cluster(n: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One cluster size: the sites (and tune), then `args.rounds` rounds of every variant per model."""
    with NetnsCluster(n, own_cores=True) as cluster:
        directory = work / f"n{n}"
        directory.mkdir()
        site = bench_site(directory, cluster, f"train-n{n}", {}, {}, args.timeout)
        sites: dict[str, tuple[Path, str | None]] = {"horovod": (site, None)}
        if args.tuned:
            print(f"\n== {n} nodes: hpcbundle tune ...", file=sys.stderr, flush=True)
            tuned = run_tune(cluster, site, directory / "tuned.yaml", timeout=args.tune_timeout)
            sites["horovod-tuned"] = (tuned, None)
        elif args.tuned_from:
            settings = args.tuned_settings[str(n)]
            print(f"\n== {n} nodes: tuned settings from {args.tuned_from}: {settings}", file=sys.stderr, flush=True)
            tuned = bench_site(directory, cluster, f"train-n{n}-tuned", {}, settings, args.timeout)
            sites["horovod-tuned"] = (tuned, None)
        sites["ddp"] = (site, "torch")
        sites["ddp-torchrun"] = (site, "torchrun")
        rates: dict[str, dict[str, list[float]]] = {m: {v: [] for v in sites} for m in args.models}
        ranks: dict[str, set[int]] = {v: set() for v in sites}
        errors: dict[str, str] = {}
        for round_ in range(1, args.rounds + 1):
            for model in args.models:
                for variant, (variant_site, wiring) in sites.items():
                    t0 = time.monotonic()
                    record, error = run_variant(cluster, variant_site, model, args, wiring)
                    took = time.monotonic() - t0
                    if error:
                        errors[f"{variant}/{model}/round {round_}"] = error
                        print(f"   {n} nodes {model} {variant}: FAILED {error}", file=sys.stderr, flush=True)
                        continue
                    rates[model][variant].append(record["per_rank"])
                    ranks[variant].add(record["ranks"])
                    print(
                        f"   {n} nodes, round {round_}, {model}, {variant}: {record['per_rank']:.1f} img/s per rank "
                        f"({took:.0f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    return {"nodes": n, "rates": rates, "ranks": {v: sorted(r) for v, r in ranks.items()}, "errors": errors}


def ratios(rates: dict[str, list[float]], top: str, bottom: str) -> dict[str, float] | None:
    """`top` / `bottom` round by round (the rounds interleave them), as median and min-max."""
    if not rates.get(top) or len(rates[top]) != len(rates.get(bottom, [])):
        return None
    return spread([a / b for a, b in zip(rates[top], rates[bottom], strict=True)])


def report(cluster: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The table of one cluster size, and its summary for the JSON line."""
    n, lines, summary = cluster["nodes"], [], {}
    for model, by_variant in cluster["rates"].items():
        lines += [f"\n{n} nodes, model {model}: img/s per rank over {len(by_variant['ddp'])} rounds"]
        lines += [f"  {'variant':<14} {'median':>9} {'min':>9} {'max':>9}"]
        figures = {v: spread(r) for v, r in by_variant.items() if r}
        for variant, f in figures.items():
            lines.append(f"  {variant:<14} {f['median']:9.1f} {f['min']:9.1f} {f['max']:9.1f}")
        found = {f"{v}/ddp": ratios(by_variant, v, "ddp") for v in by_variant if v != "ddp"}
        for label, r in found.items():
            if r is not None:
                wins = sum(a >= b for a, b in zip(by_variant[label.split("/")[0]], by_variant["ddp"], strict=True))
                lines.append(
                    f"  ratio {label:<18} {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]  "
                    f"(goal >= 1.0: {wins} of {len(by_variant['ddp'])} rounds)"
                )
        summary[model] = {"img_per_rank": figures, "ratios": found}
    return lines, summary


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so the cluster's context manager tears it down


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="bench/train.py", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="2,3", help="cluster sizes, comma-separated, each 2..8 (default 2,3)")
    p.add_argument("--models", default="cnn,resnet", help=f"models of the example: {','.join(MODELS)}")
    p.add_argument("--rounds", type=positive, default=5, help="rounds; each runs every variant once (default 5)")
    p.add_argument("--iters", type=positive, default=20, help="timed iterations (5 batches each) per run (default 20)")
    p.add_argument("--warmup", type=positive, default=5, help="untimed batches per run (default 5)")
    p.add_argument("--batch-size", type=positive, default=32, help="images per rank per step (default 32)")
    p.add_argument("--tuned", action="store_true", help="run hpcbundle tune first and Horovod with its site too")
    p.add_argument(
        "--tuned-from",
        type=Path,
        metavar="FILE",
        help="Horovod also with the settings in FILE (bench/allreduce.py --tuned --tuned-out FILE), no tune",
    )
    p.add_argument("--timeout", type=positive, default=600, help="seconds each run may take (default 600)")
    p.add_argument("--tune-timeout", type=positive, default=1800, help="seconds tune may take (default 1800)")
    args = p.parse_args(argv)
    try:
        args.nodes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        p.error(f"--nodes: {args.nodes!r} is not a list like 2,3")
    if not all(2 <= n <= 8 for n in args.nodes):
        p.error("--nodes: each cluster size must be 2..8")
    args.models = args.models.split(",")
    if not set(args.models) <= set(MODELS):
        p.error(f"--models: choose from {','.join(MODELS)}")
    if args.tuned and args.tuned_from:
        p.error("--tuned and --tuned-from: choose one (tune here, or take what an earlier tune chose)")
    if args.tuned_from:
        args.tuned_settings = read_tuned_settings(p, args.tuned_from, args.nodes)
    return args


def read_tuned_settings(p: argparse.ArgumentParser, path: Path, nodes: list[int]) -> dict[str, dict[str, str]]:
    """bench/allreduce.py's --tuned-out file: cluster size -> {KEY: VALUE}; every size asked for must be there."""
    fix = f"write it with bench/allreduce.py --tuned --tuned-out {path} --nodes {','.join(map(str, nodes))}"
    try:
        document = parse_json(read_text(path, "--tuned-from"), f"--tuned-from {path}")
    except UserError as e:
        p.error(f"{e}; {fix}")
    clusters = document.get("clusters") if isinstance(document, dict) else None
    if not isinstance(clusters, dict) or not all(isinstance(s, dict) for s in clusters.values()):
        p.error(f"--tuned-from {path}: not a tuned-settings file; {fix}")
    missing = [n for n in nodes if str(n) not in clusters]
    if missing:
        p.error(f"--tuned-from {path}: no settings for {missing[0]} nodes; {fix}")
    settings = {str(n): {str(k): str(v) for k, v in clusters[str(n)].items()} for n in nodes}
    if any(key.partition(".")[0] not in ("mca", "env") for s in settings.values() for key in s):
        p.error(f"--tuned-from {path}: only mca.NAME and env.NAME settings; {fix}")
    return settings


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    ensure_cluster_tools()
    reap_stale()
    clusters, summaries = [], {}
    with tempfile.TemporaryDirectory(prefix="hpcbundle-bench-train-") as tmp:
        for n in args.nodes:
            cluster = bench_cluster(n, args, Path(tmp))
            lines, summaries[n] = report(cluster)
            clusters.append(cluster)
            print("\n".join(lines), flush=True)
    failed = any(c["errors"] for c in clusters)
    for c in clusters:
        for what, error in c["errors"].items():
            print(f"FAILED {c['nodes']} nodes {what}: {error}", flush=True)
    print(
        json.dumps(
            {
                "metric": "train_bench",
                "date": time.strftime("%Y-%m-%d"),
                "rounds": args.rounds,
                "clusters": [
                    {"nodes": c["nodes"], "ranks": c["ranks"], "per_round": c["rates"], "summary": summaries[n]}
                    for n, c in zip(args.nodes, clusters, strict=True)
                ],
                "failed": failed,
            }
        ),
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
