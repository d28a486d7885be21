"""`hpcbundle launch --exec` on a real multi-node cluster made of network namespaces: the site's
interface choice carries the job, and a wrong one hangs until the time bound kills it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import NetnsCluster, parse_allreduce
from hpcbundle_testbed.procs import wait_until

from .helpers import ROOT, hpcbundle_argv

pytestmark = pytest.mark.cluster


def _netns_site(directory: Path, cluster: NetnsCluster, interface: str) -> Path:
    """A site for the namespace cluster: mpirun reaching nodes through its rsh agent, MPI on `interface`."""
    site = {
        "name": f"netns-{interface}",
        "description": "the namespace cluster of the test fixtures",
        "mpi": {"flavour": "openmpi", "version": "4.1.4"},
        "launcher": {"name": "mpirun", "allow_run_as_root": True, "bind_to": "none", "timeout": 120},
        "mca": {"plm_rsh_agent": str(cluster.rsh_agent), "plm_rsh_no_tree_spawn": "1"},
        "node": {"cores": 1},
        "network": {"fabric": "ethernet", "interfaces": [interface]},
    }
    path = directory / f"netns-{interface}.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


def _launch_on_node1(cluster: NetnsCluster, site: Path, program: Path, *flags: str):
    hosts = ",".join(f"{node}:1" for node in cluster.nodes)
    argv = hpcbundle_argv(
        "launch",
        "--site",
        str(site),
        "--np",
        str(len(cluster.nodes)),
        "--hosts",
        hosts,
        *flags,
        "--exec",
        "--",
        str(program),
        str(8 << 20),
    )
    return cluster.run("node1", argv, timeout=150)


def test_exec_runs_one_rank_per_namespace_node_over_the_sites_interface(netns_cluster, allreduce_program, tmp_path):
    result = _launch_on_node1(netns_cluster, _netns_site(tmp_path, netns_cluster, "data0"), allreduce_program)
    assert result.returncode == 0, result.stderr
    report = parse_allreduce(result.stdout)
    assert report["ranks"] == "3" and report["mismatches"] == "0" and report["hosts"] == "node1,node2,node3"
    assert "--mca btl_tcp_if_include data0 --mca oob_tcp_if_include data0" in result.stderr


def test_exec_over_the_decoy_interface_is_killed_at_the_bound_and_blames_the_interface(
    netns_cluster, allreduce_program, tmp_path
):
    result = _launch_on_node1(
        netns_cluster,
        _netns_site(tmp_path, netns_cluster, "mgmt0"),
        allreduce_program,
        "--timeout",
        "15",
        "--no-doctor",
    )
    assert result.returncode == 124, result.stdout + result.stderr
    assert "ranks=" not in result.stdout
    assert "killed after 15 s (--timeout)" in result.stderr and "wrong network interface" in result.stderr
    assert wait_until(lambda: all(not netns_cluster.pids(node) for node in netns_cluster.nodes), timeout=20), {
        node: netns_cluster.pids(node) for node in netns_cluster.nodes
    }


def test_gpu_numa_wrapper_binds_every_rank_on_every_namespace_node(netns_cluster, tmp_path):
    """3 ranks (2 on node1, 1 on node2) of a site declaring 2 GPUs per node on NUMA node 0, run by
    `launch --exec` through the rsh agent: each rank reports what the wrapper applied. Every node
    here has one NUMA node (node 0) and no GPU, so the report shows the binding and the untouched
    CUDA_VISIBLE_DEVICES (exported from the launching shell, as a batch step's would be), not a rank
    moved to another socket or a GPU selected. --no-doctor: the preflight rightly finds no GPU
    (declared-gpus FAILs) on nodes that have none."""
    site = _netns_site(tmp_path, netns_cluster, "data0")
    data = yaml.safe_load(site.read_text())
    data["node"] = {"cores": 2, "gpus": 2, "gpu_model": "V100", "gpu_numa": [0, 0], "host_bind": True}
    data["export"] = ["CUDA_VISIBLE_DEVICES", "PATH"]
    site.write_text(yaml.safe_dump(data))
    installed = tmp_path / "bin"  # hpcbundle-bind installed on the hosts, as `make install-bind` does
    installed.mkdir()
    (installed / "hpcbundle-bind").symlink_to(ROOT / "src" / "hpcbundle" / "data" / "hpcbundle-bind")
    report = (
        'r=$OMPI_COMM_WORLD_RANK; { echo "rank $r host $(hostname) local $OMPI_COMM_WORLD_LOCAL_RANK'
        ' CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status;'
        ' numactl --show; } > "$0/rank-$r"'
    )
    argv = hpcbundle_argv("launch", "--site", str(site), "--np", "3")
    argv += ["--hosts", "node1:2,node2:1", "--no-doctor", "--timeout", "45", "--exec", "--", "sh", "-c", report]
    env = {"CUDA_VISIBLE_DEVICES": "1,0", "PATH": f"{installed}:{os.environ['PATH']}"}
    result = netns_cluster.run("node1", [*argv, str(tmp_path)], timeout=60, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " hpcbundle-bind 0,0 sh -c " in result.stderr, result.stderr
    cpus = Path("/sys/devices/system/node/node0/cpulist").read_text().strip()
    expected = {0: ("node1", 0), 1: ("node1", 1), 2: ("node2", 0)}
    for rank, (host, local) in expected.items():
        text = (tmp_path / f"rank-{rank}").read_text()
        print(f"--- rank {rank}\n{text}", end="")
        assert f"rank {rank} host {host} local {local} CUDA_VISIBLE_DEVICES=1,0\n" in text
        assert f"Cpus_allowed_list:\t{cpus}\n" in text and "Mems_allowed_list:\t0\n" in text
        assert "policy: preferred\n" in text and "preferred node: 0\n" in text and "cpubind: 0 \n" in text
