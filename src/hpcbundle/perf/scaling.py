"""Strong- and weak-scaling studies of the synthetic benchmark: the plan, the results, the model fit.

Pure functions only (no I/O, no environment, no clock): `hpcbundle scaling plan` turns a
`Study` into one sbatch script per point, `hpcbundle scaling report` feeds the job outputs to
`results`, `fit_model` and `csv_text`. Vocabulary:

* W, workers: ranks of a point (nodes x tasks per node).
* strong scaling: a fixed global batch split over the W ranks (each rank gets B/W images);
  weak scaling: a fixed batch per rank (the global batch grows as b*W).
* T, time per step: global batch / total images per second.
* speedup and efficiency relative to the smallest point W0 (normally one node):
  speedup = throughput_W / throughput_W0, efficiency = speedup / (W/W0). That is T1/(W*TW) for
  strong scaling and T1/TW for weak scaling when W0 = 1.
* the model: T(W) = G/W + C(W) (strong) or T(W) = G + C(W) (weak), with the communication time
  C(W) = a*2(W-1)/W + b*(W-1): a ring allreduce's bandwidth term (each rank sends and receives
  2(W-1)/W of the gradients) and its latency term (2(W-1) messages, here folded into b), C(1) = 0.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
import statistics
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

import jinja2
import numpy as np

from ..config.errors import UserError, clip
from ..config.sites import Site
from ..launch.batch import BatchJob, sbatch_script

BENCHMARK = "pytorch_synthetic_benchmark.py"
IMAGE_EXAMPLES = "/examples"  # where images carry examples/ (containers/*: COPY examples /examples)
MODELS = ("cnn", "mlp", "resnet", "resnet-wide")  # examples/pytorch_synthetic_benchmark.py MODELS
MODES = ("strong", "weak")
METRIC = "img_per_sec"
CSV_COLUMNS = (
    "mode",
    "nodes",
    "ranks",
    "batch_per_rank",
    "global_batch",
    "img_per_sec",
    "img_per_sec_spread",
    "step_seconds",
    "speedup",
    "efficiency",
    "model_step_seconds",
    "model_efficiency",
    "status",
)


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
MAX_NODES = 100_000
"""The largest node count a study may name."""


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


def scripts(
    site: Site,
    study: Study,
    points: Sequence[Point],
    image: str | None,
    examples: str,
    outdir: str,
    env: jinja2.Environment,
) -> dict[str, str]:
    """Point name -> its sbatch script text; each job writes `outdir`/<name>.out (stdout and stderr).

    `examples` is used without an image; with one, the image's /examples. Unless `study.serial`
    is False, the jobs depend on each other as a singleton: no point shares nodes or network with
    another, which would spoil both measurements.
    """
    where = IMAGE_EXAMPLES if image else examples
    texts = {}
    for point in points:
        job = BatchJob(
            nodes=point.nodes,
            tasks_per_node=study.tasks_per_node,
            time=study.time,
            job_name=job_name(site),
            output=f"{outdir.rstrip('/')}/{point.name}.out",
            dependency="singleton" if study.serial else None,
        )
        texts[point.name] = sbatch_script(site, job, program(study, point, where), image, env)
    return texts


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


def points_of(document: Mapping, where: str = "plan.json") -> list[Point]:
    """The points a plan.json describes; a damaged file is a UserError naming the key."""
    try:
        rows = document["points"]
        points = [
            Point(
                str(r["mode"]),
                _bounded(r["nodes"], MAX_NODES),
                _bounded(r["ranks"], MAX_NODES * 1024),
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


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """What rank 0's JSON line said: total images/sec (mean over iterations) and its spread."""

    img_per_sec: float
    spread: float
    ranks: int


def parse_output(text: str) -> Measurement | None:
    """The benchmark's last JSON line in a job's output, or None when there is none.

    >>> parse_output('noise\\n{"metric": "img_per_sec", "total": 812.5, "total_spread": 10.0, "ranks": 2}\\n')
    Measurement(img_per_sec=812.5, spread=10.0, ranks=2)
    """
    found = None
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("{") and METRIC in line):
            continue
        try:
            data = json.loads(line)
            if data.get("metric") == METRIC:
                measured = Measurement(float(data["total"]), float(data.get("total_spread", 0.0)), int(data["ranks"]))
                if 0 < measured.img_per_sec < math.inf and measured.ranks >= 1 and math.isfinite(measured.spread):
                    found = measured
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
            continue
    return found


def failure_reason(text: str | None) -> str:
    """Why a point has no figure: no output yet, or the output's last words.

    >>> failure_reason(None)
    'no output (not run yet, still queued, or the job never started)'
    >>> failure_reason("Traceback ...\\nRuntimeError: boom\\n")
    'failed: RuntimeError: boom'
    """
    if text is None:
        return "no output (not run yet, still queued, or the job never started)"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (
        f"failed: {lines[-1][:200]}" if lines else "no benchmark line (the output is empty: still running, or killed)"
    )


@dataclass(frozen=True)
class Row:
    """One point with its figures; `status` is 'ok' or why there are none."""

    point: Point
    measured: Measurement | None
    status: str
    speedup: float | None = None
    efficiency: float | None = None

    @property
    def step_seconds(self) -> float | None:
        """T: the global batch over the total throughput."""
        return (
            self.point.global_batch / self.measured.img_per_sec
            if self.measured and self.measured.img_per_sec > 0
            else None
        )


def results(points: Sequence[Point], outputs: Mapping[str, str | None]) -> list[Row]:
    """Rows for every point, from the job outputs (point name -> text, None when missing); the
    rounds of a repeated study become one row per point with the median throughput.

    Speedup and efficiency are relative to the mode's smallest measured point:

    >>> rows = results([Point("strong", 1, 1, 64), Point("strong", 2, 2, 32)], {
    ...     "strong-n01": '{"metric": "img_per_sec", "total": 800, "ranks": 1}',
    ...     "strong-n02": '{"metric": "img_per_sec", "total": 1440, "ranks": 2}'})
    >>> [(r.status, r.speedup, r.efficiency) for r in rows]
    [('ok', 1.0, 1.0), ('ok', 1.8, 0.9)]
    """
    rows: list[Row] = []
    for point in points:
        text = outputs.get(point.name)
        measured = parse_output(text) if text is not None else None
        if measured is None:
            rows.append(Row(point, None, failure_reason(text)))
        elif measured.ranks != point.ranks:
            rows.append(Row(point, None, f"failed: ran {measured.ranks} rank(s), the plan asked for {point.ranks}"))
        elif measured.img_per_sec <= 0:
            rows.append(Row(point, None, "failed: the benchmark reported no throughput"))
        else:
            rows.append(Row(point, measured, "ok"))
    rows = _merge_rounds(rows)
    scored = []
    for row in rows:
        base = _baseline(rows, row.point.mode)
        if row.measured is None or base is None:
            scored.append(row)
            continue
        speedup = row.measured.img_per_sec / base.measured.img_per_sec
        scored.append(Row(row.point, row.measured, row.status, speedup, speedup / (row.point.ranks / base.point.ranks)))
    return scored


def _merge_rounds(rows: Sequence[Row]) -> list[Row]:
    """One row per (mode, nodes): the median throughput of the rounds that worked, their range as
    the spread, and a status saying how many worked; rows of an unrepeated study pass through.

    >>> ok = lambda r, v: Row(Point("weak", 1, 1, 32, r), Measurement(v, 1.0, 1), "ok")
    >>> [(r.point.name, r.measured.img_per_sec, r.measured.spread, r.status) for r in _merge_rounds(
    ...     [ok(1, 100.0), ok(2, 130.0), Row(Point("weak", 1, 1, 32, 3), None, "failed: boom"), ok(4, 120.0)])]
    [('weak-n01', 120.0, 15.0, 'ok (3 of 4 rounds)')]
    """
    if all(r.point.round is None for r in rows):
        return list(rows)
    merged = []
    for key in dict.fromkeys((r.point.mode, r.point.nodes) for r in rows):
        rounds = [r for r in rows if (r.point.mode, r.point.nodes) == key]
        point = replace(rounds[0].point, round=None)
        good = [r.measured for r in rounds if r.measured is not None]
        if not good:
            merged.append(Row(point, None, f"{rounds[-1].status} (all {len(rounds)} rounds)"))
            continue
        values = sorted(m.img_per_sec for m in good)
        status = "ok" if len(good) == len(rounds) else f"ok ({len(good)} of {len(rounds)} rounds)"
        merged.append(
            Row(point, Measurement(statistics.median(values), (values[-1] - values[0]) / 2, good[0].ranks), status)
        )
    return merged


def _baseline(rows: Sequence[Row], mode: str) -> Row | None:
    measured = [r for r in rows if r.point.mode == mode and r.measured is not None]
    return min(measured, key=lambda r: r.point.ranks) if measured else None


# --- the model -------------------------------------------------------------------------------

PARAMETERS = ("G", "a", "b")


@dataclass(frozen=True)
class Fit:
    """T(W) = G/W + a*2(W-1)/W + b*(W-1) (strong), or G + ... (weak); seconds per step.

    `identifiable` is False for a or b when the worker counts cannot tell them apart: with W in
    {1, 2} only, 2(W-1)/W and W-1 are both 1, so C(2) = a + b is all reported as a.
    """

    mode: str
    G: float
    a: float
    b: float
    residual: float
    identifiable: dict[str, bool] = field(default_factory=dict)

    def step_seconds(self, workers: float) -> float:
        """The model's time per step on `workers` ranks."""
        compute = self.G / workers if self.mode == "strong" else self.G
        return compute + communication(workers, self.a, self.b)


def communication(workers: float, a: float, b: float) -> float:
    """C(W) = a*2(W-1)/W + b*(W-1); zero on one worker.

    >>> communication(1, 0.5, 0.1), communication(4, 0.5, 0.1)
    (0.0, 1.05)
    """
    return a * 2 * (workers - 1) / workers + b * (workers - 1)


def _design(mode: str, workers: np.ndarray) -> np.ndarray:
    compute = 1.0 / workers if mode == "strong" else np.ones_like(workers)
    return np.column_stack([compute, 2 * (workers - 1) / workers, workers - 1])


def fit_model(mode: str, workers: Sequence[float], seconds: Sequence[float]) -> Fit | None:
    """Least squares of the step times with G, a, b >= 0 (an exact non-negative least squares:
    every subset of the three terms is solved, the best non-negative one wins, ties go to fewer
    terms). None without a point to fit.

    >>> f = fit_model("strong", [1, 2, 4], [0.08, 0.045, 0.0275])
    >>> round(f.G, 6), round(f.a, 6), round(f.b, 6)
    (0.08, 0.005, 0.0)
    """
    w = np.asarray(workers, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if w.size == 0:
        return None
    design = _design(mode, w)
    scale = max(float(np.abs(t).max()), 1e-300)
    candidates: list[tuple[float, tuple[int, ...], np.ndarray]] = []
    for size in range(1, 4):
        for subset in itertools.combinations(range(3), size):
            coef, *_ = np.linalg.lstsq(design[:, subset], t, rcond=None)
            if (coef < -1e-12 * scale).any():
                continue
            coef = np.clip(coef, 0.0, None)
            candidates.append((float(np.sum((design[:, subset] @ coef - t) ** 2)), subset, coef))
    # The G-only subset always has a non-negative solution for positive times, so there is one.
    floor = min(c[0] for c in candidates) + 1e-20 * scale**2 * len(t)  # within rounding of the best: prefer fewer terms
    residual, subset, coef = min((c for c in candidates if c[0] <= floor), key=lambda c: (len(c[1]), c[1]))
    values = dict.fromkeys(PARAMETERS, 0.0)
    for index, value in zip(subset, coef, strict=True):
        values[PARAMETERS[index]] = float(value)
    distinct = len(set(w.tolist()))
    separable = np.linalg.matrix_rank(_design(mode, np.array(sorted(set(w.tolist()))))) == 3
    identifiable = {"G": True, "a": distinct >= 2, "b": bool(separable)}
    return Fit(mode, values["G"], values["a"], values["b"], residual, identifiable)


def fits(rows: Iterable[Row]) -> dict[str, Fit]:
    """Mode -> the model fitted to that mode's measured points."""
    found = {}
    rows = list(rows)
    for mode in MODES:
        measured = [r for r in rows if r.point.mode == mode and r.step_seconds is not None]
        fitted = fit_model(mode, [r.point.ranks for r in measured], [r.step_seconds for r in measured])
        if fitted is not None:
            found[mode] = fitted
    return found


def model_efficiency(fit: Fit, ranks: int, base_ranks: int) -> float:
    """The efficiency the model predicts at `ranks`, against the model at `base_ranks`."""
    t_base, t = fit.step_seconds(base_ranks), fit.step_seconds(ranks)
    if fit.mode == "strong":
        return (base_ranks * t_base) / (ranks * t)
    return t_base / t


def csv_text(rows: Sequence[Row], fitted: Mapping[str, Fit]) -> str:
    """The CSV of a study: one line per point (missing figures are empty), measured and modelled.

    >>> print(csv_text([Row(Point("weak", 1, 1, 32), None, "no output")], {}), end="")
    mode,nodes,ranks,batch_per_rank,global_batch,img_per_sec,img_per_sec_spread,step_seconds,speedup,efficiency,model_step_seconds,model_efficiency,status
    weak,1,1,32,32,,,,,,,,no output
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        p, m = row.point, row.measured
        model_t, model_e = _modelled(row, rows, fitted)
        writer.writerow(
            [
                p.mode,
                p.nodes,
                p.ranks,
                p.batch_per_rank,
                p.global_batch,
                _num(m.img_per_sec if m else None),
                _num(m.spread if m else None),
                _num(row.step_seconds),
                _num(row.speedup),
                _num(row.efficiency),
                _num(model_t),
                _num(model_e),
                row.status,
            ]
        )
    return buffer.getvalue()


def _modelled(row: Row, rows: Sequence[Row], fitted: Mapping[str, Fit]) -> tuple[float | None, float | None]:
    """The model's step time and efficiency at `row`'s point (None without a fit or a baseline)."""
    fit, base = fitted.get(row.point.mode), _baseline(rows, row.point.mode)
    if fit is None:
        return None, None
    return fit.step_seconds(row.point.ranks), model_efficiency(fit, row.point.ranks, base.point.ranks) if base else None


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def table(rows: Sequence[Row], fitted: Mapping[str, Fit]) -> list[str]:
    """The report's lines: one per point, then the fitted model of each mode."""
    lines = [
        f"{'mode':<7}{'nodes':>6}{'ranks':>6}{'batch/rank':>11}{'img/s':>10}{'+-':>8}{'T (s)':>9}"
        f"{'speedup':>9}{'eff':>7}{'model eff':>10}  status"
    ]
    for row in rows:
        p, m = row.point, row.measured
        _, model_e = _modelled(row, rows, fitted)
        lines.append(
            f"{p.mode:<7}{p.nodes:>6}{p.ranks:>6}{p.batch_per_rank:>11}{_cell(m and m.img_per_sec, '.1f'):>10}"
            f"{_cell(m and m.spread, '.1f'):>8}{_cell(row.step_seconds, '.4f'):>9}{_cell(row.speedup, '.2f'):>9}"
            f"{_cell(row.efficiency, '.2f'):>7}{_cell(model_e, '.2f'):>10}  {row.status}"
        )
    for mode, fit in fitted.items():
        form = "G/W" if mode == "strong" else "G"
        unsure = [k for k, ok in fit.identifiable.items() if not ok]
        note = (
            f" ({' and '.join(unsure)} not identifiable from these worker counts: 3 or more tell G, a and b apart)"
            if unsure
            else ""
        )
        lines.append(
            f"model {mode}: T(W) = {form} + a*2(W-1)/W + b*(W-1) with G={fit.G:.5f} s, a={fit.a:.5f} s, "
            f"b={fit.b:.5f} s{note}"
        )
    return lines


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
