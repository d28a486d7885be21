"""hpcbundle-torchenv: the per-rank shim that tells a torch.distributed program who it is.

torch's env:// rendezvous reads RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; the site's launcher
sets its own variables instead (srun SLURM_PROCID..., Open MPI OMPI_COMM_WORLD_*, Hydra PMI_*/MPI_LOCAL*).
The shim, plain POSIX sh run inside the container just before the program, reads the named launcher's
variables (LauncherKnown.torch_ranks: ompi, slurm, hydra), checks each is a decimal number, OVERWRITES
the four (a stale RANK from the launching shell, which srun and Hydra forward, must not win) and execs the
program, so signals reach it. Nothing from the site reaches it as code: its arguments are the source
name and the program's words. Images built here carry it (data/hpcbundle-torchenv, at TORCHENV_PATH); a line
for an image built elsewhere, or for ranks on the host, passes its text inline (`sh -c TEXT hpcbundle-torchenv
SOURCE PROGRAM...`), so it runs anywhere.
"""

from __future__ import annotations

import ipaddress
from importlib.resources import files

TORCHENV_NAME = "hpcbundle-torchenv"

TORCHENV_SOURCES = ("ompi", "slurm", "hydra")

AGENT = "agent"
"""The shim's mode for a torchrun agent (`--torchrun`): `hpcbundle-torchenv agent IFACE CONF PYTHON -m
torch.distributed.run ...`. The agent passes USR1 (SLURM's time-limit warning) to its workers and goes on waiting
for them, so it ends as they do; torchrun's own --signals-to-handle would end it with exit 1 whatever they did."""

TORCHENV_PATH = f"/usr/local/bin/{TORCHENV_NAME}"
"""Where images built here carry it (image/blocks/bind.py writes it beside hpcbundle-bind)."""
TORCHENV_SCRIPT = files("hpcbundle").joinpath("data").joinpath(TORCHENV_NAME).read_text(encoding="utf-8")
"""The script's text (data/hpcbundle-torchenv): plain POSIX sh; what it does is said in its header."""
TORCHENV_INLINE = "\n".join(line for line in TORCHENV_SCRIPT.splitlines() if not line.startswith("#")) + "\n"
"""The same script without its header, as one `sh -c` argument, for images that lack the file (an image built
elsewhere: site container.foreign_image) and for ranks on the host (no image)."""


def _shim(inline: bool) -> list[str]:
    """The script by name (images built here carry it), or its text inline (`sh -c TEXT hpcbundle-torchenv`)."""
    return ["sh", "-c", TORCHENV_INLINE, TORCHENV_NAME] if inline else [TORCHENV_NAME]


def torchenv_words(source: str, inline: bool = False) -> list[str]:
    """The words in front of a rank's program that give it its torch rank variables from `source`'s.

    >>> torchenv_words("slurm"), torchenv_words("slurm", inline=True)[3:]
    (['hpcbundle-torchenv', 'slurm'], ['hpcbundle-torchenv', 'slurm'])
    """
    assert source in TORCHENV_SOURCES, source
    return [*_shim(inline), source]


def agent_words(interface: str | None, conf: str = "", inline: bool = False) -> list[str]:
    """The words in front of a torchrun agent: its rendezvous at MASTER_ADDR from this node's address on
    `interface` (None: one node, torchrun --standalone), with the c10d options `conf` beside is_host.

    >>> agent_words("ib0", "join_timeout=300"), agent_words(None, inline=True)[3:]
    (['hpcbundle-torchenv', 'agent', 'ib0', 'join_timeout=300'], ['hpcbundle-torchenv', 'agent', '-', ''])
    """
    return [*_shim(inline), AGENT, interface or "-", conf]


def is_address(head: str) -> bool:
    """Whether a torch job's head (MASTER_ADDR) is an IPv4 address rather than a host name.

    >>> is_address("10.0.0.1"), is_address("node1")
    (True, False)
    """
    try:
        ipaddress.IPv4Address(head)
    except ValueError:
        return False
    return True
