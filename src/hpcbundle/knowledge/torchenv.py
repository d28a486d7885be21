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

AGENT = "agent"
"""The shim's mode for a torchrun agent (`--torchrun`): `hpcbundle-torchenv agent IFACE CONF PYTHON -m
torch.distributed.run ...`."""

OUTER_RANK_VARIABLES = (
    "RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK "
    "SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_NPROCS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE "
    "SLURM_STEP_NUM_TASKS SLURM_STEP_TASKS_PER_NODE SLURM_GTIDS "
    "OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE "
    "OMPI_COMM_WORLD_NODE_RANK PMIX_RANK PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS"
)
"""What the outer launcher told the agent about ITS task: gone before torchrun starts, so a worker (and Lightning's
SLURM detection) reads torchrun's RANK, not that of the agent."""

ADDRESS_OF = (
    "import fcntl, socket, struct, sys\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "try:\n"
    '    asked = struct.pack("256s", sys.argv[1][:15].encode())\n'
    "    print(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, asked)[20:24]))\n"
    "except OSError:\n"
    "    sys.exit(1)\n"
)
"""This node's IPv4 address on the interface argv[1] (ioctl SIOCGIFADDR), run by the agent's own Python: no `ip`
needed in the image."""

TORCHENV_INLINE = r"""set -eu
fail() { echo "hpcbundle-torchenv: $*" >&2; exit 2; }
[ "$#" -ge 2 ] || fail "usage: hpcbundle-torchenv ompi|slurm|hydra PROGRAM [ARGS...], or agent IFACE CONF PYTHON ..."
source=$1
shift
case $source in
agent)
    [ "$#" -ge 3 ] || fail "agent $1: no rendezvous options, or no PYTHON to run torchrun with"
    iface=$1 conf=$2
    shift 2
    unset OUTER
    if [ "$iface" != - ]; then
        [ -n "${MASTER_ADDR-}" ] && [ -n "${MASTER_PORT-}" ] && [ -n "${HPCBUNDLE_RUN_ID-}" ] ||
            fail "MASTER_ADDR, MASTER_PORT and HPCBUNDLE_RUN_ID must be set for a torchrun agent"
        address=$("$1" -c 'ADDRESS' "$iface") || fail "$(uname -n) has no IPv4 address on $iface"
        is_host=0
        [ "$address" = "$MASTER_ADDR" ] && is_host=1
        PET_LOCAL_ADDR=$address PET_RDZV_ENDPOINT=$MASTER_ADDR:$MASTER_PORT PET_RDZV_ID=$HPCBUNDLE_RUN_ID
        PET_RDZV_CONF=is_host=$is_host${conf:+,$conf}
        export PET_LOCAL_ADDR PET_RDZV_ENDPOINT PET_RDZV_ID PET_RDZV_CONF
    fi
    exec "$@" ;;
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
    fail "unknown launcher '$source' (ompi, slurm, hydra or agent)" ;;
esac
for value in "$rank" "$size" "$local_rank" "$local_size"; do
    case $value in
    '' | *[!0-9]*) fail "the launcher did not give this rank $names as numbers (started by $source?)" ;;
    esac
done
RANK=$rank WORLD_SIZE=$size LOCAL_RANK=$local_rank LOCAL_WORLD_SIZE=$local_size
export RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
exec "$@"
""".replace("OUTER", OUTER_RANK_VARIABLES).replace("ADDRESS", ADDRESS_OF)
"""The shim's text: `sh -c TORCHENV_INLINE hpcbundle-torchenv SOURCE PROGRAM [ARGS...]`, or for a torchrun agent
`... agent IFACE CONF PYTHON -m torch.distributed.run ...`: the outer launcher's rank variables unset, then (IFACE
not `-`) torchrun's rendezvous options set as its PET_* defaults from MASTER_ADDR, MASTER_PORT, HPCBUNDLE_RUN_ID and
CONF (c10d options such as join_timeout=300),
with this node's address on IFACE as --local-addr and is_host=1 exactly where that address is MASTER_ADDR (torch
would match host names otherwise, which on many clusters resolve elsewhere)."""


def torchenv_words(source: str) -> list[str]:
    """The words in front of a rank's program that give it its torch rank variables from `source`'s.

    >>> torchenv_words("slurm")[:2], torchenv_words("slurm")[3:]
    (['sh', '-c'], ['hpcbundle-torchenv', 'slurm'])
    """
    assert source in TORCHENV_SOURCES, source
    return ["sh", "-c", TORCHENV_INLINE, TORCHENV_NAME, source]


def agent_words(interface: str | None, conf: str = "") -> list[str]:
    """The words in front of a torchrun agent: its rendezvous at MASTER_ADDR from this node's address on
    `interface` (None: one node, torchrun --standalone), with the c10d options `conf` beside is_host.

    >>> agent_words("ib0", "join_timeout=300")[3:], agent_words(None)[3:]
    (['hpcbundle-torchenv', 'agent', 'ib0', 'join_timeout=300'], ['hpcbundle-torchenv', 'agent', '-', ''])
    """
    return ["sh", "-c", TORCHENV_INLINE, TORCHENV_NAME, AGENT, interface or "-", conf]


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
