"""The machinery of the bad-input corpus, shared by test_bad_inputs and test_hostile_cli: the hostile
file contents, a case, and how one runs in its own directory under a timer (clean error, inert
artifact, or a traceback, injection, partial file or hang).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from click.testing import CliRunner

from hpcbundle.cli import main

from .helpers import ROOT
from .untrusted import (
    RECIPE,
    Sandbox,
    base_recipe,
    def_script_lines,
    def_sections,
    dockerfile_instructions,
    dockerfile_run_lines,
    new_lines,
)

CASE_SECONDS = 20
FORMATS = ("docker", "singularity", "shell")
HUGE = "9" * 5000
BAD_KINDS = ("tracebacks", "injections", "partial files", "hangs")

# A file is bytes, or one of these markers for a special file.
FIFO, DIRECTORY, DEV_ZERO, DANGLING = "<fifo>", "<directory>", "<symlink to /dev/zero>", "<dangling symlink>"
Content = bytes | str


@dataclass
class Case:
    """One bad input: files to create in a fresh directory, then the CLI's arguments (after --bundle)."""

    name: str
    args: list[str]
    files: dict[str, Content] = field(default_factory=dict)


# ---- the tables ------------------------------------------------------------------------------

BROKEN_YAML: dict[str, Content] = {
    "not UTF-8": b"name: x\ndescription: caf\xe9\n",
    "UTF-16": "name: x\n".encode("utf-16"),
    "tag !!int": b"a: !!int abc\n",
    "tag !!float": b"a: !!float abc\n",
    "tag !!bool": b"a: !!bool maybe\n",
    "tag !!timestamp": b"a: !!timestamp bad\n",
    "tag !!python": b"a: !!python/object/apply:os.system [id]\n",
    "bad date": b"a: 2001-13-45\n",
    "billion laughs": b"a: &a [x,x,x,x,x,x,x,x,x]\n"
    + b"".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n".encode()
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ),
    "deep flow nesting": b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "deep block nesting": "".join(f"{'  ' * i}k{i}:\n" for i in range(300)).encode() + b"  " * 300 + b"v\n",
    "5000-digit integer": f"a: {HUGE}\n".encode(),
    "complex key": b"? [a, b]\n: 1\n",
    "mapping key": b"? {a: 1}\n: 1\n",
    "duplicate key": b"name: a\nname: b\n",
    "octal 010": b"name: x\nversion: 010\n",
    "sexagesimal": b"name: x\nversion: 1:20\n",
    "empty": b"",
    "a list": b"- a\n- b\n",
    "a scalar": b"just words\n",
    "NUL escape": b'name: "a\\0b"\n',
    "raw NUL": b"name: a\x00b\n",
    "3 MB of unknown keys": b"".join(b"k%d: v\n" % i for i in range(400_000)),
    "5000 keys": b"".join(b"k%d: v\n" % i for i in range(5000)),
    "long list": b"a: [" + b"1," * 5000 + b"1]\n",
    "shadow-like": b"root:$6$salt$hash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
    "binary": bytes(range(256)) * 4,
    "tabs": b"a:\n\tb: 1\n",
    "unclosed quote": b'name: "x\n',
    "fifo": FIFO,
    "directory": DIRECTORY,
    "/dev/zero": DEV_ZERO,
    "dangling symlink": DANGLING,
}


class _Hang(Exception):
    """Raised by the timer when a case runs past CASE_SECONDS."""


def _make(directory: Path, files: dict[str, Content]) -> None:
    for name, content in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == FIFO:
            os.mkfifo(path)
        elif content == DIRECTORY:
            path.mkdir()
        elif content == DEV_ZERO:
            path.symlink_to("/dev/zero")
        elif content == DANGLING:
            path.symlink_to(directory / "nowhere")
        elif isinstance(content, str) and content.startswith("<symlink to "):
            path.symlink_to(directory / content.removeprefix("<symlink to ").rstrip(">"))
        else:
            assert isinstance(content, bytes)
            path.write_bytes(content)


def _snapshot(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `directory`: (mode, size, mtime) by relative name (links not followed)."""
    found = {}
    for path in directory.rglob("*"):
        info = path.lstat()
        found[str(path.relative_to(directory))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


@dataclass(frozen=True)
class Clean:
    """Clean renders of the base recipe, to compare hostile renders with."""

    renders: dict[str, str]


def _clean(directory: Path) -> Clean:
    (directory / f"{RECIPE}.yaml").write_text(yaml.safe_dump(base_recipe()))
    renders = {}
    for fmt in FORMATS:
        result = CliRunner().invoke(
            main, ["--bundle", str(ROOT), "render", f"{directory}/{RECIPE}.yaml", "--format", fmt]
        )
        assert result.exit_code == 0, result.output
        renders[fmt] = result.stdout
    return Clean(renders)


def _injected(box: Sandbox, produced: dict[str, str], stdout: str, clean: Clean) -> bool:
    """Whether a produced artifact (or a printed launch line) runs the payload, or changed structure."""
    for name, text in produced.items():
        if "#SBATCH" in text:
            (box.root / "job-copy.sh").write_text(text, encoding="utf-8", errors="surrogateescape")
            box.run("/bin/bash job-copy.sh")
        elif name.endswith(".docker"):
            if dockerfile_instructions(text) != dockerfile_instructions(clean.renders["docker"]):
                return True
            box.run_lines(new_lines(dockerfile_run_lines(text), dockerfile_run_lines(clean.renders["docker"])))
        elif name.endswith(".singularity"):
            if def_sections(text) != def_sections(clean.renders["singularity"]):
                return True
            box.run_lines(new_lines(def_script_lines(text), def_script_lines(clean.renders["singularity"])))
        elif name.endswith(".shell"):
            lines = [line.strip() for line in text.splitlines()]
            box.run_lines(new_lines(lines, [line.strip() for line in clean.renders["shell"].splitlines()]))
    if stdout.startswith(("mpirun", "srun")):
        box.run(stdout)
    return box.pwned


def run_case(case: Case, work: Path, clean: Clean) -> str:
    """The outcome of one case: 'clean error', 'accepted', or one of BAD_KINDS."""
    directory = work / "case"
    directory.mkdir()
    _make(directory, case.files)
    before = _snapshot(directory)
    old = signal.signal(signal.SIGALRM, _raise_hang)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    cwd = os.getcwd()
    try:
        os.chdir(directory)
        result = CliRunner().invoke(main, ["--bundle", str(ROOT), *case.args], env={"SLURM_JOB_ID": None})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
    if isinstance(result.exception, _Hang):
        return "hangs"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "tracebacks"
    after = _snapshot(directory)
    leftovers = [name for name in after if Path(name).name.startswith(".") and name not in before]
    messages = result.stderr.splitlines()
    if result.exit_code == 2:
        clean_lines = all(
            line.startswith(("hpcbundle: error: ", "Usage: ", "Try ", "Error: ")) or not line for line in messages
        )
        if after != before:
            return "partial files"
        return "clean error" if clean_lines else "tracebacks"
    if result.exit_code != 0 and not (case.args[:2] == ["scaling", "report"] and result.exit_code == 1):
        return "tracebacks"  # only `scaling report` has another documented status: 1, a point without a figure
    if leftovers:
        return "partial files"
    produced = {
        name: (directory / name).read_bytes().decode("utf-8", errors="surrogateescape")
        for name, stamp in after.items()
        if before.get(name) != stamp and (directory / name).is_file() and not (directory / name).is_symlink()
    }
    produced = {_kind(case, name): text for name, text in produced.items()}
    return "injections" if _injected(Sandbox(work / "sandbox"), produced, result.stdout, clean) else "accepted"


def _kind(case: Case, name: str) -> str:
    """A produced file's name with the render format it holds (out.docker, out.shell, ...)."""
    if "--format" in case.args and "-o" in case.args:
        return f"{name}.{case.args[case.args.index('--format') + 1]}"
    return name


def _raise_hang(signum: int, frame: object) -> None:
    raise _Hang()


# ---- the test --------------------------------------------------------------------------------
