"""The user's own Python packages in a recipe (python_packages, requirements_file): exact pins only, read
without running anything, refused in one line naming the recipe and the key where they would touch the stack."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbundle.config.errors import UserError
from hpcbundle.config.packages import shape
from hpcbundle.rules.loading import load_recipe

from .helpers import RECIPES, ROOT, examples, hpcbundle, recipe, recipe_data, write_recipe


def _recipe_with(directory: Path, requirements: str | None = None, **keys: object) -> Path:
    data = recipe_data("cpu-local") | keys
    if requirements is not None:
        (directory / "reqs.txt").write_text(requirements)
        data["requirements_file"] = "reqs.txt"
    return write_recipe(directory, data)


def _refusal(path: Path) -> str:
    with pytest.raises(UserError) as caught:
        load_recipe(str(path), RECIPES)
    assert len(caught.value.lines) == 1
    return caught.value.lines[0]


@pytest.mark.parametrize(
    "spec, problem",
    [
        ("requests @ https://example.org/requests-2.32.3.whl", "names a URL"),
        ("requests==2.32.3 @ https://example.org/r.whl", "not a PEP 508 name with a pin"),
        ("./vendor/mypkg", "not a PEP 508 name with a pin"),
        ("/srv/wheels/mypkg.whl", "not a PEP 508 name with a pin"),
        ("--index-url=https://example.org/simple", "is a pip option"),
        ("requests==2.32.3; os.system('id')", "not a PEP 508 name with a pin"),
        ("requests==2.32.3; python_version >= '3.8'", "has an environment marker"),
        ("requests>=2.0", "is not pinned to one exact version"),
        ("requests==2.*", "is not pinned to one exact version"),
        ("requests", "is not pinned to one exact version"),
        ("req$uests==1.0", "not a PEP 508 name with a pin"),
    ],
)
def test_a_package_spec_that_is_not_one_exact_pin_is_refused_in_one_line(tmp_path, spec, problem):
    line = _refusal(_recipe_with(tmp_path, python_packages=[spec]))
    assert line.startswith(f"{tmp_path}/cpu-local.yaml: python_packages[0]: ")
    assert problem in line


@pytest.mark.parametrize(
    "text, problem",
    [
        ("-r other.txt\n", "includes another file or source"),
        ("-c constraints.txt\n", "includes another file or source"),
        ("-e git+https://example.org/x.git#egg=x\n", "includes another file or source"),
        ("--index-url https://example.org/simple\n", "is a pip option"),
        ("requests==2.32.3 \\\n  --hash=sha256:00\n", "continues on the next line"),
        ("requests>=2\n", "is not pinned to one exact version"),
    ],
)
def test_a_requirements_file_that_includes_files_or_options_is_refused(tmp_path, text, problem):
    line = _refusal(_recipe_with(tmp_path, requirements=text))
    assert line.startswith(f"{tmp_path}/cpu-local.yaml: requirements_file: reqs.txt line 1: ")
    assert problem in line


@pytest.mark.parametrize("where", ["../reqs.txt", "/etc/reqs.txt"])
def test_a_requirements_file_outside_the_recipes_directory_is_refused(tmp_path, where):
    line = _refusal(_recipe_with(tmp_path, requirements_file=where))
    assert "requirements_file: " in line and "outside the recipe's directory" in line


SECRET = "root:$6$sAlt$h4sh.Xy/Z:19000:0:99999:7:::"
"""A line a requirements file must never echo (its letters and digits are the secret)."""


@pytest.mark.parametrize("how", ["file", "folder"])
def test_a_requirements_file_that_is_a_symlink_out_of_the_recipes_directory_is_refused_unread(tmp_path, how):
    outside, team = tmp_path / "outside", tmp_path / "team"
    outside.mkdir(), team.mkdir()
    (outside / "shadow").write_text(f"{SECRET}\n")
    if how == "file":
        (team / "reqs.txt").symlink_to(outside / "shadow")
    else:
        (team / "etc").symlink_to(outside)
    relative = "reqs.txt" if how == "file" else "etc/shadow"
    line = _refusal(write_recipe(team, recipe_data("cpu-local") | {"requirements_file": relative}))
    assert line == (
        f"{team}/cpu-local.yaml: requirements_file: '{relative}' is a symlink out of the recipe's directory "
        "(copy the file beside the recipe)"
    )


def test_a_symlink_to_a_file_inside_the_recipes_directory_is_read(tmp_path):
    (tmp_path / "pins").mkdir()
    (tmp_path / "pins" / "real.txt").write_text("tqdm==4.66.4\n")
    (tmp_path / "reqs.txt").symlink_to(tmp_path / "pins" / "real.txt")
    path = write_recipe(tmp_path, recipe_data("cpu-local") | {"requirements_file": "reqs.txt"})
    assert load_recipe(str(path), RECIPES).user_packages == (("requirements_file", "tqdm==4.66.4"),)


@pytest.mark.parametrize("secret", [SECRET, "ghp_" + "Ab1" * 12, "sk-live-" + "9x" * 20, "AKIA" + "Q7" * 8 + " x"])
def test_a_refused_requirements_line_shows_its_shape_never_its_text(tmp_path, secret):
    line = _refusal(_recipe_with(tmp_path, requirements=f"tqdm==4.66.4\n{secret}\n"))
    assert line.startswith(f"{tmp_path}/cpu-local.yaml: requirements_file: reqs.txt line 2: a line shaped '")
    words = {word for word in re.split(r"[^A-Za-z0-9]+", secret) if len(word) > 1}
    assert not any(word in line.split("line 2:", 1)[1] for word in words), line


@given(st.text(st.characters(codec="utf-8"), min_size=1, max_size=80))
@settings(max_examples=examples(200), deadline=None)
def test_the_shape_of_any_text_holds_no_letter_digit_or_control_character_of_it(text):
    shown = shape(text)
    assert not any(c.isalnum() and c not in "a9" or not c.isprintable() for c in shown), shown
    assert len(shown) <= 45


@pytest.mark.parametrize("text", ["\ufefftqdm==4.66.4\n", "tqdm==4.66.4\t# progress bars\n", "#x\n\ttqdm==4.66.4 #y\n"])
def test_a_requirements_file_pip_reads_with_a_bom_or_a_comment_after_a_tab_is_accepted(tmp_path, text):
    loaded = load_recipe(str(_recipe_with(tmp_path, requirements=text)), RECIPES)
    assert loaded.user_packages == (("requirements_file", "tqdm==4.66.4"),)


@pytest.mark.parametrize(
    "pins, message",
    [
        (["torch==2.12.0"], "torch==2.12.0 conflicts with the stack's torch==2.13.0+cpu (frameworks.pytorch)"),
        (["tensorflow-cpu==2.14.0"], "conflicts with the stack's tensorflow-cpu==2.15.1 (frameworks.tensorflow)"),
        (["horovod==0.27.0"], "horovod==0.27.0 conflicts with the stack's horovod==0.28.1 (horovod.version)"),
        (["tensorflow==2.15.1"], "tensorflow==2.15.1 is the stack's to choose (frameworks.tensorflow)"),
        (["nvidia-nccl-cu12==2.20.5"], "is the stack's to choose (gpu (torch's NVIDIA wheels))"),
        (["tqdm==4.66.4", "TQDM==4.66.5"], "TQDM==4.66.5 is given twice (also tqdm==4.66.4)"),
    ],
)
def test_a_pin_against_the_stack_is_refused_naming_both_pins(tmp_path, pins, message):
    line = _refusal(_recipe_with(tmp_path, python_packages=pins))
    assert line.startswith(f"{tmp_path}/cpu-local.yaml: python_packages: ") and message in line


@pytest.mark.parametrize(
    "pin, key",
    [
        ("intel-tensorflow==2.14.0", "frameworks.tensorflow"),
        ("tensorflow-gpu==2.11.0", "frameworks.tensorflow"),
        ("tensorflow==2.15.1", "frameworks.tensorflow"),
        ("tf_nightly==2.16.0.dev20231102", "frameworks.tensorflow"),
        ("TF-Nightly-CPU==2.16.0.dev20231102", "frameworks.tensorflow"),
        ("Intel_TensorFlow_AVX512==2.14.0", "frameworks.tensorflow"),
        ("tensorflow-macos==2.15.0", "frameworks.tensorflow"),
        ("torch-nightly==1.0.0.dev20190328", "frameworks.pytorch"),
        ("pytorch==1.0.2", "frameworks.pytorch"),
    ],
)
@pytest.mark.parametrize("where", ["python_packages", "requirements_file"])
def test_another_distribution_of_a_framework_is_refused_as_a_second_copy_of_it(tmp_path, pin, key, where):
    recipe_file = (
        _recipe_with(tmp_path, python_packages=[pin])
        if where == "python_packages"
        else _recipe_with(tmp_path, requirements=pin + "\n")
    )
    assert _refusal(recipe_file) == (
        f"{tmp_path}/cpu-local.yaml: {where}: {pin} is the stack's to choose ({key}) (remove it; set {key} instead)"
    )


def test_a_pin_the_stack_already_has_is_accepted(tmp_path):
    loaded = load_recipe(str(_recipe_with(tmp_path, python_packages=["torch==2.13.0"])), RECIPES)
    assert loaded.user_packages == (("python_packages", "torch==2.13.0"),)


def test_a_conflict_in_the_requirements_file_names_that_key(tmp_path):
    line = _refusal(_recipe_with(tmp_path, requirements="horovod==0.27.0\n"))
    assert line.startswith(f"{tmp_path}/cpu-local.yaml: requirements_file: horovod==0.27.0 conflicts")


def test_the_test_recipe_reads_both_keys_in_order():
    assert recipe("cpu-packages").user_packages == (
        ("python_packages", "tqdm==4.66.4"),
        ("python_packages", "typing_extensions==4.12.2"),
        ("requirements_file", "requests[socks]==2.32.3"),
        ("requirements_file", "urllib3==2.2.2"),
    )


def test_render_refuses_a_bad_pin_with_exit_2_and_writes_nothing(tmp_path):
    path = _recipe_with(tmp_path, python_packages=["torch==2.12.0"])
    out = tmp_path / "out.Dockerfile"
    result = hpcbundle("render", str(path), "--format", "docker", "-o", str(out))
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.count("\n") == 1 and "python_packages: torch==2.12.0 conflicts" in result.stderr


def test_a_recipe_outside_the_bundle_renders_by_its_path(tmp_path):
    team = tmp_path / "team-repo"
    team.mkdir()
    (team / "requirements.txt").write_text("tqdm==4.66.4\n")
    data = recipe_data("cpu-local") | {"name": "team", "requirements_file": "requirements.txt"}
    path = write_recipe(team, data)
    result = hpcbundle("render", str(path), "--format", "docker", "-o", str(tmp_path / "team.Dockerfile"))
    assert result.returncode == 0, result.stderr
    assert "'^(tqdm)=='" in (tmp_path / "team.Dockerfile").read_text()


@pytest.mark.parametrize("target", ["build-sif", "build-docker"])
def test_make_targets_take_a_recipe_path_and_name_outputs_by_its_stem(tmp_path, target):
    recipe_file = tmp_path / "team-repo" / "team.yaml"
    result = subprocess.run(
        ["make", "-n", target, f"RECIPE={recipe_file}"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    if target == "build-sif":
        assert f"render '{recipe_file}' --format singularity" in result.stdout
        assert "-o 'build/team.def'" in result.stdout and "'build/team.sif'" in result.stdout
    else:
        assert f"build-docker '{recipe_file}'" in result.stdout


def test_numpy_and_the_stacks_own_stay_held_at_their_built_version_when_pinned_too(tmp_path):
    path = _recipe_with(tmp_path, python_packages=["numpy==1.26.4", "torch==2.13.0", "tqdm==4.66.4"])
    out = tmp_path / "install.sh"
    assert hpcbundle("render", str(path), "--format", "shell", "-o", str(out)).returncode == 0
    assert "list --format=freeze | grep -viE '^(tqdm)==' >> " in out.read_text()


def test_the_readmes_own_recipe_check_runs_as_written():
    """The README's "### Your own packages" check line, run by bash from the repository root."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Your own packages") : readme.index("### What every node must have")]
    (line,) = [line for line in section.splitlines() if line.startswith("hpcbundle ")]
    assert line.split("#")[0].strip() == "hpcbundle check tests/data/recipes/cpu-packages.yaml"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("recipe cpu-packages: OK (25 rules)\n") and "PASS  user-packages" in done.stdout
