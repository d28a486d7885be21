"""`hpcbundle sites | launch | sbatch`: a site's command for a program, printed, run or submitted."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import click

from ..config.errors import UserError
from ..config.sites import Site
from ..diagnose.gate.run import gate_probe, run_gate
from ..diagnose.gate.verdict import STARTED, hang_line
from ..diagnose.head import head_address
from ..diagnose.watchdog import (
    Stopped,
    exec_limit,
    find_stopped,
    hang_error,
    quiet_warning,
    run_job,
    stall_lines,
    stall_verdict,
    unbounded_note,
)
from ..knowledge.secrets import horovodrun_allowlist, kept_environment
from ..launch import Command, LaunchPlan, load_site
from ..launch.batch import BatchJob, GateStep, batch_plan, sbatch_script, script_environment
from ..launch.elastic import allocation_path, discovery_path, discovery_script
from . import main, pass_bundle
from .options import (
    NODES,
    PROGRAM_SETTINGS,
    RANKS_PER_NODE,
    JobOptions,
    enter_workdir,
    image_option,
    job_options,
    layout_from,
    plan_from,
    plan_options,
    seconds,
    site_choice,
    site_for,
    site_option,
    typed_command,
    wiring_of,
    workdir_from,
)
from .outputs import echo_text, output_option, print_results, write_atomic
from .preflight import doctor_first, fast_doctor, placed_hosts, torch_planned, warnings_of
from .submit import submit_script


@main.command("sites")
@pass_bundle
def sites_command(bundle) -> None:
    """List the clusters in site_configs/ (every file is validated)."""
    directory = bundle.get().sites_dir
    for path in sorted(directory.glob("*.yaml")):
        site = load_site(path.stem, directory)
        mpi = f"{site.mpi.flavour} {site.mpi.version}"
        click.echo(
            f"{site.name:<20} {site.launcher.name:<14} {site.container.runtime:<13} {mpi:<17} {site.description}"
        )


@dataclass(frozen=True)
class LaunchOptions(JobOptions):
    """What `hpcbundle launch` was asked (its click parameters)."""

    np_: int
    hosts: str | None
    hostfile: Path | None
    explain: bool
    execute: bool
    timeout: int | None


@main.command("launch", context_settings=PROGRAM_SETTINGS)
@plan_options()
@click.option("--explain", is_flag=True, help="Show where every token comes from and why.")
@click.option("--exec", "execute", is_flag=True, help="Run the command (bounded by --timeout) instead of printing it.")
@click.option("--timeout", type=seconds(), help="Seconds --exec may run (default: the site's launcher.timeout).")
@job_options
@typed_command(LaunchOptions)
def launch_command(ctx: click.Context, bundle, asked: LaunchOptions) -> None:
    """Print (or run, with --exec) the command that runs PROGRAM as NP ranks on SITE.

    \b
    Examples:
      hpcbundle launch --np 2 --exec -- python3 train.py
      hpcbundle launch --site ib-v100 --image horovod.sif --np 4 --hosts f1:2,f2:2 \\
          -- python /examples/keras_train.py
      hpcbundle launch --site stampede2-knl --np 2 --explain -- python tf_cnn_benchmarks.py --model resnet50

    An elastic site (faults.elastic, discovery: hostfile) also writes HOSTFILE.discover, the script
    horovodrun reads the hosts from every second: edit the hostfile to add or retire nodes mid-run.
    """
    model = site_for(bundle, asked.site)
    layout = layout_from(asked.np_, asked.hosts, asked.hostfile)
    hosts_path = str(asked.hostfile.absolute()) if asked.hostfile else None
    if model.faults.elastic is not None:
        job = os.environ.get("SLURM_JOB_ID", "")
        in_job = allocation_path(model.name, job if job.isascii() and job.isdecimal() else str(os.getpid()))
        layout = replace(layout, discovery_script=discovery_path(hosts_path) if hosts_path else in_job)
    # Run from this shell, the exported variables must be set here; a printed line may run elsewhere.
    start_in = workdir_from(asked.workdir)
    environment = os.environ if asked.execute else None
    plan = plan_from(
        model, layout, asked.program, asked.image, workdir=start_in, environment=environment, **site_choice(ctx)
    )
    plan = torch_planned(plan, wiring_of(model, asked.wiring), asked.execute)
    warned = warnings_of(plan.judge())
    headed = asked.execute and plan.wiring != "horovod"
    plan = replace(plan, **address_head(plan, judged=not asked.no_doctor)) if headed else plan
    if asked.execute and not asked.no_doctor:  # a torch job's head too: its address, its port free, reached
        doctor_first(ctx, plan, "nodes", warned)
    plan = replace(plan, **address_head(plan)) if headed else plan  # where doctor passed a head not read before
    command = plan.command()
    if layout.discovery_script is not None:  # written once the plan has passed
        write_discovery(bundle, model, hosts_path, Path(start_in.path) / layout.discovery_script)
    if not asked.execute:
        if asked.gate:
            gate_first(ctx, plan)
        click.echo(command.display())
        for line in command.explain() if asked.explain else ():
            click.echo(line)
        return
    for line in command.explain() if asked.explain else ():
        click.echo(line, err=True)
    if asked.gate:
        gate_first(ctx, plan)
    enter_workdir(start_in)
    execute_job(ctx, plan, command, asked.timeout)


def address_head(plan: LaunchPlan, judged: bool = False) -> dict[str, str | None]:
    """The head's IPv4 address on network.interfaces[0], asked of the first host (launch --exec); where doctor's
    checks follow (`judged`), a head without one is left to them (rule torch-head-address names it)."""
    if plan.head is not None:
        return {}
    placed = placed_hosts(plan)
    if not placed:
        raise UserError.at(
            "",
            f"--{plan.wiring}",
            "the ranks' first node is SLURM's to place",
            f"submit with hpcbundle sbatch --{plan.wiring}",
        )
    host, interface = placed[0][0], plan.site.network.interfaces[0]
    address = head_address(plan.site, host)
    if address is None and judged:
        return {}
    if address is None:
        problem = f"{host} gave no IPv4 address on {interface} (network.interfaces of site {plan.site.name})"
        raise UserError.at("", f"--{plan.wiring}", problem, f"check that {host} is up and {interface} has an address")
    return {"head": address, "head_source": f"{host}'s address on {interface} (network.interfaces)"}


def write_discovery(bundle, model: Site, hostfile: str | None, path: Path) -> None:
    """Write the elastic job's host discovery script at `path` (relative paths: in the working directory,
    where horovodrun starts)."""
    text = discovery_script(model, script_environment(bundle.get().scripts_dir), hostfile, model.node.slots)
    write_atomic(path, text, executable=True, option="faults.elastic.discovery", derived=True)
    click.echo(f"wrote {path} (the elastic job's host discovery, read every second)", err=True)


def execute_job(ctx: click.Context, plan: LaunchPlan, command: Command, timeout: int | None) -> None:
    """Run the job's `command` under the watchdog and exit with its status: 124 when it reached
    its time bound or went silent for faults.stall_seconds (then doctor looks at its nodes)."""
    model = plan.site
    limit, source = exec_limit(model, timeout)
    note = unbounded_note(model, limit, source)
    if note:
        click.echo(note, err=True)
    click.echo(f"+ {command.display()}", err=True)
    allowlist = horovodrun_allowlist(model)
    if allowlist is not None:  # this process only runs the job from here: horovodrun gets the allowlist's
        kept = kept_environment(os.environ, allowlist)
        os.environ.clear()
        os.environ.update(kept)
    hosts = [host for host, _ in placed_hosts(plan)]
    program = plan.program or ()
    ended = run_job(
        model,
        command.argv,
        limit,
        lambda: find_stopped(model, hosts, program, os.environ),
        lambda stopped: find_stopped(model, hosts, program, os.environ, kill=stopped),
    )
    if ended.watched.stalled:
        after_stall(ctx, plan, ended.stopped, ended.killed)
    warning = quiet_warning(model, ended.watched)
    if warning:
        click.echo(warning, err=True)
    if ended.watched.status is None:
        click.echo(hang_error(model, limit, source), err=True)
        ctx.exit(124)
    ctx.exit(ended.watched.status)


def after_stall(ctx: click.Context, plan: LaunchPlan, stopped: Stopped, killed: Stopped) -> None:
    """The job went silent for faults.stall_seconds and was stopped: say so, name the ranks found
    stopped before the end (`stopped`) and those killed after it (`killed`), then what doctor finds on its
    nodes now (a link down on one of them is a FAIL naming it), and stop with exit 124."""
    for line in stall_lines(plan.site, stopped, killed):
        click.echo(line, err=True)
    results = fast_doctor(plan, placed_hosts(plan), "nodes")
    failed = [r for r in results if r.status == "FAIL"]
    print_results(failed, err=True)
    click.echo(stall_verdict(bool(failed), bool(stopped)), err=True)
    ctx.exit(124)


def gate_step(plan: LaunchPlan) -> GateStep:
    """The launch gate as a batch script step: the probe, and what the script says when it hangs."""
    model = plan.site
    where, timeout = model.where, model.gate.timeout
    return GateStep(
        tuple(gate_probe(model, plan.image, plan.program or (), plan.wiring != "horovod")),
        hang_line(where, timeout, started=True),
        hang_line(where, timeout, started=False),
        STARTED,
    )


def gate_first(ctx: click.Context, plan: LaunchPlan) -> None:
    """Run the launch gate through the job's own launch command (bounded by gate.timeout), print its
    verdict line; stop with exit 2 on FAIL and 124 when it hangs."""
    torch = plan.wiring != "horovod"
    outcome = run_gate(plan.site, lambda words: plan.command(words).argv, plan.image, plan.program or (), torch=torch)
    click.echo(outcome.line, err=True)
    if outcome.status:
        ctx.exit(outcome.status)


@dataclass(frozen=True)
class SbatchOptions(JobOptions):
    """What `hpcbundle sbatch` was asked (its click parameters)."""

    nodes: int
    tasks_per_node: int | None
    time_: str | None
    output: Path | None
    submit: bool


@main.command("sbatch", context_settings=PROGRAM_SETTINGS)
@site_option
@image_option
@click.option("--nodes", type=NODES, required=True, help="Nodes to allocate.")
@click.option(
    "--tasks-per-node",
    type=RANKS_PER_NODE,
    help="Ranks per node (default: the site's node.ranks_per_node, GPUs or cores).",
)
@click.option("--time", "time_", help="Time limit, e.g. 02:00:00 (default: the site's slurm.time).")
@output_option("Write the script here")
@click.option("--submit", is_flag=True, help="Submit it with sbatch and print the job id.")
@job_options
@typed_command(SbatchOptions)
def sbatch_command(ctx: click.Context, bundle, asked: SbatchOptions) -> None:
    """Write a SLURM batch script that runs PROGRAM on SITE (and submit it, with --submit).

    \b
    Examples:
      hpcbundle sbatch --site eth-a100-slurm --image horovod.sif --nodes 2 -o job.sh -- python train.py
      hpcbundle sbatch --nodes 1 --submit -- python3 train.py
    """
    model = site_for(bundle, asked.site)
    wiring = wiring_of(model, asked.wiring)
    job = BatchJob(asked.nodes, asked.tasks_per_node, asked.time_, workdir=workdir_from(asked.workdir), wiring=wiring)
    plan = replace(batch_plan(model, job, asked.program, asked.image), **site_choice(ctx))
    warned = warnings_of(plan.judge())
    gate = gate_step(plan) if asked.gate else None
    text = sbatch_script(plan, job, script_environment(bundle.get().scripts_dir), gate)
    if asked.output is not None:
        write_atomic(asked.output, text, executable=True)
        click.echo(f"wrote {asked.output} (site {model.name}, {asked.nodes} node(s))", err=True)
    elif not asked.submit:
        echo_text(text)
    if asked.submit:
        if not asked.no_doctor:  # on the login node: the node-side checks (interfaces, IB) wait for the job
            doctor_first(ctx, plan, "login", warned)
        click.echo(submit_script(text, asked.output))
