"""A real Apptainer builds a small SIF from a local base with the header `hpcbundle render --bootstrap`
writes, and runs it: exec, the recipe's labels read back by `apptainer inspect`, `apptainer test`.

The base is the testbed's debootstrapped Debian rootfs, a cached sandbox directory (hpcbundle_testbed.sif); the
.def takes the stage header, %environment and %labels of the rendered cpu-local .def and a %post and
%test of its own (tests/test_sif.py builds the whole cpu-local .def). Runs in `make test`, not in
`make check` (marker `apptainer`). Apptainer comes from the set-up, or is installed now; never skipped.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcbundle_testbed.apptainer import build_argv
from hpcbundle_testbed.sif import base_sandbox as cached_base_sandbox
from hpcbundle_testbed.sif_plugin import RUN_FLAGS

from .helpers import hpcbundle

pytestmark = pytest.mark.apptainer
RECIPE = "cpu-local"
MARKER = "/etc/hpcbundle-built-by-post"


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    """A temp dir for the sandbox and the SIF, removed even when a test fails."""
    path = Path(tempfile.mkdtemp(prefix="hpcbundle-apptainer-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def base_sandbox() -> Path:
    """The cached debootstrapped Debian rootfs with this machine's layer, as a sandbox directory."""
    return cached_base_sandbox()


def section(text: str, name: str) -> str:
    """A .def's %name section, up to the next blank line."""
    return re.search(rf"^%{name}\n(?:.+\n)*", text, re.M)[0]


@pytest.fixture(scope="module")
def rendered(work: Path, base_sandbox: Path) -> str:
    """The cpu-local .def as `hpcbundle render --bootstrap localimage:<sandbox>` writes it."""
    out = work / f"{RECIPE}.def"
    res = hpcbundle(
        "render", RECIPE, "--format", "singularity", "--bootstrap", f"localimage:{base_sandbox}", "-o", str(out)
    )
    assert res.returncode == 0, res.stderr
    return out.read_text()


@pytest.fixture(scope="module")
def sif(apptainer: str, work: Path, rendered: str) -> Path:
    """A small SIF: the rendered build stage's header, %environment and %labels; a %post and %test of its own."""
    header = re.search(r"^Bootstrap: .*\nFrom: .*\n", rendered, re.M)[0]
    definition = work / "small.def"
    definition.write_text(
        header
        + f"\n%post -c /bin/bash\n    set -euo pipefail\n    echo built > {MARKER}\n\n"
        + section(rendered, "environment")
        + "\n"
        + section(rendered, "labels")
        + f'\n%test\n    set -e\n    test "$(cat {MARKER})" = built\n    echo small-image-test-ran\n'
    )
    image = work / "small.sif"
    res = subprocess.run(build_argv(apptainer, image, definition), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and image.is_file(), res.stdout[-2000:] + res.stderr[-2000:]
    return image


def test_rendered_local_bootstrap_builds_a_sif_that_runs(apptainer: str, sif: Path, rendered: str) -> None:
    res = subprocess.run(
        [apptainer, "exec", *RUN_FLAGS, str(sif), "sh", "-c", f"cat {MARKER} /etc/debian_version; echo $PATH"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    built, debian, path = res.stdout.split()
    assert built == "built" and debian.startswith("12.")
    image_path = re.search(r'^    export PATH="(.*)\$\{PATH\}"$', section(rendered, "environment"), re.M)[1]
    assert path.startswith(image_path), "the rendered %environment is the container's"


def test_inspect_reads_back_the_recipe_labels(apptainer: str, sif: Path, rendered: str) -> None:
    res = subprocess.run(
        [apptainer, "inspect", "--labels", "--json", str(sif)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    labels = json.loads(res.stdout)["data"]["attributes"]["labels"]
    expected = dict(re.findall(r"^    (org\.hpcbundle\.\S+) (.*)$", section(rendered, "labels"), re.M))
    assert expected["org.hpcbundle.recipe"] == RECIPE
    assert {k: v for k, v in labels.items() if k.startswith("org.hpcbundle.")} == expected
    assert labels["org.label-schema.usage.singularity.deffile.bootstrap"] == "localimage"


def test_apptainer_test_runs_the_test_section(apptainer: str, sif: Path) -> None:
    res = subprocess.run([apptainer, "test", *RUN_FLAGS, str(sif)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "small-image-test-ran" in res.stdout, res.stdout + res.stderr
