"""A torch job's head: the first host's IPv4 address on the site's data interface, asked of that host
(through the site's rsh agent, else ssh) as `ip -4 -o addr show dev IFACE scope global` prints it; and, for
doctor, whether its port is free there and every node reaches it (`observe_head`).

torch.distributed's ranks meet at MASTER_ADDR; a name there is resolved by every node and by torch
itself, and on many clusters resolves to the management network or 127.0.x.1 (the notes in
docs/running.md). The address is read at the edge, once, before the job starts.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping

from ..config.sites import Site
from ..execute import run_captured
from ..rules.engine import HeadProbe
from .fanout import CONNECT_SECONDS, head_store, remote_argv

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


def observe_head(
    site: Site, asked: HeadProbe, hosts: list[str], timeout: float, environment: Mapping[str, str]
) -> HeadProbe:
    """`asked` as doctor observes it: the head's address (asked of it unless known), whether its port is free
    there, and whether each of `hosts` reaches address:port (rules torch-head-address, -port-free, -reach)."""
    address = asked.address or head_address(site, asked.host, timeout)
    if address is None:
        return asked
    mca, head = dict(site.mca), (asked.host, address, asked.port)
    bound, reached = head_store(mca, head, hosts, CONNECT_SECONDS, timeout, environment)
    return replace(asked, address=address, bound=bound, reached=reached)
