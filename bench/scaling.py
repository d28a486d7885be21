"""Strong- and weak-scaling study of the synthetic benchmark on a real SLURM in a namespace cluster.

    .venv/bin/python bench/scaling.py                          # 1-2 nodes, strong and weak, resnet
    .venv/bin/python bench/scaling.py --model resnet-wide --global-batch 64 --batch-per-rank 32
    .venv/bin/python bench/scaling.py --shared-cores           # every node sees both cores
    .venv/bin/python bench/scaling.py --max-nodes 3 --out study  # 3 nodes oversubscribe 2 cores

It builds a NetnsCluster of --max-nodes nodes with slurmctld/slurmd in it (hpcbundle_testbed), writes
a site for it (hpcbundle_testbed.sites: one rank per node, OMP_NUM_THREADS=1, TCP over data0), runs
`hpcbundle scaling plan --submit` on the controller node, waits for the jobs, runs
`hpcbundle scaling report`, and prints the table, the 2-node strong-scaling efficiency against the
0.85 target, where the 2-node step time goes, and one JSON line (metric strong_efficiency_2_nodes).
Where the time goes comes from a control run (skip it with --no-control): two independent 1-rank
jobs on half the global batch at once, one per node, which share the machine but never talk. So
    T1/(2*T2) = T1/(2*Thalf)  x  Thalf/Tpair  x  Tpair/T2
              = batch-size effect x sharing the host x communication and synchronisation.

Every namespace node shares this machine's cores. By default every process of a node (slurmd,
srun, the rank) runs on a core of the node's own (the fixture's own_cores), so that one more node
really is one more core, as on a cluster; `--shared-cores` lets every rank use every core, so the
1-node run already has the whole machine and adding nodes adds no compute. With more nodes than cores the
nodes oversubscribe the cores and the figures say nothing about scaling; the output says so.
Measured figures, not a timed test: other work on the machine moves them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpcbundle_testbed import NetnsCluster, SlurmCluster, ensure_cluster_tools, reap_stale
from hpcbundle_testbed.cli import hpcbundle_argv
from hpcbundle_testbed.sites import site_data, write_site

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.85
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def bench_site(directory: Path, launcher: str, env: dict[str, str]) -> Path:
    """The namespace cluster as a site, one rank per node."""
    data = site_data(
        "scaling-netns", launcher=launcher, interfaces=[NetnsCluster.DATA_IFACE], ranks_per_node=1, timeout=900
    )
    data["description"] = f"namespace cluster for bench/scaling.py ({launcher})"
    data["env"].update(env)
    for key in env:
        data["why"][f"env.{key}"] = "set with bench/scaling.py --env"
    return write_site(directory, data)


def wait_for_jobs(slurm: SlurmCluster, job_ids: list[str], timeout: float) -> float:
    """Poll squeue until none of `job_ids` is queued or running; return the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        res = slurm.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T"], timeout=30)
        left = [line for line in res.stdout.splitlines() if line.strip()]
        if res.returncode == 0 and not left:
            return time.monotonic() - started
        time.sleep(2)
    slurm.run(["scancel", *job_ids], timeout=30)
    raise SystemExit(f"jobs {', '.join(job_ids)} still queued or running after {timeout:.0f} s; cancelled")


def run_control(slurm: SlurmCluster, site: Path, study: Path, args: argparse.Namespace, timeout: float) -> float | None:
    """Two 1-node jobs of one rank on half the global batch, at the same time on node1 and node2, that
    never talk to each other: their step time is the 2-node compute with the machine shared, without
    communication. Returns the mean of their step times, or None when a job printed no figure."""
    from hpcbundle.perf.scaling.results import parse_output

    half = args.global_batch // 2
    script = study / "control.sh"
    made = slurm.run(
        hpcbundle_argv(
            "sbatch",
            "--site",
            str(site),
            "--nodes",
            "1",
            "-o",
            str(script),
            "--",
            str(VENV_PYTHON),
            str(ROOT / "examples" / "pytorch_synthetic_benchmark.py"),
            "--model",
            args.model,
            "--batch-size",
            str(half),
            "--image-size",
            str(args.image_size),
            "--num-warmup-batches",
            str(args.warmup),
            "--num-batches-per-iter",
            str(args.batches_per_iter),
            "--num-iters",
            str(args.iters),
        ),
        timeout=120,
    )
    if made.returncode:
        raise SystemExit(f"control script: {made.stderr}")
    ids = []
    for node in slurm.nodes[:2]:
        sub = slurm.run(
            [
                "sbatch",
                "--parsable",
                f"--nodelist={node}",
                "--job-name=control",
                f"--output={study}/control-{node}.out",
                str(script),
            ],
            timeout=60,
        )
        ids.append(sub.stdout.strip().split(";")[0])
    wait_for_jobs(slurm, ids, timeout)
    found = [parse_output((study / f"control-{node}.out").read_text()) for node in slurm.nodes[:2]]
    if any(m is None for m in found):
        return None
    return sum(half / m.img_per_sec for m in found) / len(found)


def decomposition(
    rows: list[dict[str, str]], global_batch: int, batch_per_rank: int, control: float | None
) -> list[str]:
    """Where the 2-node strong step time goes, when weak-n01 is one rank on half the global batch."""
    get = {(r["mode"], int(r["nodes"])): r for r in rows if r["step_seconds"]}
    s1, s2, w1 = get.get(("strong", 1)), get.get(("strong", 2)), get.get(("weak", 1))
    if not (s1 and s2 and w1) or batch_per_rank * 2 != global_batch:
        return ["(decomposition needs strong-n01, strong-n02 and weak-n01 with --batch-per-rank = --global-batch / 2)"]
    t1, t2, th = float(s1["step_seconds"]), float(s2["step_seconds"]), float(w1["step_seconds"])
    lines = [
        f"where the 2-node strong step goes: T1 = {t1 * 1e3:.1f} ms ({global_batch} images, 1 rank); "
        f"Thalf = {th * 1e3:.1f} ms ({batch_per_rank} images, 1 rank, alone)"
        + (f"; Tpair = {control * 1e3:.1f} ms (the same on 2 nodes at once, no communication)" if control else "")
        + f"; T2 = {t2 * 1e3:.1f} ms (2 ranks)",
        f"  half-batch compute efficiency T1/(2*Thalf) = {t1 / (2 * th):.3f} "
        "(a smaller batch per rank computes less efficiently)",
    ]
    if control:
        lines += [
            f"  sharing the machine Thalf/Tpair = {th / control:.3f} (two nodes computing at once on one host: caches, "
            f"memory bandwidth, the other work running here)",
            f"  communication and synchronisation Tpair/T2 = {control / t2:.3f} "
            f"(T2 - Tpair = {(t2 - control) * 1e3:.1f} ms per step: the allreduce over data0 and waiting for "
            "the slower rank)",
        ]
    else:
        lines.append(f"  everything else Thalf/T2 = {th / t2:.3f} (T2 - Thalf = {(t2 - th) * 1e3:.1f} ms per step)")
    lines.append(f"  product = strong efficiency {t1 / (2 * t2):.3f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-nodes", type=int, default=2, help="study 1..N nodes (default 2; 3 oversubscribes 2 cores)"
    )
    parser.add_argument("--launcher", choices=["srun", "mpirun"], default="srun")
    parser.add_argument(
        "--shared-cores", action="store_true", help="every node may use every core (default: one core each)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more variable for every rank (the site's env), e.g. HOROVOD_CYCLE_TIME=20",
    )
    parser.add_argument("--mode", choices=["strong", "weak", "both"], default="both")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of the whole study; each point's median counts (default 3)"
    )
    parser.add_argument("--model", default="resnet")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--global-batch", type=int, help="default: 64, or the next multiple of every rank count")
    parser.add_argument(
        "--batch-per-rank", type=int, help="default: half the global batch (the decomposition needs that)"
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches-per-iter", type=int, default=5)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument(
        "--no-control",
        dest="control",
        action="store_false",
        help="skip the control run (two independent 1-rank jobs at once, to separate contention from communication)",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds all jobs may take together")
    parser.add_argument("--out", type=Path, help="keep the study (scripts, outputs, scaling.csv, scaling.png) here")
    args = parser.parse_args()
    if args.max_nodes < 1:
        parser.error("--max-nodes must be at least 1")
    if any("=" not in kv for kv in args.env):
        parser.error("--env takes KEY=VALUE")
    if args.global_batch is None:
        every = math.lcm(*range(1, args.max_nodes + 1))
        args.global_batch = every * -(-64 // every)
    if args.batch_per_rank is None:
        args.batch_per_rank = max(1, args.global_batch // 2)

    cores = len(os.sched_getaffinity(0))
    print(
        f"# {cores} core(s) on this machine; "
        + ("every node may use all of them" if args.shared_cores else "each node runs on one"),
        flush=True,
    )
    if args.max_nodes > cores:
        print(
            f"# WARNING: {args.max_nodes} nodes on {cores} cores oversubscribe them: points above {cores} node(s) "
            f"share cores and say nothing about scaling",
            flush=True,
        )
    ensure_cluster_tools()
    reap_stale()
    work = Path(tempfile.mkdtemp(prefix="hpcbundle-scaling-"))
    study = work / "study"
    load_before = os.getloadavg()
    try:
        with (
            NetnsCluster(args.max_nodes, own_cores=not args.shared_cores) as net,
            SlurmCluster(net.nodes, inside=net) as slurm,
        ):
            site = bench_site(work, args.launcher, dict(kv.split("=", 1) for kv in args.env))
            plan = hpcbundle_argv(
                "scaling",
                "plan",
                "--site",
                str(site),
                "--nodes",
                f"1-{args.max_nodes}",
                "--mode",
                args.mode,
                "--global-batch",
                str(args.global_batch),
                "--batch-per-rank",
                str(args.batch_per_rank),
                "--model",
                args.model,
                "--image-size",
                str(args.image_size),
                "--warmup",
                str(args.warmup),
                "--batches-per-iter",
                str(args.batches_per_iter),
                "--iters",
                str(args.iters),
                "--python",
                str(VENV_PYTHON),
                "--repeat",
                str(args.repeat),
                "-o",
                str(study),
                "--submit",
            )
            print("+ " + " ".join(plan[1:]), flush=True)
            made = slurm.run(plan, timeout=180)
            sys.stderr.write(made.stderr)
            if made.returncode:
                print(made.stdout)
                return made.returncode
            jobs = dict(line.split() for line in made.stdout.splitlines() if line.strip())
            print(f"submitted {len(jobs)} job(s): {' '.join(f'{k}={v}' for k, v in jobs.items())}", flush=True)
            took = wait_for_jobs(slurm, list(jobs.values()), args.timeout)
            print(f"all jobs left the queue after {took:.0f} s", flush=True)
            control = None
            if args.control and args.max_nodes >= 2 and args.global_batch % 2 == 0:
                control = run_control(slurm, site, study, args, args.timeout)
        report = subprocess.run(
            hpcbundle_argv("scaling", "report", str(study)), capture_output=True, text=True, timeout=300, check=False
        )
        print(report.stdout, end="")
        sys.stderr.write(report.stderr)
        rows = list(csv.DictReader((study / "scaling.csv").open())) if (study / "scaling.csv").exists() else []
        for line in decomposition(rows, args.global_batch, args.batch_per_rank, control):
            print(line)
        strong2 = next((r for r in rows if r["mode"] == "strong" and r["nodes"] == "2" and r["efficiency"]), None)
        efficiency = float(strong2["efficiency"]) if strong2 else None
        verdict = (
            "no 2-node strong point"
            if efficiency is None
            else f"{efficiency:.3f} {'meets' if efficiency >= TARGET else 'misses'} the {TARGET} target"
        )
        print(f"2-node strong-scaling efficiency: {verdict}")
        print(
            f"# load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} "
            "(other work on the machine moves the figures)"
        )
        print(
            json.dumps(
                {
                    "metric": "strong_efficiency_2_nodes",
                    "value": efficiency,
                    "target": TARGET,
                    "points": {
                        f"{r['mode']}-{r['nodes']}": float(r["img_per_sec"]) if r["img_per_sec"] else None for r in rows
                    },
                    "efficiency": {
                        f"{r['mode']}-{r['nodes']}": float(r["efficiency"]) if r["efficiency"] else None for r in rows
                    },
                    "model": args.model,
                    "repeat": args.repeat,
                    "global_batch": args.global_batch,
                    "batch_per_rank": args.batch_per_rank,
                    "pair_step_seconds": control,
                    "launcher": args.launcher,
                    "shared_cores": args.shared_cores,
                    "env": args.env,
                    "cores": cores,
                    "max_nodes": args.max_nodes,
                }
            )
        )
        if args.out:
            shutil.copytree(study, args.out, dirs_exist_ok=True)
            print(f"# study kept in {args.out}", file=sys.stderr)
        return 0 if report.returncode == 0 else report.returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
