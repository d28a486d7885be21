"""Host set-up reads the versions it installs from recipes/cpu-local.yaml (scripts/setup/pins.py),
so the host venv and the cpu-local image carry one stack and no script repeats a version."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from hpcbundle.rules.loading import load_recipe

from .helpers import ROOT

PINS = ROOT / "scripts" / "setup" / "pins.py"


def run_pins(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PINS), *args], capture_output=True, text=True, timeout=60, env=env)


def pins() -> dict[str, str]:
    result = run_pins()
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in shlex.split(result.stdout, posix=True) if "=" in line)


def test_setup_pins_are_the_cpu_local_recipes():
    recipe = load_recipe("cpu-local", ROOT / "recipes")
    tf, torch = recipe.frameworks.tensorflow, recipe.frameworks.pytorch
    assert tf is not None and torch is not None
    assert pins() == {
        "PYTHON_VERSION": recipe.python,
        "TORCH_VERSION": torch.version,
        "TORCH_VARIANT": torch.variant,
        "TORCHVISION_VERSION": "",  # cpu-local: torchvision: false
        "TF_PACKAGE": tf.package,
        "TF_VERSION": tf.version,
        "HOROVOD_VERSION": recipe.horovod.version,
        "HOROVOD_SDIST_SHA256": recipe.horovod.sdist_sha256,
        "HOROVOD_PATCHES": " ".join(recipe.horovod.patches),
    }


def test_setup_scripts_and_makefile_repeat_no_pinned_version():
    pinned = ("TORCH_VERSION", "TF_VERSION", "HOROVOD_VERSION", "HOROVOD_SDIST_SHA256")
    values = {value for key, value in pins().items() if key in pinned}
    found = []
    for path in [*sorted((ROOT / "scripts" / "setup").glob("*.sh")), ROOT / "Makefile"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = re.sub(r"(^|\s)#.*", "", line)  # comments may tell the history of a version
            found += [f"{path.name}:{number}: {value}" for value in values if value in code]
    assert found == []


def test_pins_without_pyyaml_is_a_one_line_error(tmp_path: Path):
    (tmp_path / "yaml.py").write_text("raise ImportError('no PyYAML here')\n")
    result = run_pins(env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "apt-get install python3-yaml" in result.stderr
