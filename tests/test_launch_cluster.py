"""`hpcbundle launch --exec` on a real multi-node cluster made of network namespaces: the site's
interface choice carries the job, and a wrong one hangs until the time bound kills it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import NetnsCluster, parse_allreduce
from hpcbundle_testbed.procs import wait_until

from .helpers import ROOT

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
    argv = [
        sys.executable,
        "-m",
        "hpcbundle",
        "--bundle",
        str(ROOT),
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
    ]
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
