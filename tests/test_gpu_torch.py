"""torch.distributed on a real NVIDIA GPU (`make test-gpu`; each test skips "no NVIDIA GPU on this host" elsewhere).

As a user on a GPU node would: `site detect` drafts the site, used as it is, and the node's own Python and torch
run the ranks (no Horovod: `scripts/device/gpu-lane.sh --torch` runs these alone). The gate's NCCL path under
`--torch`, examples/torch_train.py under `--torchrun` on cuda:0, and two workers on one GPU: refused by
hpcbundle before anything starts, and refused by NCCL itself when started by hand.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcbundle_testbed.gpu_device import host_torch_site, nvidia_gpus
from hpcbundle_testbed.slurm_cluster import free_ports

from .helpers import ROOT, hpcbundle_argv

pytestmark = pytest.mark.gpu

HPCBUNDLE = hpcbundle_argv()
TORCH_TRAIN = str(ROOT / "examples" / "torch_train.py")
LIGHTNING_DIGITS = str(ROOT / "tests" / "data" / "user_programs" / "lightning_digits.py")
DIGITS = str(ROOT / "examples" / "data" / "digits.csv.gz")

# Two processes on cuda:0 meeting by env:// over NCCL, as a hand-written line would start them.
SHARED_GPU_RANK = """
import torch, torch.distributed as dist
torch.cuda.set_device(0)
dist.init_process_group("nccl")
value = torch.ones(1, device="cuda:0")
dist.all_reduce(value)
print("sum", value.item())
"""


@pytest.fixture(scope="module")
def torch_python() -> str:
    """The node's `python3` that imports torch (it runs the ranks, as an image's Python would)."""
    python = shutil.which("python3")
    assert python, "no python3 on this GPU host"
    host_torch_site(python)
    return python


@pytest.fixture(scope="module")
def gpu_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`hpcbundle site detect` on this GPU node, used as it is; hpcbundle-bind installed as docs/sites.md says
    for a site with node.gpu_numa and ranks on the host (`make install-bind`, here into a folder on PATH)."""
    work = tmp_path_factory.mktemp("gpu-torch-site")
    draft = work / "gpunode.yaml"
    run = subprocess.run([*HPCBUNDLE, "site", "detect", "-o", str(draft)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    bind = subprocess.run(["make", "-C", str(ROOT), "install-bind", f"PREFIX={work}"], capture_output=True, text=True)
    assert bind.returncode == 0, bind.stdout + bind.stderr
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}")
        yield draft


@pytest.fixture
def nccl_logs(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """Where NCCL_DEBUG=INFO files go: the lane's folder (gpu-lane.sh brings them back), else the test's."""
    folder = Path(os.environ.get("HPCBUNDLE_GPU_LANE_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"nccl-{request.node.name.removeprefix('test_')[:40]}.%h.%p.log"


def launch(site: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HPCBUNDLE, "launch", "--site", str(site), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )


def nccl_text(pattern: Path) -> str:
    """What NCCL wrote into the files of an NCCL_DEBUG_FILE pattern (its %h.%p filled in)."""
    files = pattern.parent.glob(pattern.name.split("%")[0] + "*")
    return "".join(path.read_text(errors="replace") for path in sorted(files))


def test_the_gate_measures_nccl_on_this_gpu_under_torch(gpu_site: Path, torch_python: str) -> None:
    program = [torch_python, TORCH_TRAIN, "--epochs", "2"]
    run = launch(gpu_site, "--torch", "--np", "1", "--gate", "--exec", "--", *program)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    gate = re.search(r"^hpcbundle gate: (\w+).*$", run.stdout + run.stderr, re.M)
    assert gate and gate.group(1) == "PASS", run.stdout[-3000:] + run.stderr[-3000:]
    assert "torch.distributed nccl" in gate.group(0) and "RANK 0 to 0 once each" in gate.group(0), gate.group(0)
    assert "Gloo" not in gate.group(0), gate.group(0)
    assert "done: 2 epochs on 1 ranks, rank 0 on cuda:0" in run.stdout, run.stdout[-3000:]


def test_torchrun_trains_the_torch_example_on_this_gpu(gpu_site: Path, torch_python: str, nccl_logs: Path) -> None:
    program = [torch_python, TORCH_TRAIN, "--epochs", "5"]
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(nccl_logs)}
    run = launch(gpu_site, "--torchrun", "--np", "1", "--exec", "--", *program, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "-m torch.distributed.run --standalone --nproc-per-node=1" in run.stderr, run.stderr[-3000:]
    last = re.findall(r"^epoch 5/5: .* val_accuracy=([\d.]+) ", run.stdout, re.M)
    assert last and float(last[0]) >= 0.9, run.stdout[-3000:]
    assert "done: 5 epochs on 1 ranks, rank 0 on cuda:0" in run.stdout, run.stdout[-3000:]
    assert "Init COMPLETE" in nccl_text(nccl_logs), f"NCCL started no communicator ({nccl_logs.parent})"


def test_a_users_lightning_script_trains_on_this_gpu_under_torchrun(gpu_site: Path, torch_python: str) -> None:
    """Lightning, unchanged, takes its world from torchrun (TorchElasticEnvironment) and the GPU as its device."""
    if subprocess.run([torch_python, "-c", "import lightning"], capture_output=True, check=False).returncode:
        pytest.fail(f"{torch_python} cannot import lightning on this GPU host", pytrace=False)
    program = [torch_python, LIGHTNING_DIGITS, DIGITS, "--epochs", "5"]
    run = launch(gpu_site, "--torchrun", "--np", "1", "--exec", "--", *program)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    seen = re.search(r"^lightning: (.*) val_accuracy=([\d.]+)$", run.stdout, re.M)
    assert seen, run.stdout[-3000:] + run.stderr[-3000:]
    world, accuracy = seen.groups()
    assert world == "world_size=1 environment=TorchElasticEnvironment device=cuda:0 torchrun=True", seen.group(0)
    assert float(accuracy) >= 0.9, seen.group(0)


@pytest.mark.parametrize("wiring", ["--torch", "--torchrun"])
def test_two_torch_workers_on_one_gpu_are_refused_before_launch(
    gpu_site: Path, torch_python: str, tmp_path: Path, wiring: str
) -> None:
    if len(nvidia_gpus()) != 1:
        pytest.skip(f"this host has {len(nvidia_gpus())} GPUs; the case needs exactly one")
    marker, script = tmp_path / "started", tmp_path / "touch.py"
    script.write_text(f"open({str(marker)!r}, 'w')\n")  # a script: torchrun runs no -c
    host = socket.gethostname()
    run = launch(gpu_site, wiring, "--np", "2", "--hosts", f"{host}:2", "--exec", "--", torch_python, str(script))
    assert (run.returncode, run.stdout) == (2, ""), run.stdout + run.stderr
    assert run.stderr.startswith(f"hpcbundle: error: --hosts {host}:2: 2 ranks on {host} but site "), run.stderr
    assert "NCCL refuses two ranks on one GPU" in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert not marker.exists(), "a worker started although the launch was refused"


def test_nccl_itself_fails_two_ranks_on_one_gpu_when_started_by_hand(
    torch_python: str, tmp_path: Path, nccl_logs: Path
) -> None:
    """What the refusal above prevents, measured: NCCL's own error, after both ranks started."""
    script = tmp_path / "shared_gpu.py"
    script.write_text(SHARED_GPU_RANK)
    port = free_ports(1)[0]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    ranks = [
        subprocess.Popen(
            [torch_python, str(script)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": "0"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    for rank in ranks:
        try:
            outputs.append(rank.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            rank.kill()
            outputs.append(rank.communicate()[0] + "\n(killed after 180 s)")
    text = "\n".join(outputs)
    (nccl_logs.parent / "nccl-duplicate-gpu.log").write_text(text)  # NCCL's words, for the record
    assert all(rank.returncode != 0 for rank in ranks), text[-4000:]
    assert "Duplicate GPU detected" in text, text[-4000:]
