"""`hpcbundle launch --gate` and `sbatch --gate` on real namespace clusters: shaped links (tc tbf), a
decoy interface, real Open MPI and SLURM. The gate passes on the fast data link, stops the job on the
slow management link (busbw below gate.threshold), and fails within gate.timeout on the decoy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import NetnsCluster, SlurmCluster
from hpcbundle_testbed.procs import wait_until
from hpcbundle_testbed.sites import gate_site

from .helpers import hpcbundle_argv

pytestmark = pytest.mark.cluster

DATA_MBIT, SLOW_MBIT = 400, 20
# Each rank of the job leaves a file named after its node (mpirun may drop a short-lived rank's stdout).
MARK = "import pathlib, socket, sys; pathlib.Path(sys.argv[1], socket.gethostname()).touch()"


def job(directory: Path) -> list[str]:
    """The job behind the gate: every rank marks its node in `directory`."""
    directory.mkdir(exist_ok=True)
    return [sys.executable, "-c", MARK, str(directory)]


def ran_on(directory: Path) -> list[str]:
    """The nodes the job ran on."""
    return sorted(path.name for path in directory.iterdir()) if directory.exists() else []


@pytest.fixture(scope="module")
def shaped(cluster_tools: None):
    """3 nodes: data0 shaped to 400 Mbit/s, slow0 to 20 Mbit/s (both carry traffic), mgmt0 the isolated decoy."""
    with NetnsCluster(3, data_mbit=DATA_MBIT, slow_mbit=SLOW_MBIT) as cluster:
        yield cluster


def _launch_with_gate(cluster: NetnsCluster, site: Path, marks: Path):
    argv = hpcbundle_argv("launch", "--site", str(site))
    argv += ["--np", "3", "--hosts", "node1:1,node2:1,node3:1", "--gate", "--no-doctor", "--exec", "--", *job(marks)]
    return cluster.run("node1", argv, timeout=120)


def test_gate_passes_on_the_fast_data_link_then_the_job_runs(shaped: NetnsCluster, tmp_path: Path) -> None:
    site = gate_site(tmp_path, shaped, shaped.DATA_IFACE, link_gbps=DATA_MBIT / 1000)
    result = _launch_with_gate(shaped, site, tmp_path / "ran")
    assert result.returncode == 0, result.stderr
    assert "hpcbundle gate: PASS; 3 ranks on 3 nodes, mpi4py, Open MPI ob1/tcp via data0" in result.stderr
    assert ran_on(tmp_path / "ran") == shaped.nodes


def test_gate_stops_the_job_when_the_site_points_at_the_slow_link(shaped: NetnsCluster, tmp_path: Path) -> None:
    site = gate_site(tmp_path, shaped, shaped.SLOW_IFACE, link_gbps=DATA_MBIT / 1000)
    result = _launch_with_gate(shaped, site, tmp_path / "ran")
    assert result.returncode == 2, result.stdout + result.stderr
    assert ran_on(tmp_path / "ran") == []
    [line] = [line for line in result.stderr.splitlines() if line.startswith("hpcbundle gate:")]
    assert line.startswith("hpcbundle gate: FAIL: busbw ")
    assert f"below gate.threshold 0.5: {site}: network.interfaces (point it at the 0.4 Gbit/s data link" in line
    assert "Open MPI ob1/tcp via slow0" in line


def test_gate_on_the_decoy_interface_fails_within_its_timeout_and_leaves_nothing_running(
    shaped: NetnsCluster, tmp_path: Path
) -> None:
    site = gate_site(tmp_path, shaped, shaped.MGMT_IFACE, link_gbps=DATA_MBIT / 1000, gate_timeout=10)
    result = _launch_with_gate(shaped, site, tmp_path / "ran")
    assert result.returncode == 124, result.stdout + result.stderr
    assert ran_on(tmp_path / "ran") == []
    assert f"hpcbundle gate: FAIL: no rank started within 10 s: {site}: network.interfaces" in result.stderr
    assert wait_until(lambda: all(not shaped.pids(node) for node in shaped.nodes), timeout=20), {
        node: shaped.pids(node) for node in shaped.nodes
    }


def test_gate_uses_horovod_where_the_python_has_no_mpi4py(shaped: NetnsCluster, tmp_path: Path) -> None:
    # As in the shipped images: Horovod with PyTorch, no mpi4py (shadowed here by a package that fails to import).
    (tmp_path / "shadow" / "mpi4py").mkdir(parents=True)
    (tmp_path / "shadow" / "mpi4py" / "__init__.py").write_text("raise ImportError('no mpi4py in this image')\n")
    site = gate_site(tmp_path, shaped, shaped.DATA_IFACE, link_gbps=DATA_MBIT / 1000, gate_timeout=100)
    data = yaml.safe_load(site.read_text())
    data["env"]["PYTHONPATH"] = str(tmp_path / "shadow")
    site.write_text(yaml.safe_dump(data))
    result = _launch_with_gate(shaped, site, tmp_path / "ran")
    assert result.returncode == 0, result.stderr
    assert "hpcbundle gate: PASS; 3 ranks on 3 nodes, horovod, Open MPI ob1/tcp via data0" in result.stderr


def test_sbatch_gate_runs_on_the_compute_nodes_before_the_job(netns_slurm: SlurmCluster, tmp_path: Path) -> None:
    cluster = netns_slurm.inside
    assert cluster is not None
    scripts = {}
    for interface in (cluster.DATA_IFACE, cluster.MGMT_IFACE):
        site = gate_site(tmp_path, cluster, interface, link_gbps=1.0, gate_timeout=10)
        argv = hpcbundle_argv("sbatch", "--site", str(site))
        argv += ["--nodes", "2", "--tasks-per-node", "1", "--gate", "--", *job(tmp_path / interface)]
        made = netns_slurm.run(argv, timeout=60)
        assert made.returncode == 0, made.stderr
        scripts[interface] = made.stdout
    passed = netns_slurm.sbatch_wait(scripts[cluster.DATA_IFACE], timeout=120)
    assert passed.returncode == 0, passed
    assert "hpcbundle gate: PASS; 2 ranks on 2 nodes" in passed.error
    assert ran_on(tmp_path / cluster.DATA_IFACE) == cluster.nodes
    hung = netns_slurm.sbatch_wait(scripts[cluster.MGMT_IFACE], timeout=120)
    assert hung.returncode != 0 and ran_on(tmp_path / cluster.MGMT_IFACE) == []
    # Under SLURM, Open MPI's daemons fail at once on the decoy rather than hang: the gate still stops the job.
    assert "ORTE daemon has unexpectedly failed" in hung.error
    assert "hpcbundle gate: the job was not started (the gate exited with status 1; the reason is above)" in hung.error


def test_a_torch_gate_passes_gloo_on_the_data_link_then_the_torch_job_runs(
    shaped: NetnsCluster, tmp_path: Path
) -> None:
    """launch --torch --gate: the probe meets by env:// as the job will, all_reduces over Gloo, and reports the
    rank table; then the job runs."""
    site = gate_site(tmp_path, shaped, shaped.DATA_IFACE, link_gbps=DATA_MBIT / 1000, gate_timeout=100)
    argv = hpcbundle_argv("launch", "--site", str(site), "--np", "3", "--hosts", "node1:1,node2:1,node3:1")
    argv += ["--torch", "--gate", "--no-doctor", "--exec", "--", *job(tmp_path / "ran")]
    result = shaped.run("node1", argv, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "hpcbundle gate: PASS; 3 ranks on 3 nodes, torch.distributed gloo, RANK 0 to 2 once each, Gloo over TCP "
        "via data0" in result.stderr
    ), result.stderr[-3000:]
    assert ran_on(tmp_path / "ran") == shaped.nodes
