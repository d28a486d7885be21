"""``python -m hpcbundle_testbed.docker_engine [--suite S] -- CMD ...``: CMD against a private engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from .engine import DockerEngine


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hpcbundle_testbed.docker_engine [--suite S] -- CMD ...``: run CMD against a private
    engine (cached data root) that has ``local/debian:<suite>``, then stop the engine.

    CMD gets DOCKER_HOST; e.g. ``-- hpcbundle build-docker cpu-local --base-image
    local/debian:bookworm --network host`` (the engine has no bridge: RUN steps use the host's
    network). Images stay in the cached data root for the next run. Exit status: CMD's.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hpcbundle_testbed.docker_engine",
        description=main.__doc__.splitlines()[0] if main.__doc__ else None,
    )
    parser.add_argument("--suite", default="bookworm")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    with DockerEngine.cached() as engine:
        base = engine.base_image(args.suite)
        print(
            f"docker_engine: dockerd pid {engine.pid} at {engine.host}; base image {base.tag} ({base.id[:19]})",
            file=sys.stderr,
            flush=True,
        )
        return subprocess.run(command, env={**os.environ, **engine.env()}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
