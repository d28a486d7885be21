"""The fast doctor checks a command runs before it starts or submits a job (exit 2 on a FAIL, nothing started)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

import click

from ..config.sites import Wiring
from ..diagnose.imports import program_imports
from ..diagnose.program import FRAMEWORKS, ProgramProbe, probe_words
from ..knowledge.torchenv import is_address
from ..launch import LAUNCHERS, LaunchPlan, RankLayout
from ..rules.engine import HeadProbe, Result, exit_status
from .outputs import print_results


def placed_hosts(plan: LaunchPlan) -> tuple[tuple[str, int], ...]:
    """The plan's ranks per host as the command line tells (every rank on this node without hosts or an
    allocation; () when SLURM or the launcher places them)."""
    return plan.layout.placement(plan.here) if plan.layout else ()


def torch_planned(plan: LaunchPlan, wiring: Wiring, execute: bool) -> LaunchPlan:
    """`plan` with its wiring; a torch job's head as the command line tells: 127.0.0.1 when every rank runs
    on this node, else the first host's name for a printed line (rule torch-head-by-name warns), or None
    until --exec asks that host for its address on the data interface. A torchrun job run here (--exec) gets
    a rendezvous id of its own."""
    if wiring == "horovod":
        return replace(plan, wiring=wiring)
    if execute:
        plan = replace(plan, run_id=f"hpcbundle-{secrets.token_hex(6)}")
    placed = placed_hosts(plan)
    if len(placed) == 1 and placed[0][0] in (plan.here, "localhost"):
        return replace(plan, wiring=wiring, head="127.0.0.1", head_source="every rank on this node")
    if execute or not placed:
        return replace(plan, wiring=wiring, head=None)
    return replace(plan, wiring=wiring, head=placed[0][0], head_source="the first host's name")


def torch_head(plan: LaunchPlan, hosts: tuple[tuple[str, int], ...]) -> HeadProbe | None:
    """What doctor observes of a torch job's head: the first of `hosts`, the interface its address is on, the
    port, the address where already read (None for Horovod, a batch job, or no hosts)."""
    wiring = plan.torch(agents=False) if plan.wiring != "horovod" else None
    if wiring is None or wiring.port is None or not hosts:
        return None
    address = wiring.head if wiring.head and is_address(wiring.head) else None
    interfaces = ("lo",) if address == "127.0.0.1" else plan.site.network.interfaces
    return HeadProbe(hosts[0][0], interfaces[0], wiring.port, address) if interfaces else None


def program_probe(plan: LaunchPlan, hosts: tuple[tuple[str, int], ...]) -> ProgramProbe | None:
    """The job's own launch line, one rank on each remote host, running the program-environment
    probe instead of the plan's program; when every rank runs on this node outside a container, the probe
    alone, here (one Python start, no launcher). None when the launcher places ranks itself, or every rank
    runs on this node in a container.

    The program's imports are read here, at the edge: `python3 train.py` probes the versions of
    horovod and the frameworks train.py imports, and whether every module it (and the local modules
    it imports) imports resolves in the rank's interpreter.
    """
    program = plan.program or ()
    remote = [h for h, _ in hosts if h not in ("localhost", plan.here)]
    launcher = LAUNCHERS.get(plan.site.launcher.name)
    if not program or not hosts or (not remote and plan.image) or launcher is None or not launcher.takes_hosts:
        return None
    modules, imports = ["horovod"], None
    script = next((Path(word) for word in program[1:] if not word.startswith("-")), None)  # python3 -u train.py
    if script and script.suffix == ".py" and script.is_file():
        imports = program_imports(script)
        modules = ["horovod"] + [name for name in FRAMEWORKS if name in imports.required + imports.optional]
    words = probe_words(program[0], modules, imports.required + imports.optional if imports else ())
    names = [h for h, _ in hosts]
    if not remote:
        return ProgramProbe(None, words, names[:1], imports=imports)
    argv = plan.command(words, RankLayout(np=len(names), hosts=tuple((h, 1) for h in names))).argv
    return ProgramProbe(argv, words, names, in_image=bool(plan.image), imports=imports)


def doctor_first(ctx: click.Context, plan: LaunchPlan, scope: str, shown: Collection[Result] = ()) -> None:
    """Run the fast doctor checks (no image hashing) on the plan's nodes; print what is not PASS and not
    already `shown` (the plan's WARNs); stop with exit 2 on a FAIL."""
    hosts = placed_hosts(plan) if scope == "nodes" else ()
    results = fast_doctor(plan, hosts, scope, program_probe(plan, hosts))
    print_results([r for r in results if r.status in ("WARN", "FAIL") and r not in shown], err=True)
    if exit_status(results) == 2:
        click.echo(
            f"hpcbundle: error: doctor found a problem (FAIL above), nothing was started; "
            f"fix {plan.site.where}, or run with --no-doctor to launch anyway",
            err=True,
        )
        ctx.exit(2)


def fast_doctor(
    plan: LaunchPlan, hosts: tuple[tuple[str, int], ...], scope: str, probe: ProgramProbe | None = None
) -> list[Result]:
    """Doctor's checks as a launch runs them, before a job or after it stalled: no image hashing, 20 s
    per probe, the node probes with this shell's exported variables; the rules the plan's judgement ran
    over the site and the request alone are not run again."""
    from ..diagnose.doctor import doctor  # imported when a check runs: printing a line stays fast

    return doctor(
        plan.site,
        plan.image,
        hosts,
        checksum=False,
        scope=scope,
        timeout=20,
        probe=probe,
        environment=os.environ,
        judged=JUDGED,
        request=plan.request(),
        head=torch_head(plan, hosts),
    )


JUDGED = ("site", "request")
"""The fact kinds a plan's judgement covers without nodes: doctor leaves the rules over them alone."""


def warnings_of(results: list[Result]) -> list[Result]:
    """The WARNs of a plan's judgement, printed on stderr (and returned, so doctor does not print them twice)."""
    warnings = [r for r in results if r.status == "WARN"]
    print_results(warnings, err=True)
    return warnings
