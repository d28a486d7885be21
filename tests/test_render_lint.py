"""The real linters on what the renderer writes: hadolint, shellcheck, and tests/defcheck.py for .defs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .defcheck import check_def, parse_def
from .helpers import RENDERED_RECIPES, ROOT, rendered, shellcheck, steps, tool
from .helpers import SHIPPED_RECIPES as RECIPES

SH_SECTIONS = ("test", "runscript", "environment")  # run by /bin/sh; %post runs with `-c /bin/bash`


@pytest.mark.parametrize("name", RENDERED_RECIPES)
def test_hadolint_finds_nothing_in_the_rendered_dockerfile(name: str) -> None:
    result = subprocess.run(
        [tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "--format", "json", "-"],
        input=rendered(name, "docker"),
        capture_output=True,
        text=True,
    )
    assert json.loads(result.stdout or "[]") == [], result.stdout
    assert result.returncode == 0, result.stderr


def test_every_rule_hadolint_ignores_is_justified_in_a_comment() -> None:
    text = (ROOT / ".hadolint.yaml").read_text()
    ignored = yaml.safe_load(text)["ignored"]
    assert ignored
    for rule in ignored:
        assert re.search(rf"^  # {rule} \(.+\): .+\n(  # .*\n)*  - {rule}$", text, re.M), f"{rule} has no justification"


@pytest.mark.parametrize("name", RENDERED_RECIPES)
def test_every_snippet_passes_shellcheck_as_rendered(name: str) -> None:
    for step in steps(name).all():
        shell = "sh" if step.snippet == "verify" else "bash"  # verify is also the .def's %test
        script = f"#!/bin/{shell}\nset -eu\n" + "\n".join(step.lines) + "\n"
        assert shellcheck(script, shell, step.lint_ignore) == [], f"{step.snippet}: {step.title}"


@pytest.mark.parametrize("name", RENDERED_RECIPES)
def test_def_scripts_pass_shellcheck(name: str) -> None:
    stages, _ = parse_def(rendered(name, "singularity"))
    checked = []
    for stage in stages:
        for section in stage.sections:
            if section.name in ("post", *SH_SECTIONS):
                shell = "bash" if section.args == "-c /bin/bash" else "sh"
                assert shellcheck("\n".join(section.body) + "\n", shell) == [], f"%{section.name} of stage {stage.name}"
                checked.append(section.name)
    assert sorted(checked) == ["environment", "post", "post", "runscript", "test"]


@pytest.mark.parametrize("name", RECIPES)
def test_def_has_the_structure_apptainer_needs(name: str) -> None:
    assert check_def(rendered(name, "singularity")) == []


BROKEN = {
    "misspelled section": (
        ("%post -c /bin/bash\n", "%psot -c /bin/bash\n", 1),
        "%psot: unknown section (did you mean %post?)",
    ),
    "missing Bootstrap": (("Bootstrap: docker\n", "", 1), "stage build: no Bootstrap:"),
    "unknown stage in %files from": (
        ("%files from build\n", "%files from bulid\n", 1),
        "no earlier stage is named 'bulid' (earlier: build)",
    ),
    "unbalanced quotes": (
        ("    set -euo pipefail\n", '    set -euo pipefail\n    echo "unfinished\n', 1),
        "bash -n: bash: line",
    ),
    "stage from a later stage": (
        ("%files from build\n", "%files from runtime\n", 1),
        "no earlier stage is named 'runtime'",
    ),
    "unknown header keyword": (
        ("Stage: build\n", "Stage: build\nFrmo: debian:bookworm\n", 1),
        "Frmo: unknown header keyword (did you mean from?)",
    ),
    "stray text": (
        ("%files\n    wheelhouse", "garbage here\n%files\n    wheelhouse", 1),
        "neither a header keyword nor a %section: 'garbage here'",
    ),
    "two stages, one name": (("Stage: runtime\n", "Stage: build\n", 1), "the stage name is used twice"),
    "templating without %arguments": (
        ("From: debian:bookworm\nStage: build", "From: debian:{{ TAG }}\nStage: build", 1),
        "needs an %arguments section",
    ),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_defcheck_rejects_a_broken_def_that_spython_would_accept(broken: str) -> None:
    (old, new, count), problem = BROKEN[broken]
    text = rendered("cpu-local", "singularity")
    assert old in text
    problems = check_def(text.replace(old, new, count))
    assert any(problem in line for line in problems), problems


def test_defcheck_command_names_each_problem_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.def"
    bad.write_text("From: debian:bookworm\n\n%post\n    echo hi\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "defcheck.py"), str(bad)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stdout == f"{bad}: line 1: stage at line 1: no Bootstrap: (each stage starts with one)\n"


@pytest.mark.parametrize("name", RENDERED_RECIPES)
def test_shellcheck_finds_nothing_in_the_rendered_install_script(name: str) -> None:
    script = rendered(name, "shell")
    assert script.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in script
    assert shellcheck(script, "bash") == []
