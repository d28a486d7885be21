"""The reference pages in docs/reference/ match the code they are generated from (`hpcbundle reference`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import BaseModel

from hpcbundle.cli.reference import REGENERATE, models_in, pages, stale_pages
from hpcbundle.config.recipes import Recipe
from hpcbundle.config.sites import Site
from hpcbundle.image.blocks import BLOCKS

from .helpers import ROOT, hpcbundle

REFERENCE = ROOT / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(pages()))
def test_each_reference_page_is_what_the_code_generates(name: str) -> None:
    path = REFERENCE / name
    assert path.is_file() and path.read_text(encoding="utf-8") == pages()[name], (
        f"docs/reference/{name} is stale: run `{REGENERATE}` and commit the page"
    )


def _undescribed(model: type[BaseModel], prefix: str = "") -> list[str]:
    missing = []
    for name, field in model.model_fields.items():
        nested = models_in(field.annotation)
        if nested:
            missing += _undescribed(nested[0], f"{prefix}{name}.")
        elif not field.description:
            missing.append(f"{prefix}{name}")
    return missing


@pytest.mark.parametrize("model, source", [(Site, "sites.py"), (Recipe, "recipes.py")])
def test_every_key_has_a_description_for_the_reference_page(model: type[BaseModel], source: str) -> None:
    assert _undescribed(model) == [], f"add description= to these fields of src/hpcbundle/config/{source}"


def test_the_site_keys_page_shows_each_keys_type_default_and_description() -> None:
    page = pages()["site-keys.md"]
    assert "| `container.foreign_image` | `bool` | `false` | the site runs images not built by hpcbundle" in page
    assert "| `node.gpu_numa` | `list[int] \\| None` | `null` | GPU index -> its NUMA node" in page


def test_every_block_has_a_section_with_its_file_shell_parameters_and_example() -> None:
    page = pages()["image-blocks.md"]
    sections = page.split("\n## ")[1:]
    assert [section.split("\n", 1)[0] for section in sections] == [block.name for block in BLOCKS.ordered()]
    for block, section in zip(BLOCKS.ordered(), sections, strict=True):
        assert "Parameters:" in section and "Example" in section, block.name
        assert all(f"containers/common/{name}.sh.j2" in section for name in block.shell), block.name
    assert '\n```\nexport HOROVOD_BUILD_CUDA_CC_LIST="70,80"\n' in page


def test_reference_check_names_a_stale_page_and_the_command_that_writes_it(tmp_path: Path) -> None:
    shutil.copytree(REFERENCE, tmp_path, dirs_exist_ok=True)
    assert stale_pages(tmp_path) == []
    (tmp_path / "site-keys.md").write_text("old\n")
    (tmp_path / "image-blocks.md").unlink()
    assert stale_pages(tmp_path) == ["site-keys.md", "image-blocks.md"]
    result = hpcbundle("reference", "--check")
    assert result.returncode == 0 and result.stderr == "", result.stderr


def _bundle(tmp_path: Path) -> Path:
    """A bare bundle (its pages come from the code) and, beside it, a folder outside it."""
    root = tmp_path / "bundle"
    for name in ("recipes", "containers", "docs"):
        (root / name).mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return root


@pytest.mark.parametrize("linked", ["page", "folder", "docs"])
def test_reference_refuses_a_symlinked_page_or_folder_and_writes_nothing_outside_the_bundle(
    tmp_path: Path, linked: str
) -> None:
    root, outside = _bundle(tmp_path), tmp_path / "outside"
    if linked == "page":
        (root / "docs" / "reference").mkdir()
        (outside / "victim").write_text("keep me\n")
        (root / "docs" / "reference" / "site-keys.md").symlink_to(outside / "victim")
        shown = "docs/reference/site-keys.md"
    elif linked == "folder":
        (root / "docs" / "reference").symlink_to(outside)
        shown = "docs/reference"
    else:
        (root / "docs").rmdir()
        (outside / "reference").mkdir()
        (root / "docs").symlink_to(outside)
        shown = "docs"
    before = {path: path.read_bytes() if path.is_file() else None for path in outside.rglob("*")}
    result = hpcbundle("reference", bundle=root)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"hpcbundle: error: {shown}: is a symlink: reference pages are written only")
    assert {path: path.read_bytes() if path.is_file() else None for path in outside.rglob("*")} == before


def test_reference_writes_every_page_into_a_real_docs_reference_folder(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    result = hpcbundle("reference", bundle=root)
    assert result.returncode == 0, result.stderr
    assert stale_pages(root / "docs" / "reference") == []
