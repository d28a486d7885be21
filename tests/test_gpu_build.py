"""The CUDA-wheels recipe's bare-metal install script, run for real on a host venv that already has
torch 2.11 and PyPI's NVIDIA wheels: Horovod 0.28.1 built with NCCL ops against torch's own NCCL,
no GPU needed (it compiles and links; nothing runs on a GPU here).

The script is what `hpcbundle render cuda13.0-torch2.11 --format shell` writes, unchanged. It runs
offline (PIP_NO_INDEX=1, the cached wheelhouse as PIP_FIND_LINKS), so it can only use what the host
venv and the wheelhouse hold. Cold, Horovod compiles (~220 s on 2 cores) into the script's own
cache, ``$HPCBUNDLE_CACHE/horovod/<key>/``; warm, the script installs that wheel in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbundle.image.blocks.horovod import check_build
from hpcbundle.image.derive import image_spec, runtime_stage
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle_testbed.cuda_wheels import check_build_marks, cubin_archs, dist_record, ldd, site_packages
from hpcbundle_testbed.gpu_plugin import CudaStack, HostInstall, in_venv, offline_env, run_install_script

pytestmark = pytest.mark.gpu_build


def _in_venv(venv: Path, argv: list[str], timeout: float = 300) -> str:
    """argv's output, run in the venv's environment (hpcbundle-env.sh); it must exit 0."""
    res = in_venv(venv, argv, timeout)
    assert res.returncode == 0, f"{' '.join(argv)} failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-3000:]}"
    return res.stdout + res.stderr


def _torch_lib(venv: Path) -> Path:
    libs = sorted((site_packages(venv) / "horovod" / "torch").glob("mpi_lib_v2*.so"))
    assert libs, f"no horovod/torch/mpi_lib_v2*.so in {venv}"
    return libs[0]


def test_script_reuses_the_hosts_torch_and_nvidia_wheels(gpu_host_install: HostInstall) -> None:
    assert gpu_host_install.torch_record is not None, "the host venv has no torch"
    assert dist_record(gpu_host_install.venv, "torch") == gpu_host_install.torch_record, (
        "the script reinstalled torch instead of using the host's"
    )


def test_check_build_lists_nccl_and_pytorch(gpu_host_install: HostInstall, cuda_host_venv: CudaStack) -> None:
    venv = gpu_host_install.venv
    marks = check_build_marks(_in_venv(venv, ["horovodrun", "--check-build"]))
    assert {"Frameworks: PyTorch", "Tensor Operations: NCCL"} <= marks, marks
    wanted = set(check_build(cuda_host_venv.recipe))
    assert wanted <= marks, f"the recipe wants {sorted(wanted - marks)} too"


def test_horovod_torch_imports_with_nccl_built(gpu_host_install: HostInstall) -> None:
    out = _in_venv(
        gpu_host_install.venv,
        ["python", "-c", "import horovod.torch as hvd; print('nccl_built', hvd.nccl_built(), hvd.mpi_built())"],
    )
    assert "nccl_built" in out
    version = int(out.split("nccl_built", 1)[1].split()[0])
    assert version >= 22800, f"hvd.nccl_built() = {version}: want torch's NCCL 2.28 (22809)"


def test_one_nccl_torchs_own_wheel(gpu_host_install: HostInstall) -> None:
    venv = gpu_host_install.venv
    nvidia = site_packages(venv) / "nvidia"
    resolved = ldd(_torch_lib(venv), run=lambda argv: _in_venv(venv, argv))
    assert "libnccl.so.2" in resolved, f"Horovod's torch library does not link NCCL: {sorted(resolved)}"
    assert Path(resolved["libnccl.so.2"]).resolve().parent == (nvidia / "nccl" / "lib").resolve(), resolved
    copies = [p for p in site_packages(venv).rglob("libnccl.so*") if not p.is_symlink()]
    assert len(copies) == 1, f"more than one NCCL in the venv: {copies}"


def test_cuda_code_for_every_recipe_arch(gpu_host_install: HostInstall, cuda_host_venv: CudaStack) -> None:
    venv = gpu_host_install.venv
    cuobjdump = site_packages(venv) / "nvidia" / "cu13" / "bin" / "cuobjdump"
    assert cuobjdump.exists(), "cuobjdump missing (nvidia-cuda-cuobjdump wheel)"
    out = _in_venv(venv, [str(cuobjdump), "--list-elf", str(_torch_lib(venv))])
    archs = cubin_archs(out)
    wanted = set(cuda_host_venv.recipe.gpu.archs) if cuda_host_venv.recipe.gpu else set()
    assert wanted and wanted <= archs, f"cubins for {sorted(archs)}; the recipe's gpu.archs: {sorted(wanted)}"


def test_horovod_wheel_is_cached_by_versions(gpu_host_install: HostInstall) -> None:
    wheel = gpu_host_install.wheel
    assert wheel.is_file(), f"the script did not keep its Horovod wheel in its cache: no {wheel}"
    assert wheel.name.startswith("horovod-0.28.1-"), wheel
    if gpu_host_install.installed_from != wheel:  # cold: it built; the next run must take the cached wheel
        assert "Horovod: building" in gpu_host_install.log
    else:
        assert "Horovod: building" not in gpu_host_install.log, "a cached wheel was there, yet Horovod was built"


def test_script_builds_against_a_cuda_toolkit_the_host_names(
    pytestconfig: pytest.Config, gpu_host_install: HostInstall, cuda_host_venv: CudaStack, tmp_path: Path
) -> None:
    """HPCBUNDLE_CUDA_HOME names a CUDA 13.0 toolkit already there (here the venv's own nvcc tree, a
    real toolkit, as /usr/local/cuda or a `module load cuda` would be): the script asks pip for no
    toolkit wheel, builds against that toolkit and writes its lib64 into the env file."""
    venv = gpu_host_install.venv
    toolkit = site_packages(venv) / "nvidia" / "cu13"
    assert (toolkit / "bin" / "nvcc").is_file(), f"no nvcc in {toolkit}"
    env = offline_env(cuda_host_venv) | {"HPCBUNDLE_CUDA_HOME": str(toolkit)}
    log, _ = run_install_script(pytestconfig, venv, tmp_path, env)
    assert f"CUDA toolkit: {toolkit}\n" in log
    assert "nvidia-cuda-nvcc" not in log, "pip was asked for the toolkit wheels although a toolkit was named"
    assert f"{toolkit}/lib64${{LD_LIBRARY_PATH" in (venv / "hpcbundle-env.sh").read_text()
    marks = check_build_marks(_in_venv(venv, ["horovodrun", "--check-build"]))
    assert {"Frameworks: PyTorch", "Tensor Operations: NCCL"} <= marks, marks


def test_script_leaves_the_recipe_where_doctor_reads_an_images(
    gpu_host_install: HostInstall, cuda_host_venv: CudaStack
) -> None:
    venv = gpu_host_install.venv
    manifest = venv / "etc" / "hpcbundle" / "manifest.json"
    assert manifest.is_file(), "the install script wrote no manifest into the venv"
    assert json.loads(manifest.read_text()) == json.loads(
        runtime_stage(image_spec(cuda_host_venv.recipe, knowledge_base())).manifest
    )
    hpcbundle = Path(sys.executable).parent / "hpcbundle"
    run = subprocess.run(
        [str(hpcbundle), "doctor", "--site", "local", "--image", str(venv), "--no-checksum"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert f"PASS  image-metadata       read {manifest} on " in run.stdout, run.stdout + run.stderr
    # no GPU here: the CUDA recipe's manifest is judged against this node's (absent) GPUs
    assert "FAIL  gpu-presence         recipe cuda13.0-torch2.11 is a CUDA stack" in run.stdout, run.stdout
