"""The plan of a scaling study: its points (mode x node count x round), each point's benchmark argv
and sbatch script, and plan.json, which tells `report` every point without the site file."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import jinja2

from ...config.errors import UserError, clip
from ...config.limits import MAX_NODES, MAX_RANKS
from ...config.sites import Site
from ...launch import LaunchPlan
from ...launch.batch import BatchJob, batch_plan, sbatch_script
from ...rules.engine import Result

BENCHMARK = "pytorch_synthetic_benchmark.py"
IMAGE_EXAMPLES = "/examples"  # where images carry examples/ (containers/*: COPY examples /examples)
MODELS = ("cnn", "mlp", "resnet", "resnet-wide")  # examples/pytorch_synthetic_benchmark.py MODELS
MODES = ("strong", "weak")
PLAN = "plan.json"
"""The file in a study's directory that tells `report` every point."""


@dataclass(frozen=True)
class Study:
    """What to measure: which node counts, which modes, which batches, which benchmark settings.

    `global_batch` is split over the ranks in strong mode; `batch_per_rank` is what each rank
    gets in weak mode. `extra` are more benchmark arguments, passed as given. `repeat` runs the
    whole study that many times, round after round, and reports each point's median: a shared
    machine or network has slow spells, and rounds spread them over every point.
    """

    nodes: tuple[int, ...]
    modes: tuple[str, ...] = MODES
    tasks_per_node: int = 1
    global_batch: int = 64
    batch_per_rank: int = 32
    model: str = "resnet"
    image_size: int = 32
    warmup: int = 5
    batches_per_iter: int = 5
    iters: int = 5
    time: str | None = None
    python: str = "python"
    extra: tuple[str, ...] = ()
    serial: bool = True
    repeat: int = 1


@dataclass(frozen=True)
class Point:
    """One job of a study: a mode at a node count, and the batch each rank gets."""

    mode: str
    nodes: int
    ranks: int
    batch_per_rank: int
    round: int | None = None  # which round of a repeated study; None: the study runs once

    @property
    def global_batch(self) -> int:
        return self.batch_per_rank * self.ranks

    @property
    def name(self) -> str:
        """File stem of the point's script and output, e.g. 'strong-n02' (or 'strong-n02-r2')."""
        return f"{self.mode}-n{self.nodes:02d}" + (f"-r{self.round}" if self.round is not None else "")


def parse_nodes(text: str) -> tuple[int, ...]:
    """Node counts from '1-4', '1,2,4,8' or '1-2,4'; sorted, without repeats.

    >>> parse_nodes("1-4")
    (1, 2, 3, 4)
    >>> parse_nodes("8,1-2,2")
    (1, 2, 8)
    """
    counts: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*([0-9]{1,6})\s*(?:-\s*([0-9]{1,6})\s*)?", part)
        if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise UserError.at(
                "", "--nodes", f"{clip(text)} is not a list of node counts", "e.g. 1-4, 1,2,4,8 or 1-2,4"
            )
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last - first >= MAX_POINTS or len(counts) >= MAX_POINTS or last > MAX_NODES:
            raise UserError.at(
                "", "--nodes", f"{clip(text)} names too many points", f"at most {MAX_POINTS} counts up to {MAX_NODES}"
            )
        counts.update(range(first, last + 1))
    if len(counts) > MAX_POINTS:
        raise UserError.at("", "--nodes", f"{clip(text)} names too many points", f"at most {MAX_POINTS} counts")
    return tuple(sorted(counts))


MAX_POINTS = 256
"""The most jobs one study may plan (node counts x modes x rounds)."""


def plan(study: Study) -> list[Point]:
    """The points of `study`, mode by mode, smallest node count first (round after round if repeated).

    Strong mode splits the global batch evenly, so it must be a multiple of every rank count:

    >>> study = Study(nodes=(1, 2, 4), global_batch=64, batch_per_rank=16)
    >>> [(p.name, p.ranks, p.batch_per_rank) for p in plan(study)]  # doctest: +NORMALIZE_WHITESPACE
    [('strong-n01', 1, 64), ('strong-n02', 2, 32), ('strong-n04', 4, 16),
     ('weak-n01', 1, 16), ('weak-n02', 2, 16), ('weak-n04', 4, 16)]
    >>> [p.name for p in plan(Study(nodes=(1, 2), modes=("strong",), repeat=2))]
    ['strong-n01-r1', 'strong-n02-r1', 'strong-n01-r2', 'strong-n02-r2']
    """
    if study.repeat < 1:
        raise UserError.at("", "--repeat", f"is {study.repeat}", "run every point at least once")
    once = _points(study)
    if len(once) * study.repeat > MAX_POINTS:
        raise UserError.at(
            "",
            "--nodes",
            f"{len(once) * study.repeat} jobs (node counts x modes x --repeat)",
            f"plan at most {MAX_POINTS} jobs",
        )
    if study.repeat == 1:
        return once
    return [replace(p, round=r) for r in range(1, study.repeat + 1) for p in once]


def _points(study: Study) -> list[Point]:
    if not study.nodes:
        raise UserError.at("", "--nodes", "names no node count", "e.g. 1-4")
    unknown = [m for m in study.modes if m not in MODES]
    if unknown or not study.modes:
        raise UserError.at("", "--mode", f"{','.join(unknown) or 'nothing'} is not a mode", "use strong, weak or both")
    points = []
    for mode in MODES:
        if mode not in study.modes:
            continue
        for nodes in sorted(set(study.nodes)):
            ranks = nodes * study.tasks_per_node
            if mode == "weak":
                points.append(Point(mode, nodes, ranks, study.batch_per_rank))
                continue
            if study.global_batch % ranks:
                fit = math.lcm(*(n * study.tasks_per_node for n in study.nodes))
                raise UserError.at(
                    "",
                    "--global-batch",
                    f"{study.global_batch} images cannot be split evenly over {ranks} ranks "
                    f"({nodes} node(s) x {study.tasks_per_node})",
                    f"use a multiple of {fit}, e.g. {fit * -(-study.global_batch // fit)}",
                )
            points.append(Point(mode, nodes, ranks, study.global_batch // ranks))
    return points


def program(study: Study, point: Point, examples: str) -> list[str]:
    """The benchmark's argv for one point; `examples` is the directory holding the example programs.

    >>> program(Study(nodes=(2,), iters=3), Point("strong", 2, 2, 32), "/examples")  # doctest: +NORMALIZE_WHITESPACE
    ['python', '/examples/pytorch_synthetic_benchmark.py', '--model', 'resnet', '--batch-size', '32',
     '--image-size', '32', '--num-warmup-batches', '5', '--num-batches-per-iter', '5', '--num-iters', '3']
    """
    return [
        study.python,
        f"{examples.rstrip('/')}/{BENCHMARK}",
        "--model",
        study.model,
        "--batch-size",
        str(point.batch_per_rank),
        "--image-size",
        str(study.image_size),
        "--num-warmup-batches",
        str(study.warmup),
        "--num-batches-per-iter",
        str(study.batches_per_iter),
        "--num-iters",
        str(study.iters),
        *study.extra,
    ]


def job_name(site: Site) -> str:
    """Every job of a study shares one name, so `--dependency=singleton` runs them one at a time."""
    return f"{site.slurm.job_name}-scaling"


def point_jobs(
    site: Site, study: Study, points: Sequence[Point], image: str | None, examples: str, outdir: str
) -> dict[str, tuple[BatchJob, LaunchPlan]]:
    """Point name -> its batch job and launch plan; each job writes `outdir`/<name>.out (stdout and stderr).

    `examples` is used without an image; with one, the image's /examples. Unless `study.serial`
    is False, the jobs depend on each other as a singleton: no point shares nodes or network with
    another, which would spoil both measurements.
    """
    where = IMAGE_EXAMPLES if image else examples
    jobs = {}
    for point in points:
        job = BatchJob(
            nodes=point.nodes,
            tasks_per_node=study.tasks_per_node,
            time=study.time,
            job_name=job_name(site),
            output=f"{outdir.rstrip('/')}/{point.name}.out",
            dependency="singleton" if study.serial else None,
        )
        jobs[point.name] = job, batch_plan(site, job, program(study, point, where), image)
    return jobs


def plan_document(site: Site, study: Study, points: Sequence[Point], image: str | None, version: str) -> dict:
    """What plan.json holds: enough for `report` to know every point without the site file."""
    return {
        "hpcbundle": version,
        "site": site.name,
        "image": image,
        "benchmark": BENCHMARK,
        "study": {
            "nodes": list(study.nodes),
            "modes": list(study.modes),
            "tasks_per_node": study.tasks_per_node,
            "global_batch": study.global_batch,
            "batch_per_rank": study.batch_per_rank,
            "model": study.model,
            "image_size": study.image_size,
            "warmup": study.warmup,
            "batches_per_iter": study.batches_per_iter,
            "iters": study.iters,
            "extra": list(study.extra),
            "serial": study.serial,
            "time": study.time,
            "python": study.python,
            "repeat": study.repeat,
        },
        "points": [
            {
                "name": p.name,
                "mode": p.mode,
                "nodes": p.nodes,
                "ranks": p.ranks,
                "batch_per_rank": p.batch_per_rank,
                "global_batch": p.global_batch,
                "round": p.round,
                "script": f"{p.name}.sh",
                "output": f"{p.name}.out",
            }
            for p in points
        ],
    }


def check_study_directory(given: str, resolved: str) -> None:
    """-o (`given`, `resolved` to an absolute path) must name a directory every job's `#SBATCH --output`
    can carry: not empty, no whitespace, no % (SLURM's filename patterns).

    >>> check_study_directory("study", "/home/me/study")
    >>> check_study_directory("my study", "/home/me/my study")
    Traceback (most recent call last):
    hpcbundle.config.errors.UserError: my study: -o: contains whitespace or %, which #SBATCH --output cannot...
    """  # doctest: +ELLIPSIS
    if not given:
        raise UserError.at("''", "-o", "names no directory", "give the study's directory, e.g. -o study")
    if any(c.isspace() or c == "%" for c in resolved):
        raise UserError.at(
            given,
            "-o",
            "contains whitespace or %, which #SBATCH --output cannot carry",
            "choose a plain directory path",
        )


@dataclass(frozen=True)
class StudyPlan:
    """A planned study as the files `scaling plan` writes into its directory: each point's sbatch script
    (`scripts`: point name -> text) and plan.json (`document`), and the outputs its jobs will write."""

    site: str
    study: Study
    points: tuple[Point, ...]
    scripts: Mapping[str, str]
    document: str
    warnings: tuple[Result, ...] = ()

    def summary(self, outdir: str) -> str:
        """The line `scaling plan` ends with: what it wrote where, for which site and study."""
        nodes = ", ".join(map(str, self.study.nodes))
        return (
            f"wrote {len(self.scripts)} script(s) and {PLAN} to {outdir} (site {self.site}, "
            f"{', '.join(self.study.modes)} scaling over {nodes} node(s))"
        )

    def outputs(self) -> list[str]:
        """The file each job writes (stdout and stderr), where `report` reads it."""
        return [f"{p.name}.out" for p in self.points]


def plan_study(
    site: Site, study: Study, image: str | None, examples: str, outdir: str, env: jinja2.Environment, version: str
) -> StudyPlan:
    """The plan of `study` on `site`: its points, their sbatch scripts (each job writing into `outdir`; the
    benchmark from `examples` without an image) and plan.json's text, stamped with hpcbundle's `version`.
    Each point's launch plan is judged once before any script is made (a FAIL is a UserError); the WARNs
    of all of them, each once, come back with the plan."""
    points = plan(study)
    jobs = point_jobs(site, study, points, image, examples, outdir)
    warnings = {r: None for job, launch in jobs.values() for r in launch.judge() if r.status == "WARN"}
    texts = {name: sbatch_script(launch, job, env) for name, (job, launch) in jobs.items()}
    document = json.dumps(plan_document(site, study, points, image, version), indent=2) + "\n"
    return StudyPlan(site.name, study, tuple(points), texts, document, tuple(warnings))


def points_of(document: Mapping, where: str = "plan.json") -> list[Point]:
    """The points a plan.json describes; a damaged file is a UserError naming the key."""
    try:
        rows = document["points"]
        points = [
            Point(
                str(r["mode"]),
                _bounded(r["nodes"], MAX_NODES),
                _bounded(r["ranks"], MAX_RANKS),
                _bounded(r["batch_per_rank"], 1 << 30),
                None if r.get("round") is None else _bounded(r["round"], MAX_POINTS),
            )
            for r in rows[: MAX_POINTS + 1]
        ]
        if len(points) > MAX_POINTS or any(p.mode not in MODES for p in points):
            raise ValueError(f"more than {MAX_POINTS} points, or a mode other than {' or '.join(MODES)}")
        return points
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError.at(
            where,
            "points",
            f"is not a plan's list of points ({type(exc).__name__}: {clip(str(exc), 80)})",
            "write the plan again with `hpcbundle scaling plan`",
        ) from None


def _bounded(value: object, most: int) -> int:
    """A positive JSON integer no larger than `most` (a plan's counts), else ValueError."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise ValueError(f"{clip(value)} is not a whole number from 1 to {most}")
    return value
