"""The Makefile's user variables as hostile input (issue 41, item 6): a RECIPE that is no recipe name or path, or
a PYTHON that is no Python version or interpreter, stops make in one line (exit 2) before anything runs; any
other value reaches its command as exactly one argument, whatever quotes, spaces, backquotes or $(...) it holds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import ROOT, examples

INJECTIONS = ["x;touch {m}", "`touch {m}`", "$(touch {m})", "$(shell touch {m})", "x\ntouch {m}", "x'; touch {m}; '"]
BAD_RECIPES = [*INJECTIONS, "", "-o.yaml", "--help", "cpu-local\t", "team.yaml\r", "recipes/"]
BAD_PYTHONS = [*INJECTIONS, "3.11;id", "-V", "/bin/sh", "perl", "python3 -c 1", "3.11\n", "3"]


def make(*words: str, dry: bool = False) -> subprocess.CompletedProcess[str]:
    """`make [-n] WORDS...` in the bundle as a user types it (not a sub-make of `make check`), output captured."""
    argv = ["make", "--no-print-directory", *(["-n"] if dry else []), *words]
    env = {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False, env=env)


def assert_refused(result: subprocess.CompletedProcess[str], variable: str) -> None:
    """Exit 2 and one line: make's `Makefile:N: *** VARIABLE: ... (fix).  Stop.`, nothing on stdout."""
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert re.fullmatch(rf"Makefile:\d+: \*\*\* {variable}: .* \(give .*\)\.  Stop\.", line), line


@pytest.mark.parametrize("target", ["build-sif", "build-docker", "gpu-wheelhouse", "demo"])
@pytest.mark.parametrize("value", BAD_RECIPES)
def test_a_recipe_that_is_no_name_or_path_stops_make_in_one_line_and_runs_nothing(tmp_path, target, value):
    marker = tmp_path / "PWNED"
    assert_refused(make(target, f"RECIPE={value.format(m=marker)}", "PYTHON=3.11"), "RECIPE")
    assert not marker.exists()


@pytest.mark.parametrize("target", ["gpu-wheelhouse", "venv", "setup"])
@pytest.mark.parametrize("value", BAD_PYTHONS)
def test_a_python_that_is_no_version_or_interpreter_stops_make_in_one_line_and_runs_nothing(tmp_path, target, value):
    marker = tmp_path / "PWNED"
    assert_refused(make(target, "RECIPE=cpu-local", f"PYTHON={value.format(m=marker)}"), "PYTHON")
    assert not marker.exists()


def _line(output: str, module: str) -> list[str]:
    """The words of the printed command that runs `module`."""
    return shlex.split(next(line for line in output.splitlines() if f" -m {module} " in line))


# What a path may hold (no control character): the shell's and make's own metacharacters above all; blanks
# inside it, not around (make drops a value's leading blanks, as it reads VAR= value).
PATH_TEXT = st.text(st.sampled_from("ab9 ._-/'\"`$(){};&|<>*?~#%=,:\\!é"), min_size=1, max_size=30).filter(
    lambda text: text.strip() == text
)


@given(
    recipe=PATH_TEXT.map(lambda text: f"{text}.yaml").filter(lambda text: not text.startswith("-")),
    python=st.one_of(st.sampled_from(["3.11", "python3.12", "python3"]), PATH_TEXT.map(lambda t: f"/{t}/python3")),
    out=PATH_TEXT.filter(lambda text: not text.startswith("-")),
)
@settings(max_examples=examples(60), deadline=None)
def test_any_recipe_path_and_python_reach_the_command_as_one_argument_each(recipe, python, out):
    printed = make("gpu-wheelhouse", f"RECIPE={recipe}", f"PYTHON={python}", f"GPU_WHEELHOUSE={out}", dry=True)
    assert printed.returncode == 0, printed.stderr
    assert _line(printed.stdout, "hpcbundle_testbed.gpu_wheelhouse")[3:] == [recipe, "--python", python, "--out", out]


@given(recipe=PATH_TEXT.map(lambda text: f"{text}.yaml").filter(lambda text: not text.startswith("-")))
@settings(max_examples=examples(40), deadline=None)
def test_build_sif_renders_and_builds_any_recipe_path_under_its_file_name(recipe):
    printed = make("build-sif", f"RECIPE={recipe}", "SIF_FLAGS=", dry=True)
    assert printed.returncode == 0, printed.stderr
    assert _line(printed.stdout, "hpcbundle_testbed.sif")[3:] == ["horovod", recipe, "wheelhouse"]
    render = next(line for line in printed.stdout.splitlines() if " render " in line)
    name = Path(recipe).name.removesuffix(".yaml")
    assert shlex.split(render)[1:3] == ["render", recipe] and shlex.split(render)[-2:] == ["-o", f"build/{name}.def"]
