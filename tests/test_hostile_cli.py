"""Every user-reachable path ends in a one-line error or a result: a walker that finds every command of the
`hpcbundle` click group and feeds each of its options and arguments a hostile value of every class (numbers that
are not numbers, empty, leading dashes, control characters, bidi, 1 MB, FIFOs, /dev/zero, directories, symlink
loops, deep YAML and JSON, non-UTF-8 files), plus an argv past the kernel's limit for `launch --exec`.

Each case runs in-process through the bad-input corpus's runner (tests/test_bad_inputs.py run_case: its own
directory, a timer against hangs, exit status 0 or 2, one line per problem, no partial file, no injection), with
PATH holding no program, so that nothing can launch a job, build an image or reach the network: the walker stays
on refusals and printed lines. `make check` draws a fixed sample of the matrix (HPCBUNDLE_FAST_LANE), `make test`
all of it.
"""

from __future__ import annotations

import os
import random
import subprocess
import tempfile
from pathlib import Path

import click
import pytest

from hpcbundle.cli import main

from .badinput import BROKEN_YAML, DEV_ZERO, DIRECTORY, FIFO, HUGE, Case, Content, _clean, run_case
from .helpers import hpcbundle_argv
from .untrusted import SITE

NEVER = {"--exec", "--submit", "--gate"}
"""Flags the walker never gives: they run jobs, submit them or start a cluster gate."""
BASES: dict[str, list[str]] = {
    "build-docker": ["build-docker", "cpu-local"],
    "check": ["check", "cpu-local", "--site", SITE],
    "doctor": ["doctor", "--site", SITE, "--no-checksum", "--timeout", "5"],
    "launch": ["launch", "--site", SITE, "--np", "2", "--", "python", "train.py"],
    "recipes": ["recipes"],
    "reference": ["reference", "--check"],
    "render": ["render", "cpu-local", "--format", "docker"],
    "rules": ["rules"],
    "sbatch": ["sbatch", "--site", SITE, "--nodes", "1", "--", "python", "train.py"],
    "scaling plan": ["scaling", "plan", "--site", SITE, "--nodes", "1,2", "-o", "plan"],
    "scaling report": ["scaling", "report", "plan"],
    "site detect": ["site", "detect", "-o", "site.yaml", "--name", "x"],
    "sites": ["sites"],
    "tune": ["tune", "--plan", "--site", SITE, "--np", "2"],
}
"""A safe command line per command, on a refusal or a printed result; each case changes one value of it."""
HOSTILE = "hostile"
"""The name every hostile file is created under, in the case's own directory."""
VALUES: dict[str, str] = {
    "yes": "yes",
    "true": "true",
    "1e309": "1e309",
    "-1": "-1",
    "0": "0",
    "5000 digits": HUGE,
    "nan": "nan",
    "inf": "inf",
    "huge count": "10000000000000000000",
    "empty": "",
    "leading dash": "-x",
    "leading double dash": "--x",
    "newline": "a\nb",
    "control characters": "a\x1b[31m\r\tb\x7f",
    "bidi": "a\u202eb\u2066c",
    "line separator": "a\u2028b",
    "1 MB": "a" * 1_000_000,
    "/dev/zero": "/dev/zero",
    # NUL: argv cannot carry it (execve ends every word at the first NUL), so no user can hand it over.
}
"""Hostile values given as text."""
FILES: dict[str, Content] = {
    "fifo": FIFO,
    "directory": DIRECTORY,
    "symlink to /dev/zero": DEV_ZERO,
    "symlink loop": f"<symlink to {HOSTILE}>",
    "deep YAML": BROKEN_YAML["deep flow nesting"],
    "deep JSON": b"[" * 100_000 + b"]" * 100_000,
    "non-UTF-8": BROKEN_YAML["not UTF-8"],
}
"""Hostile values given as a file named HOSTILE."""
KNOWN: dict[tuple[str, str], str] = {}
"""(command and option, value class) -> why it still fails: each is another branch's fix (removed at merge)."""


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> dict[str, click.Command]:
    """Every leaf command of the CLI by its words ('scaling plan'), found by walking the click groups."""
    ctx = click.Context(group)
    found: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            found |= commands(command, (*path, name))
        else:
            found[" ".join((*path, name))] = command
    return found


def with_value(base: list[str], param: click.Parameter, value: str) -> list[str]:
    """`base` with `param` given `value`: an option replaced or added, a positional replaced, a program word."""
    if isinstance(param, click.Option):
        option = param.opts[-1]
        args = list(base)
        for opt in param.opts:
            if opt in args:
                index = args.index(opt)
                args[index + 1] = value
                return args
        cut = args.index("--") if "--" in args else len(args)
        return [*args[:cut], option, value, *args[cut:]]
    if param.nargs == -1:
        return [*base[:-1], value] if "--" in base else [*base, "--", "python", value]
    words = 2 if base[0] in ("scaling", "site") else 1  # the command's own words, then its one positional
    return [*base[:words], value, *base[words + 1 :]]


def matrix() -> list[tuple[tuple[str, str], Case]]:
    """Every (command option, value class) case, with the class's file created where the value is a file."""
    found: list[tuple[tuple[str, str], Case]] = []
    for what, value in VALUES.items():  # the group's own option (it overrides the runner's --bundle)
        found.append((("--bundle", what), Case(f"--bundle = {what}", ["--bundle", value, "recipes"])))
    for what, content in FILES.items():
        found.append(
            (("--bundle", what), Case(f"--bundle = {what}", ["--bundle", HOSTILE, "recipes"], {HOSTILE: content}))
        )
    for name, command in commands().items():
        assert name in BASES, f"new command `{name}`: give the walker a safe command line for it in BASES"
        for param in command.params:
            if isinstance(param, click.Option) and (param.is_flag or param.hidden):
                continue
            where = f"{name} {param.opts[-1] if isinstance(param, click.Option) else param.name}"
            for what, value in VALUES.items():
                found.append(((where, what), Case(f"{where} = {what}", with_value(BASES[name], param, value))))
            for what, content in FILES.items():
                args = with_value(BASES[name], param, HOSTILE)
                found.append(((where, what), Case(f"{where} = {what}", args, {HOSTILE: content})))
    return found


def _sample(cases: list[tuple[tuple[str, str], Case]]) -> list[tuple[tuple[str, str], Case]]:
    """All cases in `make test`; a tenth, the same fixed draw each time, in `make check` (the whole matrix takes
    minutes on a busy machine)."""
    if os.environ.get("HPCBUNDLE_FAST_LANE") != "1":
        return cases
    return random.Random(33).sample(cases, len(cases) // 10)


def test_every_command_has_a_safe_base_and_never_gets_a_running_flag() -> None:
    found = commands()
    assert set(found) == set(BASES)
    assert not {word for base in BASES.values() for word in base} & NEVER


def test_every_option_of_every_command_with_a_hostile_value_ends_in_a_clean_error_or_a_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "no-programs"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hpcbundle-walker-") as scratch:
        clean = _clean(Path(scratch))
        for index, (key, case) in enumerate(_sample(matrix())):
            work = Path(scratch) / str(index)
            work.mkdir()
            outcome = run_case(case, work, clean)
            failed = outcome not in ("clean error", "accepted")
            if failed != (key in KNOWN):  # a known failure that now passes must leave KNOWN (a strict xfail)
                bad.append(f"{outcome}: {case.name}" + (f" (listed in KNOWN: {KNOWN[key]})" if key in KNOWN else ""))
    assert not bad, "\n".join(bad)


def test_a_launch_line_past_the_kernel_argv_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    """4000 host names of 245 characters, each within the limits, from one short host list: mpirun's line
    passes ARG_MAX (a stand-in mpirun, so nothing runs even where the line fits)."""
    hosts = f"n{'x' * 240}[0001-4000]"
    assert 4000 * 245 > os.sysconf("SC_ARG_MAX") // 4  # -H carries them in one word, past MAX_ARG_STRLEN too
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("mpirun", "srun"):
        (bin_dir / program).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / program).chmod(0o755)
    argv = ["launch", "--site", "local", "--np", "4000", "--hosts", hosts, "--exec", "--no-doctor", "--", "python"]
    run = subprocess.run(
        hpcbundle_argv(*argv),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PATH": str(bin_dir)},
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("hpcbundle: error:")]
    assert run.returncode == 2 and len(errors) == 1 and "more than Linux's" in errors[0], run.stderr[-3000:]
