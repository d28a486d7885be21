"""Running `hpcbundle tune` on the nodes: each candidate's benchmark command from the site, run bounded,
its busbw read back, fed to the sweep.

`TuneJob` is pure (the site's data with a candidate's settings on top, validated, through the site's
own launch command); `run_sweep` is the edge that runs those commands; the CLI only prints.

    >>> job = TuneJob({}, "s.yaml", RankLayout(np=2), None, (), Benchmark("py", "b.py", 64 << 20, 1, 4096, 4))
    >>> job.benchmark.program(SMALL)
    ['py', 'b.py', '--backend', 'horovod', '--sizes', '4096', '--tensors', '4']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ...config.errors import UserError
from ...config.loading import validate
from ...config.sites import Site
from ...execute import Captured, run_captured
from ...launch import RankLayout, build_command
from ...quoting import shell_join
from .sweep import LARGE, SMALL, Knob, Settings, TuneResult, Workload, apply_settings, sweep


@dataclass(frozen=True)
class Benchmark:
    """allreduce_bench.py as tune runs it: `python script` on the nodes, `nbytes` in `tensors` float32
    tensors (the LARGE end), and `small_bytes` in `small_tensors` (the SMALL end, many small gradients).

    A small end that does not split into whole float32 tensors is refused (exit 2) when made.
    """

    python: str
    script: str
    nbytes: int
    tensors: int
    small_bytes: int
    small_tensors: int

    def __post_init__(self) -> None:
        if self.small_bytes % (self.small_tensors * 4):
            raise UserError.at(
                "",
                "--small-tensors",
                f"{self.small_bytes} bytes do not split into {self.small_tensors} float32 tensors",
                "give a --small-size that is a multiple of 4 x --small-tensors, e.g. 256K and 64",
            )

    def size(self, end: str = LARGE) -> int:
        """Bytes allreduced per step at `end`."""
        return self.nbytes if end == LARGE else self.small_bytes

    def program(self, end: str = LARGE) -> list[str]:
        """The benchmark's argv at `end`; one tensor needs no --tensors."""
        parts = self.tensors if end == LARGE else self.small_tensors
        return [self.python, self.script, "--backend", "horovod", "--sizes", str(self.size(end))] + (
            ["--tensors", str(parts)] if parts > 1 else []
        )


@dataclass(frozen=True)
class TuneJob:
    """One tune of a site: its data as loaded from YAML (each candidate's settings go on top), the ranks,
    the image, the knobs to sweep in order, and the benchmark."""

    data: Mapping[str, Any]
    where: str
    layout: RankLayout
    image: str | None
    knobs: tuple[Knob, ...]
    benchmark: Benchmark

    @property
    def both_ends(self) -> bool:
        """Whether a knob is also judged on the small end (so the small workload runs too)."""
        return any(knob.small_end for knob in self.knobs)

    def command(self, settings: Settings, end: str = LARGE) -> list[str]:
        """The site's launch command for the benchmark at `end`, with `settings` applied to the site."""
        variant = validate(Site, apply_settings(self.data, settings), self.where)
        return build_command(variant, self.layout, self.benchmark.program(end), self.image).argv

    def plan_lines(self, start: Settings) -> list[str]:
        """What `tune --plan` prints: each knob with its candidates, then the first command of each end."""
        lines = [
            f"{knob.name}: {knob.what}: "
            + " | ".join(c.label for c in knob.candidates)
            + (" (also judged on the small end)" if knob.small_end else "")
            for knob in self.knobs
        ]
        return lines + [shell_join(self.command(start, end)) for end in self.ends()]

    def ends(self) -> tuple[str, ...]:
        """The workloads that run: LARGE, and SMALL where a knob is judged on it."""
        return (LARGE, SMALL) if self.both_ends else (LARGE,)

    def announce(self, repeat: int) -> str:
        """The line before the sweep: how many knobs and runs, of what, on how many ranks."""
        runs = sum(len(k.candidates) * (2 if k.small_end else 1) for k in self.knobs) * repeat
        return (
            f"tune: {len(self.knobs)} knobs, {runs} runs of {self.benchmark.nbytes} bytes in "
            f"{self.benchmark.tensors} tensor(s) on {self.layout.np} ranks"
        )

    def workload(self, hosts: str, repeat: int) -> Workload:
        """What was measured, for the tuned copy's comments."""
        bench = self.benchmark
        small = bench.small_bytes if self.both_ends else None
        return Workload(bench.nbytes, bench.tensors, self.layout.np, hosts, repeat, small, bench.small_tensors)


def busbw_of(stdout: str, size: int) -> float | None:
    """busbw (GiB/s) of the `size` allreduce in allreduce_bench.py's JSON lines; None if absent or wrong.

    >>> busbw_of('noise\\n{"metric": "allreduce", "bytes": 8, "correct": true, "busbw_gib": 1.5}\\n', 8)
    1.5
    """
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):  # a --bench line nested past the stack
                continue
            if record.get("metric") == "allreduce" and record.get("bytes") == size and record.get("correct") is True:
                return float(record["busbw_gib"])
    return None


def failure_line(ran: Captured) -> str:
    """The line for a run that gave no busbw: why it ended, and the last three lines it wrote.

    >>> failure_line(Captured(1, "", "a\\nb\\nc\\nd\\n"))
    'tune:   failed (exit 1): b / c / d'
    """
    why = "killed at --timeout" if ran.status is None else f"exit {ran.status}"
    tail = " / ".join((ran.stderr or ran.stdout).strip().splitlines()[-3:])
    return f"tune:   failed ({why}): {tail}"


def progress_line(knob: str, label: str, busbw: float | None) -> str:
    """One run's line as the sweep goes.

    >>> progress_line("yield", "1", 0.5)
    'tune: yield        1                    0.500 GiB/s'
    """
    return f"tune: {knob:<12} {label:<20} {'failed' if busbw is None else f'{busbw:.3f} GiB/s'}"


Runner = Callable[[Sequence[str], float], Captured]


def measure(
    job: TuneJob, end: str, timeout: float, say: Callable[[str], None], run: Runner, settings: Settings
) -> float | None:
    """busbw (GiB/s) of one run of the job's benchmark at `end` with `settings`; None (and a line to
    `say`) when it failed, was killed at `timeout` s or printed no correct figure."""
    ran = run(job.command(settings, end), timeout)
    busbw = busbw_of(ran.stdout, job.benchmark.size(end)) if ran.status == 0 else None
    if busbw is None:
        say(failure_line(ran))
    return busbw


def run_sweep(
    job: TuneJob, start: Settings, repeat: int, timeout: float, say: Callable[[str], None], run: Runner = run_captured
) -> TuneResult:
    """Sweep the job's knobs from `start`, running each candidate's command (bounded by `timeout` s)
    with `run`; `say` gets a line per run and per failure. Refused (exit 2) when every run failed."""
    large = partial(measure, job, LARGE, timeout, say, run)
    small = partial(measure, job, SMALL, timeout, say, run) if job.both_ends else None
    result = sweep(
        job.knobs,
        large,
        repeat=repeat,
        start=start,
        progress=lambda knob, label, busbw: say(progress_line(knob, label, busbw)),
        measure_small=small,
    )
    if result.baseline() is None and result.final() is None:
        raise UserError.at(
            job.where,
            "launcher",
            "every benchmark run failed, nothing to compare",
            "run the first command of `hpcbundle tune --plan` by hand and read its error",
        )
    return result
