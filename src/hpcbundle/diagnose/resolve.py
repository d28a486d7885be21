"""Resolve a few host names at once within a time limit (site detect's --hosts): a slow or dead resolver
costs RESOLVE_SECONDS in all, not a timeout per name one after another."""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable

RESOLVE_SECONDS = 10.0
"""How long site detect waits for all of its --hosts to resolve together."""
MAX_PEERS = 64
"""The most --hosts site detect takes: the routes to a few peers show the interface the nodes share."""


def resolve_all(
    hosts: list[str], seconds: float = RESOLVE_SECONDS, lookup: Callable[[str], str] = socket.gethostbyname
) -> dict[str, str | None]:
    """Each of `hosts` -> its IPv4 address, or None where it did not resolve, or not within `seconds`.

    Every name is looked up on a thread of its own, a daemon, so a resolver that never answers holds
    neither the others nor the exit.

    >>> resolve_all(["localhost", "no-such-host.invalid"])
    {'localhost': '127.0.0.1', 'no-such-host.invalid': None}
    """
    answers: queue.Queue[tuple[str, str | None]] = queue.Queue()

    def one(host: str) -> None:
        try:
            answers.put((host, lookup(host)))
        except (OSError, UnicodeError):  # not found, or a name no DNS label can hold
            answers.put((host, None))

    for host in dict.fromkeys(hosts):
        threading.Thread(target=one, args=(host,), daemon=True).start()
    found: dict[str, str | None] = dict.fromkeys(hosts)
    deadline, pending = time.monotonic() + seconds, len(found)
    while pending:
        try:
            host, address = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        found[host], pending = address, pending - 1
    return found
