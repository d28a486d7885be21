"""The options commands share, declared once: bounded counts and seconds (ASCII digits within a range: no
10**30, no '٣'), the site, image, ranks (--np, --hosts, --hostfile) and working directory every command that
makes a launch plan takes, the program; and `typed`, which hands a long command its parameters as one object."""

from __future__ import annotations

import functools
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from ..config.errors import UserError
from ..config.limits import MAX_CORES, MAX_COUNT, MAX_NODES, MAX_RANKS, MAX_SECONDS
from ..config.loading import read_text
from ..config.sites import Site, Wiring
from ..launch import LaunchPlan, RankLayout, parse_hostfile, parse_hosts, read_site
from ..launch.layout import fewest_cpus
from ..launch.workdir import FLAG_SOURCE, SHELL_SOURCE, WorkDir
from . import pass_bundle


class Count(click.IntRange):
    """An integer option written in ASCII digits, between `min` and `max` (inclusive).

    >>> Count(1, 10).convert("7", None, None)
    7
    """

    name = "integer"

    def __init__(self, min: int = 1, max: int = MAX_COUNT) -> None:  # noqa: A002 - click's own names
        super().__init__(min=min, max=max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,18}", value):
            self.fail(f"{value[:20]!r} is not a whole number in ASCII digits from {self.min} to {self.max}", param, ctx)
        return super().convert(value, param, ctx)


def seconds(max: int = MAX_SECONDS) -> Count:  # noqa: A002
    """A timeout in seconds, from 1 to `max` (a year unless given)."""
    return Count(1, max)


def ranks(min: int = 1) -> Count:  # noqa: A002
    """A number of ranks (--np), at most MAX_RANKS."""
    return Count(min, MAX_RANKS)


NODES = Count(1, MAX_NODES)
"""A number of nodes (sbatch --nodes), at most MAX_NODES."""
RANKS_PER_NODE = Count(1, MAX_CORES)
"""Ranks on each node (--tasks-per-node), at most MAX_CORES: one per CPU of the largest node Linux runs."""


DEFAULT_SITE = "local"
PROGRAM_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}
site_option = click.option(
    "--site",
    default=DEFAULT_SITE,
    show_default=True,
    help="A name in site_configs/ or a path to a site YAML file. The default, local, is this machine alone: "
    "launch and sbatch refuse it unnamed inside a SLURM job or with other hosts.",
)


def site_choice(ctx: click.Context) -> dict[str, Any]:
    """Read at the edge for rule default-site: whether --site was left at its default, and the SLURM job this
    shell runs in (SLURM_JOB_ID), as LaunchPlan fields."""
    default = ctx.get_parameter_source("site") is click.core.ParameterSource.DEFAULT
    return {"default_site": default, "shell_job": os.environ.get("SLURM_JOB_ID")}


image_option = click.option(
    "--image", help="The image every rank runs (.sif, directory, or Docker name). Omit it to run on the host."
)
program_argument = click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
no_doctor_option = click.option(
    "--no-doctor", is_flag=True, help="Skip the fast doctor checks run before anything is started or submitted."
)
gate_option = click.option(
    "--gate",
    is_flag=True,
    help="First run a short allreduce through the same launch line (the launch gate) and stop, exit 2, when "
    "its transport is not the site's network.fabric or its busbw is below gate.threshold x network.link_gbps.",
)

workdir_option = click.option(
    "--workdir",
    metavar="DIR",
    help="The directory every rank starts in, mounted at the same path in the container (absolute; "
    "default: this shell's working directory). For a line written here to run from another directory.",
)


def here(option: str) -> str:
    """This shell's working directory, which `option`'s default or relative path needs; a removed one is refused."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise UserError.at("", option, "this shell's working directory was removed", "cd to one that exists") from None


def workdir_from(flag: str | None) -> WorkDir:
    """The user's working directory, read at the edge: --workdir, else this shell's (the rules judge its form)."""
    if flag is not None:
        return WorkDir(flag, FLAG_SOURCE)
    return WorkDir(here("--workdir"), SHELL_SOURCE)


def enter_workdir(workdir: WorkDir) -> None:
    """Make `workdir` this process's directory before `launch --exec` starts the job there: a launcher
    with no option for it (horovodrun) and every rank it starts on this node begin where it does."""
    try:
        os.chdir(workdir.path)
    except OSError as e:
        raise UserError.at("", "--workdir", f"{workdir.path}: {e.strerror}", "give a directory that exists") from None


def site_for(bundle, ref: str) -> Site:
    """The site named `ref`, its shape validated: the command's LaunchPlan judges the rest, once."""
    return read_site(ref, bundle.get().sites_dir)


HOSTS_HELP = (
    "Hosts and slots, e.g. f1:2,f2:2 or a SLURM host list n[01-04]:2 (slots for each; at most 4096 hosts; "
    "inside a SLURM allocation the launcher asks SLURM)."
)
HOSTFILE_HELP = "A hostfile (`host slots=N` or `host:N` lines)."

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def ranks_options(np_help: str = "Number of ranks.", least: int = 1, required: bool = True) -> Decorator:
    """--np (at least `least`), --hosts and --hostfile: where a command's ranks go (layout_from reads them)."""
    stack = [
        click.option("--np", "np_", type=ranks(least), required=required, help=np_help),
        click.option("--hosts", help=HOSTS_HELP),
        click.option("--hostfile", type=click.Path(dir_okay=False, path_type=Path), help=HOSTFILE_HELP),
    ]
    return lambda function: functools.reduce(lambda f, option: option(f), reversed(stack), function)


def plan_options(np_help: str = "Number of ranks.", least: int = 1) -> Decorator:
    """--site, --image, then ranks_options: what a command that plans ranks on a site takes (launch, tune)."""
    ranks_stack = ranks_options(np_help, least)
    return lambda function: site_option(image_option(ranks_stack(function)))


def counted(flag: str, least: int, default: int, help: str, name: str | None = None) -> Decorator:  # noqa: A002
    """A whole-number option from `least` up, its default shown in --help (e.g. --repeat, --tensors)."""
    names = (flag, name) if name else (flag,)
    return click.option(*names, type=Count(least), default=default, show_default=True, help=help)


WIRING_HELP = {
    "torch": "a torch.distributed program (DDP, FSDP, Lightning): the site's launcher starts one rank per GPU "
    "(per slot on CPU sites) with RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR set (env://)",
    "torchrun": "a torch.distributed program run by torchrun: one agent per node (python -m torch.distributed.run, "
    "c10d rendezvous at the first node's data address) starts its workers; --np still counts workers",
    "horovod": "a Horovod program (default: the site's torch.wiring, else horovod)",
}


def wiring_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """--torch, --torchrun and --horovod: how the ranks meet, one parameter `wiring` (None: the site's)."""
    for name in reversed(WIRING_HELP):
        function = click.option(f"--{name}", "wiring", flag_value=name, default=None, help=WIRING_HELP[name])(function)
    return function


def job_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """What every command that starts or writes a job takes after its own options: --torch/--torchrun/--horovod,
    --workdir, --no-doctor, --gate and the PROGRAM after -- (see JobOptions)."""
    for option in reversed((wiring_option, workdir_option, no_doctor_option, gate_option, program_argument)):
        function = option(function)
    return function


def wiring_of(site: Site, wiring: Wiring | None) -> Wiring:
    """The wiring a command asked for (--torch, --torchrun, --horovod), else the site's torch.wiring."""
    return wiring or site.torch.wiring


@dataclass(frozen=True)
class JobOptions:
    """The parameters every command that starts or writes a job shares (site_option, image_option, job_options)."""

    site: str
    image: str | None
    wiring: Wiring | None
    workdir: str | None
    no_doctor: bool
    gate: bool
    program: tuple[str, ...]


T = TypeVar("T")


def typed_command(options_type: type[T]) -> Decorator:
    """A command `def NAME(ctx, bundle, asked: options_type)`: click's context, the bundle, then its parameters
    as one typed object (see `typed`); put it right above the `def`."""
    return lambda function: pass_bundle(click.pass_context(typed(options_type)(function)))


def typed(options_type: type[T]) -> Decorator:
    """Hand a command its click parameters as one `options_type` (a dataclass with a field per parameter),
    after the positional ones click passes first (the context, the bundle).

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Greeting:
    ...     name: str
    >>> typed(Greeting)(lambda options: f"hello {options.name}")(name="KNL")
    'hello KNL'
    """

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def command(*positional: Any, **parameters: Any) -> Any:
            return function(*positional, options_type(**parameters))

        return command

    return decorate


def plan_from(
    site: Site, layout: RankLayout | None, program: tuple[str, ...] | None, image: str | None, **more: Any
) -> LaunchPlan:
    """The command's LaunchPlan, with this node's host name (where mpirun starts every rank without hosts)."""
    return LaunchPlan(site, layout, program, image, here=socket.gethostname(), **more)


def layout_from(np_: int, hosts: str | None, hostfile: Path | None) -> RankLayout:
    """The ranks asked for, read at the edge: the hostfile's slots and whether SLURM allocated us (then its nodes
    and CPUs: SLURM_JOB_NUM_NODES, SLURM_CPUS_PER_TASK, SLURM_JOB_CPUS_PER_NODE)."""
    if hosts is not None and hostfile:
        raise UserError.at("", "--hosts", "and --hostfile both given", "give one of them")
    lines = parse_hostfile(read_text(hostfile, "--hostfile"), str(hostfile)) if hostfile is not None else ()
    allocated = "SLURM_JOB_ID" in os.environ
    nodes, per_task = os.environ.get("SLURM_JOB_NUM_NODES", ""), os.environ.get("SLURM_CPUS_PER_TASK", "")
    cpus = per_task.isdigit() and int(per_task) > 0 and allocated
    return RankLayout(
        np=np_,
        hosts=parse_hosts(hosts) if hosts is not None else (),
        hostfile=str(hostfile) if hostfile else None,
        hostfile_slots=sum(slots for _, slots in lines) if hostfile is not None else None,
        in_allocation=allocated,
        hostfile_hosts=lines,
        nodes=int(nodes) if nodes.isdigit() and allocated else None,
        cpus_per_rank=int(per_task[-7:]) if cpus else None,
        cpus_source="SLURM_CPUS_PER_TASK of the allocation" if cpus else "",
        node_cpus=fewest_cpus(os.environ.get("SLURM_JOB_CPUS_PER_NODE", "")) if allocated else None,
    )
