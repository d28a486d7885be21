"""What doctor's program-environment check adds: `hpcbundle doctor` with and without `-- PROGRAM`.

    .venv/bin/python bench/doctor_program.py                 # 3 ssh nodes, 5 interleaved rounds
    .venv/bin/python bench/doctor_program.py --repeat 9 --warmup 2

Needs root: it builds the testbed's ssh cluster (hpcbundle_testbed.ssh_cluster: a real sshd on
every namespace node) and removes it at the end. From node1, in a shell with this venv activated,
both variants run doctor on node1..node3 over ssh for a site that exports PATH and VIRTUAL_ENV:

    base     hpcbundle doctor --site S --hosts node1,node2,node3 --no-checksum
    program  the same, -- python3 examples/pytorch_train.py: also the job's own mpirun line, one
             rank per node, running the probe (interpreter, horovod and torch versions, and a
             find_spec of every module the program imports: still one Python start per node)

A run counts when doctor exits 0 or 1 (no FAIL) and, for `program`, prints PASS for program-env
and program-imports.
Prints the medians, the added seconds and the ratio, and one JSON line (metric doctor_program_env).
Exit status 1 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hpcbundle_testbed.cli import hpcbundle_argv
from hpcbundle_testbed.sites import ssh_site
from hpcbundle_testbed.ssh_cluster import SshCluster
from hpcbundle_testbed.tools import ensure_cluster_tools

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("base", "program")
PROGRAM = ["python3", "examples/pytorch_train.py"]


def run_once(cluster: SshCluster, site: Path, variant: str) -> tuple[float, str]:
    """(wall seconds, error or '') of one doctor run from node1."""
    venv = Path(sys.prefix)
    argv = hpcbundle_argv("doctor", "--site", str(site))
    argv += ["--hosts", ",".join(cluster.nodes), "--no-checksum"]
    argv += ["--", *PROGRAM] if variant == "program" else []
    env = {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(venv)}
    start = time.monotonic()
    result = cluster.run("node1", argv, env=env, cwd=ROOT, timeout=120)
    wall = time.monotonic() - start
    if result.returncode not in (0, 1):
        return wall, f"exit {result.returncode}: {(result.stdout + result.stderr).strip()[-600:]}"
    passed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("PASS")}
    if variant == "program" and not {"program-env", "program-imports"} <= passed:
        return wall, f"no PASS for program-env and program-imports: {result.stdout.strip()[-600:]}"
    return wall, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=5, help="recorded rounds of every variant")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded rounds first")
    args = parser.parse_args(argv)
    if sys.prefix == sys.base_prefix:
        parser.error("run it with the project's venv python (.venv/bin/python)")
    ensure_cluster_tools()
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    errors: dict[str, list[str]] = {v: [] for v in VARIANTS}
    with SshCluster(3) as cluster, tempfile.TemporaryDirectory() as tmp:
        site = ssh_site(Path(tmp), cluster, "bench-ssh", export=["PATH", "VIRTUAL_ENV"])
        for round_ in range(args.warmup + args.repeat):
            order = VARIANTS[round_ % 2 :] + VARIANTS[: round_ % 2]
            for variant in order:
                wall, error = run_once(cluster, site, variant)
                if round_ < args.warmup:
                    continue
                if error:
                    errors[variant].append(error)
                else:
                    times[variant].append(wall)
    medians = {v: statistics.median(t) if t else None for v, t in times.items()}
    for v in VARIANTS:
        shown = f"{medians[v]:.3f}" if medians[v] is not None else "-"
        print(f"{v:<8} median {shown} s over {len(times[v])} run(s), {len(errors[v])} failed")
        for error in errors[v]:
            print(f"  failed: {error}")
    base, program = medians["base"], medians["program"]
    added = program - base if base is not None and program is not None else None
    if added is not None:
        print(f"added by the program-env check: {added:+.3f} s ({program / base:.2f}x of doctor without it)")
    print(
        json.dumps(
            {
                "metric": "doctor_program_env",
                "nodes": 3,
                "repeat": args.repeat,
                "median_s": medians,
                "added_s": added,
                "ratio": program / base if added is not None else None,
                "errors": errors,
            }
        )
    )
    return 1 if any(errors.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
