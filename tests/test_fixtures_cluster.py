"""The cluster fixtures, proven for real: MPI across namespaces, SLURM locally and in namespaces."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpcbundle_testbed import IfaceBytes, NetnsCluster, SlurmCluster, parse_allreduce
from hpcbundle_testbed.procs import pid_alive, wait_until

pytestmark = pytest.mark.cluster

PAYLOAD = 32 << 20  # bytes allreduced per rank
DECOY_NOISE = 1024  # bytes a silent interface may still count (a stray frame at link-up)


def mpirun_argv(cluster: NetnsCluster, program: Path, btl_iface: str) -> list[str]:
    """mpirun on every node of `cluster`, one rank each, ranks talking over `btl_iface`."""
    return [
        "mpirun",
        "--allow-run-as-root",
        *cluster.mpirun_agent_args(),
        "--host",
        ",".join(cluster.nodes),
        "-np",
        str(len(cluster.nodes)),
        "--bind-to",
        "none",  # every "node" sees the same 2 cores: binding would stack ranks
        "--mca",
        "btl_tcp_if_include",
        btl_iface,
        "--mca",
        "oob_tcp_if_include",
        "data0",
        str(program),
        str(PAYLOAD),
    ]


def counters(cluster: NetnsCluster) -> dict[tuple[str, str], IfaceBytes]:
    return {(node, iface): cluster.iface_bytes(node, iface) for node in cluster.nodes for iface in ("data0", "mgmt0")}


def srun_job(program: Path, ompi_env: str) -> str:
    """A batch script running the allreduce with srun/PMIx, one rank on each of 2 nodes."""
    return (
        f"#!/bin/sh\n#SBATCH --nodes=2 --ntasks-per-node=1\nset -eu\nexport {ompi_env}\n"
        f"srun --mpi=pmix -n 2 {program} {PAYLOAD}\n"
    )


def test_allreduce_crosses_data0_and_never_the_decoy(netns_cluster: NetnsCluster, allreduce_program: Path) -> None:
    before = counters(netns_cluster)
    res = netns_cluster.run("node1", mpirun_argv(netns_cluster, allreduce_program, "data0"), timeout=60)
    assert res.returncode == 0, res.stderr
    report = parse_allreduce(res.stdout)
    assert report["ranks"] == "3" and report["bytes"] == str(PAYLOAD)
    assert report["mismatches"] == "0" and report["sum0"] == report["expected0"] == "6"
    assert report["hosts"] == "node1,node2,node3"

    moved = {key: after - before[key] for key, after in counters(netns_cluster).items()}
    for (node, iface), d in moved.items():
        print(f"{node} {iface}: rx {d.rx:>10} B  tx {d.tx:>10} B")
    for node in netns_cluster.nodes:
        data, decoy = moved[node, "data0"], moved[node, "mgmt0"]
        assert data.rx + data.tx >= PAYLOAD, f"{node}/data0 moved only {data}"
        assert decoy.rx + decoy.tx < DECOY_NOISE, f"{node}/mgmt0 carried {decoy}"


def test_mpirun_over_the_decoy_hangs_and_is_killed_without_leftovers(
    netns_cluster: NetnsCluster, allreduce_program: Path
) -> None:
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        netns_cluster.run("node1", mpirun_argv(netns_cluster, allreduce_program, "mgmt0"), timeout=20)
    assert "ranks=" not in (timed_out.value.stdout or ""), "the run finished over mgmt0"
    assert netns_cluster.tracker.pids() == []
    assert {node: netns_cluster.pids(node) for node in netns_cluster.nodes} == {
        node: [] for node in netns_cluster.nodes
    }


def test_sbatch_srun_pmix_allreduce_sums_right_on_two_fake_local_nodes(
    slurm_local: SlurmCluster, allreduce_program: Path
) -> None:
    # Fake nodes share one host: Open MPI's shared-memory btl crashes at exit there.
    job = slurm_local.sbatch_wait(srun_job(allreduce_program, "OMPI_MCA_btl=self,tcp"), timeout=60)
    assert job.returncode == 0, job
    report = parse_allreduce(job.output)
    assert (report["ranks"], report["mismatches"], report["sum0"]) == ("2", "0", "3")


def test_sbatch_srun_pmix_allreduce_crosses_data0_between_two_namespace_nodes(
    netns_slurm: SlurmCluster, allreduce_program: Path
) -> None:
    cluster = netns_slurm.inside
    assert cluster is not None
    before = cluster.iface_bytes("node2", "data0")
    job = netns_slurm.sbatch_wait(srun_job(allreduce_program, "OMPI_MCA_btl_tcp_if_include=data0"), timeout=60)
    assert job.returncode == 0, job
    report = parse_allreduce(job.output)
    assert (report["ranks"], report["mismatches"], report["sum0"]) == ("2", "0", "3")
    assert report["hosts"] == "node1,node2"
    moved = cluster.iface_bytes("node2", "data0") - before
    print(f"node2 data0 during the job: {moved}")
    assert moved.rx >= PAYLOAD and moved.tx >= PAYLOAD


class SimulatedTestFailure(AssertionError):
    """A failing assertion in a test body, distinct from the real assertions around it."""


@pytest.mark.parametrize("failure", [SimulatedTestFailure, KeyboardInterrupt])
def test_teardown_leaves_no_namespace_daemon_or_job_after_a_failing_test(
    cluster_tools: None, failure: type[BaseException]
) -> None:
    with pytest.raises(failure):
        with NetnsCluster(2) as net, SlurmCluster(net.nodes, inside=net) as slurm:
            namespaces = [net.netns(name) for name in ("switch", *net.nodes)]
            leftovers = [slurm.tracker.path, net.tracker.path, slurm.workdir, net.workdir]
            submitted = slurm.run(["sbatch", "--parsable", "--nodes=2", "--wrap", "srun -n 2 sleep 300"], timeout=10)
            assert submitted.returncode == 0, submitted.stderr
            assert wait_until(lambda: _runs_sleep(net.pids("node2")), timeout=20), "the job step never started on node2"
            pids = slurm.tracker.pids() + net.pids("node1") + net.pids("node2")
            raise failure("the test body fails while daemons and a job are running")

    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True).stdout
    assert [ns for ns in namespaces if ns in listed] == []
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert [path for path in leftovers if path.exists()] == []


def _runs_sleep(pids: list[int]) -> bool:
    """True if one of `pids` is a `sleep` (the job step's task)."""
    for pid in pids:
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if Path(argv0.decode()).name == "sleep":
            return True
    return False


def test_own_cores_gives_each_node_a_core_of_its_own_and_remote_ranks_keep_it(cluster_tools, allreduce_program):
    """A rank started on node2 by mpirun (through the rsh agent) runs on node2's core only."""
    with NetnsCluster(2, own_cores=True) as cluster:
        assert cluster.cores["node1"] != cluster.cores["node2"] or len(set(cluster.cores.values())) == 1
        argv = [
            "mpirun",
            "--allow-run-as-root",
            *cluster.mpirun_agent_args(),
            "--host",
            "node1,node2",
            "-np",
            "2",
            "--bind-to",
            "none",
            "--mca",
            "btl_tcp_if_include",
            "data0",
            "--mca",
            "oob_tcp_if_include",
            "data0",
            "sh",
            "-c",
            'echo "$(hostname) $(taskset -pc $$ | sed "s/.*: //")"',
        ]
        res = cluster.run("node1", argv, timeout=60)
        assert res.returncode == 0, res.stderr
        seen = dict(line.split() for line in res.stdout.splitlines())
        assert seen == {node: str(core) for node, core in cluster.cores.items()}


def test_image_tests_refuse_in_one_line_when_the_disk_cannot_hold_them(tmp_path: Path, monkeypatch) -> None:
    from hpcbundle_testbed import cache

    monkeypatch.setattr(cache, "SCRATCH_GB", 10**6)
    problem = cache.disk_space_problem(tmp_path / "cache", tmp_path)
    need = 10**6 + cache.FILLED_CACHE_GB  # a cold cache and the scratch space, on one file system
    assert problem.startswith("only ") and f"need about {need} GB there (a cold cache fills to" in problem, problem
    (tmp_path / "cache" / "docker").mkdir()  # warm: only the scratch space
    assert f"need about {10**6} GB there (a run takes" in cache.disk_space_problem(tmp_path / "cache", tmp_path)
