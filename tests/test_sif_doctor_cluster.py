"""doctor with a real SIF over real ssh: a 3-node namespace cluster (sshd on every node), a small SIF
built now with the set-up's Apptainer and copied to each node's own /dev/shm (the nodes share this
machine's file system, but each node's sshd has a private /dev/shm: a per-node copy at one path, as on
node-local disks). Everything on a node goes through its sshd, the commands on node1 too (a user
logged in there), so all of them see that node's /dev/shm.

Apptainer is on the launching shell's PATH only (sshd's login PATH has none), as for a user who put it
in ~/bin: the site exports PATH, the launch's ranks find `apptainer`, and doctor's probes, which get
the site's exported variables too, see it the same way. The site also exports PYTHONPATH, so the
nodes' probes import this checkout's hpcbundle.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcbundle_testbed import SshCluster
from hpcbundle_testbed.sif_images import small_sif
from hpcbundle_testbed.sites import sif_site

from .helpers import ROOT, hpcbundle_argv

pytestmark = [pytest.mark.cluster, pytest.mark.apptainer]

NODES = ["node1", "node2", "node3"]
IMAGE = "/dev/shm/hpcbundle-small.sif"
LABELS = {"org.hpcbundle.recipe": "small", "org.hpcbundle.mpi.flavour": "openmpi", "org.hpcbundle.mpi.version": "4.1.4"}


@pytest.fixture(scope="module")
def sif(apptainer: str) -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="hpcbundle-sifdoctor-"))
    try:
        yield small_sif(apptainer, work, LABELS)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(cluster_tools: None, sif: Path) -> Iterator[SshCluster]:
    """The ssh cluster with the SIF at IMAGE on every node (gone with the nodes' /dev/shm at teardown)."""
    with SshCluster(3) as c:
        for node in NODES:
            over_ssh(c, node, ["cp", str(sif), IMAGE], check=True)
        yield c


def over_ssh(
    cluster: SshCluster, node: str, argv: list[str], env: dict[str, str] | None = None, *, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """`argv` run on `node` through its sshd (in ROOT, with `env` set), from node1."""
    command = f"cd {shlex.quote(str(ROOT))} && " + shlex.join(
        ["env", *(f"{k}={v}" for k, v in (env or {}).items()), *argv]
    )
    return cluster.run("node1", [*cluster.ssh_argv(), node, command], timeout=300, check=check)


def shell(apptainer: str) -> dict[str, str]:
    """The launching shell: the venv activated, Apptainer's directory on PATH, this checkout importable."""
    path = f"{Path(sys.prefix) / 'bin'}:{Path(apptainer).parent}:{os.environ['PATH']}"
    return {"PATH": path, "VIRTUAL_ENV": sys.prefix, "PYTHONPATH": str(ROOT / "src")}


def cli_on_node1(cluster: SshCluster, apptainer: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = hpcbundle_argv(*args)
    return over_ssh(cluster, "node1", argv, shell(apptainer))


def doctor(cluster: SshCluster, apptainer: str, site: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli_on_node1(
        cluster, apptainer, "doctor", "--site", str(site), "--image", IMAGE, "--hosts", ",".join(NODES), *extra
    )


def row(output: str, name: str) -> tuple[str, str]:
    """(status, evidence) of doctor's row `name` (its rule and subject)."""
    for line in output.splitlines():
        status, _, rest = line.partition("  ")
        if rest.startswith(f"{name} "):
            return status, rest[len(name) :].strip()
    return "", f"no {name} row in:\n{output}"


def test_apptainer_is_on_the_launching_shells_path_only(cluster: SshCluster, apptainer: str):
    remote = over_ssh(cluster, "node2", ["sh", "-c", "command -v apptainer || echo none"])
    assert remote.stdout.strip() == "none", remote.stdout + remote.stderr


def test_without_path_exported_doctor_fails_the_runtime_on_every_node_reached_by_ssh(
    cluster: SshCluster, apptainer: str, tmp_path: Path
):
    site = sif_site(tmp_path, cluster, "sif-bare", export=["PYTHONPATH"])
    result = doctor(cluster, apptainer, site, "--no-checksum")
    status, evidence = row(result.stdout, "container-runtime")
    assert status == "FAIL" and "is not on PATH on node1, node2, node3;" in evidence, result.stdout + result.stderr


def test_same_sif_everywhere_passes_and_doctor_agrees_with_the_launch_on_the_runtime(
    cluster: SshCluster, apptainer: str, tmp_path: Path
):
    site = sif_site(tmp_path, cluster, "sif-path", export=["PATH", "PYTHONPATH"])
    result = doctor(cluster, apptainer, site)
    out = result.stdout
    assert row(out, "container-runtime") == ("PASS", "apptainer: apptainer version 1.4.5"), out
    status, evidence = row(out, "image checksum")
    assert status == "PASS" and evidence.startswith(f"{IMAGE}: sha256 ") and evidence.endswith("on node1, node2, node3")
    assert row(out, "image-metadata") == ("PASS", f"read /etc/hpcbundle/manifest.json in {IMAGE} on node1"), out
    assert row(out, "mpi-abi-host")[0] == "PASS", out
    assert "Traceback" not in result.stderr
    # The launch refuses to export PYTHONPATH into the image; the job needs only PATH (doctor's probes
    # needed PYTHONPATH to import this checkout).
    launch_site = sif_site(tmp_path, cluster, "sif-launch", export=["PATH"])
    launch = cli_on_node1(
        cluster,
        apptainer,
        "launch",
        "--site",
        str(launch_site),
        "--image",
        IMAGE,
        "--np",
        "3",
        "--hosts",
        ",".join(f"{n}:1" for n in NODES),
        "--exec",
        "--no-doctor",
        "--",
        "hostname",
    )
    assert launch.returncode == 0, launch.stdout[-2000:] + launch.stderr[-2000:]
    assert "apptainer exec --userns " + IMAGE + " hostname" in launch.stderr
    assert sorted(launch.stdout.split()) == NODES


def test_a_truncated_sif_on_node2_fails_naming_it(cluster: SshCluster, apptainer: str, tmp_path: Path):
    site = sif_site(tmp_path, cluster, "sif-cut", export=["PATH", "PYTHONPATH"])
    over_ssh(cluster, "node2", ["truncate", "-s", "8M", IMAGE], check=True)
    result = doctor(cluster, apptainer, site, "--no-checksum")
    assert result.returncode == 2, result.stdout + result.stderr
    status, evidence = row(result.stdout, "image intact")
    assert status == "FAIL" and evidence.startswith(f"{IMAGE} is damaged on node2: truncated: data object "), evidence
    assert "node1" not in evidence and "node3" not in evidence and "Traceback" not in result.stderr
