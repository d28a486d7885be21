"""Launching over real ssh: a 3-node namespace cluster with an sshd on every node, Open MPI using ssh.

The launching shell on node1 has the venv activated (PATH, VIRTUAL_ENV); a remote rank starts in
root's login environment as sshd makes it, which has no venv. So a site that forwards nothing
fails on the remote nodes with ModuleNotFoundError, doctor refuses that launch before starting
anything, and the site that exports the program environment (as `site detect` drafts it from the
activated shell) trains on all three nodes.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import SshCluster
from hpcbundle_testbed.netns_cluster import ip
from hpcbundle_testbed.procs import pid_alive
from hpcbundle_testbed.sites import ssh_site

from .helpers import ROOT

pytestmark = pytest.mark.cluster

HOSTS = "node1:1,node2:1,node3:1"
TRAIN = ["python3", "examples/pytorch_train.py", "--synthetic", "--epochs", "1"]


@pytest.fixture(scope="module")
def venv() -> Path:
    """The virtualenv the tests run in; the nodes share this file system, so it is at the same path on each."""
    if sys.prefix == sys.base_prefix:
        pytest.fail(f"run the tests from the project's venv (make setup): {sys.executable} is no venv", pytrace=False)
    return Path(sys.prefix)


@pytest.fixture(scope="module")
def cluster(cluster_tools: None):
    with SshCluster(3) as c:
        yield c


def activated(venv: Path, **extra: str) -> dict[str, str]:
    """The launching shell's environment after `source VENV/bin/activate`."""
    return {"PATH": f"{venv}/bin:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv), **extra}


def cli_on_node1(cluster: SshCluster, venv: Path, *args: str, env: dict[str, str] | None = None):
    """`hpcbundle ARGS` run on node1 by the venv's python, in the activated shell (or `env`)."""
    argv = [f"{venv}/bin/python3", "-m", "hpcbundle", "--bundle", str(ROOT), *args]
    return cluster.run("node1", argv, timeout=300, env=env or activated(venv), cwd=ROOT)


def launch_on_node1(cluster: SshCluster, venv: Path, site: Path, program: list[str], *flags: str, env=None):
    """`hpcbundle launch --exec` of `program` as 3 ranks, one per node."""
    args = ["launch", "--site", str(site), "--np", "3", "--hosts", HOSTS, *flags, "--exec", "--", *program]
    return cli_on_node1(cluster, venv, *args, env=env)


def _listing(directory: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_mtime_ns) for p in directory.iterdir()) if directory.is_dir() else []


def test_remote_command_gets_the_login_environment_not_the_callers(cluster: SshCluster, venv: Path):
    own_ssh = _listing(Path.home() / ".ssh")
    result = cluster.run(
        "node1", [*cluster.ssh_argv(), "node2", "hostname; env"], env=activated(venv, MARKER="x"), timeout=30
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    remote = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert lines[0] == "node2"
    assert remote["SSH_CONNECTION"].split()[2] == cluster.address("node2", cluster.MGMT_IFACE)
    assert f"{venv}/bin" not in remote["PATH"].split(":")
    assert not {"VIRTUAL_ENV", "MARKER", "PYTHONPATH"} & set(remote)
    assert _listing(Path.home() / ".ssh") == own_ssh, "the cluster's ssh must not touch ~/.ssh"


def test_without_the_environment_remote_ranks_cannot_import_the_framework(
    cluster: SshCluster, venv: Path, tmp_path: Path
):
    site = ssh_site(tmp_path, cluster, "ssh-bare")
    # Each node's daemon also writes its ranks' output to files: mpirun, aborting the job, may drop
    # a dying rank's last lines before they reach its own stdout.
    logs = tmp_path / "ranks"
    data = yaml.safe_load(site.read_text())
    data["launcher"]["args"] = ["--output-filename", str(logs)]
    site.write_text(yaml.safe_dump(data))
    result = launch_on_node1(cluster, venv, site, TRAIN, "--no-doctor", "--timeout", "120")
    assert result.returncode != 0, result.stdout[-2000:]
    remote = {p.parent.name: p.read_text(errors="replace") for p in logs.rglob("stderr")}
    assert any(
        re.search(r"ModuleNotFoundError: No module named '(horovod|torch)'", text)
        for name, text in remote.items()
        if name != "rank.0"
    ), remote
    assert "final:" not in result.stdout


def test_doctor_refuses_that_launch_naming_the_nodes_and_the_interpreter_before_anything_starts(
    cluster: SshCluster, venv: Path, tmp_path: Path
):
    site = ssh_site(tmp_path, cluster, "ssh-bare")
    checkpoints = tmp_path / "ckpt"
    result = launch_on_node1(cluster, venv, site, [*TRAIN, "--checkpoint-dir", str(checkpoints)])
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    fail = next(line for line in result.stderr.splitlines() if line.startswith("FAIL  program-env"))
    remote_python = cluster.run("node1", [*cluster.ssh_argv(), "node2", "command -v python3"], timeout=30)
    assert "FAIL  program-env          python3 on node2, node3: " in fail and "node1" not in fail
    assert "no torch" in fail and "no horovod" in fail
    assert f"this node: {venv}/bin/python3 (horovod " in fail
    assert remote_python.stdout.strip() and f"{venv}/bin" not in remote_python.stdout
    assert "add PATH (and VIRTUAL_ENV or CONDA_PREFIX) to export in" in fail
    assert "nothing was started" in result.stderr and "+ mpirun" not in result.stderr
    assert not checkpoints.exists() and "epoch" not in result.stdout


def test_site_exporting_the_venv_passes_doctor_and_trains_on_three_nodes_over_ssh(
    cluster: SshCluster, venv: Path, tmp_path: Path
):
    site = ssh_site(tmp_path, cluster, "ssh-venv", export=["PATH", "VIRTUAL_ENV"])
    doctor = cli_on_node1(cluster, venv, "doctor", "--site", str(site), "--hosts", "node1,node2,node3", "--", *TRAIN)
    passed = next(line for line in doctor.stdout.splitlines() if "program-env" in line)
    assert passed.startswith("PASS") and f"python3 -> {venv}/bin/python3 (horovod " in passed, doctor.stdout
    assert "torch " in passed and "on node1, node2, node3" in passed
    result = launch_on_node1(cluster, venv, site, TRAIN)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "-x PATH -x VIRTUAL_ENV" in result.stderr
    assert re.search(r"^final: accuracy=[\d.]+ loss=[\d.]+ images/sec=[\d.]+ ranks=3$", result.stdout, re.M), (
        result.stdout[-3000:]
    )


def test_site_detect_in_the_activated_shell_drafts_a_site_that_runs_on_three_nodes_over_ssh(
    cluster: SshCluster, venv: Path, tmp_path: Path
):
    draft = tmp_path / "drafted.yaml"
    # How this cluster reaches its nodes, as a user's ssh set-up would: detect records OMPI_MCA_ variables.
    env = activated(venv, OMPI_MCA_plm_rsh_agent=cluster.rsh_agent_value())
    detect = cli_on_node1(cluster, venv, "site", "detect", "--hosts", "node2,node3", "-o", str(draft), env=env)
    assert detect.returncode == 0, detect.stderr
    text = draft.read_text()
    assert "export:  # CONFIRM: what the launching shell holds (mpirun -x)" in text
    assert f"  - VIRTUAL_ENV  # {venv}\n" in text
    assert {"PATH", "VIRTUAL_ENV"} <= set(yaml.safe_load(text)["export"])
    program = ["python3", "examples/allreduce_check.py", "--framework", "torch"]
    result = launch_on_node1(cluster, venv, draft, program)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "allreduce_check: OK size=3 " in result.stdout, result.stdout[-3000:]


def test_a_module_the_nodes_lack_imported_by_a_local_module_is_refused_before_any_rank_starts(
    cluster: SshCluster, venv: Path, tmp_path: Path
):
    started = tmp_path / "started"
    program = tmp_path / "train.py"
    program.write_text(
        f"import pathlib\npathlib.Path({str(started)!r}).touch()\nimport torch\nimport horovod.torch as hvd\n"
        "import helpers\ntry:\n    import apex_not_installed_xyz\nexcept ImportError:\n    pass\n"
    )
    (tmp_path / "helpers.py").write_text("import not_installed_mod_xyz\n")
    site = ssh_site(tmp_path, cluster, "ssh-venv", export=["PATH", "VIRTUAL_ENV"])
    doctor = cli_on_node1(cluster, venv, "doctor", "--site", str(site), "--hosts", "node1,node2,node3", "--",
                          "python3", str(program))  # fmt: skip
    rows = {line.split()[1]: line for line in doctor.stdout.splitlines() if line.startswith(("PASS", "WARN", "FAIL"))}
    assert doctor.returncode == 2 and rows["program-env"].startswith("PASS"), doctor.stdout[-3000:]
    assert rows["program-imports"] == (
        "FAIL  program-imports      `not_installed_mod_xyz` is not importable on node1, node2, node3 "
        f"(in the node's python {venv}/bin/python3); optional: `apex_not_installed_xyz` is not importable on "
        f"node1, node2, node3 (in the node's python {venv}/bin/python3); pip install it into that environment "
        "on every node (in an image: add `not_installed_mod_xyz` to the recipe's `python_packages:`)"
    )
    result = launch_on_node1(cluster, venv, site, ["python3", str(program)])
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert (
        "FAIL  program-imports      `not_installed_mod_xyz` is not importable on node1, node2, node3" in result.stderr
    )
    assert "nothing was started" in result.stderr and "+ mpirun" not in result.stderr
    assert not started.exists()


def test_program_found_only_in_the_launching_shell_is_refused_naming_the_node(
    cluster: SshCluster, venv: Path, tmp_path: Path
):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "hvd-train").write_text('#!/bin/sh\ntouch "$1"\n')
    (tools / "hvd-train").chmod(0o755)
    site = ssh_site(tmp_path, cluster, "ssh-bare")
    env = activated(venv)
    env["PATH"] = f"{tools}:{env['PATH']}"
    result = launch_on_node1(cluster, venv, site, ["hvd-train", str(tmp_path / "ran")], env=env)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    fail = next(line for line in result.stderr.splitlines() if line.startswith("FAIL  program-env"))
    assert "hvd-train on node2, node3: not found on PATH" in fail
    assert f"this node: {tools}/hvd-train" in fail
    assert not (tmp_path / "ran").exists()


def set_links(cluster: SshCluster, node: str, state: str) -> None:
    """Every link of `node` (data0, mgmt0) down or up: as when its cable or switch port fails."""
    for iface in (cluster.DATA_IFACE, cluster.MGMT_IFACE):
        ip("-n", cluster.netns(node), "link", "set", iface, state)


def doctor_timed(cluster: SshCluster, venv: Path, site: Path, what: str):
    """`hpcbundle doctor` on the three nodes with the program probe, its seconds printed (the bound is the test's)."""
    started = time.monotonic()
    result = cli_on_node1(cluster, venv, "doctor", "--site", str(site), "--hosts", "node1,node2,node3", "--", *TRAIN)
    print(f"doctor with {what}: {time.monotonic() - started:.1f} s")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    return result.stdout


def test_nodes_that_do_not_answer_are_fails_naming_how_and_launch_starts_nothing(
    cluster: SshCluster, venv: Path, tmp_path: Path
):
    site = ssh_site(tmp_path, cluster, "ssh-venv", export=["PATH", "VIRTUAL_ENV"])
    checkpoints = tmp_path / "ckpt"
    refused = r"^FAIL  node-reach node2 +ssh: connection refused \(sshd down\?\)"
    cluster.lose_node("node2")  # its sshd (and all else there) killed by PID: connection refused
    try:
        out = doctor_timed(cluster, venv, site, "node2's sshd down")
        assert re.search(refused, out, re.M), out
        assert "PASS  interface data0 reach 2 of 2 TCP connections between 2 nodes over data0" in out, out
        set_links(cluster, "node3", "down")  # its links down: no route (or a time-out) from node1
        out = doctor_timed(cluster, venv, site, "node2's sshd down and node3's links down")
        assert re.search(refused, out, re.M), out
        assert re.search(r"^FAIL  node-reach node3 +ssh: (no route to host|timed out)", out, re.M), out
        assert "SKIP  host-mpi             node2, node3 did not answer" in out
        assert re.search(r"^PASS  host-mpi .* on node1$", out, re.M), out
        cluster.lose_node("node1")  # now no node answers
        started = time.monotonic()
        result = launch_on_node1(cluster, venv, site, [*TRAIN, "--checkpoint-dir", str(checkpoints)])
        print(f"launch pre-check with no node answering: {time.monotonic() - started:.1f} s")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
        assert re.findall(r"^FAIL  node-reach (node\d)", result.stderr, re.M) == ["node1", "node2", "node3"]
        assert "hpcbundle: error: doctor found a problem (FAIL above), nothing was started" in result.stderr
        assert "+ mpirun" not in result.stderr and not checkpoints.exists()
    finally:
        set_links(cluster, "node3", "up")
        for node in ("node1", "node2"):
            if node not in cluster.sshd_pids:
                cluster.revive_node(node)


def test_teardown_stops_every_sshd_by_pid_and_deletes_the_namespaces_also_after_a_failure(cluster_tools: None):
    with pytest.raises(RuntimeError, match="the test failed here"):
        with SshCluster(2) as small:
            pids, names = dict(small.sshd_pids), {small.netns(n) for n in ["switch", *small.nodes]}
            assert sorted(pids) == ["node1", "node2"] and all(pid_alive(pid) for pid in pids.values())
            raise RuntimeError("the test failed here")
    assert not [pid for pid in pids.values() if pid_alive(pid)]
    assert not names & {line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()}
    assert not small.workdir.exists()
