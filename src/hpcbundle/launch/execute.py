"""Run a generated command with a time bound (the I/O edge; the generators never run anything).

MPI jobs with a wrong network interface hang rather than fail, so a launch must always end:
the command runs in its own process group, and on timeout (or Ctrl-C) the whole group gets
SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Sequence

from ..errors import UserError


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
    try:
        proc = subprocess.Popen(list(argv), stdin=stdin, start_new_session=True)  # noqa: S603 - argv list
    except FileNotFoundError:
        raise UserError.at("", argv[0], "not found on PATH", "install it on this host, or set launcher.command / container.command in the site") from None
    except PermissionError:
        raise UserError.at("", argv[0], "is not executable", "check the path and its permissions") from None
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, grace)
        return None
    except KeyboardInterrupt:
        kill_group(proc, grace)
        raise
    return 128 - status if status < 0 else status


def kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group of `proc` (mpirun then stops its ranks); SIGKILL it after `grace` s,
    and in any case once the leader is gone, so no straggler of the group survives."""
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
