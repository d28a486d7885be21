"""`hpcbundle doctor`, `site detect` and the launch pre-check on the real 3-node namespace cluster.

The nodes share this host's file system, so "node-local disks" are simulated the way a real node
has them: the site's rsh agent (written here, wrapping the fixture's) bind-mounts each node's own
directory over one common image path in that node's private mount namespace before running the
command. node2's disk can thus lack the image, or hold a different one, at the very same path.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import NetnsCluster
from hpcbundle_testbed.sites import site_data, write_site

from .helpers import ROOT, hpcbundle_argv

pytestmark = pytest.mark.cluster

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
HOSTS = "node1,node2,node3"


@pytest.fixture(scope="module")
def cluster(cluster_tools: None):
    with NetnsCluster(3) as c:
        yield c


@pytest.fixture(scope="module")
def disks(cluster: NetnsCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<root>/disk-<node>: each node's local disk, seen by that node at <root>/local; and the agent."""
    root = tmp_path_factory.mktemp("doctor")
    (root / "local").mkdir()
    for node in cluster.nodes:
        (root / f"disk-{node}").mkdir()
    agent = root / "agent"
    # Same calling convention as Open MPI's plm_rsh_agent: AGENT HOST WORDS...
    agent.write_text(f"""#!/bin/sh
host=$1
shift
exec "{cluster.rsh_agent}" "$host" "mount --bind {root}/disk-$host {root}/local && $*"
""")
    agent.chmod(0o755)
    return root


def manifest(mpi_version: str) -> dict:
    return {
        "hpcbundle_version": "test",
        "recipe": {"name": "fake", "mpi": {"flavour": "openmpi", "version": mpi_version}},
        "labels": {"org.hpcbundle.mpi.flavour": "openmpi", "org.hpcbundle.mpi.version": mpi_version},
    }


def put_image(disks: Path, nodes: list[str], name: str, mpi_version: str = "4.1.4", extra: str = "") -> str:
    """A directory image <local>/<name> with an hpcbundle manifest, on the disks of `nodes`; its path."""
    for node in nodes:
        image = disks / f"disk-{node}" / name
        shutil.rmtree(image, ignore_errors=True)
        (image / "etc" / "hpcbundle").mkdir(parents=True)
        (image / "etc" / "hpcbundle" / "manifest.json").write_text(json.dumps(manifest(mpi_version)))
        (image / "etc" / "os-release").write_text("ID=debian\n" + extra)
    return str(disks / "local" / name)


def site(
    directory: Path, cluster: NetnsCluster, interface: str, agent: Path | None = None, runtime: str = "none"
) -> Path:
    data = site_data(f"doctor-{interface}-{runtime}", cluster=cluster, interfaces=[interface], timeout=120)
    if agent is not None:
        data["mca"]["plm_rsh_agent"] = str(agent)
    if runtime == "charliecloud":
        data["container"] = {"runtime": "charliecloud"}
        data["mca"]["btl_vader_single_copy_mechanism"] = "none"
    return write_site(directory, data)


def doctor(cluster: NetnsCluster, site_path: Path, *args: str):
    start = time.monotonic()
    res = cluster.run("node1", hpcbundle_argv("doctor", "--site", str(site_path), "--hosts", HOSTS, *args), timeout=90)
    return res, time.monotonic() - start


def lines(out: str, status: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(status)]


def exec_on_three(site: Path, *program: str) -> list[str]:
    """`launch --exec` of `program` on the site, one rank on each of the three nodes."""
    return hpcbundle_argv(
        "launch", "--site", str(site), "--np", "3", "--hosts", "node1:1,node2:1,node3:1", "--exec", "--", *program
    )


def test_doctor_passes_the_good_site_with_the_same_image_on_every_node(cluster, disks, tmp_path):
    image = put_image(disks, cluster.nodes, "good")
    res, took = doctor(cluster, site(tmp_path, cluster, "data0", disks / "agent", "charliecloud"), "--image", image)
    print(res.stdout, f"took {took:.1f} s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not lines(res.stdout, "FAIL") and not lines(res.stdout, "WARN")
    assert (
        "PASS  interface data0 reach" in res.stdout
        and "6 of 6 TCP connections between 3 nodes over data0" in res.stdout
    )
    assert "PASS  image checksum" in res.stdout and "PASS  mpi-abi-host" in res.stdout
    assert "SKIP  declared-gpus" in res.stdout and "no GPU on node1, node2, node3" in res.stdout


def test_doctor_fails_the_decoy_interface_because_tcp_does_not_cross_it(cluster, tmp_path):
    res, took = doctor(cluster, site(tmp_path, cluster, "mgmt0"))
    print(res.stdout, f"took {took:.1f} s")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "PASS  interface mgmt0 " in res.stdout  # it exists and is up: only the probe can tell
    [fail] = lines(res.stdout, "FAIL")
    assert fail.startswith("FAIL  interface mgmt0 reach") and "6 of 6 TCP connections over mgmt0 failed" in fail
    assert (
        "node2 -> node1 10.78.0.1: timed out (no answer within 3 s)" in fail
        and "name the data interface in network.interfaces" in fail
    )
    assert took < 30


def test_doctor_fails_an_interface_the_nodes_do_not_have(cluster, tmp_path):
    res, _ = doctor(cluster, site(tmp_path, cluster, "ib0"))
    assert res.returncode == 2, res.stdout + res.stderr
    [fail] = lines(res.stdout, "FAIL")
    assert "no interface ib0 on node1, node2, node3 (named by network.interfaces; the nodes have data0, mgmt0)" in fail


def test_doctor_fails_an_image_built_with_open_mpi_5_against_host_open_mpi_4_1(cluster, disks, tmp_path):
    image = put_image(disks, cluster.nodes, "ompi5", mpi_version="5.0.3")
    res, _ = doctor(cluster, site(tmp_path, cluster, "data0", disks / "agent", "charliecloud"), "--image", image)
    assert res.returncode == 2, res.stdout + res.stderr
    [fail] = lines(res.stdout, "FAIL")
    assert (
        fail.startswith("FAIL  mpi-abi-host")
        and "host Open MPI 4.1.4 and image Open MPI 5.0.3 are different series" in fail
    )


def test_doctor_fails_an_image_missing_on_one_node(cluster, disks, tmp_path):
    image = put_image(disks, ["node1", "node3"], "partial")
    res, _ = doctor(cluster, site(tmp_path, cluster, "data0", disks / "agent", "charliecloud"), "--image", image)
    assert res.returncode == 2, res.stdout + res.stderr
    [fail] = lines(res.stdout, "FAIL")
    assert fail.startswith("FAIL  image present") and f"{image} does not exist on node2" in fail


def test_doctor_fails_an_image_that_differs_on_one_node(cluster, disks, tmp_path):
    image = put_image(disks, ["node1", "node3"], "drift")
    put_image(disks, ["node2"], "drift", extra="VERSION=stale copy\n")
    res, _ = doctor(cluster, site(tmp_path, cluster, "data0", disks / "agent", "charliecloud"), "--image", image)
    assert res.returncode == 2, res.stdout + res.stderr
    [fail] = lines(res.stdout, "FAIL")
    assert fail.startswith("FAIL  image checksum") and f"{image} differs between nodes" in fail
    assert "on node1, node3;" in fail and fail.split("; ")[1].split(" on ")[1].startswith("node2")


def test_launch_over_the_decoy_interface_stops_in_seconds_with_the_doctors_reason(cluster, tmp_path):
    start = time.monotonic()
    res = cluster.run("node1", exec_on_three(site(tmp_path, cluster, "mgmt0"), "true"), timeout=60)
    took = time.monotonic() - start
    print(res.stderr, f"took {took:.1f} s")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "FAIL  interface mgmt0 reach" in res.stderr and "nothing was started" in res.stderr
    assert "+ mpirun" not in res.stderr
    assert took < 20


def test_site_detect_on_a_node_writes_a_site_that_runs_horovod_on_three_nodes(cluster, tmp_path):
    out = tmp_path / "detected.yaml"
    # The agent is how this cluster reaches its nodes, like an ssh set-up would be: detect records
    # the OMPI_MCA_ variables of the environment it runs in.
    env = {"OMPI_MCA_plm_rsh_agent": str(cluster.rsh_agent), "OMPI_MCA_plm_rsh_no_tree_spawn": "1"}
    res = cluster.run("node1", hpcbundle_argv("site", "detect", "-o", str(out)), env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    print(text)
    data = yaml.safe_load(text)
    assert data["name"] == "detected" and data["network"]["interfaces"] == ["data0"]
    assert "CONFIRM: this node's name node1 resolves to 10.77.0.1, on data0" in text
    assert "other candidates: mgmt0 (10.78.0.1/24)" in text
    assert data["mca"]["plm_rsh_agent"] == str(cluster.rsh_agent)
    assert data["mpi"] == {"flavour": "openmpi", "version": "4.1.4"}
    run = cluster.run(
        "node1",
        exec_on_three(out, str(VENV_PYTHON), str(ROOT / "examples" / "allreduce_check.py"), "--framework", "torch"),
        env={"OMP_NUM_THREADS": "1"},
        timeout=150,
    )
    print(run.stdout, run.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "--mca btl_tcp_if_include data0" in run.stderr
    assert "allreduce_check: OK size=3 " in run.stdout, run.stdout
