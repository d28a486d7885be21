"""Run a generated command with a time bound (the I/O edge; the generators never run anything).

MPI jobs with a wrong network interface hang rather than fail, so a launch must always end:
the command runs in its own process group, and on timeout (or Ctrl-C) the whole group gets
SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Sequence

from .config.errors import UserError


def run_bounded(argv: Sequence[str], timeout: float, grace: float = 5.0) -> int | None:
    """Run `argv`; return its exit status (128+N when killed by signal N), or None after `timeout` s.

    stdin is /dev/null unless it is a terminal (mpirun forwards stdin to rank 0 and would
    otherwise wait on a pipe nobody writes to).

    >>> run_bounded(["sh", "-c", "exit 3"], timeout=10)
    3
    >>> run_bounded(["sleep", "5"], timeout=0.2, grace=1) is None
    True
    """
    stdin = None if sys.stdin is not None and sys.stdin.isatty() else subprocess.DEVNULL
    proc = _start(argv, stdin=stdin)
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, grace)
        return None
    except KeyboardInterrupt:
        kill_group(proc, grace)
        raise
    return _status(status)


@dataclass(frozen=True)
class Watched:
    """How a watched run ended: its exit status, or None when it was stopped (`stalled`: for want of
    output, else at the time bound); `quietest` is its longest stretch without a line, in seconds."""

    status: int | None
    stalled: bool = False
    quietest: float = 0.0


def run_watched(
    argv: Sequence[str], timeout: float, stall: float, grace: float = 5.0, before_stop: Callable[[], None] | None = None
) -> Watched:
    """Like run_bounded, and also stopped when neither its stdout nor its stderr gave a line for `stall` s;
    `before_stop` runs first then, while every process of the job is still there to be looked at.

    The output is passed through line by line as it comes. A rank that stops (SIGSTOP, a hung device)
    or loses its link leaves every other rank waiting inside MPI, where TCP's retries take many
    minutes; the silence ends the job in `stall` s instead.

    >>> run_watched(["sh", "-c", "echo one; sleep 5; echo two"], timeout=30, stall=0.5, grace=1).stalled
    one
    True
    >>> ended = run_watched(["sh", "-c", "echo one; sleep 0.5; echo two; exit 4"], timeout=30, stall=5)
    one
    two
    >>> ended.status, ended.stalled, 0.4 < ended.quietest < 5
    (4, False, True)
    """
    stdin = None if sys.stdin is not None and sys.stdin.isatty() else subprocess.DEVNULL
    proc = _start(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    last_line, quietest = [time.monotonic()], [0.0]

    def relay(source: IO[str], target: IO[str]) -> None:
        for line in iter(source.readline, ""):
            now = time.monotonic()
            quietest[0] = max(quietest[0], now - last_line[0])
            last_line[0] = now
            target.write(line)
            target.flush()

    relays = [
        threading.Thread(target=relay, args=(proc.stdout, sys.stdout), daemon=True),
        threading.Thread(target=relay, args=(proc.stderr, sys.stderr), daemon=True),
    ]
    for thread in relays:
        thread.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                status = proc.wait(0.2)
                for thread in relays:
                    thread.join(5.0)
                return Watched(_status(status), quietest=quietest[0])
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if now >= deadline or now - last_line[0] >= stall:
                    if now < deadline and before_stop is not None:
                        before_stop()
                    kill_group(proc, grace)
                    return Watched(None, stalled=now < deadline)
    except KeyboardInterrupt:
        kill_group(proc, grace)
        raise


@dataclass(frozen=True)
class Captured:
    """What a bounded, captured run gave: exit status (None: killed at the bound) and its output."""

    status: int | None
    stdout: str
    stderr: str


def run_captured(
    argv: Sequence[str], timeout: float, grace: float = 5.0, stop: threading.Event | None = None
) -> Captured:
    """Like run_bounded, but stdin is /dev/null and the output is returned, not shown; `stop`, when
    set by another thread, ends the run early as the bound does.

    >>> run_captured(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
    Captured(status=3, stdout='out\\n', stderr='err\\n')
    """
    proc = _start(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                out, err = proc.communicate(timeout=min(left, 0.1) if stop is not None else left)
                return Captured(_status(proc.returncode), out, err)
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                    kill_group(proc, grace)
                    out, err = proc.communicate()
                    return Captured(None, out, err)
    except KeyboardInterrupt:
        kill_group(proc, grace)
        raise


MAX_ARG_BYTES = 32 * 4096
"""The longest single argv or environment string Linux execs (MAX_ARG_STRLEN, its NUL included)."""


def argv_limit() -> int:
    """The bytes the kernel takes for argv and the environment together (ARG_MAX; 128 KiB if unknown)."""
    try:
        return os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        return 1 << 17


def _check_size(argv: Sequence[str]) -> None:
    """Refuse a command line the kernel would refuse (E2BIG), before starting it: argv and environment
    strings with their NULs and pointers, as execve counts them."""
    strings = [*argv, *(f"{k}={v}" for k, v in os.environ.items())]
    longest = max(len(os.fsencode(s)) + 1 for s in strings)
    if longest > MAX_ARG_BYTES:
        raise UserError.at(
            "",
            argv[0],
            f"one word of the command line takes {longest} bytes, more than Linux's {MAX_ARG_BYTES} per word",
            "give fewer hosts (a hostfile, or fewer or shorter names)",
        )
    size = sum(len(os.fsencode(s)) + 1 + 8 for s in strings)
    if size > argv_limit():
        raise UserError.at(
            "",
            argv[0],
            f"the command line and environment take {size} bytes, more than the system's {argv_limit()}",
            "give fewer hosts (a hostfile, or fewer or shorter names) or a shorter environment",
        )


def _start(argv: Sequence[str], **popen: object) -> subprocess.Popen:
    """Start `argv` in its own process group (so a bound can stop all of it); missing tools and command
    lines past the kernel's limit are user errors."""
    _check_size(argv)
    try:
        return subprocess.Popen(list(argv), start_new_session=True, **popen)  # type: ignore[call-overload]  # noqa: S603 - argv list
    except FileNotFoundError:
        raise UserError.at(
            "",
            argv[0],
            "not found on PATH",
            "install it on this host, or set launcher.command / container.command in the site",
        ) from None
    except PermissionError:
        raise UserError.at("", argv[0], "is not executable", "check the path and its permissions") from None
    except OSError as exc:
        raise UserError.at("", argv[0], f"cannot start: {exc.strerror}", _START_FIX.get(exc.errno, "")) from None


_START_FIX = {errno.E2BIG: "give fewer hosts (a hostfile, or fewer or shorter names) or a shorter environment"}


def _status(returncode: int) -> int:
    """Exit status as the shell reports it: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group of `proc` (mpirun then stops its ranks); SIGKILL it after `grace` s,
    and in any case once the leader is gone, so no straggler of the group survives. Then SIGKILL what
    was below `proc` and left its group: mpirun runs each ssh to a node in a group of its own, and one
    whose node it could no longer reach (a link down) would keep that node's daemon and ranks alive."""
    below = _descendants(proc.pid)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
            break
        except ProcessLookupError:
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` now, whatever its process group (read from /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
