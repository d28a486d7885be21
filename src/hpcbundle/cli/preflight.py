"""The fast doctor checks a command runs before it starts or submits a job (exit 2 on a FAIL, nothing started)."""

from __future__ import annotations

import os
import socket
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

import click

from ..config.errors import UserError
from ..config.sites import Site
from ..diagnose.imports import program_imports
from ..diagnose.program import FRAMEWORKS, ProgramProbe, probe_words
from ..knowledge.compat import knowledge_base
from ..launch import LAUNCHERS, RankLayout, build_command
from ..rules.engine import LaunchRequest, Result, exit_status
from ..rules.facts import declared_launch
from ..rules.loading import problem_line
from .outputs import print_results


def program_probe(
    site: Site, hosts: tuple[tuple[str, int], ...], program: tuple[str, ...], image: str | None
) -> ProgramProbe | None:
    """The job's own launch line, one rank on each remote host, running the program-environment
    probe instead of `program` (None when no rank leaves this node or the launcher places ranks itself).

    The program's imports are read here, at the edge: `python3 train.py` probes the versions of
    horovod and the frameworks train.py imports, and whether every module it (and the local modules
    it imports) imports resolves in the rank's interpreter.
    """
    remote = [h for h, _ in hosts if h not in ("localhost", socket.gethostname())]
    launcher = LAUNCHERS.get(site.launcher.name)
    if not program or not remote or launcher is None or not launcher.takes_hosts:
        return None
    modules, imports = ["horovod"], None
    script = next((Path(word) for word in program[1:] if not word.startswith("-")), None)  # python3 -u train.py
    if script and script.suffix == ".py" and script.is_file():
        imports = program_imports(script)
        modules = ["horovod"] + [name for name in FRAMEWORKS if name in imports.required + imports.optional]
    words = probe_words(program[0], modules, imports.required + imports.optional if imports else ())
    names = [h for h, _ in hosts]
    layout = RankLayout(np=len(names), hosts=tuple((h, 1) for h in names))
    argv = build_command(site, layout, words, image).argv
    return ProgramProbe(argv, words, names, in_image=bool(image), imports=imports)


def doctor_first(
    ctx: click.Context,
    model: Site,
    image: str | None,
    hosts: tuple,
    scope: str,
    program: tuple[str, ...] = (),
    shown: Collection[Result] = (),
) -> None:
    """Run the fast doctor checks (no image hashing); print what is not PASS and not already `shown`
    (declared_first's WARNs); stop with exit 2 on a FAIL."""
    results = fast_doctor(model, image, hosts, scope, program_probe(model, hosts, program, image))
    print_results([r for r in results if r.status in ("WARN", "FAIL") and r not in shown], err=True)
    if exit_status(results) == 2:
        click.echo(
            f"hpcbundle: error: doctor found a problem (FAIL above), nothing was started; "
            f"fix {model.where}, or run with --no-doctor to launch anyway",
            err=True,
        )
        ctx.exit(2)


def fast_doctor(
    model: Site, image: str | None, hosts: tuple, scope: str, probe: ProgramProbe | None = None
) -> list[Result]:
    """Doctor's checks as a launch runs them, before a job or after it stalled: no image hashing, 20 s
    per probe, the node probes with this shell's exported variables."""
    from ..diagnose.doctor import doctor  # imported when a check runs: printing a line stays fast

    return doctor(model, image, hosts, checksum=False, scope=scope, timeout=20, probe=probe, environment=os.environ)


def planned_ranks(site: Site, layout: RankLayout) -> dict[str, int] | None:
    """Ranks per host of a launch as the command line tells, a repeated host's added up (None when SLURM or
    the launcher places them)."""
    launcher = LAUNCHERS.get(site.launcher.name)
    if launcher is None or not launcher.takes_hosts:
        return None
    return dict(layout.ranks_per_host() or layout.placement(socket.gethostname())) or None


def declared_first(
    model: Site, request: LaunchRequest, ranks_per_host: dict[str, int] | None, flag: str
) -> list[Result]:
    """The rules over what the command declares (the site, its node, the launch request, the ranks per
    host `flag` asks for) before anything is started or written: WARNs on stderr (and returned), each
    FAIL refused as one line (exit 2)."""
    results = declared_launch(model, request, ranks_per_host, knowledge_base())
    failures = [replace(r, key=r.key or flag) for r in results if r.status == "FAIL"]
    if failures:
        raise UserError(*(problem_line(r, model.where) for r in failures))
    warnings = [r for r in results if r.status == "WARN"]
    print_results(warnings, err=True)
    return warnings
