"""`hpcbundle render --format singularity --bootstrap AGENT:SOURCE`: a .def that builds from a local base
(air-gapped build hosts), changed in its stage headers only; bad values refused in one line, nothing written."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from hpcbundle.image.bootstrap import AGENTS, parse_bootstrap
from hpcbundle.image.render import render_image, template_environment
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules.loading import load_recipe

from .helpers import GOLDEN, ROOT, assert_golden, hpcbundle

RECIPE = "cpu-local"
SOURCES = {
    "localimage": "/srv/hpcbundle/debian-bookworm.sif",
    "docker-archive": "/srv/hpcbundle/debian-bookworm.tar",
    "docker-daemon": "local/debian:bookworm",
}


def rendered(bootstrap: str | None) -> str:
    return render_image(
        load_recipe(RECIPE, ROOT / "recipes"),
        "singularity",
        template_environment(ROOT / "containers"),
        knowledge_base(),
        parse_bootstrap(bootstrap) if bootstrap else None,
    )


def test_every_agent_has_a_golden_source() -> None:
    assert set(SOURCES) == set(AGENTS)


@pytest.mark.parametrize("agent", sorted(SOURCES))
def test_def_bootstrapped_locally_matches_its_golden_file(agent: str) -> None:
    assert_golden(GOLDEN / "bootstrap" / f"{RECIPE}.{agent}.def", rendered(f"{agent}:{SOURCES[agent]}"))


@pytest.mark.parametrize("agent", sorted(SOURCES))
def test_bootstrap_changes_every_stage_header_and_nothing_else(agent: str) -> None:
    changed = [
        line
        for line in difflib.unified_diff(
            rendered(None).splitlines(), rendered(f"{agent}:{SOURCES[agent]}").splitlines(), n=0
        )
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    recipe = load_recipe(RECIPE, ROOT / "recipes")
    assert sorted(changed) == sorted(
        [
            *("-Bootstrap: docker", f"-From: {recipe.base.build_image}", f"-From: {recipe.base.runtime_image}"),
            *("-Bootstrap: docker", *[f"+Bootstrap: {agent}", f"+From: {SOURCES[agent]}"] * 2),
        ]
    )


def test_relative_local_base_is_written_as_an_absolute_path(tmp_path: Path) -> None:
    (tmp_path / "base.sif").write_bytes(b"")
    out = tmp_path / "out.def"
    res = hpcbundle(
        "render", RECIPE, "--format", "singularity", "--bootstrap", "localimage:base.sif", "-o", str(out), cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert out.read_text().count(f"\nBootstrap: localimage\nFrom: {tmp_path / 'base.sif'}\n") == 2


@pytest.mark.parametrize(
    ("value", "fmt", "says"),
    [
        ("docker:debian:bookworm", "singularity", "not AGENT:SOURCE with a known agent"),
        ("localimage", "singularity", "not AGENT:SOURCE with a known agent"),
        ("localimage:missing.sif", "singularity", "'missing.sif': no such file or directory"),
        ("docker-archive:.", "singularity", "'.': no such file"),
        ("localimage:/srv/base.sif\n%post\ntouch /pwned", "singularity", "is not a plain path"),
        ("localimage:/srv/base$(touch pwned).sif", "singularity", "is not a plain path"),
        ("docker-daemon:debian", "singularity", "has no tag"),
        ("docker-daemon:debian:bookworm\rBootstrap: docker", "singularity", "is not an image reference"),
        ("docker-daemon:debian:bookworm", "docker", "applies to --format singularity, not docker"),
    ],
)
def test_bad_bootstrap_is_one_line_naming_the_option_and_writes_nothing(
    tmp_path: Path, value: str, fmt: str, says: str
) -> None:
    out = tmp_path / "out"
    res = hpcbundle("render", RECIPE, "--format", fmt, "--bootstrap", value, "-o", str(out), cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("hpcbundle: error: --bootstrap: ") and says in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.rstrip().endswith(")"), "one line, ending with the fix"
    assert list(tmp_path.iterdir()) == [] and not (tmp_path / "pwned").exists()
