"""`hpcbundle sites | launch | sbatch`: a site's command for a program, printed, run or submitted."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import click

from ..config.errors import UserError
from ..config.loading import read_text
from ..config.sites import Site
from ..diagnose.program import ProgramProbe, probe_words, program_modules
from ..launch import LAUNCHERS, Layout, build_command, hostfile_slots, load_site, parse_hosts
from ..launch.batch import BatchJob, GateStep, parse_job_id, sbatch_script, script_environment
from ..launch.execute import run_bounded, run_captured
from . import main, pass_bundle
from .options import Count, seconds
from .outputs import OUTPUT_HELP, echo_text, write_atomic

DEFAULT_SITE = "local"
PROGRAM_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}
site_option = click.option(
    "--site", default=DEFAULT_SITE, show_default=True, help="A name in site_configs/ or a path to a site YAML file."
)
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


def program_probe(
    site: Site, hosts: tuple[tuple[str, int], ...], program: tuple[str, ...], image: str | None
) -> ProgramProbe | None:
    """The job's own launch line, one rank on each remote host, running the program-environment
    probe instead of `program` (None when no rank leaves this node or the launcher places ranks itself).

    The program's imports are read here, at the edge: `python3 train.py` probes horovod and the
    frameworks train.py imports.
    """
    remote = [h for h, _ in hosts if h not in ("localhost", socket.gethostname())]
    launcher = LAUNCHERS.get(site.launcher.name)
    if not program or not remote or launcher is None or not launcher.takes_hosts:
        return None
    modules = ["horovod"]
    script = Path(program[1]) if len(program) > 1 else None
    if script and script.suffix == ".py" and script.is_file():
        modules = program_modules(script.read_text(encoding="utf-8", errors="replace"))
    words = probe_words(program[0], modules)
    names = [h for h, _ in hosts]
    layout = Layout(np=len(names), hosts=tuple((h, 1) for h in names))
    return ProgramProbe(build_command(site, layout, words, image).argv, words, names, in_image=bool(image))


def doctor_first(
    ctx: click.Context, model: Site, image: str | None, hosts: tuple, scope: str, program: tuple[str, ...] = ()
) -> None:
    """Run the fast doctor checks (no image hashing); print what is not PASS; stop with exit 2 on a FAIL."""
    from ..diagnose.doctor import doctor
    from ..rules.engine import exit_status
    from .doctor import print_results

    probe = program_probe(model, hosts, program, image)
    results = doctor(model, image, hosts, checksum=False, scope=scope, timeout=20, probe=probe)
    shown = [r for r in results if r.status in ("WARN", "FAIL")]
    print_results(shown, err=True)
    if exit_status(results) == 2:
        click.echo(
            f"hpcbundle: error: doctor found a problem (FAIL above), nothing was started; "
            f"fix {model.where}, or run with --no-doctor to launch anyway",
            err=True,
        )
        ctx.exit(2)


def site_for(bundle, ref: str) -> Site:
    """The site named `ref`, with every problem in it refused (exit 2)."""
    return load_site(ref, bundle.get().sites_dir)


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
@click.option("--np", "np_", type=Count(1), required=True, help="Number of ranks.")
@click.option("--hosts", help="Hosts and slots, e.g. f1:2,f2:2 (inside a SLURM allocation the launcher asks SLURM).")
@click.option(
    "--hostfile", type=click.Path(dir_okay=False, path_type=Path), help="A hostfile (`host slots=N` or `host:N` lines)."
)
@click.option("--explain", is_flag=True, help="Show where every token comes from and why.")
@click.option("--exec", "execute", is_flag=True, help="Run the command (bounded by --timeout) instead of printing it.")
@click.option("--timeout", type=seconds(), help="Seconds --exec may run (default: the site's launcher.timeout).")
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
    """
    model = site_for(bundle, site)
    layout = layout_from(np_, hosts, hostfile)
    # Run from this shell, the exported variables must be set here; a printed line may run elsewhere.
    command = build_command(model, layout, program, image, os.environ if execute else None)
    if gate and not execute:
        gate_first(ctx, model, layout, image, program)
    if not execute:
        click.echo(command.display())
        for line in command.explain() if explain else ():
            click.echo(line)
        return
    for line in command.explain() if explain else ():
        click.echo(line, err=True)
    if not no_doctor:
        doctor_first(ctx, model, image, layout.placement(socket.gethostname()), "nodes", program)
    if gate:
        gate_first(ctx, model, layout, image, program)
    limit, source = (
        (timeout, "--timeout") if timeout else (model.launcher.timeout, f"launcher.timeout of site {model.name}")
    )
    click.echo(f"+ {command.display()}", err=True)
    status = run_bounded(command.argv, limit)
    if status is None:
        click.echo(
            f"hpcbundle: error: killed after {limit} s ({source}): the job neither finished nor failed. "
            f"MPI hangs like this when ranks cannot reach each other, most often over a wrong network interface: "
            f"check network.interfaces, "
            f"mca btl_tcp_if_include/oob_tcp_if_include and NCCL_SOCKET_IFNAME in {model.where} against `ip -br addr` "
            f"on the nodes (or raise the limit for a long job)",
            err=True,
        )
        ctx.exit(124)
    ctx.exit(status)


def gate_python(program: tuple[str, ...], image: str | None) -> str:
    """The Python the gate probe runs with: the job's own when its program is a Python, else the image's
    python3, else (no image) the one running hpcbundle."""
    if Path(program[0]).name.startswith("python"):
        return program[0]
    return "python3" if image else sys.executable


def gate_step(model: Site, image: str | None, program: tuple[str, ...]) -> GateStep:
    """The launch gate as a batch script step: the probe, and what the script says when it hangs."""
    from ..diagnose import gateprobe
    from ..diagnose.gate import hang_line

    return GateStep(
        tuple(gateprobe.program(model, gate_python(program, image))), hang_line(model.where, model.gate.timeout)
    )


def gate_first(ctx: click.Context, model: Site, layout: Layout, image: str | None, program: tuple[str, ...]) -> None:
    """Run the launch gate through the job's own launch command (bounded by gate.timeout), print its
    verdict line; stop with exit 2 on FAIL and 124 when it hangs."""
    from ..diagnose import gateprobe

    step = gate_step(model, image, program)
    ran = run_captured(build_command(model, layout, step.program, image).argv, model.gate.timeout, grace=2.0)
    report = gateprobe.report_of(ran.stdout)
    if ran.status is None:
        click.echo(step.hang_line, err=True)
        ctx.exit(124)
    if report is None:
        click.echo(gateprobe.failure_of(ran.stderr or ran.stdout, ran.status), err=True)
        ctx.exit(2)
    click.echo(report["line"], err=True)
    if report[gateprobe.REPORT_KEY] != "PASS":
        ctx.exit(2)


def layout_from(np_: int, hosts: str | None, hostfile: Path | None) -> Layout:
    """The ranks asked for, read at the edge: the hostfile's slots and whether SLURM allocated us."""
    if hosts is not None and hostfile:
        raise UserError.at("", "--hosts", "and --hostfile both given", "give one of them")
    slots = hostfile_slots(read_text(hostfile, "--hostfile"), str(hostfile)) if hostfile is not None else None
    return Layout(
        np=np_,
        hosts=parse_hosts(hosts) if hosts is not None else (),
        hostfile=str(hostfile) if hostfile else None,
        hostfile_slots=slots,
        in_allocation="SLURM_JOB_ID" in os.environ,
    )


@main.command("sbatch", context_settings=PROGRAM_SETTINGS)
@site_option
@image_option
@click.option("--nodes", type=Count(1), required=True, help="Nodes to allocate.")
@click.option(
    "--tasks-per-node", type=Count(1), help="Ranks per node (default: the site's node.ranks_per_node, GPUs or cores)."
)
@click.option("--time", "time_", help="Time limit, e.g. 02:00:00 (default: the site's slurm.time).")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Write the script here (atomically; {OUTPUT_HELP}) instead of standard output.",
)
@click.option("--submit", is_flag=True, help="Submit it with sbatch and print the job id.")
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
    text = sbatch_script(
        model,
        BatchJob(nodes, tasks_per_node, time_),
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
            doctor_first(ctx, model, image, (), "login")
        click.echo(submit_script(text, output))


def submit_script(text: str, path: Path | None) -> str:
    """Run sbatch on the written file (or the text on stdin); return the job id."""
    argv = ["sbatch", "--parsable", *([str(path)] if path else [])]
    try:
        result = subprocess.run(
            argv, input=None if path else text, capture_output=True, text=True, timeout=120, check=False
        )  # noqa: S603
    except FileNotFoundError:
        raise UserError.at(
            "",
            "sbatch",
            "not found on PATH",
            "run --submit on a SLURM login node, or drop it and copy the script there",
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError.at(
            "", "sbatch", "did not answer within 120 s", "check that slurmctld is reachable (sinfo)"
        ) from None
    if result.returncode:
        raise UserError.at(
            "",
            "sbatch",
            "refused the job: "
            f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}",
            "fix the site's slurm settings or the flags",
        )
    return parse_job_id(result.stdout)
