"""`hpcbundle tune`: measure a site's allreduce on its nodes, knob by knob, and write a tuned copy."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path

import click

from ..config.errors import UserError, clip
from ..config.loading import parse_yaml, read_yaml, validate
from ..config.sites import Site
from ..perf.tune.run import Benchmark, TuneJob, run_sweep
from ..perf.tune.sweep import (
    KNOB_NAMES,
    KNOBS,
    Knob,
    Settings,
    changed_text,
    current_settings,
    report_lines,
    tuned_site_text,
)
from . import main
from .options import counted, layout_from, no_doctor_option, plan_from, plan_options, seconds, site_for, typed_command
from .outputs import output_option, write_atomic
from .preflight import doctor_first, warnings_of

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_SIZE = 16 << 30
"""The largest --size (bytes every rank allocates twice)."""


def parse_size(text: str, option: str = "--size") -> int:
    """'64M' -> 67108864 (K/M/G are KiB/MiB/GiB); a plain number is bytes."""
    number, unit = (text[:-1], text[-1].upper()) if text[-1:].upper() in _UNITS else (text, "")
    if not re.fullmatch(r"[0-9]{1,12}", number) or not 0 < int(number) * _UNITS.get(unit, 1) <= MAX_SIZE:
        raise UserError.at("", option, f"{clip(text)} is not a size up to 16G", "e.g. 64M, 256K or 1G (KiB/MiB/GiB)")
    return int(number) * _UNITS.get(unit, 1)


def _knobs(names: str | None, site: Site, tensors: int) -> list[Knob]:
    """The knobs to sweep: those named, or all that apply to the site and workload (the plan's rule
    knob-site judges whether each applies)."""
    if names is None:
        return [k for k in KNOBS if k.applies(site) and tensors >= k.needs_tensors]
    chosen = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        knob = next((k for k in KNOBS if k.name == name), None)
        if knob is None:
            raise UserError.at("", "--knobs", f"no knob {name!r}", f"choose from {', '.join(KNOB_NAMES)}")
        if tensors < knob.needs_tensors:
            raise UserError.at(
                "",
                "--knobs",
                f"knob {name!r} needs --tensors {knob.needs_tensors} or more (one tensor is never fused)",
                "add e.g. --tensors 16, or drop it",
            )
        chosen.append(knob)
    if not chosen:
        raise UserError.at("", "--knobs", "names no knob", f"choose from {', '.join(KNOB_NAMES)}")
    return chosen


def _interpreter(python: str) -> str:
    """--python: a command word, never empty (every run would then fail to start)."""
    if not python.strip():
        raise UserError.at("", "--python", "is empty", "give the interpreter the ranks run, e.g. python3")
    return python


@dataclass(frozen=True)
class TuneOptions:
    """What `hpcbundle tune` was asked (its click parameters)."""

    site: str
    image: str | None
    np_: int
    hosts: str | None
    hostfile: Path | None
    size: str
    tensors: int
    small_size: str
    small_tensors: int
    knobs: str | None
    repeat: int
    python: str
    bench: str | None
    timeout: int
    output: Path | None
    plan: bool
    no_doctor: bool


@main.command("tune")
@plan_options("Number of ranks (at least 2: an allreduce needs peers).", least=2)
@click.option("--size", default="64M", show_default=True, help="Bytes allreduced per step (K/M/G = KiB/MiB/GiB).")
@counted(
    "--tensors",
    1,
    1,
    "Split --size into this many tensors submitted together, as gradients are (exercises fusion and cycle time).",
)
@click.option(
    "--small-size",
    default="256K",
    show_default=True,
    help="The other end for the fusion and cycle knobs: bytes allreduced per step in --small-tensors tensors.",
)
@counted(
    "--small-tensors", 1, 64, "Tensors of the small end (a model with many small gradients: 64 x 4 KiB by default)."
)
@click.option(
    "--knobs",
    help=(
        "Comma-separated knobs to sweep, in order (default: all that apply; fusion needs --tensors > 1): "
        f"{', '.join(KNOB_NAMES)}."
    ),
)
@counted("--repeat", 1, 3, "Runs per candidate, interleaved; the median counts.")
@click.option(
    "--python",
    "python",
    default="python3",
    show_default=True,
    callback=lambda ctx, param, value: _interpreter(value),
    help="The Python that runs the benchmark on the nodes (in the image: its own).",
)
@click.option(
    "--bench", "bench", help="allreduce_bench.py to run (default: the bundle's examples/, /examples in an image)."
)
@click.option(
    "--timeout",
    type=seconds(86400),
    default=180,
    show_default=True,
    help="Seconds one run may take before it is killed (and counts as failed).",
)
@output_option(
    "Where to write the tuned site, default site_configs/<site>-tuned.yaml",
    "; its name is the file's stem.",
    stdout=False,
)
@click.option("--plan", is_flag=True, help="Print the knobs, candidates and the first command, run nothing.")
@no_doctor_option
@typed_command(TuneOptions)
def tune_command(ctx: click.Context, bundle, asked: TuneOptions) -> None:
    """Sweep the knobs that decide allreduce speed on SITE's nodes; write the winners into a copy of SITE.

    Runs examples/allreduce_bench.py (Horovod, float32, --size split in --tensors) through the
    site's generated launch command for every candidate, one knob at a time, each candidate
    --repeat times interleaved, and keeps a value only if it beats the kept one in every pair of
    runs measured back to back, by more than 5 % in the median pair (noise wins single pairs on
    shared nodes). The fusion and cycle knobs are judged at both ends: --size (bandwidth) and
    --small-size in --small-tensors tensors (latency, many small gradients); a value is kept if it
    wins that way at one end and loses no more than 5 % at the other.
    The copy carries the figures as comments and a `why` line per changed key;
    the original is not touched. Knobs: Open MPI's allreduce algorithm,
    TCP links and buffers, mpi_yield_when_idle, HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME.
    MPI vs Gloo is a knob of horovodrun sites only (launcher.gloo): under mpirun or srun Horovod
    0.28 cannot switch to Gloo by environment (it needs horovodrun's rendezvous).

    \b
    Examples:
      hpcbundle tune --site eth-a100-slurm --image horovod.sif --np 2 --hosts n1:1,n2:1
      hpcbundle tune --site my-site.yaml --np 4 --hostfile hosts --knobs algorithm,tcp-links --repeat 5
      hpcbundle launch --site eth-a100-slurm-tuned --np 2 --hosts n1:1,n2:1 -- python train.py
    """
    b, image = bundle.get(), asked.image
    model = site_for(bundle, asked.site)
    layout = layout_from(asked.np_, asked.hosts, asked.hostfile)
    default = "/examples/allreduce_bench.py" if image else str(b.examples_dir / "allreduce_bench.py")
    small_size = parse_size(asked.small_size, "--small-size")
    sizes = (parse_size(asked.size), asked.tensors, small_size, asked.small_tensors)
    benchmark = Benchmark(asked.python, asked.bench or default, *sizes)
    chosen = tuple(_knobs(asked.knobs, model, asked.tensors))
    plan = plan_from(model, layout, tuple(benchmark.program()), image, knobs=tuple(k.name for k in chosen))
    warned = warnings_of(plan.judge())
    out = asked.output or b.sites_dir / f"{model.name}-tuned.yaml"
    data = read_yaml(Path(model.where))
    validate(Site, {**data, "name": out.stem}, str(out))  # a bad -o name fails now, not after the sweep
    job, start = TuneJob(data, model.where, layout, image, chosen, benchmark), current_settings(model, chosen)
    if asked.plan:
        click.echo("\n".join(job.plan_lines(start)))
        return
    if not asked.no_doctor:
        doctor_first(ctx, plan, "nodes", warned)
    where = asked.hosts or str(asked.hostfile or "the allocation")
    _sweep_and_write(job, start, asked.repeat, asked.timeout, where, out, asked.output or out.stem)


def _sweep_and_write(
    job: TuneJob, start: Settings, repeat: int, timeout: int, hosts: str, out: Path, use_as: Path | str
) -> None:
    """Run the sweep (its lines on stderr), print its table, write the tuned copy (validated first)
    to `out` and say how to use it (`--site use_as`)."""
    click.echo(job.announce(repeat), err=True)
    result = run_sweep(job, start, repeat, timeout, lambda line: click.echo(line, err=True))
    workload = job.workload(hosts, repeat)
    text = tuned_site_text(job.data, out.stem, job.where, result, workload, datetime.date.today().isoformat())
    validate(Site, parse_yaml(text, str(out)), str(out))
    for line in report_lines(result):
        click.echo(line)
    write_atomic(out, text)
    click.echo(f"wrote {out} (changed: {changed_text(result)}); use it with --site {use_as}")
