"""`hpcbundle sites | launch | sbatch`: a site's command for a program, printed, run or submitted."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import click

from ..config.sites import Site
from ..diagnose.gate import STARTED, hang_line
from ..diagnose.launchgate import gate_probe, run_gate
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
from ..launch import Command, RankLayout, build_command, launch_request, load_site
from ..launch.batch import BatchJob, GateStep, job_layout, sbatch_script, script_environment
from ..launch.elastic import BATCH_SCRIPT, discovery_path, discovery_script
from ..launch.workdir import WorkDir
from . import main, pass_bundle
from .options import (
    NODES,
    PROGRAM_SETTINGS,
    RANKS_PER_NODE,
    enter_workdir,
    gate_option,
    image_option,
    layout_from,
    no_doctor_option,
    program_argument,
    ranks,
    seconds,
    site_for,
    site_option,
    workdir_from,
    workdir_option,
)
from .outputs import OUTPUT_HELP, echo_text, print_results, write_atomic
from .preflight import declared_first, doctor_first, fast_doctor, planned_ranks
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


@main.command("launch", context_settings=PROGRAM_SETTINGS)
@site_option
@image_option
@click.option("--np", "np_", type=ranks(), required=True, help="Number of ranks.")
@click.option(
    "--hosts",
    help="Hosts and slots, e.g. f1:2,f2:2 or a SLURM host list n[01-04]:2 (slots for each; at most 4096 hosts; "
    "inside a SLURM allocation the launcher asks SLURM).",
)
@click.option(
    "--hostfile", type=click.Path(dir_okay=False, path_type=Path), help="A hostfile (`host slots=N` or `host:N` lines)."
)
@click.option("--explain", is_flag=True, help="Show where every token comes from and why.")
@click.option("--exec", "execute", is_flag=True, help="Run the command (bounded by --timeout) instead of printing it.")
@click.option("--timeout", type=seconds(), help="Seconds --exec may run (default: the site's launcher.timeout).")
@workdir_option
@no_doctor_option
@gate_option
@program_argument
@pass_bundle
@click.pass_context
def launch_command(
    ctx: click.Context,
    bundle,
    site: str,
    image: str | None,
    np_: int,
    hosts: str | None,
    hostfile: Path | None,
    explain: bool,
    execute: bool,
    timeout: int | None,
    workdir: str | None,
    no_doctor: bool,
    gate: bool,
    program: tuple[str, ...],
) -> None:
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
    model = site_for(bundle, site)
    layout = layout_from(np_, hosts, hostfile)
    hosts_path = str(hostfile.absolute()) if hostfile else None
    if model.faults.elastic is not None:
        layout = replace(layout, discovery_script=discovery_path(hosts_path) if hosts_path else BATCH_SCRIPT)
    # Run from this shell, the exported variables must be set here; a printed line may run elsewhere.
    start_in = workdir_from(workdir)
    command = build_command(model, layout, program, image, os.environ if execute else None, start_in)
    warned = declared_first(
        model,
        launch_request(layout, program, image, workdir=start_in),
        planned_ranks(model, layout),
        f"--hosts {layout.host_list()}" if layout.hosts else f"--np {np_}",
    )
    if layout.discovery_script is not None:  # written once every check has passed
        write_discovery(bundle, model, hosts_path, Path(start_in.path) / layout.discovery_script)
    if not execute:
        if gate:
            gate_first(ctx, model, layout, image, program, start_in)
        click.echo(command.display())
        for line in command.explain() if explain else ():
            click.echo(line)
        return
    for line in command.explain() if explain else ():
        click.echo(line, err=True)
    if not no_doctor:
        doctor_first(ctx, model, image, layout.placement(socket.gethostname()), "nodes", program, warned)
    if gate:
        gate_first(ctx, model, layout, image, program, start_in)
    enter_workdir(start_in)
    execute_job(ctx, model, image, layout, command, program, timeout)


def write_discovery(bundle, model: Site, hostfile: str | None, path: Path) -> None:
    """Write the elastic job's host discovery script at `path` (relative paths: in the working directory,
    where horovodrun starts)."""
    text = discovery_script(model, script_environment(bundle.get().scripts_dir), hostfile, model.node.slots)
    write_atomic(path, text, mode=0o755, option="faults.elastic.discovery", derived=True)
    click.echo(f"wrote {path} (the elastic job's host discovery, read every second)", err=True)


def execute_job(
    ctx: click.Context,
    model: Site,
    image: str | None,
    layout: RankLayout,
    command: Command,
    program: tuple[str, ...],
    timeout: int | None,
) -> None:
    """Run the job's `command` under the watchdog and exit with its status: 124 when it reached
    its time bound or went silent for faults.stall_seconds (then doctor looks at its nodes)."""
    limit, source = exec_limit(model, timeout)
    note = unbounded_note(model, limit, source)
    if note:
        click.echo(note, err=True)
    click.echo(f"+ {command.display()}", err=True)
    hosts = [host for host, _ in layout.placement(socket.gethostname())]
    ended = run_job(model, command.argv, limit, lambda: find_stopped(model, hosts, program, os.environ))
    if ended.watched.stalled:
        after_stall(ctx, model, image, layout, ended.stopped)
    warning = quiet_warning(model, ended.watched)
    if warning:
        click.echo(warning, err=True)
    if ended.watched.status is None:
        click.echo(hang_error(model, limit, source), err=True)
        ctx.exit(124)
    ctx.exit(ended.watched.status)


def after_stall(ctx: click.Context, model: Site, image: str | None, layout: RankLayout, stopped: Stopped) -> None:
    """The job went silent for faults.stall_seconds and was stopped: say so, name the ranks found
    stopped before the end (`stopped`), then what doctor finds on its nodes now (a link down on one of
    them is a FAIL naming it), and stop with exit 124."""
    for line in stall_lines(model, stopped):
        click.echo(line, err=True)
    results = fast_doctor(model, image, layout.placement(socket.gethostname()), "nodes")
    failed = [r for r in results if r.status == "FAIL"]
    print_results(failed, err=True)
    click.echo(stall_verdict(bool(failed), bool(stopped)), err=True)
    ctx.exit(124)


def gate_step(model: Site, image: str | None, program: tuple[str, ...]) -> GateStep:
    """The launch gate as a batch script step: the probe, and what the script says when it hangs."""
    where, timeout = model.where, model.gate.timeout
    return GateStep(
        tuple(gate_probe(model, image, program)),
        hang_line(where, timeout, started=True),
        hang_line(where, timeout, started=False),
        STARTED,
    )


def gate_first(
    ctx: click.Context, model: Site, layout: RankLayout, image: str | None, program: tuple[str, ...], workdir: WorkDir
) -> None:
    """Run the launch gate through the job's own launch command (bounded by gate.timeout), print its
    verdict line; stop with exit 2 on FAIL and 124 when it hangs."""
    outcome = run_gate(
        model, lambda words: build_command(model, layout, words, image, workdir=workdir).argv, image, program
    )
    click.echo(outcome.line, err=True)
    if outcome.status:
        ctx.exit(outcome.status)


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
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Write the script here (atomically; {OUTPUT_HELP}) instead of standard output.",
)
@click.option("--submit", is_flag=True, help="Submit it with sbatch and print the job id.")
@workdir_option
@no_doctor_option
@gate_option
@program_argument
@pass_bundle
@click.pass_context
def sbatch_command(
    ctx: click.Context,
    bundle,
    site: str,
    image: str | None,
    nodes: int,
    tasks_per_node: int | None,
    time_: str | None,
    output: Path | None,
    submit: bool,
    workdir: str | None,
    no_doctor: bool,
    gate: bool,
    program: tuple[str, ...],
) -> None:
    """Write a SLURM batch script that runs PROGRAM on SITE (and submit it, with --submit).

    \b
    Examples:
      hpcbundle sbatch --site eth-a100-slurm --image horovod.sif --nodes 2 -o job.sh -- python train.py
      hpcbundle sbatch --nodes 1 --submit -- python3 train.py
    """
    model = site_for(bundle, site)
    start_in = workdir_from(workdir)
    warned = declared_first(
        model,
        launch_request(
            job_layout(model, BatchJob(nodes, tasks_per_node)), program, image, time=time_, workdir=start_in
        ),
        {"each node": tasks_per_node} if tasks_per_node else None,
        f"--tasks-per-node {tasks_per_node}",
    )
    text = sbatch_script(
        model,
        BatchJob(nodes, tasks_per_node, time_, workdir=start_in),
        program,
        image,
        script_environment(bundle.get().scripts_dir),
        gate_step(model, image, program) if gate else None,
    )
    if output is not None:
        write_atomic(output, text, mode=0o755)
        click.echo(f"wrote {output} (site {model.name}, {nodes} node(s))", err=True)
    elif not submit:
        echo_text(text)
    if submit:
        if not no_doctor:  # on the login node: the node-side checks (interfaces, IB) wait for the job
            doctor_first(ctx, model, image, (), "login", shown=warned)
        click.echo(submit_script(text, output))
