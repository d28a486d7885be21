"""On a real NVIDIA GPU (`make test-gpu`; each test skips "no NVIDIA GPU on this host" elsewhere).

The lane (hpcbundle_testbed.gpu_device) installs the CUDA 13 recipe with its rendered install
script on the GPU host, building Horovod with NCCL against the host's torch. Then, as a user on a
GPU node would: `site detect` drafts the site, `doctor --image VENV` judges the install (and the
manifest of a recipe without code for this GPU), `launch --exec` refuses two ranks on one GPU
before starting anything, and one rank trains on the GPU through Horovod's NCCL allreduce.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from hpcbundle.image.derive import image_spec, runtime_stage
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.knowledge.knobs import GPU_CYCLE_TIME
from hpcbundle.rules.loading import load_recipe
from hpcbundle_testbed.cuda_wheels import check_build_marks
from hpcbundle_testbed.gpu_device import nvidia_gpus
from hpcbundle_testbed.gpu_plugin import in_venv

from .helpers import ROOT, hpcbundle_argv

pytestmark = pytest.mark.gpu

HPCBUNDLE = hpcbundle_argv()
ARCH_EXCLUDING_RECIPE = "cuda11.8-tf2.14-torch2.1"  # archs 7.0 and 8.0: no code for 9.0 (H100)


def doctor_rows(out: str) -> dict[str, tuple[str, str]]:
    """`hpcbundle doctor` output -> {rule: (status, evidence)}."""
    rows = {}
    for line in out.splitlines():
        if re.match(r"^(PASS|WARN|FAIL|SKIP)  ", line):
            status, rule, evidence = (re.split(r"\s{2,}", line, maxsplit=2) + [""])[:3]
            rows[rule] = (status, evidence)
    return rows


@pytest.fixture(scope="module")
def drafted_site(gpu_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`hpcbundle site detect` on this GPU node, in the lane's environment, used as it is."""
    draft = tmp_path_factory.mktemp("gpu-site") / "gpunode.yaml"
    run = in_venv(gpu_venv, [*HPCBUNDLE, "site", "detect", "-o", str(draft)], timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return draft


def test_horovod_built_by_the_install_script_has_nccl(gpu_venv: Path) -> None:
    run = in_venv(gpu_venv, ["horovodrun", "--check-build"])
    assert run.returncode == 0, run.stdout + run.stderr
    marks = check_build_marks(run.stdout)
    assert {"Frameworks: PyTorch", "Tensor Operations: NCCL", "Controllers: MPI"} <= marks, marks


def test_site_detect_reads_this_nodes_gpus_and_driver(drafted_site: Path) -> None:
    text = drafted_site.read_text()
    assert f"  gpus: {len(nvidia_gpus())}" in text, text
    assert re.search(r"^  gpu_model: .+# nvidia-smi: NVIDIA ", text, re.M), text
    assert re.search(r"^  driver: \"\d+\.\d+", text, re.M), text
    assert f'\n  HOROVOD_CYCLE_TIME: "{GPU_CYCLE_TIME}"  # CONFIRM: ' in text, text  # tests/golden/detect/h200.yaml


def test_doctor_passes_the_cuda13_install_on_this_gpu(gpu_venv: Path, drafted_site: Path) -> None:
    run = in_venv(
        gpu_venv, [*HPCBUNDLE, "doctor", "--site", str(drafted_site), "--image", str(gpu_venv), "--no-checksum"]
    )
    rows = doctor_rows(run.stdout)
    for rule in ("gpu-presence", "driver-cuda", "gpu-arch"):
        assert rows.get(rule, ("missing",))[0] == "PASS", f"{rule}: {rows.get(rule)}\n{run.stdout}"
    assert run.returncode in (0, 1), f"doctor found a FAIL on the GPU node:\n{run.stdout}{run.stderr}"


def test_doctor_fails_a_recipe_without_code_for_this_gpu(gpu_venv: Path, drafted_site: Path, tmp_path: Path) -> None:
    recipe = load_recipe(ARCH_EXCLUDING_RECIPE, ROOT / "recipes")
    image = tmp_path / "image"
    (image / "etc" / "hpcbundle").mkdir(parents=True)
    (image / "etc" / "hpcbundle" / "manifest.json").write_text(
        runtime_stage(image_spec(recipe, knowledge_base())).manifest
    )
    run = in_venv(gpu_venv, [*HPCBUNDLE, "doctor", "--site", str(drafted_site), "--image", str(image)])
    status, evidence = doctor_rows(run.stdout).get("gpu-arch", ("missing", ""))
    assert status == "FAIL", run.stdout
    assert "(compute capability 9.0); the recipe builds 7.0, 8.0" in evidence, evidence
    assert run.returncode == 2


def test_two_ranks_on_one_gpu_are_refused_before_launch(gpu_venv: Path, drafted_site: Path, tmp_path: Path) -> None:
    if len(nvidia_gpus()) != 1:
        pytest.skip(f"this host has {len(nvidia_gpus())} GPUs; the case needs exactly one")
    marker = tmp_path / "started"
    program = ["python", "-c", f"open({str(marker)!r}, 'w')"]
    host = socket.gethostname()  # this node asked for two ranks, as a user forcing two slots would
    launch = [*HPCBUNDLE, "launch", "--site", str(drafted_site), "--np", "2", "--hosts", f"{host}:2", "--exec", "--"]
    run = in_venv(gpu_venv, [*launch, *program])
    assert (run.returncode, run.stdout) == (2, ""), run.stdout + run.stderr
    # rule ranks-per-node (rules/nodes.py) refuses the launch plan, before the doctor or any rank: the same line
    # on a CPU host (tests/test_launch.py::test_two_slots_on_a_one_gpu_node_are_refused_before_anything_starts)
    assert run.stderr == (
        f"hpcbundle: error: --hosts {host}:2: 2 ranks on {host} but site gpunode nodes have 1 GPUs: "
        'NCCL refuses two ranks on one GPU (invalid usage: "Duplicate GPU detected") '
        "(give at most 1 ranks per node, one per GPU)\n"
    )
    assert not marker.exists(), "a rank started although the launch was refused"


def test_one_rank_trains_on_the_gpu_through_horovods_nccl_allreduce(
    gpu_venv: Path, drafted_site: Path, tmp_path: Path
) -> None:
    program = ["python", str(ROOT / "examples" / "pytorch_train.py"), "--epochs", "5"]
    nccl_log = gpu_venv.parent / "nccl-train.%h.%p.log"
    run = in_venv(
        gpu_venv,
        [*HPCBUNDLE, "launch", "--site", str(drafted_site), "--np", "1", "--exec", "--", *program],
        timeout=900,
        env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(nccl_log)},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "device=cuda:0" in run.stdout, run.stdout[-3000:]
    final = re.search(r"^final: accuracy=([\d.]+) ", run.stdout, re.M)
    assert final and float(final.group(1)) >= 0.9, run.stdout[-3000:]
    logs = sorted(gpu_venv.parent.glob("nccl-train.*.log"))
    text = "".join(path.read_text(errors="replace") for path in logs)
    assert "Init COMPLETE" in text, f"NCCL did not start a communicator (logs: {logs})"
