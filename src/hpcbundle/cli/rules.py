"""`hpcbundle rules`: every rule of the one engine, what it needs and what it judges."""

from __future__ import annotations

import click

from ..rules.engine import Rule, registered
from . import main

NEEDS_ORDER = ("recipe", "image", "site", "nodes", "observed", "hosts", "program", "request", "head")


def rules_table(rules: list[Rule]) -> str:
    """One block per rule: name, the facts it needs, whether loading refuses on it, its source, then
    its one-line docstring and the rules that supersede it. The source is module:function, so the listing
    does not churn on edits."""
    lines = [f"{'NAME':<22} {'NEEDS':<24} {'LOAD':<5} SOURCE"]
    for r in rules:
        needs = ",".join(need for need in NEEDS_ORDER if need in r.needs)
        load = "load" if r.on_load else "-"
        lines += [f"{r.name:<22} {needs:<24} {load:<5} {r.source}", f"    {r.summary}"]
        if r.superseded_by:
            lines.append(f"    SKIPs where {' or '.join(r.superseded_by)} FAILs (superseded)")
    return "\n".join(lines) + "\n"


@main.command("rules")
def rules_command() -> None:
    """List every rule: NAME, NEEDS, LOAD, SOURCE, then what the rule judges.

    \b
    NEEDS   the facts a rule reads; it runs wherever all of them exist:
              recipe    the build spec              (check RECIPE)
              image     the image's labels          (check RECIPE; doctor reads a built image's)
              site      the site file               (every command that loads a site)
              nodes     the nodes, declared by the site (check --site) or probed (doctor)
              observed  only what doctor sees on the nodes
              hosts     the planned launch's ranks per host (launch, sbatch --tasks-per-node, doctor --hosts)
              program   the program's environment as the launcher starts it (doctor)
              request   the launch plan: ranks, hosts, image, program, workdir, options (launch, sbatch,
                        tune, scaling plan, check --np/--hosts/--hostfile/--image/--workdir, doctor)
              head      a torch job's head as observed: its address, its port free, reached from every
                        node (doctor --torch --hosts, launch --exec --torch)
    LOAD    'load': loading the site or recipe refuses on the rule's FAIL (exit status 2, nothing
            written), so every command stops at a combination no command could use; a launch plan
            is judged in one pass, and any FAIL refuses that launch before anything starts
    SOURCE  module:function of the rule; its docstring says why

    \b
    Examples:
      hpcbundle rules                      every rule, in the order check and doctor show them
      hpcbundle rules | grep ' load '      the rules every load enforces
      hpcbundle check cpu-local --site local   the rules over a recipe on a site, judged
    """
    click.echo(rules_table(registered()), nl=False)
