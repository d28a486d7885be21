"""A torch job's head checked before anything starts, on the namespace cluster's three nodes: `launch --exec
--torch` with the head's port held on node1, or the head unreachable from node3 on the data interface, exits 2
within seconds naming the node, the interface and the port, and no rank is started; `doctor --torch` on the
good cluster passes the three rules over the head (rules/torch.py: torch-head-address, -port-free, -reach)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from hpcbundle_testbed import NetnsCluster
from hpcbundle_testbed.procs import wait_until
from hpcbundle_testbed.sites import netns_site

from .helpers import VENV_PYTHON, hpcbundle_argv, no_leftovers

pytestmark = pytest.mark.cluster

PORT = 29500
"""torch.port of the test site (its default)."""
HOSTS = "node1:1,node2:1,node3:1"
SECONDS = 10
"""The most a refusal may take: torch's own store client was still waiting after 150 s (measured)."""
RANK = "import os, sys; open(os.path.join(sys.argv[1], f'started-{os.getpid()}'), 'w').close()"
"""The program: it leaves a file behind where a rank ever started."""


@pytest.fixture
def site(netns_cluster: NetnsCluster, tmp_path: Path) -> Path:
    """The namespace cluster as a site, ranks on data0, torch.port 29500 (the default)."""
    return netns_site(tmp_path, netns_cluster, netns_cluster.DATA_IFACE)


def refused(cluster: NetnsCluster, site: Path, fault: AbstractContextManager[None], rule: str, tmp: Path) -> str:
    """`launch --torch --exec` of RANK on the three nodes, run on node1 under `fault`: it exits 2 within SECONDS,
    no rank ever started and nothing is left on any node; the one FAIL line of `rule`."""
    started = tmp / "started"
    started.mkdir()
    argv = hpcbundle_argv(
        "launch", "--site", str(site), "--np", "3", "--hosts", HOSTS, "--torch", "--exec",
        "--", str(VENV_PYTHON), "-c", RANK, str(started),
    )  # fmt: skip
    with fault:
        began = time.monotonic()
        res = cluster.run("node1", argv, timeout=60)
        took = time.monotonic() - began
    print(f"{rule}: refused in {took:.1f} s")
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
    assert took <= SECONDS, f"refused after {took:.1f} s"
    assert not list(started.iterdir())  # no rank ever ran
    assert no_leftovers(cluster, timeout=10)
    return fail_line(res.stderr, rule)


STORE = """
import os, socket, time
rank, world, port = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["MASTER_PORT"])
if rank == 0:  # torch's store: every address, SO_REUSEADDR
    store = socket.socket()
    store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    store.bind(("", port))
    store.listen(world)
    for _ in range(world - 1):
        store.accept()[0].close()
else:
    for _ in range(300):
        try:
            socket.create_connection((os.environ["MASTER_ADDR"], port), 1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        raise SystemExit(f"rank {rank}: no store")
print(f"store-rank {rank} met", flush=True)
"""
"""A stand-in for torch's store (no torch needed): rank 0 listens on MASTER_PORT as the store does, the others
connect to MASTER_ADDR:MASTER_PORT."""


def fail_line(stderr: str, rule: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith(f"FAIL  {rule} ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


@contextmanager
def port_held(cluster: NetnsCluster, node: str, address: str, log: Path) -> Iterator[None]:
    """A process listening on ADDRESS:PORT inside `node`'s namespace (another job's store), stopped by its PID after."""
    hold = (
        f"import socket, time; s = socket.socket(); s.bind(({address!r}, {PORT})); s.listen(1); "
        "print('held', flush=True); time.sleep(300)"
    )
    holder = cluster.start(node, [str(VENV_PYTHON), "-c", hold], log=log)
    try:
        assert wait_until(lambda: "held" in log.read_text(), timeout=20, interval=0.1), log.read_text()
        yield
    finally:
        holder.kill()
        holder.wait(10)


@contextmanager
def dropped(cluster: NetnsCluster, node: str, address: str) -> Iterator[None]:
    """`node`'s packets to ADDRESS:PORT dropped by a firewall rule in its namespace, deleted after."""
    rule = ["OUTPUT", "-p", "tcp", "-d", address, "--dport", str(PORT), "-j", "DROP"]
    iptables = ["nsenter", f"--net=/run/netns/{cluster.netns(node)}", "iptables"]
    run([*iptables, "-A", *rule])
    try:
        yield
    finally:
        run([*iptables, "-D", *rule])


@contextmanager
def link_down(cluster: NetnsCluster, node: str) -> Iterator[None]:
    """`node`'s data interface down, brought up after."""
    link = ["ip", "-n", cluster.netns(node), "link", "set", cluster.DATA_IFACE]
    run([*link, "down"])
    try:
        yield
    finally:
        run([*link, "up"])


@contextmanager
def unaddressed(cluster: NetnsCluster, node: str) -> Iterator[None]:
    """`node`'s data interface without its IPv4 address, given back after."""
    iface, address = cluster.DATA_IFACE, f"{cluster.address(node)}/24"
    run(["ip", "-n", cluster.netns(node), "addr", "del", address, "dev", iface])
    try:
        yield
    finally:
        run(["ip", "-n", cluster.netns(node), "addr", "add", address, "dev", iface])


def run(argv: list[str]) -> None:
    """Run a set-up command here (ip, iptables), failing the test with its message."""
    subprocess.run(argv, check=True, capture_output=True, timeout=20)


def test_a_head_without_an_address_on_the_data_interface_refuses_the_launch_naming_node_interface_and_key(
    netns_cluster: NetnsCluster, site: Path, tmp_path: Path
) -> None:
    cluster = netns_cluster
    line = refused(cluster, site, unaddressed(cluster, "node1"), "torch-head-address", tmp_path)
    assert f"node1 has no IPv4 address on {cluster.DATA_IFACE} (network.interfaces[0] of {site})" in line


def test_a_port_held_on_the_head_refuses_the_launch_in_seconds_naming_node_interface_and_port(
    netns_cluster: NetnsCluster, site: Path, tmp_path: Path
) -> None:
    cluster = netns_cluster
    head = cluster.address("node1")
    line = refused(
        cluster, site, port_held(cluster, "node1", head, tmp_path / "holder.log"), "torch-port-free", tmp_path
    )
    assert f"port {PORT} is in use on node1 (address already in use)" in line
    assert f"{head}:{PORT} ({cluster.DATA_IFACE})" in line and f"set torch.port in {site}" in line


@pytest.mark.parametrize(
    "fault, cause", [("dropped", "timed out (no answer within 3 s)"), ("link_down", "network is unreachable")]
)
def test_a_head_unreachable_from_node3_refuses_the_launch_in_seconds_naming_node_interface_and_address(
    netns_cluster: NetnsCluster, site: Path, tmp_path: Path, fault: str, cause: str
) -> None:
    cluster = netns_cluster
    head = cluster.address("node1")
    cut = dropped(cluster, "node3", head) if fault == "dropped" else link_down(cluster, "node3")
    line = refused(cluster, site, cut, "torch-head-reach", tmp_path)
    assert f"node3 cannot reach node1 {head}:{PORT} ({cluster.DATA_IFACE}): {cause}" in line
    assert "torch's store client would wait until its timeout rather than fail" in line


def test_doctor_torch_on_the_good_cluster_passes_the_three_head_rules(netns_cluster: NetnsCluster, site: Path) -> None:
    cluster = netns_cluster
    argv = hpcbundle_argv("doctor", "--site", str(site), "--torch", "--no-checksum", "--hosts", HOSTS)
    began = time.monotonic()
    res = cluster.run("node1", argv, timeout=60)
    print(f"doctor took {time.monotonic() - began:.1f} s")
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    passed = {m.group(1): m.group(2) for m in re.finditer(r"^PASS  (torch-[a-z-]+) +(.*)$", res.stdout, re.M)}
    head = f"{cluster.address('node1')}:{PORT}"
    assert passed["torch-head-address"] == f"node1 has {cluster.address('node1')} on {cluster.DATA_IFACE}"
    assert passed["torch-port-free"] == f"port {PORT} is free on node1: doctor listened on it"
    assert passed["torch-head-reach"] == f"node1, node2, node3 reached node1 {head} ({cluster.DATA_IFACE})"
    assert no_leftovers(cluster, timeout=10)


def test_after_the_checks_pass_rank_0_listens_on_the_port_and_every_rank_meets_it(
    netns_cluster: NetnsCluster, site: Path
) -> None:
    """doctor's listener on the head is gone before the ranks start: rank 0 gets the port."""
    argv = hpcbundle_argv(
        "launch", "--site", str(site), "--np", "3", "--hosts", HOSTS, "--torch", "--exec",
        "--", str(VENV_PYTHON), "-c", STORE,
    )  # fmt: skip
    began = time.monotonic()
    res = netns_cluster.run("node1", argv, timeout=120)
    print(f"launched and met in {time.monotonic() - began:.1f} s")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert sorted(re.findall(r"store-rank (\d) met", res.stdout)) == ["0", "1", "2"], res.stdout[-2000:]
    assert no_leftovers(netns_cluster, timeout=10)
