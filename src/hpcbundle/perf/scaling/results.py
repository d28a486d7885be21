"""The results of a scaling study: the benchmark's figure in each job's output, rounds merged into
their median, speedup and efficiency against each mode's smallest measured point."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from .plan import Point

METRIC = "img_per_sec"


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
        base = baseline(rows, row.point.mode)
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


def baseline(rows: Sequence[Row], mode: str) -> Row | None:
    """The mode's measured row with the fewest ranks: what speedup and efficiency are relative to."""
    measured = [r for r in rows if r.point.mode == mode and r.measured is not None]
    return min(measured, key=lambda r: r.point.ranks) if measured else None
