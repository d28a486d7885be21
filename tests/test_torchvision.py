"""torchvision beside torch: paired by the knowledge base (its source named), refused when mismatched, installed
in torch's pip call with torch's variant; on a base that freezes its packages pip installs against that file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.knowledge.stack import stack_pins

from .helpers import ROOT, hpcbundle, recipe, recipe_data, rendered, write_recipe

COMPAT = ROOT / "src" / "hpcbundle" / "data" / "compat.yaml"


def test_the_torchvision_table_names_its_source_and_holds_the_readme_pairs():
    text = COMPAT.read_text()
    comment = text[: text.index("\ntorchvision:")].rsplit("\n\n", 1)[1]
    assert "Source: pytorch/vision README.md" in comment
    pairs = {"2.9": "0.24", "2.10": "0.25", "2.11": "0.26", "2.12": "0.27", "2.13": "0.28"}
    assert {torch: knowledge_base().torchvision[torch] for torch in pairs} == pairs


@pytest.mark.parametrize(
    "torch, paired",
    [("2.9.1", "0.24.1"), ("2.13.0", "0.28.0"), ("2.11", "0.26.0"), ("2.1.2", "0.16.2"), ("2.0.1", None)],
)
def test_torchvision_pairs_with_torchs_minor_and_takes_its_patch(torch: str, paired: str | None):
    assert knowledge_base().torchvision_for(torch) == paired


def _load(tmp_path: Path, base: str, **pytorch: object):
    data = recipe_data(base)
    data["frameworks"]["pytorch"].update(pytorch)
    return hpcbundle("check", str(write_recipe(tmp_path, data)))


def test_a_mismatched_torchvision_is_refused_in_one_line_naming_both_and_the_source(tmp_path: Path):
    result = _load(tmp_path, "cuda12.6-torch2.9", torchvision="0.23.0")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"hpcbundle: error: {tmp_path}/cuda12.6-torch2.9.yaml: frameworks.pytorch.torchvision: torchvision 0.23.0 "
        "does not pair with torch 2.9.1: 0.24.1 does (compat.yaml torchvision, from pytorch/vision's README) "
        "(use 0.24.1, or leave the key out to get it)\n"
    )


def test_a_torch_without_a_known_pairing_asks_for_false_or_the_table(tmp_path: Path):
    data = recipe_data("cuda12.6-torch2.9")
    data["frameworks"]["pytorch"]["version"] = "2.0.1"
    result = hpcbundle("check", str(write_recipe(tmp_path, data)))
    assert result.returncode == 2
    assert (
        "frameworks.pytorch.torchvision: no torchvision is known to pair with torch 2.0.1 (compat.yaml torchvision, "
        "from pytorch/vision's README) (set torchvision: false, or add the pairing to compat.yaml)" in result.stderr
    )


@pytest.mark.parametrize("given", ["0.24.1", "0.24.0"])
def test_the_paired_torchvision_loads(tmp_path: Path, given: str):
    result = _load(tmp_path, "cuda12.6-torch2.9", torchvision=given)
    assert "torchvision-pairing" in result.stdout and "frameworks.pytorch.torchvision" not in result.stderr


def test_gpu_images_install_torchvision_in_torchs_pip_call_with_its_variant():
    lines = [line for line in rendered("cuda12.6-torch2.9", "docker").splitlines() if "torch==" in line]
    assert lines[0].endswith(' ${frozen:+-c "$frozen"} torch==2.9.1+cu126 torchvision==0.24.1+cu126')
    pypi = [line for line in rendered("cuda13.0-torch2.11", "singularity").splitlines() if "torch==" in line]
    assert " torch==2.11.0 torchvision==0.26.0 " in pypi[0]  # PyPI's variant: no local version on either


def test_torchaudio_only_where_the_recipe_names_it_and_false_means_no_torchvision():
    shipped = stack_pins(recipe("cuda12.6-torch2.9"), knowledge_base())
    assert "torchaudio" not in shipped and shipped["torchvision"].key == "frameworks.pytorch.torchvision"
    shipped_recipe = recipe("cuda12.6-torch2.9")
    assert shipped_recipe.frameworks.pytorch is not None
    pytorch = shipped_recipe.frameworks.pytorch.model_copy(update={"torchaudio": "2.9.1"})
    frameworks = shipped_recipe.frameworks.model_copy(update={"pytorch": pytorch})
    chosen = shipped_recipe.model_copy(update={"frameworks": frameworks})
    assert stack_pins(chosen, knowledge_base())["torchaudio"].pin == "torchaudio==2.9.1+cu126"
    assert "torchvision" not in stack_pins(recipe("cpu-local"), knowledge_base())


def test_cpu_local_says_why_it_has_no_torchvision():
    text = (ROOT / "recipes" / "cpu-local.yaml").read_text()
    why = text[: text.index("    torchvision: false")].rsplit("variant: cpu\n", 1)[1]
    assert "cannot reach" in why and "PIP_EXTRA_INDEX_URL" in why and "drop this line" in why


def test_a_users_torchvision_pin_is_the_stacks_to_choose(tmp_path: Path):
    data = recipe_data("cuda12.6-torch2.9")
    data["python_packages"] = ["torchvision==0.23.0"]
    result = hpcbundle("check", str(write_recipe(tmp_path, data)))
    assert result.returncode == 2
    assert (
        "python_packages: torchvision==0.23.0 conflicts with the stack's torchvision==0.24.1+cu126 "
        "(frameworks.pytorch.torchvision) (remove torchvision from python_packages)" in result.stderr
    )


def _frozen_step(script: str, marker: str) -> str:
    """The frozen-base test and the pip line of `marker` after it, pip replaced by printing its arguments."""
    lines = script.splitlines()
    pip = next(i for i, line in enumerate(lines) if marker in line and " -m pip install " in line)
    test = next(i for i in range(pip, 0, -1) if lines[i].startswith("if [ -f "))
    return f"{lines[test]}\n{lines[pip]}".replace('"${HPCBUNDLE_VENV}/bin/python" -m pip install', "echo")


@pytest.mark.parametrize("marker", ["torch==2.13.0+cpu", "tqdm==4.66.4"])
def test_on_a_base_that_freezes_its_packages_pip_installs_against_that_file(tmp_path: Path, marker: str):
    script = hpcbundle("render", str(ROOT / "tests" / "data" / "recipes" / "cpu-packages.yaml"), "--format", "shell")
    assert script.returncode == 0, script.stderr
    frozen = tmp_path / "constraint.txt"
    step = _frozen_step(script.stdout, marker).replace("/etc/pip/constraint.txt", str(frozen))
    without = subprocess.run(["bash", "-c", step], capture_output=True, text=True, check=True).stdout
    frozen.write_text("torch==2.6.0a0+ecf3bae40a\n")
    within = subprocess.run(["bash", "-c", step], capture_output=True, text=True, check=True).stdout
    assert f"-c {frozen}" not in without and marker in without
    assert f"-c {frozen} " in within and marker in within
