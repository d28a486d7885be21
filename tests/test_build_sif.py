"""`make build-sif` picks the way to build that works on the host (scripts/sif-build-flags.sh): root builds
as itself, a user with /etc/subuid and /etc/subgid entries with --fakeroot, anyone else gets one line
saying what to pass. And the README's cluster workflow runs its `make build-sif` lines as printed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT, readme_workflow_lines

SCRIPT = ROOT / "scripts" / "sif-build-flags.sh"
ENTRIES = "alice:100000:65536\n1001:165536:65536\nzero:231072:0\n"


def build_flags(uid: int, user: str, subuid: str, subgid: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "subuid").write_text(subuid)
    (tmp_path / "subgid").write_text(subgid)
    argv = ["bash", str(SCRIPT), str(uid), user, str(tmp_path / "subuid"), str(tmp_path / "subgid")]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def test_root_builds_without_fakeroot_even_with_no_subuid_entry(tmp_path):
    chosen = build_flags(0, "root", "", "", tmp_path)
    assert (chosen.returncode, chosen.stdout, chosen.stderr) == (0, "\n", "")


@pytest.mark.parametrize(("uid", "user"), [(1000, "alice"), (1001, "bob")], ids=["by-name", "by-uid"])
def test_a_user_with_subuid_and_subgid_entries_builds_with_fakeroot(tmp_path, uid, user):
    chosen = build_flags(uid, user, ENTRIES, ENTRIES, tmp_path)
    assert (chosen.returncode, chosen.stdout, chosen.stderr) == (0, "--fakeroot\n", "")


@pytest.mark.parametrize(
    ("user", "subuid", "subgid"),
    [("carol", ENTRIES, ENTRIES), ("alice", ENTRIES, ""), ("zero", ENTRIES, ENTRIES)],
    ids=["no-entry", "no-subgid-entry", "empty-range"],
)
def test_a_user_fakeroot_cannot_serve_gets_one_line_saying_what_to_pass(tmp_path, user, subuid, subgid):
    chosen = build_flags(1002, user, subuid, subgid, tmp_path)
    assert (chosen.returncode, chosen.stdout) == (2, "")
    assert chosen.stderr.count("\n") == 1 and chosen.stderr.startswith(f"make build-sif: {user} (uid 1002) ")
    assert "SIF_SUDO=sudo SIF_FLAGS=" in chosen.stderr and "--add-subuids 100000-165535" in chosen.stderr


def test_make_build_sif_passes_the_chosen_flags_unless_sif_flags_is_given():
    def dry_run(*overrides: str) -> str:
        argv = ["make", "--no-print-directory", "-n", "build-sif", "RECIPE=cpu-local", *overrides]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout

    assert 'flags="$(bash scripts/sif-build-flags.sh)"; \\' in dry_run()
    assert 'flags=""; \\' in dry_run("SIF_FLAGS=", "SIF_SUDO=sudo")
    assert '"$builder" build $flags "$partial" \'build/cpu-local.def\'' in dry_run("SIF_FLAGS=--fakeroot")


def test_the_readme_workflow_builds_a_shipped_recipe_and_the_users_own():
    assert readme_workflow_lines("make build-sif ") == [
        "make build-sif RECIPE=cuda11.8-tf2.14-torch2.1",
        "make build-sif RECIPE=cpu-ddp",
        "make build-sif RECIPE=tests/data/recipes/cpu-packages.yaml",
    ]


@pytest.mark.apptainer
@pytest.mark.parametrize("line", readme_workflow_lines("make build-sif "))
def test_readme_workflow_build_sif_line_starts_apptainers_build_with_the_hosts_flags(apptainer: str, line: str):
    """The workflow's lines as printed, from the repository root, until Apptainer starts building: no
    `could not use fakeroot`, and the flags scripts/sif-build-flags.sh picks for this host. (The whole CUDA
    image needs its registry and an hour; tests/test_sif.py builds a whole SIF the same way, from a local base.)"""
    assert re.fullmatch(r"make build-sif RECIPE=[\w./-]+", line), line
    env = dict(os.environ, PATH=f"{Path(apptainer).parent}:{os.environ['PATH']}")  # the set-up's, as make finds it
    expected = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30).stdout.strip()
    build = subprocess.Popen(
        ["bash", "-c", line],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        for output in build.stdout:
            seen.append(output)
            if "Starting build" in output:
                break
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGTERM)
        build.wait(timeout=120)
    text = "".join(seen)
    assert "could not use fakeroot" not in text and "Starting build" in text, text[-3000:]
    (echoed,) = [out for out in seen if out.startswith("+ ")]
    assert re.search(rf" build {re.escape(expected)} ?\S*/\.[\w.-]+\.sif\.\w+ build/[\w.-]+\.def$", echoed), echoed
