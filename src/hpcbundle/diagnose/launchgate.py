"""The launch gate before a job: its probe (gateprobe) sent through the job's own launch command,
bounded by gate.timeout, and the verdict it gives: the line to show and the exit status a launch
stops with (0: PASS, go on; 2: FAIL; 124: no answer).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config.sites import Site
from ..execute import Captured, run_captured
from ..launch import RankLayout, build_command
from ..launch.batch import GateStep
from . import gateprobe
from .gate import hang_line


def gate_python(program: Sequence[str], image: str | None, own: str = sys.executable) -> str:
    """The Python the gate probe runs with: the job's own when its program is a Python, else the image's
    python3, else (no image) the one running hpcbundle (`own`).

    >>> gate_python(["python3.11", "t.py"], "x.sif"), gate_python(["./t"], "x.sif"), gate_python(["./t"], None, "/v/py")
    ('python3.11', 'python3', '/v/py')
    """
    if Path(program[0]).name.startswith("python"):
        return program[0]
    return "python3" if image else own


def gate_step(site: Site, image: str | None, program: Sequence[str]) -> GateStep:
    """The launch gate as a step of the job: the probe's argv, and what to say when it hangs."""
    return GateStep(
        tuple(gateprobe.program(site, gate_python(program, image))), hang_line(site.where, site.gate.timeout)
    )


@dataclass(frozen=True)
class GateOutcome:
    """What the gate said (`line`, for stderr) and how a launch goes on: status 0 (PASS), 2 (FAIL: the
    verdict, or the probe failed) or 124 (no answer within gate.timeout)."""

    status: int
    line: str


def run_gate(
    site: Site,
    layout: RankLayout,
    image: str | None,
    program: Sequence[str],
    run: Callable[..., Captured] = run_captured,
) -> GateOutcome:
    """Run the gate probe as the job's ranks (the same launch command, image and layout), bounded by
    gate.timeout, and read its verdict back."""
    step = gate_step(site, image, program)
    ran = run(build_command(site, layout, step.program, image).argv, site.gate.timeout, grace=2.0)
    report = gateprobe.report_of(ran.stdout)
    if ran.status is None:
        return GateOutcome(124, step.hang_line)
    if report is None:
        return GateOutcome(2, gateprobe.failure_of(ran.stderr or ran.stdout, ran.status))
    return GateOutcome(0 if report[gateprobe.REPORT_KEY] == "PASS" else 2, report["line"])
