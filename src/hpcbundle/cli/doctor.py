"""`hpcbundle doctor` and `hpcbundle site detect`: check a site and an image on the nodes; draft a site."""

from __future__ import annotations

import os
from pathlib import Path

import click
from pydantic import TypeAdapter, ValidationError

from ..config.errors import UserError, printable
from ..config.fields import Name
from ..config.limits import MAX_GATE_SECONDS
from ..config.loading import parse_yaml, validate
from ..config.sites import Site, Wiring
from ..diagnose.detect import draft_site, observe
from ..diagnose.doctor import doctor
from ..diagnose.resolve import MAX_PEERS, RESOLVE_SECONDS
from ..knowledge.compat import knowledge_base
from ..launch import parse_hosts
from ..rules.engine import exit_status, failed
from . import main, pass_bundle
from .options import PROGRAM_SETTINGS, plan_from, seconds, site_for, site_option, wiring_of, wiring_option
from .outputs import output_option, output_target, print_results, write_atomic
from .preflight import JUDGED, program_probe, torch_head, torch_planned


@main.command("doctor", context_settings=PROGRAM_SETTINGS)
@site_option
@click.option("--image", help="The image to check (.sif, directory image, or Docker name).")
@click.option(
    "--hosts",
    help="Check these nodes too, e.g. node1,node2 or node1:2,node2:2 (slots = ranks per node); "
    "reached through the site's plm_rsh_agent, else ssh.",
)
@click.option(
    "--no-checksum", is_flag=True, help="Do not hash the image on every node (hashing a large image takes a while)."
)
@click.option(
    "--timeout",
    type=seconds(MAX_GATE_SECONDS),
    default=30,
    show_default=True,
    help="Seconds each node may take to answer.",
)
@wiring_option
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
@pass_bundle
@click.pass_context
def doctor_command(
    ctx: click.Context,
    bundle,
    site: str,
    image: str | None,
    hosts: str | None,
    no_checksum: bool,
    timeout: int,
    wiring: Wiring | None,
    program: tuple[str, ...],
) -> None:
    """Check SITE (and IMAGE) on this node or on --hosts: PASS/WARN/FAIL with evidence and fix.

    With `-- PROGRAM ...` (as given to `launch`), also start the program's first word on every
    host through the site's launch line and compare its interpreter and modules with this node's.

    \b
    Exit status: 0 all PASS, 1 a WARN, 2 a FAIL. Examples:
      hpcbundle doctor
      hpcbundle doctor --site ib-v100 --image /scratch/horovod.sif --hosts node1,node2
      hpcbundle doctor --site mycluster --hosts n1,n2,n3 -- python train.py
      hpcbundle doctor --site mycluster --hosts n1,n2,n3 --torch   # also n1's address, torch.port free, reached
    """
    model = site_for(bundle, site)
    placed = parse_hosts(hosts) if hosts is not None else ()
    plan = plan_from(model, None, program or None, image, environment=os.environ, hosts=dict(placed))
    plan = torch_planned(
        plan, wiring_of(model, wiring), execute=False
    )  # --torch, --torchrun: the torch rules judge it too
    declared = plan.evaluate(observing=True)  # the site and the request; the nodes are observed next
    observed = doctor(
        model,
        image,
        placed,
        checksum=not no_checksum,
        timeout=timeout,
        probe=None if failed(declared) else program_probe(plan, placed),  # a refused line is never started
        environment=os.environ,
        judged=JUDGED,
        request=plan.request(),
        head=torch_head(plan, placed),
    )
    print_results(declared + observed)
    ctx.exit(exit_status(declared + observed))


@main.group("site")
def site_group() -> None:
    """Site helpers: draft a site for this cluster."""


@site_group.command("detect")
@output_option("Write the draft here", "; its name is the file's stem.")
@click.option("--name", help="The site's name (default: the output file's stem, else 'detected').")
@click.option(
    "--hosts",
    help=f"Other nodes of the cluster (e.g. node2,node3; at most {MAX_PEERS}, resolved together within "
    f"{RESOLVE_SECONDS:g} s): the data interface is the one their routes go through.",
)
def detect_command(output: Path | None, name: str | None, hosts: str | None) -> None:
    """Write a draft site config for the node this runs on; lines to check are marked CONFIRM.

    \b
    Example (on a compute node):
      hpcbundle site detect --hosts node2,node3 -o site_configs/mycluster.yaml
    """
    site_name = _draft_name(name, output)
    peers = [h for h, _ in parse_hosts(hosts)] if hosts is not None else []
    if len(peers) > MAX_PEERS:
        problem = f"{len(peers)} hosts; the routes to a few show the interface the nodes share"
        raise UserError.at("", "--hosts", problem, f"give at most {MAX_PEERS}, e.g. node2,node3")
    observed = observe(peers)
    if observed["unresolved"]:
        names = ", ".join(observed["unresolved"][:8]) + (", ..." if len(observed["unresolved"]) > 8 else "")
        click.echo(
            f"hpcbundle: note: --hosts: {len(observed['unresolved'])} of {len(set(peers))} did not resolve (in "
            f"{RESOLVE_SECONDS:g} s at most): {printable(names)}; the draft's interface leaves their routes out",
            err=True,
        )
    text = draft_site(observed, site_name, list(knowledge_base().gpu_capability))
    where = str(output or "site detect")
    validate(Site, parse_yaml(text, where), where)  # a draft that does not load is a bug
    if output is None:
        click.echo(text, nl=False)
        return
    write_atomic(output, text)
    confirm = sum("CONFIRM" in line for line in text.splitlines())
    click.echo(f"wrote {output}: {confirm} line(s) marked CONFIRM to check", err=True)


def _draft_name(name: str | None, output: Path | None) -> str:
    """The draft's site name, checked before anything is observed: a bad --name or -o is named as such,
    never blamed on the generated draft."""
    if output is not None:
        output_target(output)
    option, value = ("--name", name) if name is not None else ("-o", output.stem) if output else ("", "detected")
    try:
        return TypeAdapter(Name).validate_python(value)
    except ValidationError as exc:
        fix = "give a name such as mycluster" if option == "--name" else "give --name, or a file such as mycluster.yaml"
        raise UserError.at("", option, str(exc.errors()[0]["msg"]).removeprefix("Value error, "), fix) from None
