"""A torch job's head: the first host's IPv4 address on the site's data interface, asked of that host
(through the site's rsh agent, else ssh) as `ip -4 -o addr show dev IFACE scope global` prints it.

torch.distributed's ranks meet at MASTER_ADDR; a name there is resolved by every node and by torch
itself, and on many clusters resolves to the management network or 127.0.x.1 (the notes in
docs/running.md). The address is read at the edge, once, before the job starts.
"""

from __future__ import annotations

import re

from ..config.sites import Site
from ..execute import run_captured
from .fanout import remote_argv

_INET = re.compile(r"\binet ([0-9]{1,3}(?:\.[0-9]{1,3}){3})/")


def head_address(site: Site, host: str, timeout: float = 10.0) -> str | None:
    """The IPv4 address of `host` on network.interfaces[0] (None: unreachable, or no such address).

    >>> _INET.search("2: data0    inet 10.9.0.1/24 brd 10.9.0.255 scope global data0").group(1)
    '10.9.0.1'
    """
    words = ["ip", "-4", "-o", "addr", "show", "dev", site.network.interfaces[0], "scope", "global"]
    ran = run_captured(remote_argv(dict(site.mca), host, words), timeout, grace=1.0)
    found = _INET.search(ran.stdout) if ran.status == 0 else None
    return found.group(1) if found else None
