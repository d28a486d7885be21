"""The cpu-local recipe's rendered Dockerfile, built unchanged by a real Docker engine, and run.

The engine is private (hpcbundle_testbed.docker_engine) and no registry is used: both stages start
FROM a debootstrapped `local/debian:bookworm` passed as the BUILD_IMAGE / RUNTIME_IMAGE build
arguments; torch==2.13.0+cpu comes from a wheelhouse that this machine's pip fills. Builds, tags,
inspection and export go through hpcbundle.image.docker_client (the Docker SDK). Cold (empty cache) this is
the slow test of the suite; warm, every layer comes from the cache and the module takes about a
minute, most of it the in-image Horovod runs.

Nothing skips: a missing tool is installed by the fixtures, a missing input fails with the fix.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcbundle.cli import main
from hpcbundle.image import docker_client
from hpcbundle.image.derive import image_spec, recipe_record, runtime_stage
from hpcbundle.image.spec import EXAMPLES
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.knowledge.labels import MANIFEST
from hpcbundle_testbed.docker_engine.engine import DockerEngine
from hpcbundle_testbed.docker_plugin import BUILD_TAG, RECIPE, RUNTIME_TAG, Built

from .helpers import ROOT

pytestmark = pytest.mark.docker

# The runtime stage drops compilers, headers, cmake and the wheelhouse, and copies the venv from the
# `slim` stage, without the frameworks' C++ headers and PyTorch's C++ test binaries; the ~1.8 GB of
# PyTorch + TensorFlow that runs is in both, which bounds the ratio from below. Measured
# (bench/image_sizes.py, also in the session summary): build stage 3.04 GB, runtime 2.03 GB, ratio 0.67.
MAX_RUNTIME_TO_BUILD_RATIO = 0.70
MIN_SAVING_BYTES = 900e6
BUILD_ONLY = (
    "/usr/bin/gcc",
    "/usr/bin/g++",
    "/usr/bin/cmake",
    "/usr/include/python3.11",
    "/wheelhouse",
    "/tmp/build",
    "/opt/venv/lib/python3.11/site-packages/tensorflow/include",
    "/opt/venv/lib/python3.11/site-packages/torch/include",
)
# In-container commands: Open MPI as root in a container needs these; 2 ranks on 2 cores.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
RUN_ENV = {"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


def run_in(engine: DockerEngine, image: str, argv: list[str], timeout: float = 600) -> str:
    """Run argv in a fresh container of `image`; fail with its output unless it exits 0."""
    status, out = engine.run(image, argv, timeout=timeout, environment=RUN_ENV)
    assert status == 0, f"exit {status}: {' '.join(argv)}\n{out[-4000:]}"
    return out


def check_build_marks(out: str) -> set[str]:
    """`horovodrun --check-build` output -> {'Frameworks: PyTorch', 'Controllers: MPI', ...} marked [X]."""
    marked, section = set(), ""
    for line in out.splitlines():
        if line.startswith("Available "):
            section = line[len("Available ") :].strip()
        m = re.match(r"^\s*\[X\]\s+(.+?)\s*$", line)
        if m and section:
            marked.add(f"{section} {m.group(1)}")
    return marked


def step_log(log: str, needle: str) -> str:
    """The part of a build log that belongs to the first step whose instruction contains `needle`."""
    for part in re.split(r"^(?=Step \d+/\d+ :)", log, flags=re.M):
        if needle in part.split("\n", 1)[0]:
            return part
    raise AssertionError(f"no build step with {needle!r}")


# ------------------------------------------------------------------------------------------ build


def test_rendered_dockerfile_builds_unchanged_with_its_own_check_build_step(cpu_local: Built):
    """What was built is byte for byte what `hpcbundle render` prints, and the build stage's
    Horovod step (which runs `horovodrun --check-build` and refuses a missing [X]) is in it."""
    rendered = CliRunner().invoke(main, ["--bundle", str(ROOT), "render", RECIPE, "--format", "docker"])
    assert rendered.exit_code == 0, rendered.output
    assert rendered.output == cpu_local.dockerfile
    steps = [h.get("CreatedBy", "") for h in cpu_local.build.history]
    assert any("horovodrun --check-build" in s and "is not built" in s for s in steps), (
        "the build stage has no Horovod check-build layer"
    )
    # Built cold in this run, the step's log shows the check itself; warm, it came from the cache.
    step = step_log(cpu_local.logs["build"], "horovodrun --check-build")
    if "Using cache" not in step:
        assert {
            "Frameworks: PyTorch",
            "Frameworks: TensorFlow",
            "Controllers: MPI",
            "Controllers: Gloo",
        } <= check_build_marks(step)


def test_runtime_image_is_well_under_the_build_stage_and_has_no_build_tools(cpu_local: Built, docker_engine, capsys):
    build, runtime = cpu_local.build, cpu_local.runtime
    ratio = runtime.size / build.size
    with capsys.disabled():
        print(
            f"\n  {'image':<28}{'size':>10}{'layers':>8}\n"
            f"  {BUILD_TAG:<28}{docker_client.format_size(build.size):>10}{build.layers:>8}\n"
            f"  {RUNTIME_TAG:<28}{docker_client.format_size(runtime.size):>10}{runtime.layers:>8}\n"
            f"  runtime/build = {ratio:.2f}, saved {docker_client.format_size(build.size - runtime.size)}"
        )
    assert ratio <= MAX_RUNTIME_TO_BUILD_RATIO, (
        f"runtime {docker_client.format_size(runtime.size)} is {ratio:.2f} of the build stage "
        f"{docker_client.format_size(build.size)}"
    )
    assert build.size - runtime.size >= MIN_SAVING_BYTES
    probe = " ".join(f"[ ! -e {p} ] || echo {p};" for p in BUILD_ONLY)
    assert run_in(docker_engine, RUNTIME_TAG, ["sh", "-c", probe]).split() == []
    assert run_in(docker_engine, BUILD_TAG, ["sh", "-c", probe]).split() == [p for p in BUILD_ONLY if p != "/tmp/build"]


def test_image_labels_and_manifest_carry_the_recipe(cpu_local: Built, docker_engine: DockerEngine):
    recipe, info = cpu_local.recipe, cpu_local.runtime
    stage = runtime_stage(image_spec(recipe, knowledge_base()))
    ours = {k: v for k, v in info.labels.items() if k.startswith("org.hpcbundle.")}
    assert ours == stage.labels
    assert ours["org.hpcbundle.recipe"] == recipe.name
    assert ours["org.hpcbundle.horovod"] == recipe.horovod.version
    assert ours["org.hpcbundle.tensorflow"] == recipe.frameworks.tensorflow.version
    assert ours["org.hpcbundle.pytorch"] == f"{recipe.frameworks.pytorch.version}+{recipe.frameworks.pytorch.variant}"
    assert ours["org.hpcbundle.mpi.version"] == recipe.mpi.version
    assert ours["org.hpcbundle.manifest"] == MANIFEST
    manifest = docker_client.read_json(docker_engine.client(), RUNTIME_TAG, MANIFEST)
    assert manifest["recipe"] == recipe_record(recipe)
    assert manifest["labels"] == stage.labels
    assert manifest == json.loads(stage.manifest)


# ------------------------------------------------------------------------------ inside the image


def test_check_build_in_runtime_image_lists_pytorch_tensorflow_mpi_gloo(cpu_local: Built, docker_engine):
    marks = check_build_marks(run_in(docker_engine, RUNTIME_TAG, ["horovodrun", "--check-build"]))
    for want in (
        "Frameworks: PyTorch",
        "Frameworks: TensorFlow",
        "Controllers: MPI",
        "Controllers: Gloo",
        "Tensor Operations: MPI",
        "Tensor Operations: Gloo",
    ):
        assert want in marks, f"{want} is not [X]: {sorted(marks)}"


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_two_rank_allreduce_in_runtime_image_sums_right(cpu_local: Built, docker_engine, framework: str):
    script = f"{EXAMPLES}/allreduce_check.py"
    assert (ROOT / "examples" / "allreduce_check.py").is_file(), "examples/allreduce_check.py is missing"
    out = run_in(docker_engine, RUNTIME_TAG, [*MPIRUN, "python", script, "--framework", framework], timeout=300)
    assert re.search(rf"^allreduce_check: OK size=2 expected=1 framework={framework} ", out, re.M), out


def test_short_pytorch_training_in_runtime_image_learns(cpu_local: Built, docker_engine):
    assert (ROOT / "examples" / "pytorch_train.py").is_file(), "examples/pytorch_train.py is missing"
    out = run_in(
        docker_engine,
        RUNTIME_TAG,
        [*MPIRUN, "--bind-to", "none", "python", f"{EXAMPLES}/pytorch_train.py", "--synthetic", "--epochs", "2"],
        timeout=600,
    )
    epochs = re.findall(r"^epoch (\d+)/2: loss=([\d.]+)", out, re.M)
    final = re.findall(r"^final: accuracy=([\d.]+) loss=[\d.]+ images/sec=[\d.]+ ranks=(\d+)$", out, re.M)
    assert [e for e, _ in epochs] == ["1", "2"] and len(final) == 1, out[-3000:]
    assert final[0][1] == "2"
    assert float(epochs[1][1]) < float(epochs[0][1]), f"loss did not fall: {epochs}"
    assert float(final[0][0]) >= 0.9, f"accuracy {final[0][0]} on learnable synthetic data"


# ------------------------------------------------------------------------- SDK and command line


def test_export_rootfs_streams_the_flattened_file_system(docker_engine, docker_base_image):
    buf = io.BytesIO()
    written = docker_client.export_rootfs(docker_engine.client(), docker_base_image.tag, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = set(tar.getnames())
    assert written == buf.getbuffer().nbytes and "etc/debian_version" in names


def test_build_docker_command_streams_the_log_and_prints_labels_and_size(
    cpu_local: Built, docker_engine, docker_base_image, wheelhouse
):
    """Warm: every step comes from the layer cache, so this is the CLI path at CLI speed."""
    result = CliRunner().invoke(
        main,
        [
            "--bundle",
            str(ROOT),
            "build-docker",
            RECIPE,
            "--base-image",
            docker_base_image.tag,
            "--wheelhouse",
            str(wheelhouse),
            "--network",
            "host",
            "-t",
            RUNTIME_TAG,
            "-t",
            "hpcbundle/cpu-local:cli",
        ],
        env=docker_engine.env(),
    )
    assert result.exit_code == 0, result.output + result.stderr
    assert "Step 1/" in result.stderr and "Using cache" in result.stderr
    assert f"built {RUNTIME_TAG}, hpcbundle/cpu-local:cli  {cpu_local.runtime.short_id}" in result.stdout
    assert docker_client.format_size(cpu_local.runtime.size) in result.stdout
    assert f"  org.hpcbundle.recipe={RECIPE}" in result.stdout
    assert docker_client.inspect(docker_engine.client(), "hpcbundle/cpu-local:cli").id == cpu_local.runtime.id


def test_build_docker_without_an_engine_says_where_it_looked(tmp_path):
    result = CliRunner().invoke(
        main,
        ["--bundle", str(ROOT), "build-docker", RECIPE, "--wheelhouse", str(tmp_path)],
        env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"},
    )
    # The wheelhouse check comes first: no torch+cpu wheel in an empty directory.
    assert result.exit_code == 2
    assert "no torch-2.13.0+cpu wheel" in result.stderr and "make wheelhouse" in result.stderr
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    result = CliRunner().invoke(
        main,
        ["--bundle", str(ROOT), "build-docker", RECIPE, "--wheelhouse", str(tmp_path)],
        env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"},
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(f"hpcbundle: error: no Docker engine answers at unix://{tmp_path}/no.sock")
    assert len(result.stderr.strip().splitlines()) == 1


def test_private_engine_stops_by_pid_and_leaves_nothing_behind():
    """A second, throw-away engine (fresh data root) next to the session's: it answers, runs a
    container, and after stop() its PID, cgroups, mounts, socket and directories are all gone."""
    from hpcbundle_testbed.docker_engine.host import mounts_under
    from hpcbundle_testbed.procs import pid_alive

    engine = DockerEngine()
    with engine:
        pid, workdir = engine.pid, engine.workdir
        assert pid is not None and pid_alive(pid)
        assert int(engine.pidfile.read_text()) == pid
        base = engine.base_image()  # the cached rootfs, imported into the fresh root
        status, out = engine.run(base.tag, ["sh", "-c", "cat /etc/debian_version"], timeout=60)
        assert status == 0 and out.strip().startswith("12.")
    assert not pid_alive(pid)
    assert not workdir.exists() and not mounts_under(workdir)
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{engine.prefix}-*"))
