"""`launch --exec`'s run of a job: bounded by the site's launcher.timeout (or --timeout), ended when it
is silent for faults.stall_seconds (the stopped ranks found first, while they are still there), and
the lines that say how it ended badly, each naming the site key to look at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.sites import Site
from ..execute import Watched, run_bounded, run_watched
from .probes import STOPPED_STATES

Stopped = dict[str, list[dict[str, Any]]]
"""Host -> the job's ranks found stopped there: [{"pid": N, "state": "T"}, ...]."""


def exec_limit(site: Site, timeout: int | None) -> tuple[int, str]:
    """Seconds the job may run, and where that bound comes from (for the line when it is reached)."""
    return (timeout, "--timeout") if timeout else (site.launcher.timeout, f"launcher.timeout of site {site.name}")


@dataclass(frozen=True)
class JobEnd:
    """How the job ended (`watched`), the ranks found stopped before a stalled job was ended, and those of them
    still there once its launcher had ended (`killed`: SIGKILLed then)."""

    watched: Watched
    stopped: Stopped = field(default_factory=dict)
    killed: Stopped = field(default_factory=dict)


def find_stopped(
    site: Site,
    hosts: Sequence[str],
    program: Sequence[str],
    environment: Mapping[str, str],
    kill: Stopped | None = None,
) -> Stopped:
    """The job's ranks that are stopped or stuck in the kernel on `hosts` (this node when none are
    named), asked before the stalled job is ended; {} when none or no node answers in 10 s. With `kill`
    (ranks found so before), those of them still there instead, SIGKILLed."""
    from .fanout import stopped_ranks

    exported = {name: environment[name] for name in site.export if name in environment}
    if kill is None:
        asked: dict[str, list[int]] = {host: [] for host in list(hosts) or ["localhost"]}
    else:
        asked = {host: [rank["pid"] for rank in ranks] for host, ranks in kill.items()}
    return stopped_ranks(site.mca, asked, list(program), exported)


def run_job(
    site: Site,
    argv: Sequence[str],
    limit: int,
    look: Callable[[], Stopped],
    kill: Callable[[Stopped], Stopped],
    watch: Callable[..., Watched] = run_watched,
    bounded: Callable[[Sequence[str], float], int | None] = run_bounded,
) -> JobEnd:
    """Run the job's `argv` for at most `limit` s; where the site sets faults.stall_seconds, also end it
    when silent that long, after `look` found its stopped ranks; `kill` then ends those the launcher left
    behind. torchrun's workers are beyond the launcher's reach, and their agent ends a stopped one only 30 s
    after asking (PContext.close), when the launcher has long killed the agent."""
    stall = site.faults.stall_seconds
    if not stall:
        return JobEnd(Watched(bounded(argv, limit)))
    stopped: Stopped = {}
    watched = watch(argv, limit, stall, before_stop=lambda: stopped.update(look()))
    return JobEnd(watched, stopped, kill(stopped) if watched.stalled and stopped else {})


def stall_lines(site: Site, stopped: Stopped, killed: Stopped | None = None) -> list[str]:
    """What a launch says when it ended a silent job: why, then each rank found stopped, and each of them
    hpcbundle killed once the launcher had ended (`killed`)."""
    lines = [
        f"hpcbundle: error: no output from the job for {site.faults.stall_seconds} s (faults.stall_seconds of site "
        f"{site.name}), so it was stopped: a rank stopped or lost its link, and the others would wait in their "
        "collectives (MPI, Gloo or NCCL) for TCP's retries"
    ]
    for host, ranks in stopped.items():
        for rank in ranks:
            state = rank["state"]
            lines.append(
                f"hpcbundle: {host}: the rank with PID {rank['pid']} was {STOPPED_STATES.get(state, state)} "
                f"(state {state})"
            )
    for host, ranks in (killed or {}).items():
        for rank in ranks:
            lines.append(
                f"hpcbundle: {host}: the rank with PID {rank['pid']} outlived the launcher, still stopped: "
                "killed (SIGKILL)"
            )
    return lines


def stall_verdict(failed: bool, stopped: bool) -> str:
    """The last line after a stall: where the cause is (a FAIL doctor found on the job's nodes now, a rank
    found stopped, else a rank itself), and how to go on."""
    if failed:
        where = "the FAIL above is on the job's nodes now; "
    elif stopped:
        where = "the rank named above stopped, not a link; "
    else:
        where = (
            "doctor finds the job's nodes and links fine now, so a rank itself stopped "
            "(SIGSTOP, a hung device, swapping); "
        )
    return f"hpcbundle: {where}run the same command again to resume from the last checkpoint"


def unbounded_note(site: Site, limit: int, source: str) -> str | None:
    """The line `launch --exec` prints before a job on a site without faults.stall_seconds: what a lost
    link or a stopped rank will do (the others wait inside MPI until the time bound)."""
    if site.faults.stall_seconds:
        return None
    return (
        f"hpcbundle: note: site {site.name} sets no faults.stall_seconds: a lost link or a stopped rank leaves the "
        f"job waiting until {limit} s ({source}); set it above the program's longest silent phase to end such a "
        f"job sooner"
    )


def quiet_warning(site: Site, ended: Watched) -> str | None:
    """A warning when a job that finished was silent for more than half of faults.stall_seconds: a
    slower epoch or checkpoint would be taken for a stall."""
    stall = site.faults.stall_seconds
    if not stall or ended.status is None or ended.quietest < stall / 2:
        return None
    return (
        f"hpcbundle: warning: the job was silent for up to {ended.quietest:.1f} s, more than half of "
        f"faults.stall_seconds ({stall} s) of site {site.name}: a slower epoch or checkpoint would be "
        f"ended as a stall; raise it in {site.where}"
    )


def hang_error(site: Site, limit: int, source: str) -> str:
    """The line when the job reached its time bound: MPI hangs like this over a wrong network interface."""
    return (
        f"hpcbundle: error: killed after {limit} s ({source}): the job neither finished nor failed. "
        f"MPI hangs like this when ranks cannot reach each other, most often over a wrong network interface: "
        f"check network.interfaces, "
        f"mca btl_tcp_if_include/oob_tcp_if_include and NCCL_SOCKET_IFNAME in {site.where} against `ip -br addr` "
        f"on the nodes (or raise the limit for a long job)"
    )
