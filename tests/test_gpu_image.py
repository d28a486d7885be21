"""The CUDA-wheels recipe's rendered Dockerfile, built unchanged by the private Docker engine FROM the
debootstrapped `local/debian:bookworm`, offline, reusing what is already here; then, inside the
image, what the host build shows: check-build lists NCCL and PyTorch, horovod.torch imports, its
library resolves libnccl.so.2 into torch's own nvidia/nccl wheel, and its cubins cover gpu.archs.

Reuse, so the image neither downloads ~4 GB again nor compiles Horovod again: the build context's
wheelhouse/ holds the cached CUDA wheelhouse (hard links) and the Horovod wheel the install script
cached, at ``wheelhouse/horovod/<key>/`` (the script's cache layout); the build runs with
PIP_NO_INDEX=1. The template must install that wheel instead of building the sdist when it is
there (test_image_reuses_the_cached_horovod_wheel says so when it does not).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from hpcbundle.image.blocks.horovod import check_build, horovod_cache
from hpcbundle.image.spec import VENV, WHEELHOUSE
from hpcbundle_testbed import cuda_wheels
from hpcbundle_testbed.cuda_wheels import check_build_marks, cubin_archs, ldd
from hpcbundle_testbed.docker_engine.engine import DockerEngine
from hpcbundle_testbed.gpu_plugin import GPU_RECIPE, CudaStack, HostInstall, terminal_progress
from hpcbundle_testbed.sites import site_data, write_site

from .helpers import ROOT, hpcbundle_argv, launched_command

pytestmark = [pytest.mark.gpu_build, pytest.mark.docker]

TAG = f"hpcbundle/{GPU_RECIPE}:latest"
BUILD_TAG = f"hpcbundle/{GPU_RECIPE}:build"
SITE = f"{VENV}/lib/python3.11/site-packages"
RUN_ENV = {"PYTHONUNBUFFERED": "1"}


def _link_tree(src: Path, dest: Path) -> None:
    """`dest` mirrors `src` with hard links (no copy of 4 GB), copies where links cannot cross."""
    for path in src.rglob("*"):
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _docker_lines(line: str) -> bool:
    return line.startswith("Step ") or line.startswith("hpcbundle")


@pytest.fixture(scope="module")
def gpu_image(
    request: pytest.FixtureRequest,
    cuda_wheelhouse: CudaStack,
    gpu_host_install: HostInstall,
    docker_engine: DockerEngine,
    docker_base_image,
    gpu_report: list[str],
    tmp_path_factory,
):
    """`hpcbundle build-docker cuda13.0-torch2.11` through the private engine; returns (log, seconds)."""
    work = tmp_path_factory.mktemp("gpu-image")
    wheels = work / "wheelhouse"
    _link_tree(cuda_wheelhouse.wheelhouse.path, wheels)
    (wheels / cuda_wheels.COMPLETE).unlink(missing_ok=True)
    # Where the image looks for a prebuilt Horovod: /wheelhouse/horovod/<key>, the key being the
    # recipe's versions (the host script's cache adds its Python to the same key).
    in_image = horovod_cache(cuda_wheelhouse.recipe, host=False)
    assert in_image.startswith(WHEELHOUSE + "/"), in_image
    _link_tree(gpu_host_install.wheel.parent, wheels / in_image[len(WHEELHOUSE) + 1 :])
    # The build stage gets its own tag (as the cpu-local fixture does): the engine prunes untagged
    # images when it stops, and with them the build stage's layer cache.
    logs, seconds = [], 0.0
    try:
        for stage, extra in (("build", ["--target", "build", "-t", BUILD_TAG]), ("runtime", [])):
            log = work / f"{stage}.log"
            t0 = time.monotonic()
            status = cuda_wheels.run_logged(
                [
                    str(Path(sys.executable).parent / "hpcbundle"),
                    "build-docker",
                    GPU_RECIPE,
                    *extra,
                    "--base-image",
                    docker_base_image.tag,
                    "--network",
                    "host",
                    "--wheelhouse",
                    str(wheels),
                    "--build-arg",
                    "PIP_NO_INDEX=1",
                ],
                log,
                env={**os.environ, **docker_engine.env()},
                cwd=ROOT,
                timeout=3000,
                progress=terminal_progress(request.config, f"docker gpu {stage}"),
                show=_docker_lines,
            )
            took = time.monotonic() - t0
            seconds += took
            text = log.read_text(errors="replace")
            assert status == 0, (
                f"hpcbundle build-docker {GPU_RECIPE} {stage} failed ({status}):\n{cuda_wheels.tail(log)}"
            )
            logs.append(text)
            steps = len(re.findall(r"^Step \d+/\d+ :", text, re.M))
            gpu_report.append(
                f"build {GPU_RECIPE} {stage}: {took:.0f} s ({text.count('Using cache')}/{steps} steps cached)"
            )
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    size = docker_engine.client().images.get(TAG).attrs["Size"]
    gpu_report.append(f"{TAG}: {size / 1e9:.2f} GB, built in {seconds:.0f} s")
    return "".join(logs), seconds


def _run(engine: DockerEngine, argv: list[str], timeout: float = 600) -> str:
    status, out = engine.run(TAG, argv, timeout=timeout, environment=RUN_ENV)
    assert status == 0, f"exit {status}: {' '.join(argv)}\n{out[-4000:]}"
    return out


def _torch_lib(engine: DockerEngine) -> str:
    out = _run(engine, ["bash", "-c", f"ls {SITE}/horovod/torch/mpi_lib_v2*.so"])
    return out.split()[0]


def test_image_reuses_the_cached_horovod_wheel(gpu_image) -> None:
    log, _ = gpu_image
    compiled = [marker for marker in ("-- Configuring done", "Building wheel for horovod") if marker in log]
    assert not compiled, (
        f"the image compiled Horovod again ({compiled}) although wheelhouse/horovod/<key>/ held the wheel: "
        "the template must install wheelhouse/horovod/<key>/horovod-*.whl when it is there"
    )


def test_image_check_build_lists_nccl_and_pytorch(gpu_image, docker_engine: DockerEngine, cuda_wheelhouse) -> None:
    marks = check_build_marks(_run(docker_engine, ["horovodrun", "--check-build"]))
    assert {"Frameworks: PyTorch", "Tensor Operations: NCCL"} <= marks, marks
    assert set(check_build(cuda_wheelhouse.recipe)) <= marks, marks


def test_image_imports_horovod_torch(gpu_image, docker_engine: DockerEngine) -> None:
    out = _run(docker_engine, ["python", "-c", "import horovod.torch as hvd; print('nccl_built', hvd.nccl_built())"])
    assert int(out.split("nccl_built", 1)[1].split()[0]) >= 22800, out


def test_image_has_one_nccl_torchs_own_wheel(gpu_image, docker_engine: DockerEngine) -> None:
    resolved = ldd(_torch_lib(docker_engine), run=lambda argv: _run(docker_engine, argv))
    assert resolved.get("libnccl.so.2", "").startswith(f"{SITE}/nvidia/nccl/lib/"), resolved
    copies = _run(docker_engine, ["bash", "-c", "find / -xdev -name 'libnccl.so*' -type f 2>/dev/null"]).split()
    assert len(copies) == 1, f"more than one NCCL in the image: {copies}"


def test_image_cuda_code_for_every_recipe_arch(
    gpu_image, docker_engine: DockerEngine, gpu_host_install: HostInstall, cuda_wheelhouse: CudaStack
) -> None:
    lib = _torch_lib(docker_engine)
    with tempfile.TemporaryDirectory() as tmp:
        local = _copy_out(docker_engine, lib, Path(tmp))
        # cuobjdump is a build tool the runtime image need not carry: the host venv's reads the file.
        cuobjdump = cuda_wheels.site_packages(gpu_host_install.venv) / "nvidia" / "cu13" / "bin" / "cuobjdump"
        out = subprocess.run([str(cuobjdump), "--list-elf", str(local)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    archs = cubin_archs(out.stdout)
    recipe = cuda_wheelhouse.recipe
    wanted = set(recipe.gpu.archs) if recipe.gpu else set()
    assert wanted and wanted <= archs, f"cubins for {sorted(archs)}; the recipe's gpu.archs: {sorted(wanted)}"


def _copy_out(engine: DockerEngine, path: str, dest: Path) -> Path:
    """Copy the file `path` out of the image (docker cp through the SDK) into `dest`."""
    container = engine.client().containers.create(TAG, ["true"])
    try:
        stream, _ = container.get_archive(path)
        data = io.BytesIO(b"".join(stream))
    finally:
        container.remove(force=True)
    target = dest / Path(path).name
    with tarfile.open(fileobj=data) as tar:
        member = tar.extractfile(Path(path).name)
        assert member is not None, f"{path} is not a regular file in the image"
        target.write_bytes(member.read())
    return target


def test_a_users_torchvision_program_trains_in_the_image_from_their_working_directory(
    gpu_image, docker_engine: DockerEngine, tmp_path: Path
) -> None:
    """`hpcbundle launch --exec` on a docker site with the CUDA image, on the CPU (no GPU here): the
    generated `docker run ... -v DIR:DIR -w DIR` line runs 2 ranks of a torchvision model
    (tests/data/user_programs/torchvision_benchmark.py, started as `python3 train.py`) in the one
    container, each in the user's directory. --no-doctor: doctor FAILs a CUDA image on a node without a
    GPU (gpu-presence), as it should on a cluster."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "user_programs" / "torchvision_benchmark.py", work / "train.py")
    data = site_data("docker-torchvision")
    data["mca"]["btl"] = "self,vader,tcp"  # both ranks in one container: shared memory between them
    data["mca"]["btl_vader_single_copy_mechanism"] = "none"  # Docker's seccomp refuses CMA (rule userns-vader)
    data["container"] = {"runtime": "docker"}
    site = write_site(tmp_path, data)
    argv = hpcbundle_argv("launch", "--site", str(site), "--image", TAG, "--np", "2", "--exec", "--no-doctor", "--")
    env = {**os.environ, **docker_engine.env()}
    res = subprocess.run([*argv, "python3", "train.py"], capture_output=True, text=True, timeout=600, cwd=work, env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert f" -v {work}:{work} -w {work} " in launched_command(res.stderr), res.stderr[-2000:]
    for rank in range(2):
        assert re.search(rf"rank {rank}/2: resnet18 loss=[\d.]+ cwd={re.escape(str(work))}", out), out[-3000:]
    # no end-of-line anchor: unbuffered ranks write a line and its newline apart, so another rank's text can land
    # between them on the shared stdout
    assert re.search(r"total images/sec: [\d.]+ on 2 ranks", out), out[-3000:]
