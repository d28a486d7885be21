"""Recipes load into a validated model; every mistake is one clear line naming file, key and fix."""

from __future__ import annotations

import pytest

from hpcbundle.config.errors import UserError
from hpcbundle.rules.loading import all_recipes, load_recipe

from .helpers import RECIPES, recipe_data, write_recipe


def test_every_shipped_recipe_loads():
    names = [r.name for r in all_recipes(RECIPES)]
    assert len(names) >= 5
    assert "cpu-local" in names


def _error_lines(tmp_path, data) -> list[str]:
    path = write_recipe(tmp_path, data)
    with pytest.raises(UserError) as exc:
        load_recipe(str(path), RECIPES)
    return list(exc.value.lines)


def test_misspelled_key_names_file_key_and_nearest_key(tmp_path):
    data = recipe_data("cpu-local")
    data["horovod"]["versoin"] = data["horovod"].pop("version")
    lines = _error_lines(tmp_path, data)
    assert any(
        line.startswith(str(tmp_path / "cpu-local.yaml"))
        and "horovod.versoin: unknown key (did you mean version?)" in line
        for line in lines
    ), lines


def test_missing_required_key_is_named(tmp_path):
    data = recipe_data("cpu-local")
    del data["mpi"]["version"]
    assert any("mpi.version: missing required key" in line for line in _error_lines(tmp_path, data))


def test_unquoted_version_is_refused_with_the_fix(tmp_path):
    data = recipe_data("cuda12.2-tf2.15-torch2.1-ucx")
    data["gpu"]["cuda"] = 12.2
    (line,) = _error_lines(tmp_path, data)
    assert "gpu.cuda" in line and 'write versions as quoted strings, e.g. "12.2"' in line


def test_bad_combination_source_install_without_tarball(tmp_path):
    data = recipe_data("cuda11.8-tf2.14-torch2.1")
    del data["mpi"]["source"]
    (line,) = _error_lines(tmp_path, data)
    assert "mpi: install: source needs source.url and source.sha256" in line


def test_wrong_type_reports_the_shape_of_the_value_not_the_value(tmp_path):
    data = recipe_data("cpu-local")
    data["horovod"]["controllers"] = "mpi"
    (line,) = _error_lines(tmp_path, data)
    assert "horovod.controllers: expected a list, got text of 3 characters" in line and "'mpi'" not in line


def test_name_must_match_file_name(tmp_path):
    data = recipe_data("cpu-local")
    path = tmp_path / "other.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        UserError, match=r"other.yaml: name: is 'cpu-local' but the file is other.yaml \(set name: other"
    ):
        load_recipe(str(path), RECIPES)


def test_duplicate_key_is_refused_with_its_line(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: dup\npython: '3.11'\npython: '3.10'\n")
    with pytest.raises(UserError, match=r"dup.yaml:3:1: .*key 'python' is given twice"):
        load_recipe(str(path), RECIPES)


def test_unknown_recipe_name_suggests_the_nearest(tmp_path):
    with pytest.raises(UserError, match=r"cpu-locl: no such recipe \(did you mean cpu-local\?\)"):
        load_recipe("cpu-locl", RECIPES)


def test_yaml_syntax_error_names_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nbase: [unclosed\n")
    with pytest.raises(UserError, match=r"bad.yaml:\d+:\d+: not valid YAML"):
        load_recipe(str(path), RECIPES)


def test_cuda_comes_from_the_image_unless_a_recipe_says_wheels():
    recipes = {r.name: r for r in all_recipes(RECIPES)}
    assert recipes["cuda12.6-torch2.9"].gpu.source == "image"
    assert recipes["cuda13.0-torch2.11"].gpu.source == "wheels"
    assert recipes["cuda13.0-torch2.11"].base.build_image == "debian:bookworm"


def test_unknown_cuda_source_is_refused_with_the_choices(tmp_path):
    data = recipe_data("cuda13.0-torch2.11")
    data["gpu"]["source"] = "conda"
    (line,) = _error_lines(tmp_path, data)
    assert "gpu.source" in line and "'image' or 'wheels'" in line and "got text of 5 characters" in line


def test_wheels_route_without_pytorch_is_refused(tmp_path):
    data = recipe_data("cuda13.0-torch2.11")
    data["frameworks"] = {"tensorflow": {"version": "2.15.1"}}
    (line,) = _error_lines(tmp_path, data)
    assert line.endswith(
        "gpu.source: wheels takes NCCL and cuDNN from PyTorch's wheel, and the recipe has no frameworks.pytorch "
        "(add frameworks.pytorch or set gpu.source: image)"
    )


def test_unknown_horovod_patch_is_refused(tmp_path):
    data = recipe_data("cuda13.0-torch2.11")
    data["horovod"]["patches"] = ["cxx17", "gcc14"]
    (line,) = _error_lines(tmp_path, data)
    assert "horovod.patches[1]" in line and "'cxx17', 'gcc13' or 'py312'" in line


DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image, words",
    [
        (f"nvidia/cuda:12.2.2-runtime-ubuntu22.04@sha256:{'0' * 63}", "is not a digest: write @sha256: and the 64"),
        (f"nvidia/cuda:12.2.2-runtime-ubuntu22.04@sha256:{'A' * 64}", "is not a digest"),
        (f"nvidia/cuda:12.2.2-runtime-ubuntu22.04@md5:{'0' * 32}", "is not a digest"),
        (f"nvidia/cuda@{DIGEST}", "has a digest but no tag"),
        ("nvidia/cuda:12.2 runtime", "is not an image reference"),
    ],
)
def test_base_image_digest_is_validated_strictly(tmp_path, image, words):
    data = recipe_data("cuda12.2-tf2.15-torch2.1-ucx")
    data["base"]["runtime_image"] = image
    (line,) = _error_lines(tmp_path, data)
    assert "base.runtime_image" in line and words in line, line


def test_a_pinned_base_image_is_recorded_in_the_images_labels(tmp_path):
    from hpcbundle.knowledge.compat import knowledge_base
    from hpcbundle.knowledge.labels import image_labels

    data = recipe_data("cuda12.2-tf2.15-torch2.1-ucx")
    pinned = f"nvidia/cuda:12.2.2-runtime-ubuntu22.04@{DIGEST}"
    data["base"]["runtime_image"] = pinned
    labels = image_labels(load_recipe(str(write_recipe(tmp_path, data)), RECIPES), knowledge_base())
    assert labels["org.hpcbundle.base.runtime-image"] == pinned
    assert "org.hpcbundle.base.build-image" not in labels  # a tag alone can move: nothing to record


def test_a_verbs_build_without_the_rdma_user_space_is_refused(tmp_path):
    data = recipe_data("cuda12.2-tf2.15-torch2.1-ucx")
    del data["fabric_libs"]
    (line,) = _error_lines(tmp_path, data)
    assert line.endswith(
        "fabric_libs: has no verbs, but ucx.configure --with-verbs builds against them and the runtime image "
        "then needs them (add fabric_libs: [verbs])"
    )
