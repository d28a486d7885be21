"""hpcbundle-torchenv: the per-rank shim that tells a torch.distributed program who it is.

torch's env:// rendezvous reads RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; the site's launcher
sets its own variables instead (srun SLURM_PROCID..., Open MPI OMPI_COMM_WORLD_*, Hydra PMI_*/MPI_LOCAL*).
The shim, plain POSIX sh run inside the container just before the program, reads the named launcher's
variables (LauncherKnown.torch_ranks: ompi, slurm, hydra), checks each is a decimal number, OVERWRITES
the four (a stale RANK from the launching shell, which srun and Hydra forward, must not win) and execs the
program, so signals reach it. Nothing from the site reaches it as code: its arguments are the source
name and the program's words. A launch passes its text inline (`sh -c TEXT hpcbundle-torchenv SOURCE
PROGRAM...`), so it runs in any image, built here or elsewhere.
"""

from __future__ import annotations

import ipaddress

TORCHENV_NAME = "hpcbundle-torchenv"

TORCHENV_SOURCES = ("ompi", "slurm", "hydra")

TORCHENV_INLINE = r"""set -eu
fail() { echo "hpcbundle-torchenv: $*" >&2; exit 2; }
[ "$#" -ge 2 ] || fail "usage: hpcbundle-torchenv ompi|slurm|hydra PROGRAM [ARGS...]"
source=$1
shift
case $source in
ompi)
    rank=${OMPI_COMM_WORLD_RANK-} size=${OMPI_COMM_WORLD_SIZE-}
    local_rank=${OMPI_COMM_WORLD_LOCAL_RANK-} local_size=${OMPI_COMM_WORLD_LOCAL_SIZE-}
    names=OMPI_COMM_WORLD_RANK,OMPI_COMM_WORLD_SIZE,OMPI_COMM_WORLD_LOCAL_RANK,OMPI_COMM_WORLD_LOCAL_SIZE ;;
slurm)
    rank=${SLURM_PROCID-} size=${SLURM_NTASKS-} local_rank=${SLURM_LOCALID-}
    local_size=${SLURM_NTASKS_PER_NODE-${SLURM_TASKS_PER_NODE-}}
    local_size=${local_size%%[!0-9]*}
    names=SLURM_PROCID,SLURM_NTASKS,SLURM_LOCALID,SLURM_NTASKS_PER_NODE ;;
hydra)
    rank=${PMI_RANK-} size=${PMI_SIZE-} local_rank=${MPI_LOCALRANKID-} local_size=${MPI_LOCALNRANKS-}
    names=PMI_RANK,PMI_SIZE,MPI_LOCALRANKID,MPI_LOCALNRANKS ;;
*)
    fail "unknown launcher '$source' (ompi, slurm or hydra)" ;;
esac
for value in "$rank" "$size" "$local_rank" "$local_size"; do
    case $value in
    '' | *[!0-9]*) fail "the launcher did not give this rank $names as numbers (started by $source?)" ;;
    esac
done
RANK=$rank WORLD_SIZE=$size LOCAL_RANK=$local_rank LOCAL_WORLD_SIZE=$local_size
export RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
exec "$@"
"""
"""The shim's text: `sh -c TORCHENV_INLINE hpcbundle-torchenv SOURCE PROGRAM [ARGS...]`."""


def torchenv_words(source: str) -> list[str]:
    """The words in front of a rank's program that give it its torch rank variables from `source`'s.

    >>> torchenv_words("slurm")[:2], torchenv_words("slurm")[3:]
    (['sh', '-c'], ['hpcbundle-torchenv', 'slurm'])
    """
    assert source in TORCHENV_SOURCES, source
    return ["sh", "-c", TORCHENV_INLINE, TORCHENV_NAME, source]


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
