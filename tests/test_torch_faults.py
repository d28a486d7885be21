"""Faults under `--torch` and `--torchrun`, with the plain DDP example (examples/torch_train.py, gloo on the CPU,
runtime none with the venv's Python): a rank SIGKILLed on node2 ends the 3-node ssh job and the same command
resumes; a rank SIGSTOPped is ended by the site's stall bound and named (--torch); under the real SLURM the
time-limit signal makes the ranks checkpoint, the batch script requeue, and every epoch run exactly once across
the runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hpcbundle_testbed import SlurmCluster, SshCluster
from hpcbundle_testbed.sites import site_data, ssh_site, write_site

from .helpers import (
    ROOT,
    VENV_PYTHON,
    hpcbundle_argv,
    leftovers,
    no_leftovers,
    program_pids,
    release_requeued_jobs,
    signal_batch_shell,
    submit_in_background,
    two_node_sbatch,
    wait_exit,
    wait_for,
)

pytestmark = pytest.mark.cluster

TRAIN = ROOT / "examples" / "torch_train.py"
EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+): loss=", re.M)
RESUME_RE = re.compile(r"^resuming from \S+ after epoch (\d+) \+ (\d+) steps$", re.M)
STOP_RE = re.compile(r"^stopped on SIGUSR1 \(the time limit is near\) after epoch (\d+) \+ (\d+) steps;", re.M)
KILL_TO_EXIT_LIMIT = 30.0  # a killed rank must end the whole job within this many seconds (issue 42)
STALL_SECONDS = 15  # faults.stall_seconds of the ssh site: rank 0 prints a line per epoch (< 1 s here)


def train(*args: str) -> list[str]:
    return [str(VENV_PYTHON), str(TRAIN), *args]


def epochs_of(out: str) -> list[int]:
    return [int(m[1]) for m in EPOCH_RE.finditer(out)]


def saved_position(checkpoint: Path) -> tuple[int, int]:
    """(epochs done, steps of the next) the checkpoint holds, loaded whole by torch in the venv."""
    read = "import sys, torch; s = torch.load(sys.argv[1]); print(s['epoch'], s['step'])"
    loaded = subprocess.run(
        [str(VENV_PYTHON), "-c", read, str(checkpoint)], capture_output=True, text=True, timeout=120
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    epoch, step = loaded.stdout.split()
    return int(epoch), int(step)


@pytest.fixture(scope="module")
def ssh3(horovod: None) -> Iterator[SshCluster]:
    """3 namespace nodes reached over real ssh (names resolve to the management network), shared here."""
    with SshCluster(3) as cluster:
        yield cluster


def torch_job(
    cluster: SshCluster, tmp_path: Path, epochs: int, stall: int | None = None, wiring: str = "torch"
) -> list[str]:
    """`hpcbundle launch --torch --exec` (or `--torchrun`) of the example on the 3 nodes, one rank (worker) each,
    checkpointing in tmp_path."""
    site = ssh_site(tmp_path, cluster, "ssh-torch")
    if stall:
        data = yaml.safe_load(site.read_text())
        data["faults"] = {"stall_seconds": stall}
        data["why"]["faults.stall_seconds"] = "an epoch takes under a second here: this much silence is a stall"
        site.write_text(yaml.safe_dump(data, sort_keys=False))
    hosts = ",".join(f"{node}:1" for node in cluster.nodes)
    program = train("--epochs", str(epochs), "--batch-size", "16", "--checkpoint", str(tmp_path / "ck.pt"))
    return hpcbundle_argv(
        "launch", "--site", str(site), "--np", "3", "--hosts", hosts, f"--{wiring}", "--exec", "--", *program
    )


def start_until_epoch_2(cluster: SshCluster, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """The job started on node1, once epoch 2 is printed (and so checkpointed) and node2's rank runs."""
    job = cluster.start("node1", argv, log=log)

    def running() -> bool:
        return bool(program_pids(cluster, "node2", TRAIN)) and epochs_of(log.read_text())[-1:] >= [2]

    wait_for(running, 180, "epoch 2 with a rank on node2", log, job)
    return job


@pytest.mark.parametrize("wiring", ["torch", "torchrun"])
def test_a_torch_rank_killed_on_node2_ends_the_job_and_the_same_command_resumes(
    ssh3: SshCluster, tmp_path: Path, wiring: str
) -> None:
    """Rank 1's Python SIGKILLed on node2 mid-training (under --torchrun: the worker, whose agent then fails):
    mpirun ends the job within 30 s, non-zero, with no process left on any node; the same command then resumes
    after the last checkpoint (the last epoch the killed run printed: rank 0 writes it before printing) and
    trains the rest, no epoch repeated."""
    epochs = 12
    argv = torch_job(ssh3, tmp_path, epochs, wiring=wiring)
    log = tmp_path / "killed.log"
    job = start_until_epoch_2(ssh3, argv, log)
    os.kill(program_pids(ssh3, "node2", TRAIN)[0], signal.SIGKILL)
    killed_at = time.monotonic()
    status = wait_exit(job, KILL_TO_EXIT_LIMIT + 30, log)
    gone = no_leftovers(ssh3, timeout=KILL_TO_EXIT_LIMIT)
    ended = time.monotonic() - killed_at
    killed = log.read_text()
    done = saved_position(tmp_path / "ck.pt")
    print(f"rank 1 SIGKILLed: exit {status}, all gone {ended:.1f} s later; checkpoint at {done}\n{killed[-2000:]}")
    assert status != 0 and gone, (status, leftovers(ssh3), killed[-3000:])
    assert ended <= KILL_TO_EXIT_LIMIT, f"the job took {ended:.1f} s to end after the kill"
    printed = epochs_of(killed)
    assert done[1] == 0 and printed == list(range(1, done[0] + 1)) and done[0] < epochs, (done, printed)

    res = ssh3.run("node1", argv, timeout=300)
    rerun = res.stdout + res.stderr
    assert res.returncode == 0, rerun[-4000:]
    assert RESUME_RE.findall(rerun) == [(str(done[0]), "0")], rerun[-3000:]
    assert epochs_of(rerun) == list(range(done[0] + 1, epochs + 1)), rerun[-3000:]
    assert no_leftovers(ssh3, timeout=10), leftovers(ssh3)


@pytest.mark.parametrize("wiring", ["torch", "torchrun"])
def test_a_stopped_torch_rank_is_ended_by_the_stall_bound_and_named(
    ssh3: SshCluster, tmp_path: Path, wiring: str
) -> None:
    """Rank 1 SIGSTOPped on node2 (under --torchrun: the worker, `PYTHON -u SCRIPT ARGS`, its agent still
    running): the other ranks wait in gloo's all_reduce, silent, every process alive. faults.stall_seconds ends
    the launch (exit 124) naming node2 and the stopped rank's PID, and no process is left on any node (the
    stopped worker, which its killed agent could not end, hpcbundle kills and says so); the checkpoint is whole."""
    argv = torch_job(ssh3, tmp_path, epochs=200, stall=STALL_SECONDS, wiring=wiring)
    log = tmp_path / "stalled.log"
    job = start_until_epoch_2(ssh3, argv, log)
    stopped_pid = program_pids(ssh3, "node2", TRAIN)[0]
    os.kill(stopped_pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    status = wait_exit(job, 120, log)
    ended = time.monotonic() - stopped_at
    gone = no_leftovers(ssh3, timeout=KILL_TO_EXIT_LIMIT)
    out = log.read_text()
    print(f"{wiring}: rank 1 SIGSTOPped: exit {status} {ended:.1f} s later (stall bound {STALL_SECONDS} s)")
    print(out[-2000:])
    assert status == 124, out[-3000:]
    assert f"no output from the job for {STALL_SECONDS} s (faults.stall_seconds of site ssh-torch)" in out
    named = re.findall(r"^hpcbundle: (\S+): the rank with PID (\d+) was stopped .*\(state T\)$", out, re.M)
    assert named == [("node2", str(stopped_pid))], out[-3000:]
    if wiring == "torchrun":  # a worker runs in a session of its own: hpcbundle ends it once the launcher has
        killed = re.findall(r"^hpcbundle: (\S+): the rank with PID (\d+) outlived the launcher", out, re.M)
        assert killed == named, out[-3000:]
    assert gone, f"processes left after the job ended: {leftovers(ssh3)}"
    assert saved_position(tmp_path / "ck.pt")[0] >= 2


@pytest.mark.parametrize("wiring", ["torch", "torchrun"])
def test_a_torch_batch_job_signalled_before_its_time_limit_checkpoints_requeues_and_runs_every_epoch_once(
    horovod: None, netns_slurm: SlurmCluster, tmp_path: Path, wiring: str
) -> None:
    """`hpcbundle sbatch --torch` (or `--torchrun`, one agent per node) for a site with faults.signal_before_end and
    faults.requeue, on two namespace nodes: USR1 to the batch shell, as SLURM sends it before the time limit (here
    once epoch 1 is checkpointed, by `scancel --batch`), reaches both ranks through srun (under --torchrun through
    each agent); they agree to stop after the same step, rank 0 checkpoints there, they exit 0 and the script
    requeues the job. The requeued run resumes at that step and finishes: every epoch printed once, none skipped."""
    net = netns_slurm.inside
    data = site_data(f"slurm-{wiring}-requeue", launcher="srun", interfaces=[net.DATA_IFACE])
    data["faults"] = {"signal_before_end": 60, "requeue": True}
    site = write_site(tmp_path, data)
    epochs, checkpoint = 20, tmp_path / "ck.pt"  # ~0.15 s an epoch here: the signal comes mid-training
    program = train("--epochs", str(epochs), "--batch-size", "16", "--checkpoint", str(checkpoint))
    text = two_node_sbatch(site, program, tmp_path / "job.sh", f"--{wiring}")
    assert "#SBATCH --signal=B:USR1@60\n#SBATCH --requeue\n" in text and "MASTER_ADDR" in text, text
    started = time.monotonic()
    submitted, jobs = submit_in_background(netns_slurm, text, timeout=300)
    signalled = signal_batch_shell(netns_slurm, submitted, checkpoint.exists)
    holds = release_requeued_jobs(netns_slurm, submitted)
    job = jobs[0]
    out = job.output
    stops, resumes = STOP_RE.findall(out), RESUME_RE.findall(out)
    took = time.monotonic() - started
    print(f"sbatch --{wiring}: USR1 {signalled:.0f} s in, exit {job.returncode} after {took:.0f} s; stopped at {stops}")
    print(f"resumed at {resumes}; requeue holds {holds} s (released at once)\n{job.error[-2000:]}")
    assert job.returncode == 0, out[-3000:] + job.error[-3000:]
    assert len(stops) == 1 and stops == resumes and int(stops[0][0]) < epochs, (stops, resumes, out[-3000:])
    assert epochs_of(out) == list(range(1, epochs + 1)), "an epoch was trained twice, or skipped"
    assert job.error.count("requeueing job") == len(holds) == 1, job.error[-3000:]
    assert f"done: {epochs} epochs on 2 ranks" in out and saved_position(checkpoint) == (epochs, 0)
