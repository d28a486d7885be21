"""A structural validator for Apptainer/Singularity definition files (spython accepts almost anything).

Checks what a build needs before it starts: every stage begins with `Bootstrap:` and names a
`From:`; header keywords are known; in a multi-stage file every stage has a unique `Stage:`; only
known %sections; `%files from X` names an earlier stage; script sections pass `bash -n`; %labels
lines are `KEY VALUE`; no `{{ }}` build-argument templating without %arguments.

    python tests/defcheck.py build/*.def     # one line per problem, exit 1 if any
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HEADER_KEYS = {
    "bootstrap",
    "from",
    "stage",
    "registry",
    "namespace",
    "includecmd",
    "fingerprints",
    "mirrorurl",
    "osversion",
    "include",
}
SECTIONS = {
    "setup",
    "files",
    "post",
    "environment",
    "runscript",
    "startscript",
    "test",
    "labels",
    "help",
    "arguments",
    "appinstall",
    "appfiles",
    "appenv",
    "apphelp",
    "applabels",
    "apprun",
    "appstart",
    "apptest",
}
SCRIPT_SECTIONS = {
    "setup",
    "post",
    "environment",
    "runscript",
    "startscript",
    "test",
    "appinstall",
    "appenv",
    "apprun",
    "appstart",
    "apptest",
}
_SECTION = re.compile(r"^%(\S+)\s*(.*)$")
_HEADER = re.compile(r"^(\w+):\s*(.*)$")


@dataclass
class Section:
    name: str
    args: str
    line: int
    body: list[str] = field(default_factory=list)


@dataclass
class Stage:
    line: int
    header: dict[str, str] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.header.get("stage", f"at line {self.line}")


def parse_def(text: str) -> tuple[list[Stage], list[str]]:
    """Split a .def into stages (header keywords, then sections); return them and the lines it cannot place."""
    stages: list[Stage] = []
    problems: list[str] = []
    section: Section | None = None
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header and header[1].lower() == "bootstrap":
            stages.append(Stage(number))
            section = None
        if (match := _SECTION.match(line)) is not None:
            if not stages:
                stages.append(Stage(number))
            section = Section(match[1], match[2].strip(), number)
            stages[-1].sections.append(section)
        elif section is not None:
            section.body.append(line)
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        elif header:
            if not stages:
                stages.append(Stage(number))
            key = header[1].lower()
            if key in stages[-1].header:
                problems.append(f"line {number}: {header[1]}: given twice in one stage")
            stages[-1].header[key] = header[2].strip()
            if key not in HEADER_KEYS:
                problems.append(f"line {number}: {header[1]}: unknown header keyword{_near(key, HEADER_KEYS)}")
        else:
            problems.append(f"line {number}: neither a header keyword nor a %section: {line.strip()!r}")
    return stages, problems


def check_def(text: str) -> list[str]:
    """Every structural problem of a .def, one line each (empty: fine)."""
    stages, problems = parse_def(text)
    if not stages:
        return problems + ["no Bootstrap: line: the file defines no stage"]
    names = [stage.header.get("stage") for stage in stages]
    for index, stage in enumerate(stages):
        where = f"stage {stage.name}"
        if "bootstrap" not in stage.header:
            problems.append(f"line {stage.line}: {where}: no Bootstrap: (each stage starts with one)")
        if "from" not in stage.header and stage.header.get("bootstrap") != "scratch":
            problems.append(f"line {stage.line}: {where}: no From:")
        if len(stages) > 1 and not names[index]:
            problems.append(f"line {stage.line}: {where}: a multi-stage file needs Stage: in every stage")
        if names[index] and names.count(names[index]) > 1:
            problems.append(f"line {stage.line}: {where}: the stage name is used twice")
        for section in stage.sections:
            problems += _check_section(section, earlier=set(filter(None, names[:index])))
    if "{{" in text and not any(s.name == "arguments" for stage in stages for s in stage.sections):
        problems.append("{{ }} templating needs an %arguments section")
    return problems


def _check_section(section: Section, earlier: set[str]) -> list[str]:
    where = f"line {section.line}: %{section.name}"
    if section.name not in SECTIONS:
        return [f"{where}: unknown section{_near(section.name, SECTIONS, '%')}"]
    if section.name == "files" and section.args:
        source = section.args.split()
        if len(source) != 2 or source[0] != "from":
            return [f"{where} {section.args}: expected `%files from STAGE`"]
        if source[1] not in earlier:
            return [
                f"{where} from {source[1]}: no earlier stage is named {source[1]!r} "
                f"(earlier: {', '.join(sorted(earlier)) or 'none'})"
            ]
    if section.name == "labels":
        return [
            f"{where}: {line.strip()!r} is not `KEY VALUE`"
            for line in section.body
            if line.strip() and len(line.split(None, 1)) < 2
        ]
    if section.name in SCRIPT_SECTIONS:
        result = subprocess.run(["bash", "-n"], input="\n".join(section.body) + "\n", capture_output=True, text=True)
        if result.returncode != 0:
            return [f"{where}: bash -n: {result.stderr.strip().splitlines()[0][:200]}"]
    return []


def _near(word: str, known: set[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word.lower(), sorted(known), n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def main(paths: list[str]) -> int:
    bad = 0
    for path in paths:
        for problem in check_def(Path(path).read_text(encoding="utf-8")):
            print(f"{path}: {problem}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
