"""The cpu-local recipe's rendered .def, unchanged but for `--bootstrap localimage:<base>`, built into a
SIF by the real Apptainer from the debootstrapped Debian base (no registry) and run with `exec --userns`.

The build reuses what is already here, as the Docker route does: the cached torch+cpu wheel and the
set-up's Horovod wheel (scripts/setup/horovod-wheel.sh) when its key names the recipe's versions,
placed at wheelhouse/horovod/<horovod_key>/ where the rendered Horovod step installs it instead of
compiling. The SIF is cached by the .def's hash, the base and the wheels (hpcbundle_testbed.sif).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from hpcbundle.image.blocks.horovod import check_build
from hpcbundle.image.derive import image_spec, runtime_stage
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.knowledge.labels import MANIFEST
from hpcbundle.rules.loading import load_recipe
from hpcbundle_testbed.cuda_wheels import check_build_marks
from hpcbundle_testbed.sif import SifBuild
from hpcbundle_testbed.sif_plugin import RUN_FLAGS, in_sif

from .helpers import ROOT

pytestmark = pytest.mark.apptainer
RECIPE = "cpu-local"
NODE0_CPUS = Path("/sys/devices/system/node/node0/cpulist")


def test_build_reused_the_cached_horovod_wheel(cpu_local_sif: SifBuild) -> None:
    if cpu_local_sif.cached:
        return  # the cached SIF's build was checked when it was built
    assert "Horovod: the cached wheel /wheelhouse/horovod/" in cpu_local_sif.log, cpu_local_sif.log[-3000:]
    assert "Horovod: building" not in cpu_local_sif.log


def test_inspect_shows_the_recipe_labels(apptainer: str, cpu_local_sif: SifBuild) -> None:
    res = subprocess.run(
        [apptainer, "inspect", "--labels", "--json", str(cpu_local_sif.path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    labels = json.loads(res.stdout)["data"]["attributes"]["labels"]
    recipe = load_recipe(RECIPE, ROOT / "recipes")
    expected = runtime_stage(image_spec(recipe, knowledge_base())).labels
    assert {k: v for k, v in labels.items() if k.startswith("org.hpcbundle.")} == expected


def test_apptainer_test_runs_the_test_section(apptainer: str, cpu_local_sif: SifBuild) -> None:
    res = subprocess.run(
        [apptainer, "test", *RUN_FLAGS, str(cpu_local_sif.path)], capture_output=True, text=True, timeout=300
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "[X] PyTorch" in out, out[-3000:]


def test_check_build_inside(apptainer: str, cpu_local_sif: SifBuild) -> None:
    marks = check_build_marks(in_sif(apptainer, cpu_local_sif, ["horovodrun", "--check-build"]))
    recipe = load_recipe(RECIPE, ROOT / "recipes")
    assert set(check_build(recipe)) <= marks, marks


def test_manifest_is_inside_at_its_fixed_path(apptainer: str, cpu_local_sif: SifBuild) -> None:
    manifest = json.loads(in_sif(apptainer, cpu_local_sif, ["cat", MANIFEST]))
    recipe = load_recipe(RECIPE, ROOT / "recipes")
    assert manifest == json.loads(runtime_stage(image_spec(recipe, knowledge_base())).manifest)
    assert re.search(r"^    org\.hpcbundle\.recipe cpu-local$", cpu_local_sif.definition, re.M)


@pytest.mark.parametrize(
    "program",
    [["python", "/examples/pytorch_train.py"], ["python", "/examples/keras_train.py", "--epochs", "24"]],
    ids=["pytorch-sbatch-line", "keras-launch-line"],
)
def test_readme_training_commands_run_inside_on_the_shipped_digits(
    apptainer: str, cpu_local_sif: SifBuild, program: list[str]
) -> None:
    """The README's in-container programs exactly as it shows them (its sbatch and launch lines), no
    --synthetic: the digits data set ships with the examples, so no scikit-learn and no download."""
    out = in_sif(apptainer, cpu_local_sif, program, timeout=900)
    assert "digits 8x8" in out, out[-2000:]
    accuracy = float(re.search(r"^final: accuracy=([0-9.]+) ", out, re.M)[1])
    assert accuracy > 0.8, out[-2000:]


def docs_build_sif_line() -> str:
    """docs/images.md's `make build-sif ... SIF_BOOTSTRAP=localimage:$(make -s sif-base) ...` line, as printed."""
    page = (ROOT / "docs" / "images.md").read_text(encoding="utf-8")
    start = page.index("make build-sif RECIPE=cpu-local SIF_BOOTSTRAP=localimage:$(make -s sif-base)")
    return page[start : page.index("\n```", start)].replace("\\\n", " ")


def test_docs_build_sif_line_builds_the_sif_as_written(apptainer: str) -> None:
    """The card's own flow, typed as docs/images.md shows it, from the repository root: a SIF with the
    recipe's labels at build/cpu-local.sif (removed afterwards: it is large)."""
    sif = ROOT / "build" / f"{RECIPE}.sif"
    try:
        res = subprocess.run(
            ["bash", "-c", docs_build_sif_line()], cwd=ROOT, capture_output=True, text=True, timeout=1800
        )
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        inspected = subprocess.run(
            [apptainer, "inspect", "--labels", "--json", str(sif)], capture_output=True, text=True, timeout=60
        )
        assert inspected.returncode == 0, inspected.stderr
        labels = json.loads(inspected.stdout)["data"]["attributes"]["labels"]
        assert labels["org.hpcbundle.recipe"] == RECIPE
    finally:
        sif.unlink(missing_ok=True)


def test_placement_wrapper_in_the_image_execs_numactl_on_the_ranks_gpu_node(
    apptainer: str, cpu_local_sif: SifBuild, tmp_path: Path
) -> None:
    """hpcbundle-bind as launch lines run it, by name inside the image: with a stub numactl first on PATH it
    execs `numactl --cpunodebind=N --preferred=N -- PROGRAM` for the rank's GPU; with the image's own tools the
    program runs on the CPUs of NUMA node 0."""
    stubs = tmp_path / "stub"
    stubs.mkdir()
    (stubs / "numactl").write_text("#!/bin/sh\nprintf '%s\\n' numactl \"$@\"\n")
    (stubs / "numactl").chmod(0o755)
    rank = ["env", "-u", "SLURM_LOCALID", "-u", "CUDA_VISIBLE_DEVICES", "OMPI_COMM_WORLD_LOCAL_RANK=1"]
    stubbed = [*rank, "PATH=/stub:/usr/local/bin:/usr/bin:/bin", "hpcbundle-bind", "0,0", "python3", "train.py"]
    out = in_sif(apptainer, cpu_local_sif, stubbed, binds=(f"{stubs}:/stub",), timeout=60)
    assert out.split("\n") == ["numactl", "--cpunodebind=0", "--preferred=0", "--", "python3", "train.py", ""]
    program = ["sed", "-n", "s/^Cpus_allowed_list:[[:space:]]*//p", "/proc/self/status"]
    placed = in_sif(apptainer, cpu_local_sif, [*rank, "hpcbundle-bind", "0,0", *program], timeout=60)
    assert placed.strip() == NODE0_CPUS.read_text().strip()
