"""Rendering recipes into Dockerfiles and .defs: golden files, shared steps, metadata, shell that works.

Regenerate the golden files after a deliberate change with `make golden`, then review the diff like code.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from hpcbundle.config.errors import UserError
from hpcbundle.config.recipes import Recipe
from hpcbundle.image.blocks import BLOCKS
from hpcbundle.image.blocks.horovod import horovod_env, horovod_key
from hpcbundle.image.blocks.nccl import torch_nccl
from hpcbundle.image.derive import image_spec
from hpcbundle.image.render import (
    SUFFIXES,
    Steps,
    assignments,
    render_image,
    render_steps,
    shell_line_problem,
    template_environment,
)
from hpcbundle.knowledge.bind import BIND_PATH, BIND_SCRIPT
from hpcbundle.knowledge.build_env import derived
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.knowledge.torchenv import TORCHENV_PATH, TORCHENV_SCRIPT

from .helpers import GOLDEN, RENDERED_RECIPES, ROOT, assert_golden, recipe, recipe_data, rendered, steps
from .helpers import SHIPPED_RECIPES as RECIPES

FORMATS = sorted(SUFFIXES)


TEST_RECIPE_BASE = "cpu-local"
"""The shipped recipe every test recipe extends: a test recipe's golden file is its diff against it."""


def golden_name(name: str, fmt: str) -> str:
    """A shipped recipe's golden file is its rendering; a test recipe's, the diff against TEST_RECIPE_BASE."""
    return f"{name}{SUFFIXES[fmt]}" + ("" if name in RECIPES else ".diff")


def golden_text(name: str, fmt: str) -> str:
    """What golden_name(name, fmt) holds: what a test recipe adds shows as exactly the lines it adds."""
    if name in RECIPES:
        return rendered(name, fmt)
    base, suffix = rendered(TEST_RECIPE_BASE, fmt).splitlines(keepends=True), SUFFIXES[fmt]
    own = rendered(name, fmt).splitlines(keepends=True)
    return "".join(difflib.unified_diff(base, own, f"{TEST_RECIPE_BASE}{suffix}", f"{name}{suffix}"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", RENDERED_RECIPES)
def test_rendered_image_matches_its_golden_file(name: str, fmt: str) -> None:
    assert_golden(GOLDEN / golden_name(name, fmt), golden_text(name, fmt))


def test_every_golden_file_belongs_to_a_shipped_or_test_recipe() -> None:
    expected = {golden_name(name, fmt) for name in RENDERED_RECIPES for fmt in FORMATS}
    rendered_goldens = (".Dockerfile", ".def", ".sh", ".diff")
    assert {path.name for path in GOLDEN.iterdir() if path.suffix in rendered_goldens} == expected


@pytest.mark.parametrize("name", RENDERED_RECIPES)
def test_both_formats_run_every_snippet_line_in_the_same_order(name: str) -> None:
    docker = [
        line.strip().removeprefix("RUN ").removesuffix(" && \\") for line in rendered(name, "docker").splitlines()
    ]
    singularity = [line.strip() for line in rendered(name, "singularity").splitlines()]
    for text in (docker, singularity):
        position = 0
        for step in (*steps(name).build, *steps(name).runtime):
            position = text.index(step.lines[0], position)
            assert text[position : position + len(step.lines)] == list(step.lines), step.title


@pytest.mark.parametrize("name", RECIPES)
def test_dockerfile_builds_from_a_substitutable_base_with_the_legacy_builder(name: str) -> None:
    text = rendered(name, "docker")
    r = recipe(name)
    head = text[: text.index("\nFROM ")]
    assert (
        f"\nARG BUILD_IMAGE={r.base.build_image}\n" in head and f"\nARG RUNTIME_IMAGE={r.base.runtime_image}\n" in head
    )
    assert re.findall(r"^FROM .*$", text, re.M) == [
        "FROM ${BUILD_IMAGE} AS build",
        "FROM build AS slim",
        "FROM ${RUNTIME_IMAGE} AS runtime",
    ]
    assert "--mount" not in text and "<<" not in text and "# syntax=" not in text
    assert text.count('SHELL ["/bin/bash", "-euo", "pipefail", "-c"]') == 2
    assert text.rstrip().endswith(
        'CMD ["horovodrun", "--check-build"]' if recipe(name).horovod else 'sys.exit(not ok)"]'
    )


@pytest.mark.parametrize("name", RECIPES)
def test_def_has_a_build_stage_and_a_runtime_stage_fed_from_it(name: str) -> None:
    text = rendered(name, "singularity")
    r = recipe(name)
    assert re.findall(r"^(?:Bootstrap|From|Stage): .*$", text, re.M) == [
        "Bootstrap: docker",
        f"From: {r.base.build_image}",
        "Stage: build",
        "Bootstrap: docker",
        f"From: {r.base.runtime_image}",
        "Stage: runtime",
    ]
    assert "\n%files from build\n    /opt/venv\n" in text
    assert text.count("%post -c /bin/bash\n    set -euo pipefail\n") == 2


@pytest.mark.parametrize("name", RECIPES)
def test_image_carries_the_whole_recipe_as_labels_and_a_manifest(name: str) -> None:
    r = recipe(name)
    for fmt in ("docker", "singularity"):
        quoted = re.search(r"printf '%s\\n' '(.*)' > /etc/hpcbundle/manifest.json", rendered(name, fmt))
        assert quoted, fmt
        manifest = json.loads(quoted[1])
        assert Recipe.model_validate(manifest["recipe"]) == r
        assert manifest["hpcbundle_version"] and manifest["labels"]["org.hpcbundle.recipe"] == name
    docker_labels = dict(re.findall(r'^(?:LABEL )?\s*(org\.hpcbundle\.\S+)="([^"]*)"', rendered(name, "docker"), re.M))
    def_labels = dict(re.findall(r"^    (org\.hpcbundle\.\S+) (.*)$", rendered(name, "singularity"), re.M))
    assert docker_labels == def_labels == manifest["labels"]
    assert docker_labels["org.hpcbundle.horovod"] == (r.horovod.version if r.horovod else "none")
    assert (docker_labels["org.hpcbundle.mpi.flavour"], docker_labels.get("org.hpcbundle.mpi.version")) == (
        (r.mpi.flavour, r.mpi.version) if r.mpi else ("none", None)
    )
    assert docker_labels["org.hpcbundle.frameworks"] == ",".join(r.frameworks.names)
    assert docker_labels.get("org.hpcbundle.cuda") == (r.gpu.cuda if r.gpu else None)


@pytest.mark.parametrize("name", RECIPES)
def test_images_ship_the_examples_and_check_themselves(name: str) -> None:
    docker, singularity = rendered(name, "docker"), rendered(name, "singularity")
    assert "\nCOPY examples/ /examples/\n" in docker and "\n%files\n    examples /examples\n" in singularity
    verify = "\n".join(steps(name).verify.lines)
    assert "\n%test\n    set -e\n    " + verify.replace("\n", "\n    ") + "\n" in singularity
    if recipe(name).horovod is None:  # a torch.distributed image: the build checks torch.distributed and Gloo
        assert "is_gloo_available()" in verify and "horovodrun" not in docker
        assert steps(name).verify.lines in [step.lines for step in steps(name).build]
        return
    assert "horovodrun --check-build" in verify and "python -c 'import horovod." in verify
    horovod_step = steps(name).build[-1].lines
    assert (
        horovod_step[-1] == 'rm -rf "/tmp/build"'
        and horovod_step[-1 - len(steps(name).verify.lines) : -1] == steps(name).verify.lines
    )


@pytest.mark.parametrize("name", RECIPES)
def test_nothing_site_specific_is_baked_into_an_image(name: str) -> None:
    for fmt in FORMATS:
        text = rendered(name, fmt)
        for site_only in (
            "OMPI_MCA_",
            "btl_tcp_if_include",
            "oob_tcp_if_include",
            "NCCL_SOCKET_IFNAME",
            "NCCL_IB_HCA",
            "--mca",
            "UCX_NET_DEVICES",
        ):
            assert site_only not in text, f"{fmt}: {site_only}"


@pytest.mark.parametrize("name", RECIPES)
def test_every_pip_call_reads_the_wheelhouse_and_no_index_host_is_written(name: str) -> None:
    docker = rendered(name, "docker")
    assert (
        "\nARG PIP_NO_INDEX=0\nARG PIP_EXTRA_INDEX_URL=\n" in docker and "\nCOPY wheelhouse/ /wheelhouse/\n" in docker
    )
    pip_lines = [
        line
        for step in steps(name).all()
        for line in step.lines
        if " -m pip " in line and not any(word in line for word in (" uninstall ", " list "))
    ]
    assert pip_lines and all("--find-links /wheelhouse" in line for line in pip_lines)
    for fmt in FORMATS:
        # pip index URLs come only from build arguments, never from the rendered file
        assert not re.search(r"(index-url|find-links)[ =]+https?://", rendered(name, fmt))


def test_every_image_block_documents_the_recipe_keys_it_reads_and_an_example() -> None:
    for block in BLOCKS.ordered():
        doc = type(block).__doc__ or ""
        assert "Parameters:" in doc and "Example" in doc, (
            f"image block {block.name}: docstring lacks Parameters/Example"
        )


@pytest.mark.parametrize("name", [n for n in RECIPES if recipe(n).horovod])
def test_every_variable_the_horovod_block_derives_is_one_the_build_env_rule_guards(name: str) -> None:
    """A recipe's build_env can never silently replace a derived variable: the rule knows them all."""
    r = recipe(name)
    set_by_block = horovod_env(image_spec(r, knowledge_base())).keys() - r.horovod.build_env.keys()
    assert [key for key in sorted(set_by_block) if not derived(key)] == []


def test_cpu_local_builds_horovod_with_exactly_the_measured_flags() -> None:
    env = horovod_env(image_spec(recipe("cpu-local"), knowledge_base()))
    assert {k: v for k, v in env.items() if k.startswith("HOROVOD_")} == {
        "HOROVOD_WITH_TENSORFLOW": "1",
        "HOROVOD_WITH_PYTORCH": "1",
        "HOROVOD_WITHOUT_MXNET": "1",
        "HOROVOD_WITH_MPI": "1",
        "HOROVOD_WITH_GLOO": "1",
    }
    assert "torch==2.13.0+cpu" in rendered("cpu-local", "docker")
    build = [line for step in steps("cpu-local").all() if step.snippet != "bind" for line in step.lines]
    assert "cuda" not in "\n".join(build).lower()  # hpcbundle-bind only reads CUDA_VISIBLE_DEVICES


@pytest.mark.parametrize("name", ["cpu-local", "cuda13.0-torch2.11"])
@pytest.mark.parametrize("path, script", [(BIND_PATH, BIND_SCRIPT), (TORCHENV_PATH, TORCHENV_SCRIPT)])
def test_every_image_carries_the_per_rank_scripts_exactly_as_the_package_ships_them(
    name: str, path: str, script: str, tmp_path: Path
) -> None:
    """The runtime stage's steps for hpcbundle-bind and hpcbundle-torchenv, run here with their path moved into
    tmp_path, write each script's bytes and make it executable; the Dockerfile and the .def both run them."""
    (step,) = [step for step in steps(name).runtime if step.snippet == "bind" and path in step.lines[0]]
    moved = tmp_path / Path(path).name
    lines = [line.rsplit(path, 1)[0] + str(moved) for line in step.lines]
    subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], check=True, timeout=30)
    assert moved.read_text() == script and os.access(moved, os.X_OK)
    assert f"hadolint ignore=SC2016\nRUN {step.lines[0]}" in rendered(name, "docker")
    assert f"    {step.lines[0]}\n" in rendered(name, "singularity")


@pytest.mark.parametrize("name", [n for n in RECIPES if recipe(n).gpu and recipe(n).gpu.source == "image"])
def test_cuda_image_recipes_build_nccl_ops_against_one_nccl_with_the_cuda_stub(name: str) -> None:
    r = recipe(name)
    gpu, text = r.gpu, rendered(name, "docker")
    nccl = torch_nccl(image_spec(r, knowledge_base()))
    if nccl:  # torch's wheel brings NCCL: Horovod builds against it, the base image's is purged
        assert "libnccl2=" not in text and f'export HOROVOD_NCCL_HOME="{nccl.home}"' in text
        assert "apt-get purge -y --allow-change-held-packages libnccl-dev libnccl2 && \\" in text
        assert "-cudnn" not in r.base.build_image + r.base.runtime_image  # cuDNN: torch's wheel, one copy
    else:  # a bundled torch (no NCCL wheel): NVIDIA's apt NCCL, pinned
        apt = f"{gpu.nccl}-1+cuda{gpu.cuda}"
        assert f" libnccl2={apt} libnccl-dev={apt} && \\" in text and f" libnccl2={apt} && \\" in text
        assert "HOROVOD_NCCL_HOME" not in text
    assert 'export HOROVOD_GPU_OPERATIONS="NCCL"' in text
    assert f'export HOROVOD_BUILD_CUDA_CC_LIST="{",".join(a.replace(".", "") for a in gpu.archs)}"' in text
    assert f'export TORCH_CUDA_ARCH_LIST="{";".join(gpu.archs)}"' in text
    stub = 'ln -sf /usr/local/cuda/lib64/stubs/libcuda.so "/tmp/build/cuda-stubs/libcuda.so.1"'
    horovod = steps(name).build[-1].lines
    assert stub in horovod and horovod.index(stub) < horovod.index(
        next(line for line in horovod if "--wheel-dir" in line)
    )
    assert (
        'LD_LIBRARY_PATH="/tmp/build/cuda-stubs:' in text
        and "/tmp/build/cuda-stubs" not in text[text.index("AS runtime") :]
    )


@pytest.mark.parametrize("name", [n for n in RECIPES if recipe(n).gpu and recipe(n).gpu.source == "wheels"])
def test_cuda_wheels_recipes_build_against_the_toolkit_wheels_and_torchs_nccl(name: str) -> None:
    r = recipe(name)
    text = rendered(name, "docker")
    site = f"/opt/venv/lib/python{r.python}/site-packages"
    assert "nvidia/cuda" not in text and "libnccl" not in text.replace("libnccl.so", "")  # no apt NCCL
    assert (
        "torch==2.11.0 torchvision==0.26.0 nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88"
        in text
    )
    for line in (
        f'export HOROVOD_CUDA_HOME="{site}/nvidia/cu13"',
        f'export HOROVOD_NCCL_HOME="{site}/nvidia/nccl"',
        f"ln -sf libnccl.so.2 {site}/nvidia/nccl/lib/libnccl.so",
        f'ln -s lib "{site}/nvidia/cu13/lib64"',
        f'ln -s libcudart.so.13 "{site}/nvidia/cu13/lib/libcudart.so"',
        f'export PATH="/opt/venv/bin:{site}/nvidia/cu13/bin:',  # nvcc for Horovod's CMake
    ):
        assert line in text, line
    assert "cuda-stubs" not in text  # no stub: nothing in the wheels route links libcuda at build time
    slim = text[text.index("AS slim") : text.index("AS runtime")]
    assert "pip uninstall -y nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-crt nvidia-cuda-cccl" in slim
    assert f'LD_LIBRARY_PATH="{site}/nvidia/nccl/lib:' in text[text.index("AS runtime") :]


def test_gcc13_patch_adds_the_includes_and_fails_loudly_when_a_file_is_missing(tmp_path: Path) -> None:
    (line,) = [line for line in steps("cuda13.0-torch2.11").build[-1].lines if "gcc13 patch" in line]
    line = "hvd_wheel=''\n" + line.replace("/tmp/build/horovod-0.28.1", str(tmp_path))
    files = ("horovod/common/common.h", "horovod/common/group_table.h", "horovod/torch/handle_manager.cc")
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("#pragma once\n")
    assert _run_line(line, tmp_path).returncode == 0
    assert all((tmp_path / n).read_text() == "#include <stdexcept>\n#include <string>\n#pragma once\n" for n in files)
    (tmp_path / files[1]).unlink()
    failed = _run_line(line, tmp_path)
    assert failed.returncode == 1 and "gcc13 patch: horovod/common/group_table.h is missing" in failed.stderr


def test_py312_patch_swaps_distutils_for_sysconfig_and_shutil_and_fails_loudly_on_another_sdist(tmp_path: Path) -> None:
    lines = [line for line in steps("cuda13.0-torch2.11").build[-1].lines if "distutils" in line]
    script = "hvd_wheel=''\n" + "\n".join(lines).replace("/tmp/build/horovod-0.28.1", str(tmp_path))
    cmake, js_run = tmp_path / "horovod/torch/CMakeLists.txt", tmp_path / "horovod/runner/js_run.py"
    for path in (cmake, js_run):
        path.parent.mkdir(parents=True, exist_ok=True)
    cmake.write_text(
        'execute_process(COMMAND ${PY_EXE} -c "from distutils.sysconfig import get_python_inc; '
        'print(get_python_inc())"\n'
    )
    js_run.write_text("import os\nfrom distutils.spawn import find_executable\n")
    assert _run_line(script, tmp_path).returncode == 0
    assert "import sysconfig; print(sysconfig.get_paths()['include'])" in cmake.read_text()
    assert js_run.read_text() == "import os\nfrom shutil import which as find_executable\n"
    again = _run_line(script, tmp_path)  # already patched, or another Horovod: refused, not half-patched
    assert again.returncode == 1 and "py312 patch: the distutils imports are not where Horovod 0.28.1" in again.stderr


def _python_checks(name: str) -> str:
    """The script's checks of the host Python as a build with no cached Horovod wheel runs them."""
    script = rendered(name, "shell")
    version = script[script.index('python_version="$(') : script.index("# A Horovod wheel already in the cache")]
    after_tools = script.index("\nfi\n", script.index('if [ -n "${missing[*]}" ]')) + len("\nfi\n")
    checks = script[after_tools : script.index('    gcc_major="$(c++ -dumpversion')]
    return f"prebuilt=\n{version}{checks}fi\n"


@pytest.mark.parametrize(
    ("name", "python", "headers", "refusal"),
    [
        ("cuda12.6-torch2.9", "3.12", True, "Horovod 0.28.1 imports distutils, which Python >= 3.12 lacks"),
        ("cuda13.0-torch2.11", "3.12", True, None),  # the py312 patch is there
        ("cuda12.6-torch2.9", "3.11", True, None),
        ("cpu-local", "3.11", False, "Python 3.11 has no headers (/nowhere/Python.h)"),
    ],
)
def test_install_script_refuses_a_host_python_the_build_cannot_use(tmp_path, name, python, headers, refusal) -> None:
    """What the lent H100's Ubuntu 24.04 Python 3.12 met (2026-11-26), refused before any download."""
    include = tmp_path if headers else Path("/nowhere")
    (tmp_path / "Python.h").write_text("")
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$2" in *"%d.%d"*) echo {python} ;; *Python.h*) echo {include}/Python.h ;;\n'
        f"  *version_info*) [ {python} = 3.12 ] ;; esac\n"
    )
    fake.chmod(0o755)
    result = subprocess.run(
        ["bash", "-euc", f"python={fake}\n" + _python_checks(name)], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, refusal is None or refusal in result.stderr) == (0 if refusal is None else 1, True)


@pytest.mark.parametrize("name", [n for n in RECIPES if (mpi := recipe(n).mpi) and mpi.install == "source"])
def test_source_mpi_is_checksummed_and_configured_for_prefix_launch(name: str) -> None:
    r = recipe(name)
    text = rendered(name, "docker")
    tarball = r.mpi.source.url.rsplit("/", 1)[1]
    assert f"echo '{r.mpi.source.sha256}  /tmp/build/{tarball}' | sha256sum -c -" in text
    configure = next(line for line in text.splitlines() if "./configure --prefix=/opt/openmpi" in line)
    prefix = "prte" if r.mpi.version.startswith("5.") else "orterun"  # Open MPI 5 launches through PRRTE
    assert f"--enable-{prefix}-prefix-by-default" in configure and all(
        option in configure for option in r.mpi.configure
    )
    assert ("--with-ucx=/opt/ucx" in configure) == (r.ucx is not None)
    assert "COPY --from=slim /opt/openmpi /opt/openmpi" in text


def test_ucx_recipe_builds_ucx_first_from_its_real_checksum() -> None:
    r = recipe("cuda12.2-tf2.15-torch2.1-ucx")
    assert r.ucx.source.sha256 == "4b202087076bc1c98f9249144f0c277a8ea88ad4ca6f404f94baa9cb3aebda6d"
    titles = [step.title for step in steps(r.name).build]
    assert titles.index("ucx from ucx-1.15.0.tar.gz into /opt/ucx") < titles.index(
        "openmpi from openmpi-4.1.6.tar.bz2 into /opt/openmpi"
    )


def test_intel_mpi_comes_from_wheels_into_the_venv() -> None:
    text = rendered("knl-intelmpi-tf2.15", "docker")
    assert (
        "\nRUN /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse "
        "impi-devel==2021.13.1 impi-rt==2021.13.1\n" in text
    )
    assert 'I_MPI_ROOT="/opt/venv"' in text and "/opt/openmpi" not in text


def _run_line(line: str, cwd: Path, shell: str = "bash") -> subprocess.CompletedProcess[str]:
    return subprocess.run([shell, "-euc", line], cwd=cwd, capture_output=True, text=True)


def test_cxx17_patch_edits_both_cmake_files_and_fails_when_one_is_already_different(tmp_path: Path) -> None:
    (line,) = [line for line in steps("cpu-local").build[-1].lines if "CMAKE_CXX_STANDARD" in line]
    line = "hvd_wheel=''\n" + line.replace("/tmp/build/horovod-0.28.1", str(tmp_path))
    (tmp_path / "horovod/torch").mkdir(parents=True)
    for name in ("CMakeLists.txt", "horovod/torch/CMakeLists.txt"):
        (tmp_path / name).write_text("    set(CMAKE_CXX_STANDARD 14)\n")
    assert _run_line(line, tmp_path).returncode == 0
    assert all(
        (tmp_path / name).read_text() == "    set(CMAKE_CXX_STANDARD 17)\n"
        for name in ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
    )
    failed = _run_line(line, tmp_path)  # already 17: the patch no longer applies, which must stop the build
    assert failed.returncode == 1 and "cxx17 patch: no CMAKE_CXX_STANDARD 14 in CMakeLists.txt" in failed.stderr
    assert "cxx17" not in recipe("knl-intelmpi-tf2.15").horovod.patches
    assert "CMAKE_CXX_STANDARD" not in rendered("knl-intelmpi-tf2.15", "docker")


CHECK_BUILD = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [{gloo}] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo
"""


@pytest.mark.parametrize(("gloo", "status"), [("X", 0), (" ", 1)])
def test_verify_step_fails_unless_every_expected_check_build_line_is_x(tmp_path: Path, gloo: str, status: int) -> None:
    """The check the build stage and %test run, with stand-ins for horovodrun and python, under POSIX sh."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "horovodrun").write_text("#!/bin/sh\ncat <<'EOF'\n" + CHECK_BUILD.format(gloo=gloo) + "EOF\n")
    (bin_dir / "python").write_text("#!/bin/sh\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    script = "\n".join(steps("cpu-local").verify.lines)
    sh = shutil.which("dash") or "sh"
    result = subprocess.run(
        [sh, "-ec", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert result.returncode == status, result.stderr
    assert ("horovodrun --check-build: Controllers: Gloo is not built" in result.stderr) == bool(status)


@pytest.mark.parametrize(
    "line",
    [
        "apt-get update",
        'horovodrun --check-build | tee "$report"',
        "if [ -f /w/x ]; then cp /w/x /t/; else curl -o /t/x https://h/x; fi",
        'for f in a b; do grep -q x "$f" || { echo "no $f" >&2; exit 1; }; sed -i s/a/b/ "$f"; done',
        'make -C /tmp/build/ucx -j"$(nproc)" install',
        'export LD_LIBRARY_PATH="/a${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"',
        "printf '%s\\n' '{\"a\": \"b; c && d\"}' > /f",
    ],
)
def test_one_complete_command_per_line_is_accepted(line: str) -> None:
    assert shell_line_problem(line) is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("if [ -f x ]; then", "does not close on this line (no 'fi')"),
        ("for f in a b; do", "does not close on this line (no 'done')"),
        ("{", "does not close on this line (no '}')"),
        ("done", "closes 'done' without opening it"),
        ("apt-get update \\", "continues on the next line"),
        ("cd /x && make", "joins commands with '&&'"),
        ("make; make install", "joins commands with ';'"),
        ("grep -q x f || exit 1", "joins commands with '||'"),
        ("cat <<EOF", "heredoc"),
        ('echo "unclosed', 'unclosed "'),
        ("ls |", "ends with a pipe"),
    ],
)
def test_a_line_that_is_not_one_complete_command_is_refused(line: str, problem: str) -> None:
    assert problem in (shell_line_problem(line) or "")


def test_renderer_refuses_a_multi_line_compound_in_a_snippet(tmp_path: Path) -> None:
    containers = tmp_path / "containers"
    shutil.copytree(ROOT / "containers", containers)
    venv = containers / "common" / "venv.sh.j2"
    venv.write_text(venv.read_text() + "if [ ! -x /opt/venv/bin/pip ]; then\n  exit 1\nfi\n")
    for fmt in FORMATS:
        with pytest.raises(UserError) as refused:
            render_image(recipe("cpu-local"), fmt, template_environment(containers), knowledge_base())
        assert refused.value.lines == (
            "containers/common/venv.sh.j2: 'if [ ! -x /opt/venv/bin/pip ]; then': "
            "opens a compound command that does not close on this line (no 'fi') "
            "(each snippet line must be one complete command: "
            "it becomes one link of a RUN `&&` chain)",
        )


@pytest.mark.parametrize("value", ['a"b', "a\\b", "`x`", "$HOME/bin"])
def test_an_environment_value_that_docker_and_sh_would_read_differently_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="cannot be double-quoted the same way"):
        assignments({"X": value})
    assert assignments({"PATH": "/opt/venv/bin:${PATH}"}) == ['PATH="/opt/venv/bin:${PATH}"']


@lru_cache(maxsize=None)
def host_steps(name: str) -> Steps:
    spec = image_spec(recipe(name), knowledge_base(), host=True)
    return render_steps(spec, template_environment(ROOT / "containers"))


@pytest.mark.parametrize("name", RECIPES)
def test_install_script_runs_the_image_steps_on_the_host_in_order(name: str) -> None:
    script = rendered(name, "shell").splitlines()
    position = 0
    shown = [step for step in host_steps(name).build if step.snippet not in ("apt", "autotools")]
    snippets = [step.snippet for step in shown]
    assert (snippets[-1] == "horovod") if recipe(name).horovod else ("verify" in snippets)
    for step in shown:
        position = script.index(step.lines[0], position)
        assert script[position : position + len(step.lines)] == list(step.lines), step.title
    image_snippets = [step.snippet for step in steps(name).build if step.snippet not in ("apt", "autotools")]
    assert [step.snippet for step in shown] == image_snippets  # the same snippets, another layout


def test_install_script_reuses_the_host_wheels_works_offline_and_caches_horovod_by_versions() -> None:
    script = rendered("cuda13.0-torch2.11", "shell")
    assert 'HPCBUNDLE_VENV="${1:-${HPCBUNDLE_VENV:-./horovod-venv}}"' in script
    assert "venv_args+=(--system-site-packages)" in script and '-m venv ${venv_args[@]+"${venv_args[@]}"}' in script
    # exact pins: a no-op where the host already has them; pip reads PIP_NO_INDEX / PIP_FIND_LINKS itself
    assert (
        '\n"${HPCBUNDLE_VENV}/bin/python" -m pip install ${frozen:+-c "$frozen"} torch==2.11.0 torchvision==0.26.0\n'
        in script
    )
    # the toolkit wheels only where no host toolkit is named (HPCBUNDLE_CUDA_HOME)
    assert (
        'if [ -z "${HPCBUNDLE_CUDA_HOME}" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip install nvidia-cuda-nvcc=='
        in script
    )
    assert "--find-links" not in script and "--no-cache-dir" not in script
    key = horovod_key(recipe("cuda13.0-torch2.11"))
    cache = f"${{HPCBUNDLE_CACHE}}/horovod/{key}-py${{HPCBUNDLE_PYVER}}"
    assert f'hvd_wheel="$(find "{cache}" -maxdepth 1 -name \'horovod-*.whl\' -print -quit)"' in script
    assert 'export HOROVOD_NCCL_HOME="${HPCBUNDLE_BUILD}/nccl"' in script  # a link to torch's NCCL, host untouched
    assert "horovodrun --check-build" in script and script.count("printf '\\n==> [") == 5


@pytest.mark.full_setup  # the install script first checks for c++ and mpicc (Open MPI)
def test_install_script_refuses_a_host_cuda_home_without_the_recipes_nvcc_before_making_anything(
    tmp_path: Path,
) -> None:
    script = tmp_path / "install.sh"
    script.write_text(rendered("cuda13.0-torch2.11", "shell"))
    venv = tmp_path / "venv"
    run = subprocess.run(
        ["bash", str(script), str(venv)],
        env={**os.environ, "HPCBUNDLE_CUDA_HOME": str(tmp_path / "no-cuda")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr == (
        f"install.sh: HPCBUNDLE_CUDA_HOME={tmp_path / 'no-cuda'}: nvcc release not found there, the recipe needs 13.0 "
        "(name a CUDA 13.0 toolkit, or unset HPCBUNDLE_CUDA_HOME to install the toolkit wheels)\n"
    )
    assert not venv.exists() and run.stdout == ""


def test_horovod_cache_key_changes_with_every_version_the_wheel_depends_on() -> None:
    base = recipe_data("cuda13.0-torch2.11")
    keys = {horovod_key(Recipe.model_validate(base))}
    for path, value in (
        (("frameworks", "pytorch", "version"), "2.11.1"),
        (("gpu", "nccl"), "2.28.3"),
        (("gpu", "archs"), ["9.0"]),
        (("mpi", "version"), "4.1.5"),
        (("horovod", "patches"), ["cxx17"]),
        (("python",), "3.12"),
    ):
        data = recipe_data("cuda13.0-torch2.11")
        node = data
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        keys.add(horovod_key(Recipe.model_validate(data)))
    assert len(keys) == 7


def _gcc_checks(name: str) -> str:
    script = rendered(name, "shell")
    start = script.index('    gcc_major="$(c++ -dumpversion')
    checks = script[start : script.index("printf '\\n==> [%d/%d] %s\\n' 1 ")]
    return "if true; then\n" + checks  # the checks run only where no cached Horovod wheel is there


@pytest.mark.parametrize(
    ("name", "gcc", "refusal"),
    [
        ("cuda12.6-torch2.9", "13", "Horovod 0.28.1 does not compile with GCC >= 13 without the gcc13 patch"),
        ("cuda11.8-tf2.14-torch2.1", "12", "nvcc 11.8 accepts GCC <= 11"),
        ("cuda13.0-torch2.11", "13", None),  # the gcc13 patch is there, nvcc 13.0 takes GCC <= 15
    ],
)
def test_install_script_refuses_a_host_gcc_the_build_cannot_use(tmp_path: Path, name, gcc, refusal) -> None:
    fake = tmp_path / "c++"
    fake.write_text(f"#!/bin/sh\necho {gcc}.3.0\n")
    fake.chmod(0o755)
    result = subprocess.run(
        ["bash", "-euc", _gcc_checks(name)],
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
    )
    assert (result.returncode, refusal is None or refusal in result.stderr) == (0 if refusal is None else 1, True)


def test_every_block_names_the_snippets_its_steps_run_and_every_snippet_has_a_block() -> None:
    """A reader finds a component's shell from its block file: `Block.shell` lists every snippet its
    steps run for any shipped recipe, image or install script, and no snippet is left without a block."""
    kb = knowledge_base()
    for name in RECIPES:
        for host in (False, True):
            spec = image_spec(recipe(name), kb, host=host)
            for block in BLOCKS.ordered():
                run = {snippet.name for stage in (block.build, block.slim, block.runtime) for snippet in stage(spec)}
                assert run <= set(block.shell), (name, block.name, run)
    snippets = {path.name.removesuffix(".sh.j2") for path in (ROOT / "containers" / "common").glob("*.sh.j2")}
    assert snippets == {snippet for block in BLOCKS.all() for snippet in block.shell}
