"""Property: hostile strings in any recipe or site field, or in any argument, never run as code.

Every string field of a recipe and a site, and the program's words and the image, get arbitrary
text (quotes, $(...), backticks, newlines, NUL, ANSI escapes, bytes that are not UTF-8). A value
is either refused with a clean error, or rendered so that: the Dockerfile has the same
instructions and the .def the same sections as a clean render, the shell that changed runs (every
tool replaced by a recorder) without running the payload's command, and the launcher gets back
exactly the argv that was asked for.
"""

from __future__ import annotations

import functools
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbundle.config.errors import UserError
from hpcbundle.config.loading import parse_yaml, validate
from hpcbundle.config.recipes import Recipe
from hpcbundle.image.render import render_image, template_environment
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.launch import load_site
from hpcbundle.launch.batch import BatchJob, batch_plan, sbatch_script, script_environment
from hpcbundle.rules.engine import Facts
from hpcbundle.rules.loading import load_failures

from .helpers import ROOT, examples
from .untrusted import (
    SITE,
    base_recipe,
    base_site,
    bytes_of,
    def_script_lines,
    def_sections,
    dockerfile_instructions,
    dockerfile_run_lines,
    hostile_text,
    new_lines,
    sandbox,
    with_value,
)

Path_ = tuple[Any, ...]


def _string_paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every path to a string leaf, and ('key', path) for every mapping key under env-like maps."""
    found: list[Path_] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if prefix and prefix[-1] in ("env", "mca", "build_env"):
                found.append((*prefix, ("key", key)))
            found.extend(_string_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_string_paths(value, (*prefix, index)))
    elif isinstance(node, str):
        found.append(prefix)
    return found


BASE_RECIPE = base_recipe()
RECIPE_PATHS = [p for p in _string_paths(BASE_RECIPE) if p != ("name",)]
BASE_SITE = base_site()
SITE_PATHS = [p for p in _string_paths(BASE_SITE) if p[:2] != ("slurm", "prologue") and p[0] not in ("why", "name")]
# slurm.prologue is shell the site's author writes on purpose; `why` is only ever printed by --explain.


@functools.cache
def _kb():
    return knowledge_base()


@functools.cache
def _env():
    return template_environment(ROOT / "containers")


def _renders(data: dict[str, Any]) -> dict[str, str] | None:
    """The three artifacts of a recipe, or None when it is refused with a clean error."""
    try:
        recipe = validate(Recipe, data, "recipe.yaml")
        if load_failures(Facts(site=None, recipe=recipe)):
            return None
        return {fmt: render_image(recipe, fmt, _env(), _kb()) for fmt in ("docker", "singularity", "shell")}
    except UserError as exc:  # one line each, blaming the recipe's key, never a template of containers/
        assert all("\n" not in line and "containers/" not in line for line in exc.lines)
        return None


@functools.cache
def _clean_recipe() -> dict[str, str]:
    rendered = _renders(BASE_RECIPE)
    assert rendered is not None
    return rendered


def test_the_recipe_and_site_the_payloads_go_into_render_cleanly(tmp_path: Path) -> None:
    """The properties below are vacuous unless the unchanged recipe and site render."""
    assert _clean_recipe()["docker"].startswith("# Rendered by hpcbundle")
    assert _site(BASE_SITE, tmp_path) is not None


STEERING = {"os", "flavour", "install", "variant", "package", "patches", "controllers", "tensor_operations", "source"}
"""Recipe keys whose (few, fixed) valid values choose the build's steps."""


def _steers(path: Path_, value: str) -> bool:
    """Whether an accepted value may rightly change the steps: a version (digits and dots picks other
    packages) or one of a fixed set of choices. Free text (descriptions, images, URLs, options) never may."""
    key = path[-2] if isinstance(path[-1], int) else path[-1]
    return key in STEERING or re.fullmatch(r"[0-9.]+", value) is not None


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(RECIPE_PATHS), value=hostile_text)
def test_a_hostile_recipe_value_is_refused_or_rendered_inert(path: Path_, value: str) -> None:
    rendered = _renders(with_value(BASE_RECIPE, path, value))
    if rendered is None:
        return
    clean = _clean_recipe()
    if not _steers(path, value):
        assert dockerfile_instructions(rendered["docker"]) == dockerfile_instructions(clean["docker"])
        assert def_sections(rendered["singularity"]) == def_sections(clean["singularity"])
    with sandbox() as box:
        box.run_lines(new_lines(dockerfile_run_lines(rendered["docker"]), dockerfile_run_lines(clean["docker"])))
        box.run_lines(new_lines(def_script_lines(rendered["singularity"]), def_script_lines(clean["singularity"])))
        script_lines = [line.strip() for line in rendered["shell"].splitlines()]
        box.run_lines(new_lines(script_lines, [line.strip() for line in clean["shell"].splitlines()]))
        (box.root / "install.sh").write_text(rendered["shell"], encoding="utf-8")
        assert box.run("/bin/bash -n install.sh").returncode == 0
        assert not box.pwned, (path, value)


def _site(data: dict[str, Any], directory: Path):
    """The site loaded from a file as a user's would be, or None when refused with a clean error."""
    text = yaml.safe_dump(data, allow_unicode=True)
    try:
        parse_yaml(text, "site")  # the loader's own refusals (NUL, ...) come first
        path = directory / f"{data['name']}.yaml"
        path.write_text(text, encoding="utf-8")
        return load_site(str(path), directory)
    except UserError as exc:
        assert all("\n" not in line for line in exc.lines)
        return None


def _launch_round_trips(site, program: list[str], image: str | None) -> None:
    """The sbatch script runs only the launcher, with exactly the argv; the printed line parses back to it."""
    job = BatchJob(nodes=2)
    plan = batch_plan(site, job, program, image)
    try:
        plan.judge()
    except UserError as exc:  # refused (e.g. an image that starts with '-'): one line, nothing run
        assert all("\n" not in line for line in exc.lines)
        return
    script, command = sbatch_script(plan, job, script_environment(ROOT / "scripts")), plan.command()
    with sandbox() as box:
        box.run(script)
        launched = [argv for argv in box.recorded() if argv[:1] == bytes_of(command.argv[:1])]
        assert not box.pwned
        assert launched and launched[-1] == bytes_of(command.argv)
        box.run(f"printf '%s\\0' {command.display()} > argv")
        assert (box.root / "argv").read_bytes().split(b"\0")[:-1] == bytes_of(command.argv)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(SITE_PATHS), value=hostile_text)
def test_a_hostile_site_value_is_refused_or_launched_exactly(path: Path_, value: str) -> None:
    with tempfile.TemporaryDirectory(prefix="hpcbundle-site-") as directory:
        site = _site(with_value(BASE_SITE, path, value), Path(directory))
    if site is not None:
        _launch_round_trips(site, ["python", "train.py"], "horovod.sif")


_argv_word = st.one_of(
    hostile_text.filter(lambda word: "\x00" not in word),
    st.binary(min_size=1, max_size=6)
    .filter(lambda b: b"\0" not in b)
    .map(lambda b: b.decode("utf-8", "surrogateescape")),
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(_argv_word, min_size=1, max_size=5), image=_argv_word)
def test_hostile_program_words_and_image_reach_the_launcher_exactly(program: list[str], image: str) -> None:
    site = load_site(SITE, ROOT / "site_configs")
    _launch_round_trips(site, ["python", *program], image)
