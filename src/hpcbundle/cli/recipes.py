"""`hpcbundle recipes | render | check`: list, render and check matched stacks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..config.errors import UserError
from ..config.sites import Wiring
from ..image.bootstrap import AGENTS, OPTION, local_bootstrap
from ..image.render import TEMPLATES, render_image, template_environment
from ..knowledge.compat import knowledge_base
from ..knowledge.stack import torchvision_version
from ..rules.engine import failed
from ..rules.facts import check_declared
from ..rules.loading import all_recipes, file_failures, load_recipe, problem_line, read_recipe
from . import main, pass_bundle
from .options import (
    here,
    image_option,
    layout_from,
    plan_from,
    ranks_options,
    site_for,
    wiring_of,
    wiring_option,
    workdir_from,
    workdir_option,
)
from .outputs import output_option, write_atomic
from .preflight import torch_planned


def _stack_summary(recipe) -> dict[str, object]:
    fw = recipe.frameworks
    return {
        "name": recipe.name,
        "os": recipe.base.os,
        "python": recipe.python,
        "cuda": recipe.gpu.cuda if recipe.gpu else None,
        "cudnn": recipe.gpu.cudnn if recipe.gpu else None,
        "nccl": recipe.gpu.nccl if recipe.gpu else None,
        "gpu_archs": list(recipe.gpu.archs) if recipe.gpu else [],
        "mpi": f"{recipe.mpi.flavour} {recipe.mpi.version}" if recipe.mpi else "none",
        "ucx": recipe.ucx.version if recipe.ucx else None,
        "horovod": recipe.horovod.version if recipe.horovod else "none",
        "tensorflow": fw.tensorflow.version if fw.tensorflow else None,
        "pytorch": f"{fw.pytorch.version}+{fw.pytorch.variant}" if fw.pytorch else None,
        "torchvision": torchvision_version(fw.pytorch, knowledge_base()) if fw.pytorch else None,
        "description": recipe.description,
    }


@main.command("recipes")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "markdown"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts, markdown for the recipes table in docs/images.md.",
)
@pass_bundle
def recipes_command(bundle, fmt: str) -> None:
    """List the matched stacks in recipes/ (every file is validated)."""
    rows = [_stack_summary(r) for r in all_recipes(bundle.get().recipes_dir)]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    columns = [
        "name",
        "cuda",
        "cudnn",
        "nccl",
        "gpu_archs",
        "mpi",
        "ucx",
        "horovod",
        "tensorflow",
        "pytorch",
        "torchvision",
        "python",
    ]
    cell = lambda v: "-" if v in (None, []) else (" ".join(v) if isinstance(v, list) else str(v))  # noqa: E731
    if fmt == "markdown":
        click.echo("| " + " | ".join(columns) + " |")
        click.echo("|" + "---|" * len(columns))
        for row in rows:
            click.echo("| " + " | ".join(cell(row[c]) for c in columns) + " |")
        return
    table = Table(*columns, title="hpcbundle recipes")
    for row in rows:
        table.add_row(*(cell(row[c]) for c in columns))
    console = Console()
    if not console.is_terminal:  # piped: never truncate a cell to fit 80 columns
        console = Console(width=240)
    console.print(table)


@main.command("render")
@click.argument("recipe")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(TEMPLATES)),
    required=True,
    help="docker: a Dockerfile; singularity: an Apptainer/Singularity .def; shell: a bare-metal install script "
    "(a venv, the wheels, the patched Horovod build, check-build) for hosts without a container runtime.",
)
@output_option("Write here")
@click.option(
    OPTION,
    "bootstrap_text",
    metavar="AGENT:SOURCE",
    help="--format singularity: every stage bootstraps from this local base instead of pulling the recipe's "
    "images from a registry (air-gapped build hosts): " + "; ".join(AGENTS.values()) + ".",
)
@pass_bundle
def render_command(bundle, recipe: str, fmt: str, output: Path | None, bootstrap_text: str | None) -> None:
    """Render RECIPE (a name in recipes/ or a path to a YAML file) as a Dockerfile, a .def or an install script.

    All three run the same steps. The install script (--format shell) builds the stack into a venv
    on a GPU host without a container runtime; it reuses torch and the NVIDIA wheels the host
    already has (HPCBUNDLE_SYSTEM_SITE_PACKAGES=1), installs offline from a wheelhouse
    (PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR) and caches the Horovod wheel by versions
    ($HPCBUNDLE_CACHE/horovod/<key>).

    \b
    Examples:
      hpcbundle render cpu-local --format docker -o build/cpu-local.Dockerfile
      hpcbundle render ./my-stack.yaml --format singularity > my-stack.def
      hpcbundle render cpu-local --format singularity --bootstrap localimage:/srv/debian-bookworm.sif
      hpcbundle render cuda13.0-torch2.11 --format shell -o install.sh
      bash install.sh ~/horovod-venv
    """
    b = bundle.get()
    if bootstrap_text is not None and fmt != "singularity":
        raise UserError.at(
            "",
            OPTION,
            f"applies to --format singularity, not {fmt}",
            "a Dockerfile takes its bases as --build-arg BUILD_IMAGE=... RUNTIME_IMAGE=...",
        )
    bootstrap = local_bootstrap(bootstrap_text, Path(here(OPTION))) if bootstrap_text is not None else None
    kb = knowledge_base()
    model = load_recipe(recipe, b.recipes_dir)
    findings = check_declared(model, None, kb)
    if failed(findings):
        refuse(findings, model.name)
    text = render_image(model, fmt, template_environment(b.containers_dir), kb, bootstrap)
    if output is None:
        click.echo(text, nl=False)
    else:
        write_atomic(output, text)
        click.echo(f"wrote {output} ({fmt}, recipe {model.name})", err=True)


@main.command("check")
@click.argument("recipe")
@click.option("--site", help="Also check the pair: RECIPE's image on this site (driver, GPU, MPI ABI, known traps).")
@image_option
@ranks_options("Also judge a launch of this many ranks on --site (as launch would).", required=False)
@wiring_option
@workdir_option
@pass_bundle
def check_command(
    bundle,
    recipe: str,
    site: str | None,
    image: str | None,
    np_: int | None,
    hosts: str | None,
    hostfile: Path | None,
    wiring: Wiring | None,
    workdir: str | None,
) -> None:
    """Check RECIPE against the compatibility knowledge base: every rule, PASS/WARN/FAIL/SKIP.

    With --np, --hosts, --hostfile, --image or --workdir (and --site), the launch is judged too, by the
    same plan and the same single pass of the rules as `launch` makes before starting it (see
    `hpcbundle rules`), so `check` refuses what `launch` refuses.

    \b
    Exits 0 when no rule fails, 2 with every reason when one does. Example:
      hpcbundle check cuda11.8-tf2.14-torch2.1 --site ib-v100 --np 4 --hosts f1:2,f2:2 --image h.sif
    """
    b = bundle.get()
    model, where = read_recipe(recipe, b.recipes_dir)  # judged below, once, with the site and the request
    asked = {"--np": np_, "--hosts": hosts, "--hostfile": hostfile, "--image": image, "--workdir": workdir}
    asked |= {"--torch/--torchrun/--horovod": wiring}
    given = [flag for flag, value in asked.items() if value is not None]
    if given and site is None:
        raise UserError.at("", "/".join(given), "judge a launch on a site", "add --site SITE")
    if site is None:
        findings = check_declared(model, None, knowledge_base())
    elif given:
        layout = layout_from(np_ or 0, hosts, hostfile) if np_ or hosts or hostfile else None
        if layout is not None and not np_:
            layout = replace(layout, np=layout.slots or 0)  # --hosts alone: a rank on every slot
        on_site = site_for(bundle, site)
        plan = plan_from(on_site, layout, None, image, workdir=workdir_from(workdir))
        plan = torch_planned(plan, wiring_of(on_site, wiring), execute=False)
        findings = plan.evaluate(model)
    else:
        findings = check_declared(model, site_for(bundle, site), knowledge_base())
    in_recipe = file_failures(findings, {"recipe"})
    if in_recipe:  # as loading the recipe refuses it: the file first
        raise UserError(*(problem_line(r, where) for r in in_recipe))
    for finding in findings:
        click.echo(finding.line())
    if failed(findings):
        refuse(findings, model.name)
    click.echo(f"recipe {model.name}: OK ({len(findings)} rules)")


def refuse(findings, name: str) -> None:
    """Every FAIL as one error line; exit status 2."""
    raise UserError(*(f"recipe {name}: {f.rule}: {f.message()}" for f in findings if f.status == "FAIL"))
