"""Elastic Horovod on the ssh namespace cluster, launched as a user does (`hpcbundle launch --exec`
with an elastic site and a hostfile): a node lost mid-training leaves the job running on the others,
and the node, back, is taken in again. The SLURM discovery runs under the real SLURM.

horovodrun reaches the nodes with plain `ssh HOST`; here a `ssh` first in PATH adds the cluster's
client config (keys, known_hosts), as ~/.ssh/config does on a cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from subprocess import Popen

import pytest

from hpcbundle_testbed import SlurmCluster, SshCluster
from hpcbundle_testbed.procs import wait_until
from hpcbundle_testbed.sites import site_data, write_site

from .helpers import (
    ACCURACY_BAR,
    ROOT,
    VENV_PYTHON,
    assert_all_checkpoints_complete,
    hpcbundle_argv,
    leftovers,
    no_leftovers,
    submit_in_background,
    wait_exit,
)

pytestmark = pytest.mark.cluster

RANK0_LINE = re.compile(r"^\[\d+\]<stdout>:(.*)$")
COOLDOWN = [2, 10]  # a lost node sits out 2-10 s before the discovery may bring it back
GLOO_TIMEOUT = 10  # a survivor waiting on the lost rank gives up after this (Horovod: 30 s; measured 30.1 s to go on)


class Progress:
    """Rank 0's lines of a running job's log, each with the time it was first seen."""

    def __init__(self, log: Path, job: Popen[bytes]) -> None:
        self.log, self.job = log, job
        self.lines: list[tuple[float, str]] = []
        self.waited = 0  # lines already searched by wait()

    def poll(self) -> None:
        text = self.log.read_text(errors="replace")
        seen = [m[1] for line in text.splitlines() if (m := RANK0_LINE.match(line))]
        now = time.monotonic()
        self.lines += [(now, line) for line in seen[len(self.lines) :]]

    def wait(self, pattern: str, timeout: float) -> tuple[float, re.Match[str]]:
        """(when, match) of the first line after those already waited for that matches `pattern`."""
        deadline, regex = time.monotonic() + timeout, re.compile(pattern)
        while True:
            self.poll()
            for index in range(self.waited, len(self.lines)):
                if match := regex.search(self.lines[index][1]):
                    self.waited = index + 1
                    return self.lines[index][0], match
            if self.job.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"no line matching {pattern!r} (job exit {self.job.poll()}):\n{self.log.read_text()[-4000:]}"
                )
            time.sleep(0.05)

    def epochs(self) -> list[int]:
        return [int(m[1]) for _, line in self.lines if (m := re.match(r"epoch (\d+)/", line))]


def elastic_site(directory: Path, cluster: SshCluster) -> Path:
    """The ssh cluster as an elastic site: horovodrun --gloo over data0, 2 to 3 ranks, hostfile discovery."""
    data = site_data("ssh-elastic", interfaces=[cluster.DATA_IFACE], timeout=600)
    data["launcher"] = {"name": "horovodrun", "gloo": True, "timeout": 600}
    data["mca"] = {}
    data["faults"] = {"elastic": {"min_np": 2, "max_np": 3, "discovery": "hostfile", "cooldown": COOLDOWN}}
    data["env"]["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(GLOO_TIMEOUT)
    data["why"] = {k: v for k, v in data["why"].items() if not k.startswith("mca.")}
    return write_site(directory, data)


# The examples' trainers: (script, checkpoint suffix, epochs). About 30 s of training each here with
# batch 16 (batch 8 diverges after 15 epochs, elastic or not); Keras epochs are shorter, and a rank
# joining a Keras job spends seconds importing TensorFlow first.
TRAINERS = {"pytorch": ("pytorch_train.py", "pt", 40), "keras": ("keras_train.py", "npz", 100)}


@pytest.mark.usefixtures("horovod")
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_elastic_job_loses_a_node_goes_on_with_the_others_and_takes_it_back(tmp_path: Path, trainer: str) -> None:
    """Three ranks on three nodes (one each). After epoch 2, every process of node3 is SIGKILLed, its
    sshd too: the ranks on node1 and node2 roll back to their last commit and go on as 2 ranks, and
    the discovery leaves node3 out (its ssh port is closed). node3's sshd comes back: after the
    cooldown the discovery lists it again and the job takes it in at the next epoch's end. Measured:
    seconds without an epoch after the loss, seconds until node3 trains again; every epoch is
    completed exactly once (no completed epoch is lost), and the checkpoints stay whole."""
    script, suffix, epochs = TRAINERS[trainer]
    with SshCluster(3) as cluster:
        site = elastic_site(tmp_path, cluster)
        hosts = tmp_path / "hosts"
        hosts.write_text("".join(f"{node} slots=1\n" for node in cluster.nodes))
        shim = tmp_path / "bin"
        shim.mkdir()
        (shim / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {cluster.ssh_config} "$@"\n')
        (shim / "ssh").chmod(0o755)
        env = {**os.environ, "PATH": f"{shim}:{VENV_PYTHON.parent}:{os.environ['PATH']}"}
        ckpt = tmp_path / "ckpt"
        ckpt.mkdir()
        program = [str(VENV_PYTHON), str(ROOT / "examples" / script), "--epochs", str(epochs), "--batch-size", "16"]
        program += ["--checkpoint-dir", str(ckpt)]
        argv = hpcbundle_argv(
            "launch", "--site", str(site), "--np", "3", "--hostfile", str(hosts), "--exec", "--", *program
        )
        log = tmp_path / "elastic.log"
        job = cluster.start("node1", argv, log=log, env=env)
        progress = Progress(log, job)
        try:
            progress.wait(r"ranks=3 ", 180)
            before, _ = progress.wait(r"^epoch 2/", 180)
            cluster.lose_node("node3")
            lost_at = time.monotonic()
            shrunk_at, _ = progress.wait(r"^ranks changed: now 2;", 120)
            resumed_at, _ = progress.wait(r"^epoch \d+/", 120)
            cluster.revive_node("node3")
            revived_at = time.monotonic()
            grown_at, _ = progress.wait(r"^ranks changed: now 3;", 120)
            status = wait_exit(job, 600, log)
        finally:
            job.kill() if job.poll() is None else None
        progress.poll()
        out = log.read_text()
        printed = progress.epochs()
        period = (before - progress.lines[0][0]) / 2
        print(
            f"node3 lost after epoch 2 (an epoch took about {period:.1f} s): the job went on with 2 ranks "
            f"{shrunk_at - lost_at:.1f} s later and finished its next epoch {resumed_at - lost_at:.1f} s after "
            f"the loss; node3 back: taken in {grown_at - revived_at:.1f} s later (cooldown {COOLDOWN} s); "
            f"epochs printed {printed}\n{out[-4000:]}"
        )
        assert status == 0, out[-4000:]
        assert printed == list(range(1, epochs + 1)), "each epoch completed exactly once: none lost, none repeated"
        final = re.search(r"final: accuracy=([\d.]+) loss=[\d.]+ images/sec=[\d.]+ ranks=(\d+)", out)
        assert final and final[2] == "3" and float(final[1]) >= ACCURACY_BAR, out[-2000:]
        if suffix == "pt":
            assert assert_all_checkpoints_complete(ckpt) == epochs
        assert sorted(p.name for p in ckpt.iterdir())[-1] == f"checkpoint-{epochs:04d}.{suffix}"
        assert no_leftovers(cluster, timeout=30), f"processes left: {leftovers(cluster)}"


SLURM_DISCOVERY_JOB = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --no-kill
{discovery} > {out}/first
while [ ! -e {out}/go ]; do sleep 0.2; done
{discovery} > {out}/second
"""


def test_slurm_discovery_lists_the_jobs_nodes_and_leaves_out_one_set_down(
    tmp_path: Path, slurm_local: SlurmCluster
) -> None:
    """The discovery script `hpcbundle sbatch` writes for an elastic SLURM site, run inside a real
    2-node job (--no-kill, as the script asks): both nodes, then node1 alone once node2 is DOWN."""
    data = site_data("slurm-elastic")
    data["launcher"] = {"name": "horovodrun", "gloo": True}
    data["mca"], data["why"] = {}, {}
    # node states kept 1 s (faults.elastic.discovery_interval): the second run asks SLURM again
    data["faults"] = {"elastic": {"min_np": 1, "max_np": 2, "discovery": "slurm", "discovery_interval": 1}}
    site = write_site(tmp_path, data)
    made = hpcbundle_argv(
        "sbatch", "--site", str(site), "--nodes", "2", "--tasks-per-node", "1", "--", "python3", "t.py"
    )
    result = subprocess.run(made, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    start = result.stdout.index("<<'HPCBUNDLE_DISCOVERY'\n") + len("<<'HPCBUNDLE_DISCOVERY'\n")
    discovery = tmp_path / "discover.sh"
    discovery.write_text(result.stdout[start : result.stdout.index("HPCBUNDLE_DISCOVERY\nchmod")])
    discovery.chmod(0o755)
    submitted, jobs = submit_in_background(
        slurm_local, SLURM_DISCOVERY_JOB.format(discovery=discovery, out=tmp_path), timeout=180
    )
    try:
        assert wait_until(lambda: (tmp_path / "first").exists() and (tmp_path / "first").read_text(), 120)
        slurm_local.run(["scontrol", "update", "nodename=node2", "state=down", "reason=hpcbundle-test"], check=True)
        time.sleep(2.1)  # past the interval: the first run's node states are stale
        (tmp_path / "go").touch()
    finally:
        submitted.join(200)
    first, second = (tmp_path / "first").read_text(), (tmp_path / "second").read_text()
    print(f"the discovery in the job: {first!r}, then with node2 DOWN {second!r}")
    assert jobs and jobs[0].returncode == 0, jobs
    assert (first, second) == ("node1:1\nnode2:1\n", "node1:1\n")
