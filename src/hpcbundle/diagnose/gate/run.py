"""The launch gate before a job: its probe (gate/probe.py) sent through the job's own launch command (built
by the caller: diagnose reads no launch module),
bounded by gate.timeout, and the verdict it gives: the line to show and the exit status a launch
stops with (0: PASS, go on; 2: FAIL; 124: no answer).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...config.sites import Site
from ...execute import Captured, run_captured
from . import probe
from .verdict import STARTED, hang_line


def gate_python(program: Sequence[str], image: str | None, own: str = sys.executable) -> str:
    """The Python the gate probe runs with: the job's own when its program is a Python, else the image's
    python3, else (no image) the one running hpcbundle (`own`).

    >>> gate_python(["python3.11", "t.py"], "x.sif"), gate_python(["./t"], "x.sif"), gate_python(["./t"], None, "/v/py")
    ('python3.11', 'python3', '/v/py')
    """
    if Path(program[0]).name.startswith("python"):
        return program[0]
    return "python3" if image else own


def gate_probe(site: Site, image: str | None, program: Sequence[str], torch: bool = False) -> list[str]:
    """The gate probe's argv for a job running `program` on `site` (`python -c CODE EXPECT`); `torch`: a
    torch.distributed job's (its ranks meet by env://)."""
    return probe.program(site, gate_python(program, image), torch)


@dataclass(frozen=True)
class GateOutcome:
    """What the gate said (`line`, for stderr) and how a launch goes on: status 0 (PASS), 2 (FAIL: the
    verdict, or the probe failed) or 124 (no answer within gate.timeout)."""

    status: int
    line: str


def run_gate(
    site: Site,
    launch: Callable[[Sequence[str]], Sequence[str]],
    image: str | None,
    program: Sequence[str],
    run: Callable[..., Captured] = run_captured,
    torch: bool = False,
) -> GateOutcome:
    """Run the gate probe as the job's ranks (`launch` wraps it in the job's own launch command, image
    and layout), bounded by gate.timeout, and read its verdict back."""
    ran = run(launch(gate_probe(site, image, program, torch)), site.gate.timeout, grace=2.0)
    report = probe.report_of(ran.stdout)
    if ran.status is None:
        return GateOutcome(124, hang_line(site.where, site.gate.timeout, STARTED in ran.stdout))
    if report is None:
        return GateOutcome(2, probe.failure_of(ran.stderr or ran.stdout, ran.status))
    return GateOutcome(0 if report[probe.REPORT_KEY] == "PASS" else 2, report["line"])
