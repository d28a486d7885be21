"""Untrusted input, case by case: bounded loading, -o targets, and printed lines that keep every byte."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpcbundle.cli.outputs import write_atomic
from hpcbundle.config.errors import UserError
from hpcbundle.config.loading import parse_json, parse_yaml, read_text
from hpcbundle.quoting import shell_join

from .helpers import hpcbundle


@pytest.mark.parametrize(
    "text, problem",
    [
        ("a: &x [1]\nb: *x\n", "alias"),
        ("a: !!int abc\n", "tag"),
        ("? [a]\n: 1\n", "as a key"),
        ("a: " + "[" * 100 + "]" * 100, "deeper than 32"),
        ("a: " + "9" * 5000, "more than 18 digits"),
        ("a: 010\n", 'quote it: "010"'),
        ("a: 0x10\n", "quote it"),
        ("a: [" + "1," * 5000 + "1]\n", "more than 4096 items"),
        ('a: "x\\0y"\n', "NUL"),
    ],
)
def test_yaml_that_could_cost_or_mislead_is_refused_with_its_place(text: str, problem: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_yaml(text, "site.yaml")
    (line,) = caught.value.lines
    assert line.startswith("site.yaml:") and problem in line


def test_a_timestamp_stays_text_and_a_plain_decimal_stays_a_number() -> None:
    assert parse_yaml("a: 2001-12-14\nb: 42\nc: -7\n", "x") == {"a": "2001-12-14", "b": 42, "c": -7}


def test_non_utf8_names_the_file_and_the_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(UserError) as caught:
        read_text(path)
    assert caught.value.lines == (f"{path}: is not UTF-8 text (byte 0xe9 at offset 9) (save it as UTF-8)",)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "site.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):
        read_text(fifo, "--site")


def test_deep_json_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(UserError, match="deeper than 32"):
        parse_json("[" * 100_000 + "]" * 100_000, "plan.json")


def test_an_unrelated_file_is_not_echoed_back(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$salt$hash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    for path in (shadow, Path("/etc/passwd")):
        result = hpcbundle("sbatch", "--site", str(path), "--nodes", "1", "--", "python")
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and "daemon" not in result.stderr


def test_output_into_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text("old")
    path.chmod(0o600)
    write_atomic(path, "new", executable=True)
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o600


def test_output_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    link = tmp_path / "job.sh"
    link.symlink_to(tmp_path / "real" / "job.sh")  # dangling, like `>` in a shell it creates the target
    write_atomic(link, "#!/bin/bash\n", executable=True)
    assert link.is_symlink() and (tmp_path / "real" / "job.sh").read_text() == "#!/bin/bash\n"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_output_onto_a_fifo_or_directory_is_refused_and_left_alone(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "out"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    with pytest.raises(UserError):
        write_atomic(path, "x")
    assert (path.is_fifo() if kind == "fifo" else path.is_dir()) and os.listdir(tmp_path) == ["out"]


def test_non_utf8_program_words_are_written_back_as_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / "job.sh"
    word = b"\xff\xfe".decode("utf-8", "surrogateescape")
    write_atomic(out, f"python {shell_join([word])}\n")
    assert out.read_bytes() == b"python $'\\xff\\xfe'\n"


def test_printed_lines_quote_control_characters_and_bash_reads_back_every_byte() -> None:
    words = ["\x1b[31mred", "a\nb", "tab\there", "\x7f", b"\xff".decode("utf-8", "surrogateescape"), "é", "\u2028"]
    line = shell_join(words)
    assert line.isprintable() and "\x1b" not in line
    parsed = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True).stdout
    assert parsed.split(b"\0")[:-1] == [os.fsencode(word) for word in words]


def test_a_site_whose_name_ends_in_a_newline_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil\n.yaml"
    path.write_text('name: "evil\\n"\ndescription: d\n')
    result = hpcbundle("sbatch", "--site", str(path), "--nodes", "1", "--", "python")
    assert result.returncode == 2 and "name: not a name" in result.stderr and "#SBATCH" not in result.stdout


def test_scaling_report_checks_both_outputs_before_writing_either(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text('{"points": [{"mode": "strong", "nodes": 1, "ranks": 1, "batch_per_rank": 8}]}')
    os.mkfifo(tmp_path / "scaling.png")
    result = hpcbundle("scaling", "report", str(tmp_path))
    assert result.returncode == 2 and "not a regular file" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "scaling.png"]
