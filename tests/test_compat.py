"""Every rule over a recipe alone passes the shipped recipes and refuses a concrete bad one."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from hpcbundle.config.loading import validate
from hpcbundle.config.recipes import Recipe
from hpcbundle.knowledge.compat import knowledge_base, pytorch_requirement
from hpcbundle.rules.engine import RULES, applicable, failed
from hpcbundle.rules.facts import check_declared, declared_facts
from hpcbundle.rules.loading import all_recipes

from .helpers import RECIPES, recipe_data

KB = knowledge_base()
RECIPE_RULES = [r.name for r in applicable(declared_facts(all_recipes(RECIPES)[0], None, KB))]


def _recipe(base: str, change: Callable[[dict[str, Any]], None]) -> Recipe:
    data = recipe_data(base)
    change(data)
    return validate(Recipe, data, "bad.yaml")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value

    return change


# rule -> (base recipe, change, words the refusal must contain)
BAD_RECIPES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "python-os": ("cpu-local", _set("python", "3.10"), "debian12 ships python 3.11, not 3.10"),
    "cuda-known": ("cuda12.6-torch2.9", _set("gpu.cuda", "12.7"), "CUDA 12.7 is not in the knowledge base"),
    "cuda-archs": (
        "cuda12.6-torch2.9",
        _set("gpu.cuda", "13.0"),
        "gpu.archs: CUDA 13.0 cannot target compute capability 7.0: its floor is 7.5",
    ),
    "cuda-source": ("cuda12.6-torch2.9", _set("gpu.source", "wheels"), "PyPI has no CUDA 12.6 toolkit wheels"),
    "cudnn-cuda": ("cuda11.8-tf2.14-torch2.1", _set("gpu.cudnn", "9.19"), "cuDNN 9.19 has no build for CUDA 11.x"),
    "nccl-torch": (
        "cuda13.0-torch2.11",
        _set("gpu.nccl", "2.27.5"),
        "gpu.nccl is 2.27.5 but torch 2.11.0 cu130 loads NCCL 2.28.9",
    ),
    "cudnn-torch": ("cuda13.0-torch2.11", _set("gpu.cudnn", "9.10"), "torch 2.11.0 cu130 pins cuDNN 9.19.0.56"),
    "nvcc-gcc": ("cuda11.8-tf2.14-torch2.1", _set("base.os", "ubuntu24.04"), "nvcc 11.8 accepts GCC <= 11"),
    "horovod-gcc13": (
        "cuda13.0-torch2.11",
        lambda d: (_set("base.os", "ubuntu24.04")(d), _set("horovod.patches", ["cxx17"])(d)),
        "add gcc13 to horovod.patches",
    ),
    "horovod-py312": (
        "cuda13.0-torch2.11",
        lambda d: (
            _set("base.os", "ubuntu24.04")(d),
            _set("python", "3.12")(d),
            _set("horovod.patches", ["cxx17", "gcc13"])(d),
        ),
        "add py312 to horovod.patches",
    ),
    "tensorflow-build": (
        "cuda11.8-tf2.14-torch2.1",
        _set("frameworks.tensorflow.version", "2.15.1"),
        "TensorFlow 2.15.1 is built for CUDA 12.2; the recipe has CUDA 11.8",
    ),
    "pytorch-wheel": (
        "cuda12.2-tf2.15-torch2.1-ucx",
        _set("frameworks.pytorch.variant", "cu118"),
        "PyTorch wheel cu118 carries CUDA 11.x; the recipe has CUDA 12.2",
    ),
    "pytorch-archs": (
        "cuda13.0-torch2.11",
        _set("gpu.archs", ["9.0", "11.0"]),
        "the PyTorch 2.11.0 cu130 wheel has no kernels for compute capability 11.0",
    ),
    "without-horovod": (
        "cpu-ddp",
        _set("frameworks", {"tensorflow": {"version": "2.15.1", "package": "tensorflow-cpu"}}),
        "a recipe without horovod is a torch.distributed image, which needs PyTorch",
    ),
    "horovod-tensorflow": (
        "cpu-local",
        _set("frameworks.tensorflow.version", "2.16.1"),
        "TensorFlow 2.16.1 ships Keras 3",
    ),
    "horovod-pytorch": ("cpu-local", _set("horovod.patches", []), "add cxx17 to horovod.patches"),
    "horovod-ops": ("cuda12.6-torch2.9", _set("horovod.tensor_operations", ["mpi", "gloo"]), "add nccl"),
    "mpi-abi": ("cuda12.6-torch2.9", _set("mpi.version", "4.2.0"), "Open MPI 4.2 is not a known series"),
    "mpi-install": ("cuda11.8-tf2.14-torch2.1", _set("mpi.install", "distro"), "install: distro takes no source"),
    "ucx-open-mpi": (
        "cuda12.2-tf2.15-torch2.1-ucx",
        _set("mpi.flavour", "mpich"),
        "ucx is built only for an Open MPI built from source",
    ),
    "cuda-route": ("cuda12.6-torch2.9", _set("base.runtime_image", "ubuntu:22.04"), "not an nvidia/cuda image"),
    "verbs-runtime": ("cuda12.2-tf2.15-torch2.1-ucx", _set("fabric_libs", []), "add fabric_libs: [verbs]"),
    "build-env-derived": (
        "cpu-local",
        _set("horovod.build_env", {"HOROVOD_WITH_MXNET": "1"}),
        "derived from the recipe",
    ),
    "user-packages": (
        "cpu-local",
        _set("python_packages", ["horovod==0.27.0"]),
        "conflicts with the stack's horovod==0.28.1",
    ),
    "torchvision-pairing": (
        "cuda13.0-torch2.11",
        _set("frameworks.pytorch.torchvision", "0.25.0"),
        "torchvision 0.25.0 does not pair with torch 2.11.0: 0.26.0 does",
    ),
}


def test_every_rule_has_a_bad_recipe():
    assert sorted(BAD_RECIPES) == sorted(r.name for r in RULES if r.needs == {"recipe"})


@pytest.mark.parametrize("recipe", all_recipes(RECIPES), ids=lambda r: r.name)
def test_shipped_recipe_passes_every_rule(recipe):
    findings = check_declared(recipe, None, KB)
    assert not failed(findings), [f.line() for f in findings if f.status == "FAIL"]
    assert [f.rule for f in findings] == RECIPE_RULES


@pytest.mark.parametrize("rule_name", sorted(BAD_RECIPES))
def test_rule_refuses_its_bad_recipe(rule_name):
    base, change, words = BAD_RECIPES[rule_name]
    findings = {f.rule: f for f in check_declared(_recipe(base, change), None, KB)}
    assert findings[rule_name].status == "FAIL"
    assert words in findings[rule_name].message()


def test_tensorflow_cpu_on_gpu_recipe_is_refused():
    recipe = _recipe("cuda12.2-tf2.15-torch2.1-ucx", _set("frameworks.tensorflow.package", "tensorflow-cpu"))
    finding = {f.rule: f for f in check_declared(recipe, None, KB)}["tensorflow-build"]
    assert finding.status == "FAIL" and "cannot use the GPU" in finding.message()


def test_review_facts_cu128_carries_volta_and_cudnn9_builds_for_cuda_11():
    recipe = _recipe("cuda12.6-torch2.9", _set("frameworks.pytorch.variant", "cu128"))
    assert {f.rule: f.status for f in check_declared(recipe, None, KB)}["pytorch-archs"] == "PASS"
    recipe = _recipe("cuda11.8-tf2.14-torch2.1", _set("gpu.cudnn", "9.5"))
    assert {f.rule: f.status for f in check_declared(recipe, None, KB)}["cudnn-cuda"] == "PASS"


def test_nccl_of_a_bundled_torch_is_a_warning_and_of_an_unknown_one_too():
    findings = {f.rule: f for f in check_declared(_recipe("cuda11.8-tf2.14-torch2.1", lambda d: None), None, KB)}
    assert findings["nccl-torch"].status == "WARN" and "carries its own NCCL" in findings["nccl-torch"].message()
    recipe = _recipe("cuda13.0-torch2.11", _set("frameworks.pytorch.version", "2.9.1"))
    findings = {f.rule: f for f in check_declared(_recipe("cuda13.0-torch2.11", lambda d: None), None, KB)}
    assert findings["nccl-torch"].status == "PASS"
    findings = {f.rule: f for f in check_declared(recipe, None, KB)}
    assert (
        findings["nccl-torch"].status == "WARN" and "is not in the knowledge base" in findings["nccl-torch"].message()
    )


def test_torch_requirement_uses_pypi_only_for_its_default_variant():
    assert pytorch_requirement("2.1.2", "cu121", KB) == "torch==2.1.2"
    assert pytorch_requirement("2.1.2", "cu118", KB) == "torch==2.1.2+cu118"
    assert pytorch_requirement("2.13.0", "cpu", KB) == "torch==2.13.0+cpu"
