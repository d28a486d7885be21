"""`hpcbundle scaling plan | report`: a strong/weak-scaling study of the synthetic benchmark under SLURM."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click

from .. import __version__
from ..config.errors import UserError
from ..config.loading import parse_json, read_text
from ..config.sites import Site
from ..launch import LaunchPlan
from ..launch.batch import script_environment
from ..perf.scaling.model import fits
from ..perf.scaling.plan import (
    MODELS,
    PLAN,
    Study,
    StudyPlan,
    check_study_directory,
    parse_nodes,
    plan_study,
    points_of,
)
from ..perf.scaling.report import csv_text, table
from ..perf.scaling.results import results
from . import main
from .options import PROGRAM_SETTINGS, RANKS_PER_NODE, counted, no_doctor_option, site_for, site_option, typed_command
from .outputs import output_target, print_results, write_atomic
from .preflight import doctor_first
from .submit import submit_script

CSV = "scaling.csv"
PNG = "scaling.png"


@main.group("scaling", short_help="Strong/weak-scaling study of the synthetic benchmark under SLURM.")
def scaling_group() -> None:
    """Scaling studies over 1..N nodes, under SLURM.

    \b
    The program is examples/pytorch_synthetic_benchmark.py. Strong scaling keeps the global
    batch and splits it over the ranks; weak scaling keeps the batch per rank. `plan` writes
    one sbatch script per (mode, node count) and plan.json; `report` reads the outputs and
    writes scaling.csv and scaling.png (images/sec and efficiency against ideal, with the model
    T(W) = G/W + a*2(W-1)/W + b*(W-1) fitted: compute, ring-allreduce bandwidth and latency).
      hpcbundle scaling plan --site eth-a100-slurm --image horovod.sif --nodes 1-8 -o study --submit
      hpcbundle scaling report study
    """


@dataclass(frozen=True)
class StudyOptions:
    """What `hpcbundle scaling plan` was asked (its click parameters)."""

    site: str
    image: str | None
    nodes_text: str
    mode: str
    tasks_per_node: int | None
    global_batch: int
    batch_per_rank: int
    model: str
    image_size: int
    warmup: int
    batches_per_iter: int
    iters: int
    time_: str | None
    python: str
    repeat: int
    concurrent: bool
    outdir: str
    submit: bool
    no_doctor: bool
    extra: tuple[str, ...]


@scaling_group.command(
    "plan", short_help="Write (and --submit) one sbatch script per point.", context_settings=PROGRAM_SETTINGS
)
@site_option
@click.option(
    "--image", help="The image every rank runs; the benchmark is then its /examples copy. Omit it to run on the host."
)
@click.option(
    "--nodes", "nodes_text", required=True, help="Node counts, e.g. 1-4 or 1,2,4,8 (the smallest is the baseline)."
)
@click.option(
    "--mode",
    type=click.Choice(["strong", "weak", "both"]),
    default="both",
    show_default=True,
    help="strong: fixed --global-batch split over the ranks; weak: fixed --batch-per-rank.",
)
@click.option(
    "--tasks-per-node",
    type=RANKS_PER_NODE,
    help="Ranks per node (default: the site's node.ranks_per_node, GPUs or cores).",
)
@counted("--global-batch", 1, 64, "Images per step over all ranks (strong mode); a multiple of every rank count.")
@counted("--batch-per-rank", 1, 32, "Images per step on each rank (weak mode).")
@click.option(
    "--model", type=click.Choice(MODELS), default="resnet", show_default=True, help="The benchmark's --model."
)
@counted("--image-size", 4, 32, "Height and width of the synthetic images.")
@counted("--warmup", 0, 5, "Untimed batches before timing.")
@counted("--batches-per-iter", 1, 5, "Batches per timed iteration.")
@counted("--iters", 1, 5, "Timed iterations (their spread is the +-).")
@click.option("--time", "time_", help="Time limit of each job, e.g. 00:20:00 (default: the site's slurm.time).")
@click.option(
    "--python",
    default="python",
    show_default=True,
    help="The interpreter the ranks run (inside the image with --image).",
)
@counted("--repeat", 1, 1, "Run the whole study this many times, round after round; report takes each point's median.")
@click.option(
    "--concurrent",
    is_flag=True,
    help="Let points run at the same time (default: one at a time, --dependency=singleton).",
)
@click.option(
    "-o",
    "--output",
    "outdir",
    type=click.Path(file_okay=False),
    required=True,
    help="Directory for the scripts, plan.json and the jobs' outputs (on storage the nodes share).",
)
@click.option("--submit", is_flag=True, help="Submit every script with sbatch and print '<point> <job id>'.")
@no_doctor_option
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@typed_command(StudyOptions)
def plan_command(ctx: click.Context, bundle, asked: StudyOptions) -> None:
    """Write one sbatch script per point of a scaling study into OUTPUT (and submit them, with --submit).

    \b
    Each job writes OUTPUT/<mode>-n<NN>.out (-r<K>.out with --repeat), where `hpcbundle scaling
    report OUTPUT` reads it.
    Arguments after -- go to the benchmark as given. Examples:
      hpcbundle scaling plan --site eth-a100-slurm --image horovod.sif --nodes 1-4 -o study --submit
      hpcbundle scaling plan --site eth-a100-slurm --image horovod.sif --nodes 1,2 --repeat 3 -o study3 --submit
      hpcbundle scaling plan --nodes 1,2 --mode strong --global-batch 128 --model resnet-wide -o s2 -- --fp16-allreduce
    """
    model_site = site_for(bundle, asked.site)
    directory = _study_directory(asked.outdir)
    study = Study(
        nodes=parse_nodes(asked.nodes_text),
        modes=("strong", "weak") if asked.mode == "both" else (asked.mode,),
        tasks_per_node=asked.tasks_per_node or model_site.node.slots,
        global_batch=asked.global_batch,
        batch_per_rank=asked.batch_per_rank,
        model=asked.model,
        image_size=asked.image_size,
        warmup=asked.warmup,
        batches_per_iter=asked.batches_per_iter,
        iters=asked.iters,
        time=asked.time_,
        python=asked.python,
        extra=asked.extra,
        serial=not asked.concurrent,
        repeat=asked.repeat,
    )
    b = bundle.get()
    examples, environment = str(b.examples_dir.resolve()), script_environment(b.scripts_dir)
    planned = plan_study(model_site, study, asked.image, examples, str(directory), environment, __version__)
    _write_plan(planned, directory, asked.outdir)
    print_results(list(planned.warnings), err=True)
    if asked.submit:
        _submit(ctx, planned, directory, model_site, asked.image, asked.no_doctor)


def _study_directory(outdir: str) -> Path:
    """-o as an absolute path, refused where #SBATCH --output cannot carry it."""
    directory = Path(os.path.realpath(outdir))  # a symlink loop is left for the write to refuse
    check_study_directory(outdir, str(directory))
    return directory


def _submit(
    ctx: click.Context, planned: StudyPlan, directory: Path, site: Site, image: str | None, no_doctor: bool
) -> None:
    """Submit every script of the plan (after the login node's doctor checks, unless --no-doctor) and
    print '<point> <job id>' for each."""
    if not no_doctor:
        doctor_first(ctx, LaunchPlan(site, image=image), "login", planned.warnings)
    for name, text in planned.scripts.items():
        click.echo(f"{name} {submit_script(text, directory / f'{name}.sh')}")


def _write_plan(planned: StudyPlan, directory: Path, outdir: str) -> None:
    """Write the scripts (executable) and plan.json into `directory` (-o `outdir`) and say so, all or nothing:
    refused before the first write when a job's output is there from an earlier run or a target cannot be written."""
    stale = [directory / name for name in planned.outputs() if os.path.exists(directory / name)]  # no raise
    if stale:
        raise UserError.at(
            str(stale[0]),
            "",
            "exists from an earlier run, and `report` would read it",
            "use a new -o directory, or delete the .out files to measure again",
        )
    for name in planned.scripts:  # every target checked before the first is written: all or nothing
        output_target(directory / f"{name}.sh")
    output_target(directory / PLAN)
    for name, text in planned.scripts.items():
        write_atomic(directory / f"{name}.sh", text, executable=True)
    write_atomic(directory / PLAN, planned.document)
    click.echo(planned.summary(outdir), err=True)


@scaling_group.command("report", short_help="Read the outputs; write scaling.csv and scaling.png.")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def report_command(directory: Path) -> None:
    """Read the outputs of a study planned into DIRECTORY; write scaling.csv and scaling.png there.

    \b
    Prints one line per point (images/sec, time per step T, speedup, efficiency against the
    smallest point, the model's efficiency) and the fitted T(W) = G/W + a*2(W-1)/W + b*(W-1).
    Points without a figure are named with the reason, and the exit status is then 1.
      hpcbundle scaling report study
    """
    from ..perf.plot import render_png

    plan_path = directory / PLAN
    if not os.path.exists(plan_path):  # also a name too long or a symlink loop: no plan there
        raise UserError.at(
            str(plan_path), "", "not found", f"plan the study first: hpcbundle scaling plan ... -o {directory}"
        )
    document = parse_json(read_text(plan_path), str(plan_path))
    if not isinstance(document, dict):
        raise UserError.at(
            str(plan_path), "", "is not a plan (a JSON object)", "write the plan again with `hpcbundle scaling plan`"
        )
    points = points_of(document, str(plan_path))
    outputs = {p.name: _read(directory / f"{p.name}.out") for p in points}
    rows = results(points, outputs)
    fitted = fits(rows)
    for name in (CSV, PNG):  # both targets checked before either is written
        output_target(directory / name, "DIRECTORY")
    write_atomic(directory / CSV, csv_text(rows, fitted))
    study = document.get("study", {})
    title = (
        f"{document.get('site', '?')}: {study.get('model', '?')} synthetic benchmark, "
        f"global batch {study.get('global_batch')} (strong), {study.get('batch_per_rank')}/rank (weak), "
        f"{study.get('tasks_per_node')} rank(s)/node"
    )
    write_atomic(directory / PNG, render_png(rows, fitted, title))
    for line in table(rows, fitted):
        click.echo(line)
    click.echo(f"wrote {directory / CSV} and {directory / PNG}", err=True)
    missing = [r for r in rows if r.measured is None]
    for row in missing:
        where = f"{row.point.name}{'-r*' if any(p.round for p in points) else ''}.out"
        click.echo(f"hpcbundle: {row.point.name}: {row.status} (see {directory / where})", err=True)
    if missing:
        raise click.exceptions.Exit(1)


def _read(path: Path) -> str | None:
    """A job's output (bounded, undecodable bytes replaced), None when the job has written none yet."""
    return read_text(path, limit=OUTPUT_LIMIT, lenient=True) if path.exists() or path.is_symlink() else None


OUTPUT_LIMIT = 256 << 20
"""The largest job output `report` reads (the benchmark prints a few KiB; a log may be long)."""
