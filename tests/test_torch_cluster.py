"""`launch --torch` across the namespace cluster's three nodes over ssh: a plain torch.distributed program
(env://, gloo on the CPU) gets its ranks from the launcher, meets rank 0 at node 1's address on the data
interface (the node names resolve to the management network), and its traffic stays off that network.
`--torchrun` likewise, also where the node names resolve to the wrong network and a stock torchrun line fails."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from hpcbundle_testbed import NetnsCluster
from hpcbundle_testbed.sites import netns_site, site_data, write_site

from .helpers import ROOT, VENV_PYTHON, hpcbundle_argv, leftovers, no_leftovers

pytestmark = pytest.mark.cluster

PROGRAM = [str(VENV_PYTHON), str(ROOT / "tests" / "data" / "torch_allreduce.py")]
LINE = re.compile(r"torch-rank RANK=(\d+) WORLD_SIZE=(\d+) LOCAL_RANK=(\d+) MASTER_ADDR=([0-9.]+) sum=(\d+)")
"""One rank's line (found anywhere: the launcher may interleave the ranks' output)."""


def torch_launch(site: Path, hosts: str, np_: int, wiring: str = "torch", execute: bool = True) -> list[str]:
    """`hpcbundle launch` of PROGRAM with the `wiring`, run (--exec) or printed."""
    run = ["--exec"] if execute else []
    return hpcbundle_argv(
        "launch", "--site", str(site), "--np", str(np_), "--hosts", hosts, f"--{wiring}", *run, "--", *PROGRAM
    )


def test_torch_ranks_meet_at_node1s_data_address_and_reduce_over_data0(
    horovod: None, netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    cluster = netns_cluster
    site = netns_site(tmp_path, cluster, cluster.DATA_IFACE)
    ifaces = (cluster.DATA_IFACE, cluster.MGMT_IFACE)
    before = {(n, i): cluster.iface_bytes(n, i) for n in cluster.nodes for i in ifaces}
    hosts = ",".join(f"{node}:1" for node in cluster.nodes)
    res = cluster.run("node1", torch_launch(site, hosts, 3), timeout=180, env={"RANK": "7", "WORLD_SIZE": "9"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ranks = LINE.findall(res.stdout)
    assert sorted(int(rank) for rank, *_ in ranks) == [0, 1, 2], res.stdout[-2000:]  # the stale RANK=7 lost
    assert {(world, local, master, total) for _, world, local, master, total in ranks} == {
        ("3", "0", cluster.address("node1"), "6")
    }
    moved = {key: cluster.iface_bytes(*key) - bytes_before for key, bytes_before in before.items()}
    print("bytes received:", {f"{node} {iface}": m.rx for (node, iface), m in moved.items()})
    assert all(moved[(n, cluster.MGMT_IFACE)].rx < 64 << 10 for n in cluster.nodes), moved  # none over mgmt0
    assert all(moved[(n, cluster.DATA_IFACE)].rx > moved[(n, cluster.MGMT_IFACE)].rx for n in cluster.nodes), moved
    assert no_leftovers(cluster, timeout=10)


def test_two_torch_ranks_per_host_get_local_ranks_0_and_1(
    horovod: None, netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    cluster = netns_cluster
    site = netns_site(tmp_path, cluster, cluster.DATA_IFACE)
    res = cluster.run("node1", torch_launch(site, "node1:2,node2:2", 4), timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ranks = {int(rank): int(local) for rank, _, local, _, total in LINE.findall(res.stdout) if total == "10"}
    assert ranks == {0: 0, 1: 1, 2: 0, 3: 1}, res.stdout[-2000:]


RUN = re.compile(r"torch-rank .* sum=(\d+) run=(\S+)")


def test_torchrun_agents_on_three_nodes_meet_at_an_address_and_their_workers_reduce(
    horovod: None, netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """`--torchrun`: mpirun starts one agent per node, each starting 2 workers; the agents' c10d store is on the
    node whose data address is MASTER_ADDR (no host name is matched), the workers reduce over the data network."""
    cluster = netns_cluster
    site = netns_site(tmp_path, cluster, cluster.DATA_IFACE)
    hosts = ",".join(f"{node}:2" for node in cluster.nodes)
    res = cluster.run("node1", torch_launch(site, hosts, 6, "torchrun"), timeout=240, env={"RANK": "7"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ranks = LINE.findall(res.stdout)
    print("torchrun ranks:", sorted((int(r), int(local), master) for r, _, local, master, _ in ranks))
    assert sorted(int(rank) for rank, *_ in ranks) == list(range(6)), res.stdout[-2000:]
    data_addresses = {cluster.address(node) for node in cluster.nodes}
    assert {(world, total) for _, world, _, _, total in ranks} == {("6", "21")}
    assert len({master for *_, master, _ in ranks}) == 1 and {master for *_, master, _ in ranks} <= data_addresses
    assert sorted(int(local) for _, _, local, _, _ in ranks) == [0, 0, 0, 1, 1, 1]
    (run,) = {run for _, run in RUN.findall(res.stdout)}  # one rendezvous, this run's own
    assert re.fullmatch(r"hpcbundle-[0-9a-f]{12}", run), run
    assert no_leftovers(cluster, timeout=10)


def test_a_printed_torchrun_line_heads_by_name_and_trains_where_the_names_resolve_to_the_data_network(
    horovod: None, netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """A `launch --torchrun` line printed to run elsewhere names the head (node1; rule torch-head-by-name warns):
    the agents leave it to torch to match that name to their node's, so node1's agent hosts the store (with
    is_host=0 on every node none would), and the workers meet at node1's data address (its --local-addr)."""
    cluster = netns_cluster
    site = netns_site(tmp_path, cluster, cluster.DATA_IFACE)
    hosts = ",".join(f"{node}:1" for node in cluster.nodes)
    made = subprocess.run(torch_launch(site, hosts, 3, "torchrun", execute=False), capture_output=True, text=True)
    assert made.returncode == 0 and "-x MASTER_ADDR=node1 " in made.stdout, made.stdout + made.stderr
    assert "torch-head-by-name" in made.stderr, made.stderr
    res = cluster.run("node1", ["bash", "-c", made.stdout], timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ranks = LINE.findall(res.stdout)
    assert sorted(int(rank) for rank, *_ in ranks) == [0, 1, 2], res.stdout[-2000:]
    assert {(world, master, total) for _, world, _, master, total in ranks} == {("3", cluster.address("node1"), "6")}


STOCK_JOIN, STOCK_READ = 10, 5  # seconds: the stock agents' rendezvous bounds (torch's defaults: 600 and 60)


def wrong_network_hosts(cluster: NetnsCluster, node: str) -> str:
    """`node`'s /etc/hosts as on many clusters: its own name on Debian's 127.0.1.1, the other nodes' names on the
    management network (mgmt0, which carries nothing here: a firewalled or unrouted network)."""
    others = [f"{cluster.address(other, cluster.MGMT_IFACE)} {other}" for other in cluster.nodes if other != node]
    return "\n".join(["127.0.0.1 localhost", f"127.0.1.1 {node}", *others]) + "\n"


def test_where_node_names_resolve_to_the_wrong_network_a_stock_torchrun_line_fails_and_hpcbundles_trains(
    horovod: None, netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """Every node lists its own name on 127.0.1.1 and the others' on the management network. The stock line a
    user starts on every node (`-m torch.distributed.run --rdzv-endpoint node1:PORT`, same Python, short
    rendezvous bounds) fails on all three within the bounds, nothing summed: node1 hosts the store by its name,
    the others seek node1 on mgmt0. hpcbundle's `--torchrun` line, with the same join bound, trains: the agents
    meet at node1's data address (--local-addr, is_host) and gloo keeps to data0 (GLOO_SOCKET_IFNAME), not to
    the 127.0.1.1 its host name gives."""
    cluster = netns_cluster
    data = site_data("netns-torchrun", cluster=cluster, interfaces=[cluster.DATA_IFACE])
    data["torch"] = {"join_timeout": STOCK_JOIN}
    data["why"]["torch.join_timeout"] = "the stock line's bound: hpcbundle's agents meet within it"
    site = write_site(tmp_path, data)
    stock = [
        *PROGRAM[:1],
        "-m",
        "torch.distributed.run",
        *("--nnodes", "3", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node1:29400"),
        *("--rdzv-id", "stock", "--rdzv-conf", f"join_timeout={STOCK_JOIN},read_timeout={STOCK_READ}"),
        *PROGRAM[1:],
    ]
    with cluster.node_hosts({node: wrong_network_hosts(cluster, node) for node in cluster.nodes}):
        started = time.monotonic()
        agents = {node: cluster.start(node, stock, log=tmp_path / f"stock-{node}.log") for node in cluster.nodes}
        ended = {node: (agent.wait(60), round(time.monotonic() - started, 1)) for node, agent in agents.items()}
        logs = {node: (tmp_path / f"stock-{node}.log").read_text() for node in cluster.nodes}
        print("stock torchrun (exit status, seconds):", ended)
        assert all(status != 0 for status, _ in ended.values()) and not any("sum=" in log for log in logs.values())
        assert "RendezvousTimeoutError" in logs["node1"], logs["node1"][-2000:]  # it hosts, by its name
        for node in ("node2", "node3"):  # node1 looked up on mgmt0
            assert "failed to connect to any network address of (node1, 29400)" in logs[node], logs[node][-2000:]
        assert no_leftovers(cluster, timeout=10), leftovers(cluster)

        hosts = ",".join(f"{node}:1" for node in cluster.nodes)
        res = cluster.run("node1", torch_launch(site, hosts, 3, "torchrun"), timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ranks = LINE.findall(res.stdout)
    print("hpcbundle --torchrun ranks:", sorted((int(r), master, total) for r, _, _, master, total in ranks))
    assert sorted(int(rank) for rank, *_ in ranks) == [0, 1, 2], res.stdout[-2000:]
    assert {(world, master, total) for _, world, _, master, total in ranks} == {("3", cluster.address("node1"), "6")}
    assert no_leftovers(cluster, timeout=10), leftovers(cluster)
