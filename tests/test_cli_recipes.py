"""The recipe commands as a user runs them: exit codes, one-line errors, nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import ROOT, hpcbundle, recipe_data, write_recipe


def test_recipes_lists_at_least_five_stacks_as_json():
    result = hpcbundle("recipes", "--format", "json")
    assert result.returncode == 0, result.stderr
    names = [row["name"] for row in json.loads(result.stdout)]
    assert len(names) >= 5 and "cpu-local" in names


@pytest.mark.parametrize("name", [p.stem for p in sorted((ROOT / "recipes").glob("*.yaml"))])
def test_check_passes_each_shipped_recipe(name):
    result = hpcbundle("check", name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"recipe {name}: OK" in result.stdout


def test_check_refuses_cuda13_with_volta(tmp_path):
    data = recipe_data("cuda12.6-torch2.9")
    data["gpu"].update(cuda="13.0")
    result = hpcbundle("check", str(write_recipe(tmp_path, data)))
    assert result.returncode == 2
    assert "cuda-archs: gpu.archs: CUDA 13.0 cannot target compute capability 7.0: its floor is 7.5" in result.stderr
    assert "drop 7.0 from gpu.archs, or use a CUDA 12.x recipe" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_refuses_a_recipe_that_mixes_the_two_cuda_routes(tmp_path):
    data = recipe_data("cuda13.0-torch2.11")
    data["base"]["build_image"] = "nvidia/cuda:13.0.0-devel-ubuntu24.04"
    recipe = write_recipe(tmp_path, data)
    result = hpcbundle("check", str(recipe))
    assert result.returncode == 2
    assert (
        f"{recipe}: base.build_image: is an nvidia/cuda image but gpu.source is wheels (CUDA from PyPI's NVIDIA "
        "wheels) (use the plain OS image debian:bookworm, or set gpu.source: image)" in result.stderr
    )
    data = recipe_data("cuda12.6-torch2.9")
    data["base"]["runtime_image"] = "ubuntu:22.04"
    result = hpcbundle("check", str(write_recipe(tmp_path, data)))
    assert result.returncode == 2 and "base.runtime_image: is ubuntu:22.04, not an nvidia/cuda image" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_check_refuses_an_nccl_that_torch_does_not_load(tmp_path):
    data = recipe_data("cuda13.0-torch2.11")
    data["gpu"]["nccl"] = "2.27.5"
    result = hpcbundle("check", str(write_recipe(tmp_path, data)))
    assert result.returncode == 2
    assert "nccl-torch: gpu.nccl is 2.27.5 but torch 2.11.0 cu130 loads NCCL 2.28.9" in result.stderr
    assert 'set gpu.nccl: "2.28.9"' in result.stderr
    data["gpu"]["nccl"] = "2.28.9-1+cuda13.0"
    result = hpcbundle("check", str(write_recipe(tmp_path, data)))
    assert result.returncode == 2 and "gpu.nccl: '2.28.9-1+cuda13.0' is an apt libnccl2 version" in result.stderr


def test_check_refuses_tensorflow_216_with_horovod_0281(tmp_path):
    data = recipe_data("cpu-local")
    data["frameworks"]["tensorflow"]["version"] = "2.16.1"
    result = hpcbundle("check", str(write_recipe(tmp_path, data)))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("hpcbundle: error:")]
    assert any("horovod-tensorflow: Horovod 0.28.1 supports TensorFlow <= 2.15" in line for line in errors), errors


def test_render_with_misspelled_key_exits_2_and_writes_nothing(tmp_path):
    data = recipe_data("cpu-local")
    data["base"]["runtime_imgae"] = data["base"].pop("runtime_image")
    recipe = write_recipe(tmp_path, data)
    out = tmp_path / "out" / "x.Dockerfile"
    result = hpcbundle("render", str(recipe), "--format", "docker", "-o", str(out))
    assert result.returncode == 2
    assert f"{recipe}: base.runtime_imgae: unknown key (did you mean runtime_image?)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() and not out.parent.exists()


def test_render_writes_the_file_atomically(tmp_path):
    out = tmp_path / "cpu-local.Dockerfile"
    result = hpcbundle("render", "cpu-local", "--format", "docker", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith(hpcbundle("render", "cpu-local", "--format", "docker").stdout[:40])
    assert [p.name for p in tmp_path.iterdir()] == ["cpu-local.Dockerfile"]


def test_unknown_recipe_name_exits_2_with_suggestion():
    result = hpcbundle("render", "cuda11.8", "--format", "docker")
    assert result.returncode == 2
    assert "no such recipe" in result.stderr and "did you mean cuda11.8-tf2.14-torch2.1?" in result.stderr


def test_bundle_found_from_a_subdirectory():
    result = hpcbundle("recipes", "--format", "json", cwd=ROOT / "recipes", bundle=None)
    assert result.returncode == 0 and "cpu-local" in result.stdout


def test_outside_any_bundle_the_checkout_the_package_runs_from_is_the_bundle(tmp_path, monkeypatch):
    monkeypatch.delenv("HPCBUNDLE_ROOT", raising=False)
    result = hpcbundle("recipes", "--format", "json", cwd=tmp_path, bundle=None)
    assert result.returncode == 0, result.stderr
    assert "cpu-local" in result.stdout


def test_docs_recipes_table_is_the_generated_one():
    page = (ROOT / "docs" / "images.md").read_text()
    start = page.index("<!-- recipes-table:start")
    block = page[page.index("\n", start) + 1 : page.index("<!-- recipes-table:end -->")]
    assert block == hpcbundle("recipes", "--format", "markdown").stdout, (
        "run: hpcbundle recipes --format markdown, paste into docs/images.md"
    )


def test_every_command_module_registers_exactly_the_commands_it_is_listed_for():
    """The CLI imports a command's module only when it runs: the table must name them all, and right."""
    import importlib

    from hpcbundle.cli import COMMAND_MODULES, main

    for module in set(COMMAND_MODULES.values()):
        importlib.import_module(f"hpcbundle.cli.{module}")
    assert set(main.commands) == set(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        assert main.commands[name].callback.__module__ == f"hpcbundle.cli.{module}", name


def test_launch_does_not_import_the_other_commands_modules():
    code = (
        "import sys; from hpcbundle.cli import COMMAND_MODULES, main\n"
        "try:\n    main(['--bundle', sys.argv[1], 'launch', '--np', '2', '--', 'true'])\n"
        "except SystemExit:\n    pass\n"
        "commands = {f'hpcbundle.cli.{m}' for m in COMMAND_MODULES.values()}\n"
        "print(sorted(m for m in sys.modules if m in commands or m.startswith(('numpy', 'matplotlib'))))"
    )
    res = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert res.stdout.splitlines()[-1] == "['hpcbundle.cli.launch']", res.stdout + res.stderr
