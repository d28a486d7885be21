"""Programs of the kinds users bring (tests/data/user_programs/: plain Horovod, no hpcbundle import),
run for real by the generated lines from the user's working directory, not the repository's:

- `hpcbundle launch --exec` across the 3-node ssh cluster, with no container and with the cpu-local
  SIF (`apptainer exec`, one container per rank);
- `hpcbundle launch --exec` with the cpu-local Docker image (`docker run` from the image `make test` builds,
  on the private engine): Docker's runtime is one container per node holding the launcher and all its
  ranks, so 2 ranks on one node, in the working directory the line mounts (`-v DIR:DIR`) and starts in (`-w DIR`);
- `hpcbundle sbatch` submitted to the real SLURM on two namespace nodes (`srun --mpi=pmix`).

The programs: a keras.applications benchmark (MobileNetV2, DistributedGradientTape, variables
broadcast), a script that reports through Python's logging on stderr only, and a script that reads
its data from a directory on the site's shared storage (a container bind of the site, mounted at
/datasets in the SIF) and writes checkpoints/ relative to its working directory. The working
directory is the same path on every node (shared storage, as on a cluster's home or project file
system): every rank reports it as its cwd, and rank 0's checkpoint lands there, seen from the
launching node. Each program is copied into the working directory and started by a relative path,
as a user starts their own script. A torchvision model in the style of Horovod's synthetic benchmark
runs on the CUDA recipe's stack (its SIF, and the host venv its install script made): on the CPU here,
since the CPU stack cannot carry torchvision (below).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hpcbundle_testbed import SshCluster
from hpcbundle_testbed.docker_engine.engine import DockerEngine
from hpcbundle_testbed.docker_plugin import RUNTIME_TAG, Built
from hpcbundle_testbed.gpu_plugin import HostInstall
from hpcbundle_testbed.netns_cluster import NetnsCluster
from hpcbundle_testbed.sif import SifBuild
from hpcbundle_testbed.sites import sif_site, site_data, ssh_site, write_site
from hpcbundle_testbed.slurm_cluster import SlurmCluster

from .helpers import ROOT, hpcbundle_argv, launched_command

pytestmark = pytest.mark.cluster

PROGRAMS = Path(__file__).resolve().parent / "data" / "user_programs"
DATASET_IN_SIF = "/datasets"
"""Where the SIF and Docker sites bind the shared data directory (container.binds SRC:DST)."""
HOSTS, RANKS = "node1:1,node2:1,node3:1", 3


@pytest.fixture(scope="module")
def cluster(cluster_tools: None) -> Iterator[SshCluster]:
    with SshCluster(3) as c:
        yield c


def shell(venv: Path = Path(sys.prefix)) -> dict[str, str]:
    """The user's launching shell: a venv activated (its python3, and apptainer, on PATH)."""
    return {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}


def user_files(tmp_path: Path, program: str) -> tuple[Path, Path]:
    """The user's working directory holding their script (train.py), and a data directory of two CSV
    shards on the shared storage, outside it."""
    work, data = tmp_path / "work", tmp_path / "shared" / "dataset"
    work.mkdir()
    data.mkdir(parents=True)
    shutil.copy(PROGRAMS / program, work / "train.py")
    for shard in range(2):
        rows = "".join(f"{i % 3}.0,{shard}.5,{(i * 7) % 5}.0,{i % 2}\n" for i in range(8))
        (data / f"shard-{shard}.csv").write_text(rows)
    return work, data


# No ^ anchors: mpirun forwards each rank's output in chunks, and one rank's line may follow another's
# unfinished one (measured: `saved .../ckpt-2.ptrank 2/3: read ...`, `cwd=.../workrank 2/3: ...`), so a
# line ends at the end of a line or where the next rank's line (or rank 0's `saved` line) starts.
LINE_END = r"(?=$|rank \d+/|saved )"


def assert_keras_trained(out: str, work: Path, ranks: int) -> None:
    for rank in range(ranks):
        assert re.search(
            rf"rank {rank}/{ranks}: mobilenetv2_1\.00_32 loss=[\d.]+ cwd={re.escape(str(work))}{LINE_END}", out, re.M
        ), out[-3000:]
    assert re.search(rf"total images/sec: [\d.]+ on {ranks} ranks$", out, re.M), out[-3000:]


def assert_logged_to_stderr(out: str, work: Path, ranks: int) -> None:
    for rank in range(ranks):
        assert re.search(rf"INFO train: rank {rank}/{ranks} step 2 loss=[\d.]+$", out, re.M), out[-3000:]
        assert f"WARNING train: rank {rank} done in {work}\n" in out, out[-3000:]


def assert_read_shared_data_and_checkpointed(out: str, work: Path, ranks: int) -> None:
    for rank in range(ranks):
        cwd = re.escape(str(work))
        line = rf"rank {rank}/{ranks}: read shard-{rank % 2}\.csv \(8 rows\) loss=[\d.]+ cwd={cwd}{LINE_END}"
        assert re.search(line, out, re.M), out[-3000:]
    assert (work / "checkpoints" / "ckpt-2.pt").stat().st_size > 0, "rank 0's checkpoint is not in the working dir"
    assert sorted(p.name for p in work.iterdir()) == ["checkpoints", "train.py"], "a file landed elsewhere"


CASES: dict[str, tuple[str, Callable[[str, Path, int], None]]] = {
    "keras-applications": ("keras_applications_benchmark.py", assert_keras_trained),
    "logging-stderr": ("logging_train.py", assert_logged_to_stderr),
    "shared-data-checkpoints": ("shared_data_train.py", assert_read_shared_data_and_checkpointed),
}


def program_argv(data_dir: str) -> list[str]:
    """The user's line: their script by a relative path; --data is ignored by the programs without data."""
    return ["python3", "train.py", "--data", data_dir] if data_dir else ["python3", "train.py"]


def launch_from(
    cluster: SshCluster,
    work: Path,
    site: Path,
    image: list[str],
    program: list[str],
    venv: Path = Path(sys.prefix),
    flags: tuple[str, ...] = (),
) -> str:
    """`hpcbundle launch --exec` on node1 from the user's working directory, `venv` activated; its
    output, exit 0 asserted."""
    argv = hpcbundle_argv("launch", "--site", str(site), *image, "--np", str(RANKS), "--hosts", HOSTS, *flags)
    try:
        res = cluster.run("node1", [*argv, "--exec", "--", *program], timeout=600, env=shell(venv), cwd=work)
    except subprocess.TimeoutExpired:
        pytest.fail("the launch outlived its own bound and the test's 600 s")
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "killed after" not in out, out[-4000:]
    assert launched_command(res.stderr).endswith(" ".join(program)), res.stderr[-2000:]
    return out


@pytest.mark.parametrize("case", CASES)
def test_users_program_runs_from_their_working_directory_on_three_nodes_without_a_container(
    cluster: SshCluster, case: str, tmp_path: Path
) -> None:
    program, check = CASES[case]
    work, data = user_files(tmp_path, program)
    site = ssh_site(tmp_path, cluster, "ssh-user", export=["PATH", "VIRTUAL_ENV"])
    out = launch_from(cluster, work, site, [], program_argv(str(data) if "data" in case else ""))
    check(out, work, RANKS)


@pytest.mark.apptainer
@pytest.mark.parametrize("case", CASES)
def test_users_program_runs_from_their_working_directory_in_the_sif_on_three_nodes(
    cluster: SshCluster, cpu_local_sif: SifBuild, case: str, tmp_path: Path
) -> None:
    """Apptainer mounts the working directory and starts there; the data comes in by the site's bind."""
    program, check = CASES[case]
    work, data = user_files(tmp_path, program)
    site = sif_site(tmp_path, cluster, "sif-user", export=["PATH"], binds=[f"{data}:{DATASET_IN_SIF}"])
    image = ["--image", str(cpu_local_sif.path)]
    out = launch_from(cluster, work, site, image, program_argv(DATASET_IN_SIF if "data" in case else ""))
    check(out, work, RANKS)


TORCH_RANK = re.compile(r"torch-rank RANK=(\d+) WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR=(\S+) sum=6 run=(\S+)")


@pytest.mark.apptainer
@pytest.mark.parametrize("wiring", ["torch", "torchrun"])
@pytest.mark.parametrize("sif", ["cpu_local_sif", "cpu_ddp_sif"])
def test_a_torch_program_reduces_in_a_cpu_sif_on_three_ssh_nodes_with_both_torch_wirings(
    cluster: SshCluster, request: pytest.FixtureRequest, sif: str, wiring: str, tmp_path: Path
) -> None:
    """A plain torch.distributed program in the user's working directory, run by the SIF's Python and torch on
    three nodes over real ssh: --torch (one apptainer per rank, env://) and --torchrun (one apptainer per node
    running torchrun, c10d), meeting at an address on the data interface. The site's mpirun starts the
    containers (the hybrid model) in both images: cpu-local's (Horovod, Open MPI) and cpu-ddp's, which holds
    neither, since torch ranks meet over Gloo, not MPI."""
    image: SifBuild = request.getfixturevalue(sif)
    work = tmp_path / "work"
    work.mkdir()
    (work / "torch_allreduce.py").write_text((ROOT / "tests" / "data" / "torch_allreduce.py").read_text())
    site = sif_site(tmp_path, cluster, f"sif-{wiring}", export=["PATH"])
    argv = hpcbundle_argv(
        "launch", "--site", str(site), "--image", str(image.path), "--np", str(RANKS), "--hosts", HOSTS,
        f"--{wiring}", "--exec", "--", "python3", "torch_allreduce.py",
    )  # fmt: skip
    res = cluster.run("node1", argv, timeout=600, env=shell(), cwd=work)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    ranks = TORCH_RANK.findall(out)
    assert sorted(int(rank) for rank, _, _ in ranks) == [0, 1, 2], out[-3000:]
    masters = {master for _, master, _ in ranks}
    assert len(masters) == 1 and masters <= {cluster.address(node) for node in cluster.nodes}, masters
    runs = {run for *_, run in ranks}  # under torchrun one rendezvous, this run's own
    assert len(runs) == 1 and re.fullmatch(r"hpcbundle-[0-9a-f]{12}" if wiring == "torchrun" else "-", runs.pop())


@pytest.mark.apptainer
def test_a_horovod_launch_of_the_cpu_ddp_sif_is_refused_in_one_line_naming_the_torch_wirings(
    cluster: SshCluster, cpu_ddp_sif: SifBuild, tmp_path: Path
) -> None:
    """The image says it has no Horovod (label horovod: none): the doctor that runs before --exec reads it back
    on the nodes, and rule horovod-image refuses the Horovod wiring before any rank starts, naming the fix."""
    site = sif_site(tmp_path, cluster, "sif-horovod", export=["PATH"])
    argv = hpcbundle_argv(
        "launch", "--site", str(site), "--image", str(cpu_ddp_sif.path), "--np", str(RANKS), "--hosts", HOSTS,
        "--horovod", "--exec", "--", "python3", "-c", "print('started')",
    )  # fmt: skip
    res = cluster.run("node1", argv, timeout=600, env=shell(), cwd=tmp_path)
    refused = [line for line in res.stderr.splitlines() if "horovod-image" in line]
    assert res.returncode == 2 and "started" not in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    assert len(refused) == 1 and "has no Horovod" in refused[0] and "--torch or --torchrun" in refused[0], res.stderr


@pytest.mark.docker
@pytest.mark.parametrize("case", CASES)
def test_users_program_runs_from_their_working_directory_in_docker_with_two_ranks(
    docker_engine: DockerEngine, cpu_local: Built, case: str, tmp_path: Path
) -> None:
    """The generated `docker run` line, started from the user's working directory: it mounts the directory
    at its own path and starts the launcher there, so every rank's cwd is the user's and rank 0's checkpoint
    lands in it on the host; the data comes in by the site's bind."""
    program, check = CASES[case]
    work, data = user_files(tmp_path, program)
    site_yaml = site_data("docker-user")
    site_yaml["mca"]["btl"] = "self,vader,tcp"  # both ranks in one container: shared memory between them
    # Docker's default seccomp profile refuses vader's single copy (CMA: `Read -1, expected N, errno = 1`).
    site_yaml["mca"]["btl_vader_single_copy_mechanism"] = "none"
    site_yaml["container"] = {"runtime": "docker", "binds": [f"{data}:{DATASET_IN_SIF}"]}
    site = write_site(tmp_path, site_yaml)
    argv = hpcbundle_argv("launch", "--site", str(site), "--image", RUNTIME_TAG, "--np", "2", "--exec", "--")
    program_words = program_argv(DATASET_IN_SIF if "data" in case else "")
    env = {**os.environ, **shell(), **docker_engine.env()}
    res = subprocess.run([*argv, *program_words], capture_output=True, text=True, timeout=600, cwd=work, env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "killed after" not in out, out[-4000:]
    line = launched_command(res.stderr)
    assert line.startswith("docker run ") and f" -v {work}:{work} -w {work} " in line, line
    check(out, work, 2)


@pytest.mark.docker
@pytest.mark.parametrize("wiring", ["torch", "torchrun"])
def test_a_torch_program_reduces_in_one_docker_container_with_both_torch_wirings(
    docker_engine: DockerEngine, cpu_local: Built, wiring: str, tmp_path: Path
) -> None:
    """One node, one container: --torch (its mpirun starts 2 env:// ranks, MASTER_ADDR 127.0.0.1) and --torchrun
    (one agent, torchrun --standalone with 2 workers), the program in the user's mounted working directory."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "torch_allreduce.py").write_text((ROOT / "tests" / "data" / "torch_allreduce.py").read_text())
    site = write_site(tmp_path, site_data("docker-torch") | {"container": {"runtime": "docker"}})
    argv = hpcbundle_argv("launch", "--site", str(site), "--image", RUNTIME_TAG, "--np", "2", f"--{wiring}", "--exec")
    env = {**os.environ, **shell(), **docker_engine.env()}
    res = subprocess.run(
        [*argv, "--", "python", "torch_allreduce.py"], capture_output=True, text=True, timeout=300, cwd=work, env=env
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert launched_command(res.stderr).startswith("docker run ")
    ranks = re.findall(r"torch-rank RANK=(\d+) WORLD_SIZE=2 LOCAL_RANK=(\d+) MASTER_ADDR=\S+ sum=3", out)
    assert sorted(ranks) == [("0", "0"), ("1", "1")], out[-3000:]


def sbatch_from(
    slurm: SlurmCluster, work: Path, tmp_path: Path, program: list[str], venv: Path = Path(sys.prefix)
) -> str:
    """`hpcbundle sbatch` of `program` (run by `venv`'s python3) for two SLURM nodes, made in the user's
    working directory and submitted from there, `venv` activated; the job's output, exit 0 asserted."""
    site = write_site(
        tmp_path, site_data("slurm-user", launcher="srun", interfaces=[NetnsCluster.DATA_IFACE], ranks_per_node=1)
    )
    script = tmp_path / "job.sh"
    argv = hpcbundle_argv("sbatch", "--site", str(site), "--nodes", "2", "-o", str(script))
    python = str(venv / "bin" / "python3")
    made = subprocess.run([*argv, "--", python, *program], capture_output=True, text=True, timeout=60, cwd=work)
    assert made.returncode == 0, made.stderr
    job = slurm.sbatch_wait(script.read_text(), timeout=600, sbatch_args=[f"--chdir={work}"], env=shell(venv))
    out = job.output + job.error
    assert job.returncode == 0, f"job exit {job.returncode}\n{out[-4000:]}"
    return out


@pytest.mark.parametrize("case", CASES)
def test_users_program_runs_from_their_working_directory_under_sbatch_on_two_slurm_nodes(
    netns_slurm: SlurmCluster, case: str, tmp_path: Path
) -> None:
    """The job runs where it was submitted from (sbatch's default working directory, passed as --chdir
    here because the test cluster's submit helper sets its own), and srun starts every rank there."""
    program, check = CASES[case]
    work, data = user_files(tmp_path, program)
    out = sbatch_from(netns_slurm, work, tmp_path, program_argv(str(data) if "data" in case else "")[1:])
    check(out, work, 2)


# ------------------------------------------------------------------ a torchvision model, on the CUDA stack
# The program users bring first (Horovod's own pytorch_synthetic_benchmark.py imports torchvision). The
# CPU stack here cannot carry torchvision (PyPI's torchvision is the CUDA build and needs PyPI's torch;
# torch's CPU index is out of reach), but the CUDA stack (torch 2.11.0+cu130, torchvision 0.26.0+cu130,
# Horovod built with NCCL) runs on a node without a GPU, on the CPU: that is what runs here, across the
# nodes, in the recipe's SIF and in the host venv its install script made.


def assert_torchvision_trained(out: str, work: Path, ranks: int) -> None:
    for rank in range(ranks):
        line = rf"rank {rank}/{ranks}: resnet18 loss=[\d.]+ cwd={re.escape(str(work))}{LINE_END}"
        assert re.search(line, out, re.M), out[-3000:]
    assert re.search(rf"total images/sec: [\d.]+ on {ranks} ranks$", out, re.M), out[-3000:]


@pytest.mark.gpu_build
def test_torchvision_model_trains_on_three_nodes_in_the_cuda_recipes_host_venv(
    cluster: SshCluster, gpu_host_install: HostInstall, tmp_path: Path
) -> None:
    """The venv the CUDA recipe's install script made, activated as the user would, no container."""
    work, _ = user_files(tmp_path, "torchvision_benchmark.py")
    site = ssh_site(tmp_path, cluster, "ssh-torchvision", export=["PATH", "VIRTUAL_ENV"])
    out = launch_from(cluster, work, site, [], program_argv(""), venv=gpu_host_install.venv)
    assert_torchvision_trained(out, work, RANKS)


@pytest.mark.apptainer
@pytest.mark.gpu_build
def test_torchvision_model_trains_on_three_nodes_in_the_cuda_sif(
    cluster: SshCluster, gpu_sif: SifBuild, tmp_path: Path
) -> None:
    """One `apptainer exec` of the CUDA recipe's SIF per rank (no --nv: no GPU here). doctor FAILs the
    CUDA image on nodes without a GPU, as it should on a cluster (a CUDA job on CPU nodes trains at a
    fraction of the speed; doctor then stops before its program probe), so the launch that runs it
    anyway takes --no-doctor. The host-venv test above passes the probe (torchvision resolves)."""
    work, _ = user_files(tmp_path, "torchvision_benchmark.py")
    site = sif_site(tmp_path, cluster, "sif-torchvision", export=["PATH"])
    image = ["--image", str(gpu_sif.path)]
    doctor = hpcbundle_argv("doctor", "--site", str(site), *image, "--hosts", HOSTS, "--", *program_argv(""))
    rows = cluster.run("node1", doctor, timeout=600, env=shell(), cwd=work)
    assert rows.returncode == 2, rows.stdout + rows.stderr
    assert re.search(r"^FAIL  gpu-presence .* has no GPUs; use a CPU recipe$", rows.stdout, re.M), rows.stdout
    out = launch_from(cluster, work, site, image, program_argv(""), flags=("--no-doctor",))
    assert_torchvision_trained(out, work, RANKS)


@pytest.mark.gpu_build
def test_torchvision_model_trains_under_sbatch_on_two_slurm_nodes_in_the_cuda_recipes_host_venv(
    netns_slurm: SlurmCluster, gpu_host_install: HostInstall, tmp_path: Path
) -> None:
    work, _ = user_files(tmp_path, "torchvision_benchmark.py")
    out = sbatch_from(netns_slurm, work, tmp_path, program_argv("")[1:], venv=gpu_host_install.venv)
    assert_torchvision_trained(out, work, 2)
