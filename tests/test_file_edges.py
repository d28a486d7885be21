"""Files that are not files, outputs at paths that are not what they seem, and command lines past the
kernel's limit (issue 33, deliverable 5): each ends in one line naming the file or option and exit 2,
or in the right result. Every child runs with a timeout, so a FIFO that would block fails the test."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from hpcbundle.config.errors import UserError
from hpcbundle.config.loading import MAX_DEPTH, MAX_FILE_BYTES
from hpcbundle.execute import MAX_ARG_BYTES, run_captured
from hpcbundle.perf.tune.run import busbw_of
from hpcbundle_testbed.cli import hpcbundle, hpcbundle_argv

from .helpers import ROOT, SMALL_SITE, assert_refused_in_one_line, elastic_site, write_site

TRAIN_BENCH = ROOT / "bench" / "train.py"
ALLREDUCE_BENCH = ROOT / "bench" / "allreduce.py"


def not_a_file(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A path of each class a reader must refuse, and the words its refusal holds."""
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
        return path, "is not a regular file (a FIFO, device or socket)"
    if kind == "device":
        return Path("/dev/zero"), "is not a regular file (a FIFO, device or socket)"
    if kind == "directory":
        return tmp_path, "is a directory"  # click's own words where the option says dir_okay=False
    path = tmp_path / "huge"
    with path.open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)
    return path, f"is larger than {MAX_FILE_BYTES} bytes"


KINDS = ["fifo", "device", "directory", "huge"]


def assert_one_line(result, *words: str) -> None:
    """Exit 2, no traceback, and one line holding every word (click's own option errors add its usage lines)."""
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 or lines[-2:-1] == [""] and lines[-1].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[-1], result.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostfile_that_is_not_a_small_regular_file_is_refused_in_one_line(tmp_path, kind):
    path, problem = not_a_file(tmp_path, kind)
    result = hpcbundle("launch", "--np", "2", "--hostfile", str(path), "--", "python3", "t.py", timeout=60)
    assert_one_line(result, str(path), "--hostfile", problem)


@pytest.mark.parametrize("kind", KINDS)
def test_a_site_file_that_is_not_a_small_regular_file_is_refused_in_one_line(tmp_path, kind):
    path, problem = not_a_file(tmp_path, kind)
    result = hpcbundle("launch", "--site", str(path), "--np", "1", "--", "python3", "t.py", timeout=60)
    assert_one_line(result, problem)


@pytest.mark.parametrize("kind", KINDS)
def test_a_tuned_from_file_that_is_not_a_small_regular_file_is_refused_in_one_line(tmp_path, kind):
    path, problem = not_a_file(tmp_path, kind)
    assert_refused_in_one_line(TRAIN_BENCH, ["--nodes", "2", "--tuned-from", str(path)], f"--tuned-from: {problem}")


def test_a_deeply_nested_tuned_from_file_is_refused_not_a_stack_overflow(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert_refused_in_one_line(
        TRAIN_BENCH, ["--nodes", "2", "--tuned-from", str(deep)], f"nests deeper than {MAX_DEPTH}"
    )


def test_a_deeply_nested_site_yaml_is_refused_in_one_line(tmp_path):
    site = tmp_path / "deep.yaml"
    site.write_text(json.dumps(SMALL_SITE)[:-1] + ', "env": ' + "[" * 10_000 + "]" * 10_000 + "}\n")
    result = hpcbundle("launch", "--site", str(site), "--np", "1", "--", "python3", "t.py", timeout=60)
    assert_one_line(result, str(site), f"nests deeper than {MAX_DEPTH} levels")


def elastic_launch(tmp_path: Path) -> tuple[object, Path]:
    hosts = tmp_path / "hosts"
    hosts.write_text("n1 slots=2\nn2 slots=2\n")
    site = str(elastic_site(tmp_path))
    result = hpcbundle("launch", "--site", site, "--np", "4", "--hostfile", str(hosts), "--", "python3", "t.py")
    return result, tmp_path / "hosts.discover"


def test_the_discovery_script_replaces_a_symlink_at_its_path_and_leaves_the_link_target_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    victim.chmod(0o600)
    (tmp_path / "hosts.discover").symlink_to(victim)
    result, script = elastic_launch(tmp_path)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "keep me\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not script.is_symlink() and script.read_text().startswith("#!")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_an_existing_non_executable_discovery_script_is_rewritten_executable(tmp_path):
    (tmp_path / "hosts.discover").write_text("old\n")
    (tmp_path / "hosts.discover").chmod(0o644)
    result, script = elastic_launch(tmp_path)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(script.stat().st_mode) == 0o755 and script.read_text().startswith("#!")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".hosts.discover")] == []


def test_an_output_symlink_given_with_o_still_writes_its_target_as_shell_redirection_does(tmp_path):
    target = tmp_path / "job.sh"
    target.write_text("old\n")
    (tmp_path / "link.sh").symlink_to(target)
    result = hpcbundle("sbatch", "--site", "eth-a100-slurm", "--nodes", "1", "-o", str(tmp_path / "link.sh"),
                       "--", "python3", "t.py")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "link.sh").is_symlink() and target.read_text().startswith("#!")


@pytest.mark.parametrize(
    ("umask", "script_mode", "file_mode"), [(0o077, 0o700, 0o600), (0o022, 0o755, 0o644), (0o027, 0o750, 0o640)]
)
def test_o_gives_a_new_file_the_mode_the_umask_allows_a_script_executable_for_whom_it_allows(
    tmp_path, umask, script_mode, file_mode
):
    script, recipe = tmp_path / "job.sh", tmp_path / "cpu-local.def"
    sbatch = ["sbatch", "--site", "eth-a100-slurm", "--nodes", "1", "-o", str(script), "--", "python3", "t.py"]
    render = ["render", "cpu-local", "--format", "singularity", "-o", str(recipe)]
    for argv in (sbatch, render):
        made = subprocess.run(hpcbundle_argv(*argv), capture_output=True, text=True, timeout=60,
                              preexec_fn=lambda: os.umask(umask), check=False)  # fmt: skip
        assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(script.stat().st_mode) == script_mode and stat.S_IMODE(recipe.stat().st_mode) == file_mode


@pytest.mark.parametrize(
    "argv",
    [
        ["sbatch", "--site", "eth-a100-slurm", "--nodes", "1", "--", "python3", "t.py"],
        ["render", "cpu-local", "--format", "docker"],
    ],
)
def test_o_dash_prints_to_standard_output_and_writes_no_file(tmp_path, argv):
    plain = hpcbundle(*argv, cwd=tmp_path)
    dashed = hpcbundle(argv[0], "-o", "-", *argv[1:], cwd=tmp_path)
    assert dashed.returncode == 0 and dashed.stdout == plain.stdout and dashed.stdout.startswith(("#!", "#", "FROM"))
    assert list(tmp_path.iterdir()) == []


def test_tune_o_dash_is_refused_in_one_line_as_tune_writes_a_site_file(tmp_path):
    result = hpcbundle("tune", "--site", "eth-a100-slurm", "--np", "2", "--hosts", "a:1,b:1", "-o", "-", "--plan",
                       cwd=tmp_path)  # fmt: skip
    assert_one_line(result, "-o -: this command writes a file, not standard output (give a file name)")
    assert list(tmp_path.iterdir()) == []


def test_tune_plan_on_an_elastic_site_is_one_line_naming_faults_elastic(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("n1 slots=1\nn2 slots=1\n")
    site = str(elastic_site(tmp_path))
    result = hpcbundle("tune", "--site", site, "--np", "2", "--hostfile", str(hosts), "--plan")
    assert_one_line(result, "faults.elastic: site elastic is elastic: tune times a fixed set of ranks")


def test_sbatch_on_an_elastic_site_with_hostfile_discovery_is_one_line(tmp_path):
    result = hpcbundle("sbatch", "--site", str(elastic_site(tmp_path)), "--nodes", "2", "--", "python3", "t.py")
    assert_one_line(result, "faults.elastic.discovery")


def test_tune_refuses_an_empty_python_naming_the_option():
    result = hpcbundle("tune", "--np", "2", "--hosts", "n1:1,n2:1", "--python", "", "--plan")
    assert_one_line(result, "--python: is empty")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["true", "x" * MAX_ARG_BYTES], f"more than Linux's {MAX_ARG_BYTES} per word"),
        (["true", *["h" * 1000] * 20_000], "more than the system's"),
    ],
)
def test_a_command_line_past_the_kernels_limit_is_a_user_error_before_exec(argv, message):
    with pytest.raises(UserError, match=message):
        run_captured(argv, timeout=10)


def test_a_5000_digit_index_in_a_why_key_is_refused_in_one_line(tmp_path):
    site = write_site(tmp_path, SMALL_SITE, why={f"wrappers[{'9' * 5000}]": "no such wrapper"})
    result = hpcbundle("launch", "--site", str(site), "--np", "1", "--", "python3", "t.py")
    assert_one_line(result, "is not a key path")


@pytest.mark.parametrize(
    ("options", "message"),
    [(["--name", "a:b"], "--name: not a name: 'a:b'"), (["-o", "x:y.yaml"], "-o: not a name: 'x:y'")],
)
def test_site_detect_names_a_bad_name_or_output_not_its_own_draft(tmp_path, options, message):
    result = hpcbundle("site", "detect", *options, cwd=tmp_path, timeout=120)
    assert_one_line(result, message)
    assert "not valid YAML" not in result.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--sizes", "2"], "--sizes: '2': a size must be a positive multiple of 4 bytes"),
        (["--min-bytes", "2"], "--min-bytes: '2': a size must be a positive multiple of 4 bytes"),
        (["--max-bytes", "x"], "--max-bytes: 'x' is not a size"),
        (["--nodes", ","], "--nodes: no cluster size"),
        (["--nodes", "9" * 5000], "--nodes: "),
    ],
)
def test_bad_allreduce_bench_sizes_and_nodes_are_one_line_naming_the_option(options, message):
    assert_refused_in_one_line(ALLREDUCE_BENCH, options, message)


def test_doctor_with_a_fifo_as_the_image_fails_naming_it_and_does_not_block(tmp_path):
    fifo = tmp_path / "image.sif"
    os.mkfifo(fifo)
    result = hpcbundle("doctor", "--image", str(fifo), timeout=90)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{fifo} is damaged on" in result.stdout and "a FIFO, device or socket, not an image" in result.stdout


def test_a_benchmark_line_nested_past_the_stack_is_skipped_not_a_traceback():
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    good = '{"metric": "allreduce", "bytes": 8, "correct": true, "busbw_gib": 1.5}'
    assert busbw_of(f"{deep}\n{good}\n", 8) == 1.5
