"""The card's own flow with a real SIF: the cpu-local recipe's rendered .def built by Apptainer
(`cpu_local_sif`, tests/test_sif.py's image) and run by the lines hpcbundle generates, across nodes.

- `mpirun ... apptainer exec IMAGE python /examples/pytorch_train.py` (and `singularity exec`, the
  seed's spelling: the set-up installs Apptainer under both names) from `hpcbundle launch --exec` on
  the 3-node ssh cluster: the host's Open MPI 4.1.4 starts one container per rank through real ssh,
  the image's Open MPI 4.1.4 wires them (the hybrid model), doctor runs first as users get it;
- `hpcbundle sbatch` with `srun --mpi=pmix ... apptainer exec`, submitted to the real SLURM on two
  namespace nodes: the image's PMIx client reaches slurmstepd's PMIx server through the site's bind
  of SlurmdSpoolDir and PMIX_MCA_gds=hash (rule pmix-container);
- `hpcbundle sbatch --torch` and `--torchrun` with the cpu-ddp SIF (torch, no Horovod, no MPI) under the same
  SLURM: srun starts one `apptainer exec` per rank (or per node, running torchrun), the shim the image carries
  names each rank, and the ranks meet over Gloo at node1's data address;
- the seed's own line shape (`mpirun -np 4 -H n1:2,n2:2 ... -x LD_LIBRARY_PATH -x PATH
  -x HOROVOD_MPI_THREADS_DISABLE=1 -x NCCL_SOCKET_IFNAME=... -mca pml ob1 ... singularity exec --nv
  IMAGE python ...`) from site_configs/seed-v100.yaml, with the btl that exists here instead of
  openib: Apptainer's `--nv` on a host with no GPU warns and runs, so the GPU sites' argv, env and
  binds are accepted by the real tool (nothing more: no GPU runs);
- the user-namespace trap (rule userns-vader): two ranks on one node, each `apptainer exec --userns`
  its own user namespace, vader between them: a 48 MiB allreduce hangs until the launch bound kills
  it, and passes with the generated `btl_vader_single_copy_mechanism none`.

Every rank runs with `exec --userns`: the tests' root lacks CAP_SYS_RESOURCE, which plain `exec` asks
for, so the containers run as unprivileged Apptainer runs them on many clusters. The SIF stays at
its cached path, which every node sees (the nodes share this machine's file system: shared storage,
README step 3). Apptainer is on the launching shell's PATH only (the venv's bin/); the sites export
PATH so the remote ranks find it. Every run is bounded; namespaces and processes go at teardown.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import SshCluster
from hpcbundle_testbed.charliecloud import BIG_ALLREDUCE
from hpcbundle_testbed.netns_cluster import NetnsCluster
from hpcbundle_testbed.sif import SifBuild
from hpcbundle_testbed.sites import RANK_ENV, sif_site, site_data, write_site
from hpcbundle_testbed.slurm_cluster import SlurmCluster

from .helpers import ROOT, hpcbundle, hpcbundle_argv, launched_command, readme_workflow_lines

pytestmark = [pytest.mark.cluster, pytest.mark.apptainer]

README_PROGRAM = ["python", "/examples/pytorch_train.py"]
"""The README's in-container program, as its sbatch line shows it (the digits data ship in the image)."""
(README_TORCH_LAUNCH,) = readme_workflow_lines("hpcbundle launch --torch ")
README_TORCH_PROGRAM = README_TORCH_LAUNCH.split(" -- ", 1)[1].split()
"""The README's `launch --torch` program: the plain DDP example the image ships at /examples."""
FINAL_RE = re.compile(r"^final: accuracy=([\d.]+) loss=[\d.]+ images/sec=[\d.]+ ranks=(\d+)$", re.M)
EPOCH_RE = re.compile(r"^epoch (\d+)/\d+: loss=([\d.]+)", re.M)
BOUND_RE = re.compile(r"^hpcbundle: error: killed after (\d+) s \(launcher\.timeout of site ", re.M)
TESTS_IN_IMAGE = "/opt/hpcbundle-tests"
BIG_MIB, SMALL_MIB, HANG_BOUND = 48, 1, 30  # as tests/test_charliecloud.py measured for ch-run


@pytest.fixture(scope="module")
def cluster(cluster_tools: None) -> Iterator[SshCluster]:
    with SshCluster(3) as c:
        yield c


def shell(**extra: str) -> dict[str, str]:
    """The launching shell: the venv activated, so its bin/ (with `apptainer` and `singularity`) on PATH."""
    return {"PATH": f"{Path(sys.prefix) / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix, **extra}


def launch_on_node1(
    cluster: SshCluster,
    site: Path,
    image: Path,
    hosts: str,
    program: list[str],
    *flags: str,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`hpcbundle launch --exec` on node1, in the activated shell (plus `env`), one rank per slot of `hosts`."""
    np_ = sum(int(h.rpartition(":")[2]) for h in hosts.split(","))
    argv = hpcbundle_argv("launch", "--site", str(site))
    argv += ["--image", str(image), "--np", str(np_), "--hosts", hosts, *flags, "--exec", "--", *program]
    try:
        return cluster.run("node1", argv, timeout=timeout, env=shell(**(env or {})), cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launch outlived its own bound and the test's {timeout:.0f} s")


def assert_trained(out: str, ranks: int) -> None:
    """Every epoch reported, the loss fell, and the final line counts `ranks` ranks with a real accuracy."""
    epochs = EPOCH_RE.findall(out)
    final = FINAL_RE.findall(out)
    assert len(final) == 1 and int(final[0][1]) == ranks, out[-3000:]
    assert len(epochs) >= 2 and float(epochs[-1][1]) < float(epochs[0][1]), f"loss did not fall: {epochs}"
    assert float(final[0][0]) > 0.8, out[-3000:]


# ------------------------------------------------------------ mpirun ... apptainer exec, over ssh


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_generated_mpirun_line_trains_in_the_sif_on_three_nodes_over_ssh(
    cluster: SshCluster, cpu_local_sif: SifBuild, runtime: str, tmp_path: Path
) -> None:
    site = sif_site(tmp_path, cluster, f"sif-{runtime}", runtime=runtime, export=["PATH"])
    before = {n: cluster.iface_bytes(n, cluster.DATA_IFACE) for n in cluster.nodes}
    res = launch_on_node1(cluster, site, cpu_local_sif.path, "node1:1,node2:1,node3:1", README_PROGRAM)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    command = launched_command(res.stderr)
    assert command.startswith("mpirun --allow-run-as-root -np 3 -H node1:1,node2:1,node3:1 "), command
    assert command.endswith(f" {runtime} exec --userns {cpu_local_sif.path} {shlex.join(README_PROGRAM)}"), command
    warnings = [line for line in res.stderr.splitlines() if line.startswith(("WARN", "FAIL"))]
    assert warnings == sorted(set(warnings), key=warnings.index), "a check printed twice:\n" + res.stderr[-3000:]
    assert_trained(out, ranks=3)
    for node in cluster.nodes[1:]:  # the remote ranks ran on their nodes, over data0
        assert (cluster.iface_bytes(node, cluster.DATA_IFACE) - before[node]).rx > 0


def test_readme_torch_line_trains_the_ddp_example_in_the_sif_on_three_nodes_over_ssh(
    cluster: SshCluster, cpu_local_sif: SifBuild, tmp_path: Path
) -> None:
    """The README's `launch --torch --exec` program through the generated line: mpirun over ssh starts one
    `apptainer exec` per node, the shim inside sets each rank's variables, the ranks meet at node1's data0
    address and train the example's 5 epochs with gloo."""
    site = sif_site(tmp_path, cluster, "sif-torch", runtime="apptainer", export=["PATH"])
    res = launch_on_node1(cluster, site, cpu_local_sif.path, "node1:1,node2:1,node3:1", README_TORCH_PROGRAM, "--torch")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    command = launched_command(res.stderr)
    assert f"-x MASTER_ADDR={cluster.address('node1')} " in command, command
    assert command.endswith(f" hpcbundle-torchenv ompi {shlex.join(README_TORCH_PROGRAM)}"), command
    assert [int(e) for e, _ in EPOCH_RE.findall(out)] == [1, 2, 3, 4, 5] and "done: 5 epochs on 3 ranks" in out


# ------------------------------------------------- srun --mpi=pmix ... apptainer exec, under SLURM


def test_generated_sbatch_script_trains_with_pmix_inside_the_sif_on_two_slurm_nodes(
    netns_slurm: SlurmCluster, cpu_local_sif: SifBuild, tmp_path: Path
) -> None:
    spool = netns_slurm.workdir / "spool"
    data = site_data("slurm-sif", launcher="srun", interfaces=[NetnsCluster.DATA_IFACE], ranks_per_node=1)
    data["container"] = {"runtime": "apptainer", "args": ["--userns"], "binds": [str(spool)]}
    data["env"]["PMIX_MCA_gds"] = "hash"
    data["slurm"]["spool_dir"] = f"{spool}/%n"  # the test cluster's SlurmdSpoolDir
    data["why"] |= {
        "container.args": "the tests' root lacks CAP_SYS_RESOURCE: ranks run in a user namespace",
        "container.binds": "SlurmdSpoolDir: the PMIx server's directory, which the image's PMIx client must see",
    }
    site = write_site(tmp_path, data)
    script = tmp_path / "job.sh"
    made = hpcbundle(
        "sbatch",
        "--site",
        str(site),
        "--image",
        str(cpu_local_sif.path),
        "--nodes",
        "2",
        "-o",
        str(script),
        "--",
        *README_PROGRAM,
    )
    assert made.returncode == 0, made.stderr
    text = script.read_text()
    joined = re.sub(r" \\\n\s+", " ", text)  # the script's continuation lines as one command
    line = "srun --mpi=pmix -n 2 --kill-on-bad-exit=1 -c 2 --ntasks-per-node=1 --export=ALL "
    line += f"apptainer exec --bind {spool} --userns "
    assert f"{line}{cpu_local_sif.path} {shlex.join(README_PROGRAM)}" in joined, text
    checked = hpcbundle("check", "cpu-local", "--site", str(site))
    assert re.search(r"^PASS\s+pmix-container\s", checked.stdout, re.M), checked.stdout

    net = netns_slurm.inside
    before = net.iface_bytes("node2", net.DATA_IFACE)
    job = netns_slurm.sbatch_wait(text, timeout=600, env=shell())
    assert job.returncode == 0, f"job exit {job.returncode}\n{text}\n{job.output[-3000:]}\n{job.error[-3000:]}"
    assert_trained(job.output, ranks=2)
    assert (net.iface_bytes("node2", net.DATA_IFACE) - before).rx > 0, "node2's rank moved nothing over data0"


TORCH_RANK = re.compile(
    r"torch-rank RANK=(?P<rank>\d+) WORLD_SIZE=(?P<world>\d+) LOCAL_RANK=(?P<local>\d+) MASTER_ADDR=(?P<master>\S+) "
    r"sum=(?P<sum>\d+) run=(?P<run>\S+) host=(?P<host>\S+)"
)
"""The line each rank of tests/data/torch_allreduce.py prints."""


@pytest.mark.parametrize("wiring", ["torch", "torchrun"])
def test_a_torch_batch_script_reduces_in_the_cpu_ddp_sif_on_two_slurm_nodes(
    netns_slurm: SlurmCluster, cpu_ddp_sif: SifBuild, wiring: str, tmp_path: Path
) -> None:
    """`hpcbundle sbatch --torch` (srun starts one `apptainer exec` per worker, env://) or `--torchrun` (one per node,
    whose torchrun starts the workers, c10d), 2 nodes x 2 workers, with the cpu-ddp SIF's Python and torch,
    submitted as written: every RANK once, the all_reduce of rank+1 is 10 on each, LOCAL_RANK 0 and 1 on each
    node, the head is an address on data0 (node1's under --torch) and under --torchrun the rendezvous is the
    job's own (JOBID.0)."""
    net = netns_slurm.inside
    data = site_data(f"slurm-sif-{wiring}", launcher="srun", interfaces=[NetnsCluster.DATA_IFACE])
    data["container"] = {"runtime": "apptainer", "args": ["--userns"]}
    data["why"]["container.args"] = "the tests' root lacks CAP_SYS_RESOURCE: ranks run in a user namespace"
    site = write_site(tmp_path, data)
    program = tmp_path / "torch_allreduce.py"  # under /tmp, which Apptainer binds by default
    program.write_text((ROOT / "tests" / "data" / "torch_allreduce.py").read_text())
    image = str(cpu_ddp_sif.path)
    made = hpcbundle(
        "sbatch", "--site", str(site), "--image", image, "--nodes", "2", "--tasks-per-node", "2", f"--{wiring}",
        "--", "python3", str(program),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    shim = "hpcbundle-torchenv agent data0 " if wiring == "torchrun" else "hpcbundle-torchenv slurm python3 "
    joined = re.sub(r" \\\n\s+", " ", made.stdout)  # the script's continuation lines as one command
    assert f"apptainer exec --userns {image} {shim}" in joined, made.stdout
    started = time.monotonic()
    job = netns_slurm.sbatch_wait(made.stdout, timeout=300, env=shell())
    took = time.monotonic() - started
    ranks = [found.groupdict() for found in TORCH_RANK.finditer(job.output)]
    print(f"sbatch --{wiring} in the cpu-ddp SIF: exit {job.returncode} after {took:.0f} s; ranks {ranks}")
    assert job.returncode == 0, f"job exit {job.returncode}\n{job.output[-3000:]}\n{job.error[-3000:]}"
    assert sorted(int(r["rank"]) for r in ranks) == [0, 1, 2, 3], job.output[-3000:]
    assert {(r["world"], r["sum"]) for r in ranks} == {("4", "10")}, ranks
    per_node = sorted((r["host"], r["local"]) for r in ranks)  # both nodes took part, 2 workers each
    assert per_node == [(node, local) for node in ("node1", "node2") for local in "01"], ranks
    masters, runs = {r["master"] for r in ranks}, {r["run"] for r in ranks}
    if wiring == "torch":
        assert masters == {net.address("node1")} and runs == {"-"}, ranks
    else:
        assert len(masters) == 1 and masters <= {net.address(node) for node in net.nodes}, ranks
        assert len(runs) == 1 and re.fullmatch(r"[0-9]+\.0", runs.pop()), ranks


# ---------------------------------------------------------- the seed's line, singularity exec --nv


def seed_on_ssh_cluster(directory: Path, cluster: SshCluster) -> Path:
    """site_configs/seed-v100.yaml, changed only where this machine differs: no InfiniBand (btl tcp on
    data0, whose name NCCL_SOCKET_IFNAME then carries, instead of openib), the host's Open MPI 4.1.4,
    root, real ssh, ranks in a user namespace, 2 shared cores (the test ranks' environment)."""
    data = yaml.safe_load((ROOT / "site_configs" / "seed-v100.yaml").read_text())
    del data["env"]["NCCL_SOCKET_IFNAME"], data["network"]["link_gbps"]
    data["name"] = "seed-here"
    data["mpi"]["version"] = "4.1.4"
    data["launcher"] |= {"allow_run_as_root": True, "timeout": 300}
    data["mca"] |= {"btl": "self,tcp", "mpi_yield_when_idle": "1", "plm_rsh_agent": cluster.rsh_agent_value()}
    data["network"] = {"fabric": "ethernet", "interfaces": [NetnsCluster.DATA_IFACE]}
    data["container"]["args"] = ["--userns"]
    data["env"] |= RANK_ENV
    data["why"] = {k: v for k, v in data["why"].items() if not k.startswith(("env.NCCL", "mca.btl", "network"))}
    data["why"] |= {
        "mca.btl": "no InfiniBand here: TCP between all ranks, on data0 (network.interfaces)",
        "mca.plm_rsh_agent": "real ssh with the cluster's keys",
        "mca.mpi_yield_when_idle": "four ranks share 2 cores",
    }
    return write_site(directory, data)


def test_seed_line_shape_runs_with_singularity_exec_nv_on_a_host_without_gpus(
    cluster: SshCluster, cpu_local_sif: SifBuild, tmp_path: Path
) -> None:
    """Doctor would refuse this launch (the nodes have no GPU, as it should say), so --no-doctor."""
    site = seed_on_ssh_cluster(tmp_path, cluster)
    program = [*README_PROGRAM, "--epochs", "3"]
    # The seed's shell has a library path to forward (CUDA's, say); the image's own wins inside.
    shell_env = {"LD_LIBRARY_PATH": "/usr/local/lib"}
    res = launch_on_node1(cluster, site, cpu_local_sif.path, "node1:2,node2:2", program, "--no-doctor", env=shell_env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    command = launched_command(res.stderr)
    shape = (
        r"^mpirun --allow-run-as-root -np 4 -H node1:2,node2:2 "
        r"-x LD_LIBRARY_PATH -x PATH -x HOROVOD_MPI_THREADS_DISABLE=1 .*-mca btl self,tcp -mca pml ob1 "
        r".*-x NCCL_SOCKET_IFNAME=data0 singularity exec --nv --userns "
    )
    assert re.search(shape, command), command
    assert command.endswith(f" {cpu_local_sif.path} {shlex.join(program)}"), command
    assert_trained(out, ranks=4)


# ------------------------------------------------------------ the user-namespace vader trap


def test_large_shared_memory_allreduce_passes_with_the_generated_command_and_hangs_without(
    cluster: SshCluster, cpu_local_sif: SifBuild, tmp_path: Path
) -> None:
    """Two ranks on node1, one `apptainer exec --userns` (a user namespace) each, vader between them;
    the testbed's big_allreduce.py reaches the image through the site's bind."""
    binds = [f"{BIG_ALLREDUCE.parent}:{TESTS_IN_IMAGE}"]
    good = sif_site(tmp_path, cluster, "sif-shm", export=["PATH"], binds=binds, vader_none=True, timeout=120)
    bad = sif_site(tmp_path, cluster, "sif-cma", export=["PATH"], binds=binds, vader_none=False, timeout=HANG_BOUND)
    big = ["python", f"{TESTS_IN_IMAGE}/{BIG_ALLREDUCE.name}"]
    image = cpu_local_sif.path

    t0 = time.monotonic()
    res = launch_on_node1(cluster, good, image, "node1:2", [*big, str(BIG_MIB)], "--no-doctor", timeout=180)
    good_seconds = time.monotonic() - t0
    out = res.stdout + res.stderr
    command = launched_command(res.stderr)
    assert "--mca btl self,vader,tcp" in command and "--mca btl_vader_single_copy_mechanism none" in command
    assert res.returncode == 0, out[-4000:]
    assert re.search(rf"^big_allreduce: OK size=2 mib={BIG_MIB} ", out, re.M), out[-3000:]

    # Without the setting a small message still passes: the variant itself works ...
    res = launch_on_node1(cluster, bad, image, "node1:2", [*big, str(SMALL_MIB)], "--no-doctor", timeout=120)
    out = res.stdout + res.stderr
    assert "btl_vader_single_copy_mechanism" not in launched_command(res.stderr)
    assert res.returncode == 0, out[-4000:]
    assert re.search(rf"^big_allreduce: OK size=2 mib={SMALL_MIB} ", out, re.M), out[-3000:]

    # ... and the large one hangs until the launch bound kills it.
    t0 = time.monotonic()
    res = launch_on_node1(cluster, bad, image, "node1:2", [*big, str(BIG_MIB)], "--no-doctor", timeout=120)
    bad_seconds = time.monotonic() - t0
    out = res.stdout + res.stderr
    assert res.returncode == 124, f"expected the bound to kill the hung job, got exit {res.returncode}:\n{out[-4000:]}"
    bound = BOUND_RE.search(out)
    assert bound and int(bound.group(1)) == HANG_BOUND, out[-3000:]
    assert "big_allreduce: OK" not in out
    assert bad_seconds >= HANG_BOUND and good_seconds < HANG_BOUND, (good_seconds, bad_seconds)
