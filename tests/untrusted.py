"""Helpers that prove a rendered artifact carries no injected code: hostile payloads, artifact
structure (Dockerfile instructions, .def sections), and running shell with every tool replaced by
a recorder so that only a payload's own command could leave a marker file."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml
from hypothesis import strategies as st

from .defcheck import parse_def
from .helpers import ROOT, recipe_data

PWNED = "hpcbundle_pwned"
"""The command every payload tries to run; the only executable on PATH while rendered shell runs."""
PAYLOADS = [
    f"$({PWNED})",
    f"`{PWNED}`",
    f"x; {PWNED}",
    f"x\n{PWNED}",
    f"x | {PWNED}",
    f"x && {PWNED}",
    f"x & {PWNED}",
    f"'; {PWNED}; '",
    f'"; {PWNED}; "',
    f"${{IFS}}{PWNED}",
    f"\nRUN {PWNED}",
    f"\nFROM debian\nRUN {PWNED}",
    f"\n%setup\n    {PWNED}",
    f"\n%post\n    {PWNED}",
    "\n%files\n    /etc/shadow /shadow",
    f"x\r\n{PWNED}",
    f"x\u2028{PWNED}",
    "{{ x }}",
    "\x1b[31mred\x1b[0m",
    "a\x00b",
    "\\",
    "-",
    "",
    " ",
    "010",
    "1.10",
    "https://example.org/a.tar.gz$(" + PWNED + ")",
    "https://example.org/a.tar.gz|" + PWNED,
    "http://example.org/a.tar.gz",
    "--with-x=$(" + PWNED + ")",
    "debian:bookworm\nRUN " + PWNED,
]
"""Hand-written hostile strings: shell, Dockerfile and .def injections, control characters, YAML 1.1 traps."""
_PIECES = st.sampled_from(["$(", ")", "`", "'", '"', ";", "|", "&", "\n", "\\", "%", "{{", "\x1b[", "\x00", PWNED])
hostile_text = st.one_of(
    st.sampled_from(PAYLOADS), st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=6).map("".join)
)
"""Arbitrary strings rich in quotes, substitutions, newlines, NUL and ANSI escapes."""

_RECORDER = '() { printf "%s\\0" "$#" "$@" >> "$HPCBUNDLE_RECORD"; return 0; }'  # every tool: record argv, succeed


class Sandbox:
    """A directory where rendered shell runs with PATH holding only the payload command (which
    makes the marker) and every other command recorded, never run (bash's command_not_found_handle)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.marker = root / "PWNED"
        self.record = root / "record"
        pwned = self.bin / PWNED
        pwned.write_text(f"#!/bin/sh\n: > {self.marker}\n")
        pwned.chmod(0o755)

    def env(self) -> dict[str, str]:
        return {
            "PATH": str(self.bin),
            "HOME": str(self.root),
            "HPCBUNDLE_RECORD": str(self.record),
            "BASH_FUNC_command_not_found_handle%%": _RECORDER,
        }

    def run(self, script: str, timeout: float = 20) -> subprocess.CompletedProcess[bytes]:
        """Run `script` in bash here (its own process group, bounded); commands are recorded."""
        self.record.unlink(missing_ok=True)
        return subprocess.run(
            ["/bin/bash", "-c", script],
            input=b"",
            capture_output=True,
            cwd=self.root,
            env=self.env(),
            timeout=timeout,
            check=False,
        )

    def run_lines(self, lines: list[str]) -> None:
        """Run each line in its own bash (one line's syntax error cannot hide the next line)."""
        for line in lines:
            self.run(line)

    @property
    def pwned(self) -> bool:
        return self.marker.exists()

    def recorded(self) -> list[list[bytes]]:
        """Every command the shell tried to run, as argv bytes."""
        if not self.record.exists():
            return []
        fields = self.record.read_bytes().split(b"\0")[:-1]
        commands, i = [], 0
        while i < len(fields):
            count = int(fields[i])
            commands.append(fields[i + 1 : i + 1 + count])
            i += 1 + count
        return commands


@contextlib.contextmanager
def sandbox() -> Iterator[Sandbox]:
    """A fresh Sandbox in a temporary directory removed afterwards (hypothesis examples cannot share tmp_path)."""
    with tempfile.TemporaryDirectory(prefix="hpcbundle-untrusted-") as directory:
        yield Sandbox(Path(directory))


def dockerfile_instructions(text: str) -> list[str]:
    """The instruction keyword of every logical Dockerfile line (continuations joined), in order."""
    logical = re.sub(r"\\\n", " ", text)
    return [line.split()[0].upper() for line in logical.splitlines() if line.strip() and not line.startswith("#")]


def dockerfile_run_lines(text: str) -> list[str]:
    """The shell command lines of every RUN (each link of its `&&` chain)."""
    lines: list[str] = []
    for block in re.findall(r"^RUN (.*?)(?<!\\)$", text, flags=re.M | re.S):
        lines.extend(block.split(" && \\\n    "))
    return lines


def def_sections(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(stage, %section args, header keys) of every section of a .def, in order."""
    stages, problems = parse_def(text)
    assert not problems, problems
    return [
        (stage.name, f"%{section.name} {section.args}".strip(), tuple(sorted(stage.header)))
        for stage in stages
        for section in stage.sections
    ]


def def_script_lines(text: str) -> list[str]:
    """The lines of every script section of a .def (%post, %test, %environment, %runscript)."""
    stages, _ = parse_def(text)
    scripts = {"post", "test", "environment", "runscript", "setup"}
    return [
        line.strip()
        for stage in stages
        for section in stage.sections
        if section.name in scripts
        for line in section.body
        if line.strip()
    ]


def new_lines(lines: list[str], clean: list[str]) -> list[str]:
    """The lines that are not in the clean render: only they can carry a payload."""
    known = set(clean)
    return [line for line in lines if line not in known]


def bytes_of(words: list[str] | tuple[str, ...]) -> list[bytes]:
    """argv words as the bytes a process receives (surrogateescape, as Python decoded them)."""
    return [os.fsencode(word) for word in words]


RECIPE = "cuda12.2-tf2.15-torch2.1-ucx"
"""The recipe hostile values go into: source-built MPI and UCX, so URLs and configure options render."""
SITE = "eth-a100-slurm"
"""The site hostile values go into: SLURM, a container runtime, modules and most slurm keys."""


def base_recipe() -> dict[str, Any]:
    """RECIPE as data, with a build_env entry so that its keys and values can be replaced too."""
    data = recipe_data(RECIPE)
    data["horovod"]["build_env"] = {"HOROVOD_CPU_OPERATIONS": "gloo"}
    return data


def base_site() -> dict[str, Any]:
    """SITE as data, with every optional string key that renders set to a plain value."""
    data = yaml.safe_load((ROOT / "site_configs" / f"{SITE}.yaml").read_text())
    data["launcher"]["args"] = ["--cpu-bind=cores"]
    data["container"]["args"] = ["--cleanenv"]
    data["wrappers"] = [["taskset", "-c", "0-63"]]
    data["export"] = ["LD_LIBRARY_PATH"]
    data["mca"]["plm_rsh_agent"] = "ssh -x"
    data["slurm"] |= {"job_name": "horovod", "qos": "normal", "constraint": "a100"}
    return data


def with_value(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of `data` with the value at `path` replaced; a last step ('key', K) renames mapping key K."""
    changed = copy.deepcopy(data)
    node = changed
    for key in path[:-1]:
        node = node[key]
    last = path[-1]
    if isinstance(last, tuple):
        node[value] = node.pop(last[1])
    else:
        node[last] = value
    return changed
