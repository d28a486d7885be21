"""What a program imports, read without importing it, and the program-imports rule over the probe's answers.

The real thing (a program importing a module the nodes lack, refused before launch on the ssh
cluster) is tests/test_ssh_cluster.py.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hpcbundle.cli.preflight import program_probe
from hpcbundle.config.sites import Site
from hpcbundle.diagnose.imports import MAX_BYTES, MAX_FILES, MAX_NAMES, program_imports
from hpcbundle.diagnose.program import parse_probe, probe_words
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.launch import LaunchPlan
from hpcbundle.rules.engine import Facts, evaluate

from .helpers import ROOT, hpcbundle, need_mpirun
from .helpers import SMALL_SITE as SITE


def write(directory: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path: source) under `directory`; the first one is the program."""
    for name, source in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(source)
    return directory / next(iter(files))


def test_imports_are_the_top_level_names_outside_the_standard_library(tmp_path: Path):
    source = (
        "from __future__ import annotations\nimport os, sys, json\nimport numpy as np\nimport torch.nn as nn\n"
        "from torchvision import models\nimport horovod.torch as hvd\nfrom importlib import util\n"
        "def main():\n    import tqdm.auto\n"
    )
    found = program_imports(write(tmp_path, {"train.py": source}))
    assert found == ("train.py", ("horovod", "numpy", "torch", "torchvision", "tqdm"), (), ("train.py",), "")


def test_local_modules_and_packages_are_followed_and_not_checked(tmp_path: Path):
    program = write(
        tmp_path,
        {
            "train.py": "import helpers, wandb\nfrom models import net\nimport models.layers\nimport torch\n",
            "helpers.py": "import yaml\nimport helpers\n",
            "models/__init__.py": "from . import layers\n",
            "models/net.py": "import timm\nfrom .. import helpers\n",
            "models/layers.py": "import einops\nfrom .blocks import Block\n",
            "models/blocks/__init__.py": "import numpy\n",
            "unused.py": "import never_read_xyz\n",
            "wandb/run-1/log.txt": "not a module\n",
        },
    )
    found = program_imports(program)
    assert found.required == ("einops", "numpy", "timm", "torch", "wandb", "yaml")
    assert found.files == (
        "helpers.py",
        "models/__init__.py",
        "models/blocks/__init__.py",
        "models/layers.py",
        "models/net.py",
        "train.py",
    )


def test_imports_guarded_by_except_import_error_are_optional_and_type_checking_ones_skipped(tmp_path: Path):
    source = (
        "try:\n    import apex\nexcept ImportError:\n    apex = None\n"
        "try:\n    from wandb import init\nexcept (ModuleNotFoundError, AttributeError):\n    pass\n"
        "try:\n    import yaml\nexcept KeyError:\n    pass\n"
        "try:\n    import numpy\nexcept Exception:\n    pass\nimport numpy\n"
        "try:\n    pass\nexcept ImportError:\n    import tqdm\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\nelse:\n    import scipy\n"
    )
    found = program_imports(write(tmp_path, {"train.py": source}))
    assert (found.required, found.optional) == (("numpy", "scipy", "tqdm", "yaml"), ("apex", "wandb"))


def test_a_syntax_error_is_one_line_and_no_imports(tmp_path: Path):
    found = program_imports(write(tmp_path, {"train.py": "import numpy\nx = = 1\n"}))
    assert (found.required, found.problem) == ((), "train.py: line 2: invalid syntax; its imports were not read")
    local = program_imports(write(tmp_path / "b", {"train.py": "import numpy\nimport util\n", "util.py": "def (\n"}))
    assert local.required == ("numpy",) and local.problem.startswith("util.py: line 1: ")


def test_a_syntax_error_without_a_line_names_none(tmp_path: Path, monkeypatch):
    """CPython 3.11.4+ raises null bytes as a SyntaxError whose lineno is None, and a bad coding line's is 0."""
    coding = program_imports(write(tmp_path, {"train.py": "# -*- coding: nope -*-\nimport numpy\n"}))
    assert coding.problem == "train.py: unknown encoding: nope; its imports were not read"

    def parse(source: bytes, filename: str) -> None:
        raise SyntaxError("source code string cannot contain null bytes")

    monkeypatch.setattr("hpcbundle.diagnose.imports.ast.parse", parse)
    found = program_imports(write(tmp_path, {"nulls.py": "import numpy\n"}))
    assert found.problem == "nulls.py: source code string cannot contain null bytes; its imports were not read"


def test_huge_deep_and_binary_files_are_refused_in_one_line_without_recursion_error(tmp_path: Path):
    sources = {
        "chained.py": "import numpy\nx = " + "+".join(["1"] * 100_000) + "\n",
        "attributes.py": "import numpy\nx = a" + ".b" * 100_000 + "\n",
        "parens.py": "import numpy\nx = " + "(" * 1000 + ")" * 1000 + "\n",
        "nulls.py": "import numpy\x00\n",
        "huge.py": "import numpy\n" + "#" * MAX_BYTES,
    }
    problems = {name: program_imports(write(tmp_path, {name: text})).problem for name, text in sources.items()}
    deep = ("chained.py", "attributes.py")
    if sys.version_info < (3, 11):  # CPython 3.10's parser reads these whole: their imports are read, no problem
        assert {name: problems.pop(name) for name in deep} == dict.fromkeys(deep, "")
        assert all(program_imports(write(tmp_path, {n: sources[n]})).required == ("numpy",) for n in deep)
    else:
        assert {name: problems.pop(name) for name in deep} == {
            name: f"{name} is nested too deeply to read, its imports were not read" for name in deep
        }
    assert problems == {
        "parens.py": "parens.py: line 2: too many nested parentheses; its imports were not read",
        "nulls.py": "nulls.py: source code string cannot contain null bytes; its imports were not read",
        "huge.py": "huge.py is over 2 MiB, its imports were not read",
    }
    nested = "import numpy\n" + "".join("    " * i + "if x:\n" for i in range(90)) + "    " * 90 + "import tqdm\n"
    assert program_imports(write(tmp_path, {"nested.py": nested})).required == ("numpy", "tqdm")


def test_local_files_followed_and_names_sent_are_bounded(tmp_path: Path):
    chain = {f"m{i}.py": f"import m{i + 1}\nimport pkg_{i}\n" for i in range(MAX_FILES + 10)}
    found = program_imports(write(tmp_path, {"train.py": "import m0\n", **chain}))
    assert len(found.files) == MAX_FILES and "imports more than 64 local files" in found.problem
    many = "".join(f"import mod_{i:04d}\n" for i in range(MAX_NAMES + 50))
    assert len(program_imports(write(tmp_path, {"many.py": many})).required) == MAX_NAMES


def test_the_probe_finds_modules_without_importing_them_and_reports_the_missing(tmp_path: Path):
    (tmp_path / "boom.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w')\n")
    words = probe_words("python3", ["horovod"], ["boom", "pytest", "not_installed_mod_xyz"])
    words[4] = sys.executable
    out = subprocess.run(words, capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path).stdout
    [found] = parse_probe(out)
    assert found["missing"] == ["not_installed_mod_xyz"] and not (tmp_path / "imported").exists()


def test_the_probes_command_line_stays_far_below_the_kernels_argument_limits():
    words = probe_words("python3", ["horovod", "torch"], [f"m{i:099d}" for i in range(MAX_NAMES)])
    assert max(len(w.encode()) for w in words) < 8 * 1024 and sum(len(w) + 1 for w in words) < 64 * 1024


def test_the_launch_probe_sends_the_programs_imports_after_the_frameworks(tmp_path: Path):
    program = write(tmp_path, {"train.py": "import torch\nimport torchvision\nimport horovod.torch\nimport json\n"})
    hosts = (("node2", 1), ("node3", 1))
    probe = program_probe(LaunchPlan(Site.model_validate(SITE), program=("python3", str(program))), hosts)
    assert probe is not None and probe.words[6:] == ["horovod", "torch", "--", "horovod", "torch", "torchvision"]
    assert probe.imports == program_imports(program) and probe.launch_argv[-len(probe.words) :] == probe.words
    unbuffered = program_probe(LaunchPlan(Site.model_validate(SITE), program=("python3", "-u", str(program))), hosts)
    assert unbuffered is not None and unbuffered.imports == probe.imports


def test_a_job_on_this_node_alone_is_probed_here_without_its_launcher(tmp_path: Path):
    """Every rank on this node outside a container: the probe runs here once (one Python start), no launch line."""
    program = write(tmp_path, {"train.py": "import torch\n"})
    plan = LaunchPlan(Site.model_validate(SITE), program=("python3", str(program)), here="vm")
    probe = program_probe(plan, (("vm", 2),))
    assert probe is not None and probe.launch_argv is None and probe.hosts == ["vm"]
    assert program_probe(replace(plan, image="h.sif"), (("vm", 2),)) is None  # the rank's python is the image's


@pytest.mark.parametrize(
    "module, key",
    [("torch", "frameworks.pytorch"), ("tensorflow", "frameworks.tensorflow"), ("horovod", "horovod.version")],
)
def test_a_missing_framework_is_set_by_its_own_recipe_key_not_python_packages(module, key):
    nodes = {"node1": rank("node1", [module], "/opt/venv/bin/python3")}
    assert judge(nodes, required=(module,), image="/img/cpu.sif").endswith(
        f"; set {key} in the recipe for `{module}` and rebuild the image"
    )


def test_the_shipped_examples_import_nothing_local_or_optional():
    found = program_imports(ROOT / "examples" / "pytorch_train.py")
    assert "torch" in found.required and "horovod" in found.required and found.problem == ""
    assert not set(found.required) & set(sys.stdlib_module_names)


def rank(host: str, missing: list[str], executable: str = "/srv/venv/bin/python3") -> dict:
    found = {"horovod": "0.28.1", "torch": "2.13.0"}
    prefix = str(Path(executable).parent.parent)
    return {"kind": "python", "host": host, "rank": "0", "executable": executable, "prefix": prefix,
            "modules": found, "missing": missing}  # fmt: skip


def judge(nodes: dict, required=("torch", "torchvision"), optional=(), problem="", image=None) -> str:
    runtime = "singularity" if image else "none"
    data = {**copy.deepcopy(SITE), "container": {"runtime": runtime}}
    found = {"program": "train.py", "required": list(required), "optional": list(optional), "problem": problem}
    here = next(iter(nodes.values()))  # the launching node: the first
    probe = {"argv0": "python3", "reference": "this node", "launching": here, "nodes": nodes, "imports": found}
    facts = Facts(site=Site.model_validate(data), observed=True, program=probe, image_path=image)
    return next(r.line() for r in evaluate(facts, knowledge_base()) if r.rule == "program-imports")


def test_a_module_missing_on_nodes_fails_naming_it_the_nodes_and_the_recipe_key():
    nodes = {
        "node1": rank("node1", []),
        "node2": rank("node2", ["torchvision"]),
        "node3": rank("node3", ["torchvision"]),
    }
    assert judge(nodes) == (
        "FAIL  program-imports      `torchvision` is not importable on node2, node3 "
        "(in the node's python /srv/venv/bin/python3); pip install it into that environment on every node "
        "(in an image: set frameworks.pytorch.torchvision in the recipe for `torchvision`)"
    )
    in_image = {h: rank(h, ["torchvision", "timm"], "/opt/venv/bin/python3") for h in ("node1", "node2")}
    assert judge(in_image, required=("timm", "torchvision"), image="/img/cpu.sif") == (
        "FAIL  program-imports      `timm`, `torchvision` are not importable on node1, node2 (in image /img/cpu.sif); "
        "set frameworks.pytorch.torchvision in the recipe for `torchvision`; add `timm` to the recipe's "
        "`python_packages:` and rebuild the image"
    )


def test_a_missing_optional_import_warns_and_a_bad_source_warns_in_one_line():
    nodes = {"node1": rank("node1", ["apex"]), "node2": rank("node2", ["apex"])}
    assert judge(nodes, required=("torch",), optional=("apex",)) == (
        "WARN  program-imports      `apex` is not importable on node1, node2 (in the node's python "
        "/srv/venv/bin/python3), imported inside try/except ImportError: train.py runs without it; "
        "add `apex` to the recipe's `python_packages:` if needed"
    )
    bad = "train.py: line 2: invalid syntax; its imports were not read"
    assert judge({"node1": rank("node1", [])}, required=(), problem=bad) == f"WARN  program-imports      {bad}"


def test_every_import_found_passes_and_other_interpreters_are_left_to_program_env():
    other = rank("node3", ["torchvision", "torch"], "/usr/bin/python3")
    assert judge({"node1": rank("node1", []), "node2": rank("node2", []), "node3": other}) == (
        "PASS  program-imports      train.py's imports (torch, torchvision) resolve on node1, node2"
    )


def test_the_readme_shows_the_missing_module_row_as_doctor_prints_it():
    """The README's "### Your own packages" row: `timm` missing from the image on f1 and f2."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Your own packages") : readme.index("### What every node must have")]
    (shown,) = [line for line in section.splitlines() if line.startswith("FAIL  program-imports")]
    in_image = {h: rank(h, ["timm"], "/opt/venv/bin/python3") for h in ("f1", "f2")}
    assert shown == judge(in_image, required=("timm", "torch"), image="horovod.sif")


def test_a_local_launch_of_a_program_missing_a_module_is_refused_before_any_rank_starts(tmp_path: Path):
    marker = tmp_path / "ran"
    program = write(tmp_path, {"train.py": f"open({str(marker)!r}, 'w')\nimport nosuchmodule_xyz\n"})
    result = hpcbundle("launch", "--site", "local", "--np", "2", "--exec", "--", "python3", str(program))
    assert result.returncode == 2 and not marker.exists()
    (failed,) = [line for line in result.stderr.splitlines() if line.startswith("FAIL")]
    assert failed.startswith("FAIL  program-imports      `nosuchmodule_xyz` is not importable on ")
    assert "nothing was started" in result.stderr.splitlines()[-1]


@pytest.mark.full_setup
def test_a_local_launch_whose_imports_resolve_runs_every_rank(tmp_path: Path):
    need_mpirun()
    program = write(tmp_path, {"train.py": "import json\nimport os\nopen(f'rank-{os.getpid()}', 'w')\n"})
    result = hpcbundle("launch", "--site", "local", "--np", "2", "--exec", "--", "python3", str(program), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(list(tmp_path.glob("rank-*"))) == 2
