"""The report of a scaling study: its CSV (measured and modelled figures per point) and its table."""

from __future__ import annotations

import csv
import io
from typing import Mapping, Sequence

from .model import Fit, model_efficiency
from .results import Row, baseline

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


def csv_text(rows: Sequence[Row], fitted: Mapping[str, Fit]) -> str:
    """The CSV of a study: one line per point (missing figures are empty), measured and modelled.

    >>> from hpcbundle.perf.scaling.plan import Point
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
    fit, base = fitted.get(row.point.mode), baseline(rows, row.point.mode)
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
            f" ({' and '.join(unsure)} not identifiable from these worker counts: 3 or more, not all close"
            " together (1, 2, 4 rather than 42, 43, 44), tell G, a and b apart)"
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
