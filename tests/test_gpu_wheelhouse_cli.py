"""`make gpu-wheelhouse`'s user mistakes: one line, exit status 2, nothing written (no build runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcbundle_testbed.gpu_wheelhouse import main

from .helpers import ROOT


@pytest.fixture(autouse=True)
def _in_the_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_a_recipe_that_is_not_there_is_one_line_naming_recipe(tmp_path: Path, capsys) -> None:
    assert main(["no-such-recipe", "--python", "3.11", "--out", str(tmp_path / "wh")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-wheelhouse: error: RECIPE=no-such-recipe: ") and err.count("\n") == 1, err
    assert "known recipes: cpu-ddp, cpu-local" in err
    assert list(tmp_path.iterdir()) == []


def test_a_python_version_the_host_lacks_says_how_to_get_one(tmp_path: Path, capsys) -> None:
    assert main(["cuda13.0-torch2.11", "--python", "2.9", "--out", str(tmp_path / "wh")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gpu-wheelhouse: error: PYTHON=2.9: no Python 2.9 on this host (get one: uv python install 2.9, "
        "or pyenv install 2.9, or apt-get install python2.9-dev python2.9-venv)\n"
    )
    assert list(tmp_path.iterdir()) == []
