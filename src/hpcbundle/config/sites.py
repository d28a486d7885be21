"""Sites: one validated YAML per cluster in site_configs/ saying how that cluster runs an image.

A site names the host MPI and its launcher, MCA parameters, the environment every rank gets,
the container runtime, per-rank wrappers, the node layout, the network and the SLURM settings.
It says nothing about what is inside an image: that belongs to recipes. Example (abridged)::

    name: ib-v100
    mpi: {flavour: openmpi, version: "4.1.6"}
    launcher: {name: mpirun, single_dash: true}
    export: [LD_LIBRARY_PATH, PATH]
    env: {NCCL_SOCKET_IFNAME: "^virbr0,lo"}
    mca: {btl: "openib,self", pml: ob1, btl_openib_allow_ib: "1"}
    container: {runtime: singularity, gpu: true}
    node: {cores: 40, gpus: 2, gpu_model: V100, driver: "535.104.05"}
    network: {fabric: infiniband}
    why: {env.NCCL_SOCKET_IFNAME: keep NCCL off the libvirt bridge and loopback}

Loading here checks the shape only; every combination of keys is judged by a rule
(hpcbundle.rules), and hpcbundle.rules.loading.load_site refuses the ones that fail.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PositiveInt, PrivateAttr

from .errors import UserError, clip
from .fields import Line, Name, Version
from .limits import (
    MAX_CORES,
    MAX_GATE_SECONDS,
    MAX_GPUS,
    MAX_LINK_GBPS,
    MAX_NUMA_NODE,
    MAX_PORT,
    MAX_RANKS,
    MAX_RESTARTS,
    MAX_SECONDS,
    MAX_SIGNAL_SECONDS,
)
from .loading import named_file, read_yaml, validate
from .model import StrictModel


def _scalar(value: Any) -> Any:
    """YAML may write an MCA value or a variable as a number; refuse the lossy cases."""
    if isinstance(value, bool):
        raise ValueError(
            f'write {value!r} as a quoted string ("1"/"0" or "true"/"false"): YAML turned it into a boolean'
        )
    if isinstance(value, float):
        raise ValueError(f"write {value!r} as a quoted string: YAML reads 1.10 as the number 1.1")
    return str(value) if isinstance(value, int) else value


def _matching(regex: str, what: str) -> AfterValidator:
    """A validator that refuses text not matching `regex`, saying what was expected."""

    def check(value: str) -> str:
        if not re.fullmatch(regex, value):
            raise ValueError(f"{clip(value)} is not {what}")
        return value

    return AfterValidator(check)


Scalar = Annotated[str, BeforeValidator(_scalar)]
EnvName = Annotated[str, _matching(r"^[A-Za-z_][A-Za-z0-9_]*$", "a variable name")]
Word = Annotated[str, _matching(r"^[^\s\x00-\x1f\x7f]+$", "one word without spaces or control characters")]
McaName = Annotated[str, _matching(r"^[a-z][a-z0-9_]*$", "an MCA parameter name like btl_tcp_if_include")]
Bind = Annotated[str, _matching(r"^/[^\s:]*(:/[^\s:]*)?$", "an absolute path or SRC:DST")]
AbsPath = Annotated[str, _matching(r"^/[^\s:\x00-\x1f\x7f]*$", "an absolute path")]
SLURM_TIME = r"^([0-9]+-)?[0-9]+(:[0-9][0-9]){0,2}$"


def is_slurm_time(text: str) -> bool:
    """Whether `text` is a SLURM time of at most 20 characters and at most a year (MAX_SECONDS),
    e.g. 30, 02:00:00 or 1-00:00:00.

    >>> is_slurm_time("1-00:00:00"), is_slurm_time("2 hours"), is_slurm_time("400-00:00:00")
    (True, False, False)
    """
    return len(text) <= 20 and re.fullmatch(SLURM_TIME, text) is not None and slurm_seconds(text) <= MAX_SECONDS


def _slurm_time(value: str) -> str:
    if not is_slurm_time(value):
        raise ValueError(f"{clip(value)} is not a SLURM time like 30, 02:00:00 or 1-00:00:00 of at most a year")
    return value


SlurmTime = Annotated[str, AfterValidator(_slurm_time)]


def slurm_seconds(time: str) -> int:
    """Seconds of a SLURM time (minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]).

    >>> [slurm_seconds(t) for t in ("30", "5:30", "02:00:00", "1-00:00:00", "1-2", "1-2:30")]
    [1800, 330, 7200, 86400, 93600, 95400]
    """
    days, _, clock = time.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    if days:
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, (minutes, seconds) = 0, (parts + [0])[:2]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


# The variables that choose a program's interpreter, its modules and their libraries: what a
# launching shell with an activated venv or conda env holds, and what a rank on another node lacks
# unless the launcher forwards it (site `export`). `site detect` drafts the ones that are set;
# exported into a container they would replace the image's own.
PROGRAM_ENV = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME")


class HostMpi(StrictModel):
    """The MPI installed on the cluster, whose launcher starts the ranks."""

    flavour: Literal["openmpi", "intelmpi", "mpich", "mvapich2"] = Field(
        description="the host MPI's family; the image's MPI must share its ABI (rule mpi-abi)"
    )
    version: Version = Field(description="the host MPI's version, e.g. 4.1.6 (`mpirun --version`)")


class LauncherSettings(StrictModel):
    """Which registered launcher starts the ranks, and its options (each launcher honours its own)."""

    name: str = Field(
        min_length=1, description="the launcher that starts the ranks (docs/reference/launchers.md), one of its rows"
    )
    command: Word | None = Field(None, description="the executable, when not the launcher's usual name")
    tag_output: bool = Field(False, description="prefix each output line with its rank")
    allow_run_as_root: bool = Field(
        False, description="mpirun --allow-run-as-root (containers and test hosts run as root)"
    )
    oversubscribe: bool = Field(False, description="more ranks than cores on a node")
    bind_to: Word | None = Field(None, description="mpirun --bind-to, e.g. none (Horovod's advice)")
    map_by: Word | None = Field(None, description="mpirun --map-by, e.g. slot")
    single_dash: bool = Field(False, description="Open MPI <= 4 spellings -mca/-bind-to/-map-by")
    pmi: Word | None = Field(None, description="srun --mpi plugin, e.g. pmix")
    gloo: bool = Field(False, description="horovodrun --gloo instead of MPI")
    args: list[str] = Field(default_factory=list, description="extra launcher options, verbatim")
    timeout: PositiveInt = Field(
        3600, le=MAX_SECONDS, description="seconds `launch --exec` may run before the job is killed"
    )


class Container(StrictModel):
    """The container runtime that runs one image per rank (or none: the host's own software)."""

    runtime: str = Field(
        "none",
        description="the container runtime (docs/reference/launchers.md; none: the host's software), one of its rows",
    )
    command: Word | None = Field(None, description="the runtime's executable, when not its usual name")
    gpu: bool = Field(False, description="expose the host's NVIDIA driver and GPUs (--nv, --gpus all)")
    userns: bool | None = Field(None, description="runs unprivileged in a user namespace (default: the runtime's)")
    binds: list[Bind] = Field(default_factory=list, description="host paths mounted in the container, PATH or SRC:DST")
    args: list[str] = Field(default_factory=list, description="extra runtime options, verbatim")
    pmix_spool_mount: bool = Field(
        False,
        description="pyxis: mount slurm.spool_dir (where slurmstepd's PMIx server keeps its job data) into every "
        "container; only where enroot's extra PMIx hook (50-slurm-pmi.sh) is not enabled, since that hook mounts "
        "the server's directory itself and a second mount of another SlurmdSpoolDir stops every rank",
    )
    mount_home: bool = Field(
        False,
        description="pyxis: mount the user's home directory (--container-mount-home); off by default "
        "(--no-container-mount-home) so the ranks do not read the host's ~/.local packages and dotfiles",
    )
    foreign_image: bool = Field(
        False,
        description="the site runs images not built by hpcbundle (e.g. NGC's), which lack "
        "/usr/local/bin/hpcbundle-bind: where the gpu-numa wrapper (node.gpu_numa) runs inside the "
        "container, it runs the script's text inline (sh -c) instead of by name",
    )

    def bind_holding(self, path: str) -> int | None:
        """The index of the bind whose destination holds `path` (it is visible inside already), else None.

        >>> Container(binds=["/data:/scratch"]).bind_holding("/scratch/me/run"), Container().bind_holding("/data")
        (0, None)
        """
        inside = PurePosixPath(path)
        for index, bind in enumerate(self.binds):
            parts = bind.split(":")
            destination = PurePosixPath(parts[1] if len(parts) > 1 else parts[0])
            if inside == destination or destination in inside.parents:
                return index
        return None


class Node(StrictModel):
    """One compute node: what it has, and how many ranks go on it."""

    cores: PositiveInt = Field(
        le=MAX_CORES, description="CPU cores per node (ranks per node default to them on CPU sites)"
    )
    gpus: int = Field(0, ge=0, le=MAX_GPUS, description="GPUs per node (one rank per GPU by default)")
    gpu_model: str | None = Field(None, description="e.g. V100, A100, H100: matched against the recipe's gpu.archs")
    driver: Version | None = Field(None, description="NVIDIA driver version on the nodes")
    ranks_per_node: PositiveInt | None = Field(
        None, le=MAX_CORES, description="default: one rank per GPU, else per core"
    )
    numa_memory: list[Annotated[int, Field(ge=0, le=MAX_NUMA_NODE)]] | None = Field(
        None,
        max_length=MAX_NUMA_NODE + 1,
        description="the NUMA nodes that have memory (`numactl -H`), e.g. [0] on KNL in cache mode, "
        "[0, 1] in flat-quadrant mode (node 1 is MCDRAM)",
    )

    threads_per_core: PositiveInt = Field(
        1,
        le=8,
        description="hardware threads per core where SLURM counts each as a CPU (ThreadsPerCore in slurm.conf, "
        "e.g. 4 on KNL): --cpus-per-task and srun -c count them, OMP_NUM_THREADS counts cores",
    )
    cpus_per_rank: PositiveInt | None = Field(
        None,
        le=MAX_CORES,
        description="CPUs (as SLURM counts them) each rank gets in batch jobs: sbatch/srun -c and "
        "OMP_NUM_THREADS; default node.cores over the ranks per node",
    )
    gpu_numa: list[Annotated[int, Field(ge=0, le=MAX_NUMA_NODE)]] | None = Field(
        None,
        max_length=MAX_GPUS,
        description="GPU index -> its NUMA node (`nvidia-smi topo -m`, NUMA Affinity; drafted by "
        "`site detect`), e.g. [0, 0, 0, 0, 1, 1, 1, 1]; when set, every rank runs under the gpu-numa "
        "placement wrapper, `hpcbundle-bind MAP`: its local rank's GPU, and that GPU's NUMA node's cores and memory",
    )

    host_bind: bool = Field(
        False,
        description="every node's host has hpcbundle-bind on PATH (`make install-bind` as root on each node): "
        "the gpu-numa wrapper then runs on the host, before a per-rank container starts (apptainer, "
        "singularity, ch-run) or in front of a program without one; unset, it runs inside the image (every image "
        "built here carries it) or as its own text inline (container.foreign_image, no image), so nothing needs "
        "installing; `doctor` looks for it on every node and the batch script on its first",
    )

    @property
    def slots(self) -> int:
        """Ranks one node takes: ranks_per_node, else one per GPU, else one per core."""
        return self.ranks_per_node or self.gpus or self.cores

    @property
    def fixed_ranks(self) -> int | None:
        """Ranks per node SLURM must be told (srun --ntasks-per-node): ranks_per_node, else one per GPU;
        None on a CPU site without ranks_per_node (SLURM places by CPUs)."""
        return self.ranks_per_node or self.gpus or None

    def cpus_for(self, ranks_per_node: int) -> int:
        """CPUs per rank (as SLURM counts them) when `ranks_per_node` ranks share a node: cpus_per_rank,
        else the node's hardware threads shared out.

        >>> Node(cores=96, gpus=8).cpus_for(8), Node(cores=2).cpus_for(4)
        (12, 1)
        >>> Node(cores=68, threads_per_core=4).cpus_for(1)  # KNL: SLURM counts 272 CPUs
        272
        """
        return self.cpus_per_rank or max(1, self.cores * self.threads_per_core // ranks_per_node)


class Network(StrictModel):
    """The fabric, and the interfaces MPI and NCCL talk over (hpcbundle.knowledge.network derives their settings)."""

    fabric: Literal["infiniband", "roce", "ethernet", "omnipath", "loopback"] = Field(
        description="the network between nodes; the rules match the image's transports and fabric libraries to it"
    )
    interfaces: list[Word] = Field(
        default_factory=list,
        description="TCP interfaces MPI and NCCL may use: "
        "btl/oob_tcp_if_include and NCCL_SOCKET_IFNAME unless the site sets them",
    )
    link_gbps: float | None = Field(
        None,
        gt=0,
        le=MAX_LINK_GBPS,
        allow_inf_nan=False,
        description="the data link's rated speed in Gbit/s, which the launch gate's busbw is judged against",
    )
    nccl_require_ib: bool = Field(
        True,
        description="GPU sites on infiniband/roce set NCCL_NET=IB, so a container that cannot see the adapters "
        "fails at NCCL's init instead of falling back to TCP sockets at a fraction of the speed; false lets "
        "NCCL fall back",
    )


class Gate(StrictModel):
    """The launch gate (`launch --gate`, `sbatch --gate`): a short allreduce that proves the fabric first."""

    threshold: float = Field(
        0.5, allow_inf_nan=False, description="the least busbw the gate accepts, as a fraction of network.link_gbps"
    )
    timeout: PositiveInt = Field(
        30, le=MAX_GATE_SECONDS, description="seconds the gate may take before it is killed (a hung interface)"
    )


Wiring = Literal["horovod", "torch", "torchrun"]
"""How the ranks of a job meet: Horovod; torch.distributed env:// (`--torch`: the site's launcher starts every
worker); or torchrun (`--torchrun`: it starts one agent per node, which starts the workers, c10d rendezvous)."""


class Torch(StrictModel):
    """torch.distributed programs on this site (`--torch`, `--torchrun`): the port the ranks meet at, the
    wiring a launch gets without a flag and torchrun's restarts. Example::

        torch: {port: 29500, wiring: torchrun, max_restarts: 2, join_timeout: 300}
    """

    port: int = Field(
        29500,
        ge=1,
        le=MAX_PORT,
        description="MASTER_PORT of jobs started over ssh: the port rank 0 listens on (a batch job takes one "
        "from its job id)",
    )
    wiring: Wiring = Field(
        "horovod",
        description="how a launch without --torch, --torchrun or --horovod wires its ranks: horovod, torch or torchrun",
    )
    join_timeout: int = Field(
        300,
        ge=10,
        le=MAX_GATE_SECONDS,
        description="seconds torchrun's agents (--torchrun) wait for every node to join the rendezvous before the "
        "job fails (torch's default is 600)",
    )
    max_restarts: int = Field(
        0,
        ge=0,
        le=MAX_RESTARTS,
        description="how often torchrun (--torchrun) restarts every worker of the job after one fails, in place, "
        "before the job fails (the program resumes from its checkpoint)",
    )


class Elastic(StrictModel):
    """Elastic Horovod (`horovodrun --gloo --min-np --max-np --host-discovery-script`): a lost node
    leaves the job running on the others, and a node that comes back is taken in again. Example::

        faults:
          elastic: {min_np: 2, max_np: 4, discovery: hostfile, cooldown: [10, 300]}

    `discovery` says where the generated discovery script finds the hosts each second: `hostfile`
    (the --hostfile of `launch`, read again at each check: a host whose ssh port does not answer is
    left out) or `slurm` (the job's nodes that SLURM does not mark down, drained or failing).
    """

    min_np: PositiveInt = Field(le=MAX_RANKS, description="fewest ranks the job goes on with")
    max_np: PositiveInt | None = Field(None, le=MAX_RANKS, description="most ranks it grows to; default: --np")
    discovery: Literal["hostfile", "slurm"] = Field(description="where the hosts come from: hostfile or slurm")
    cooldown: tuple[Annotated[int, Field(ge=1, le=3600)], Annotated[int, Field(ge=1, le=3600)]] = Field(
        (10, 300),
        description="seconds [min, max] a host whose ranks failed is left out before it is tried again "
        "(horovodrun --blacklist-cooldown-range; doubled at each failure)",
    )
    ssh_port: int = Field(22, ge=1, le=MAX_PORT, description="the port the hostfile discovery probes on each host")
    discovery_interval: int = Field(
        30,
        ge=1,
        le=3600,
        description="seconds the slurm discovery reuses SLURM's node states (one sinfo per job per interval, "
        "not per second: the controller's load stays bounded); a failed node leaves the list within it",
    )


class Faults(StrictModel):
    """What ends a job that cannot go on, and what saves its work: a rank stopped (SIGSTOP, a hung
    device) or a node's link gone down leaves every other rank waiting inside MPI, where TCP's
    retries take many minutes, while the processes stay alive and the allocation burns; a time
    limit or a failed node ends a job whose work only its checkpoints keep."""

    kill_on_bad_exit: bool = Field(
        True,
        description="srun ends the whole step when one rank fails (--kill-on-bad-exit=1), "
        "instead of leaving the others in their next collective until the time limit",
    )
    stall_seconds: PositiveInt | None = Field(
        None,
        le=MAX_SECONDS,
        description="`launch --exec` and the sbatch script stop the job after this many seconds without a "
        "line of its output "
        "(longer than the program's quietest stretch: an epoch, a checkpoint); none: off",
    )
    signal_before_end: PositiveInt | None = Field(
        None,
        le=MAX_SIGNAL_SECONDS,
        description="sbatch asks SLURM for SIGUSR1 this many seconds before the time limit "
        "(--signal=B:USR1@N); the script passes it to the ranks, which finish the epoch, checkpoint "
        "and stop (longer than an epoch plus a checkpoint); none: off",
    )
    requeue: bool = Field(
        False,
        description="sbatch asks for --requeue (output appended, not overwritten): SLURM requeues the job "
        "when a node fails, and the script requeues it after the time-limit signal, to resume from "
        "its checkpoint",
    )
    elastic: Elastic | None = Field(None, description="elastic Horovod: go on with fewer ranks when a node is lost")


class Slurm(StrictModel):
    """#SBATCH settings and what the batch script runs before launching."""

    job_name: Word = Field("horovod", description="#SBATCH --job-name")
    partition: Word | None = Field(None, description="#SBATCH --partition")
    account: Word | None = Field(None, description="#SBATCH --account")
    qos: Word | None = Field(None, description="#SBATCH --qos")
    time: SlurmTime | None = Field(None, description="e.g. 02:00:00 or 1-00:00:00")
    gres: Word | None = Field(None, description="#SBATCH --gres, e.g. gpu:8")
    mem: Word | None = Field(
        None,
        description="#SBATCH --mem, memory per node (e.g. 480G); default 0 (all of it) with --exclusive in "
        "slurm.options, where SLURM would otherwise give DefMemPerCPU",
    )
    constraint: Word | None = Field(None, description="#SBATCH --constraint (node features)")
    options: list[Word] = Field(default_factory=list, description="more #SBATCH options, e.g. --exclusive")
    modules: list[Word] = Field(default_factory=list, description="environment modules loaded before the launch")
    prologue: list[str] = Field(default_factory=list, description="shell lines run before the launch")
    spool_dir: AbsPath = Field(
        "/var/spool/slurmd",
        description="slurmd's SlurmdSpoolDir (`scontrol show config`), where srun --mpi=pmix puts "
        "the PMIx server's directory (PMIX_SERVER_TMPDIR) that containers must see",
    )


class Site(StrictModel):
    """One cluster. See site_configs/*.yaml for complete examples."""

    name: Name = Field(description="the site's name, the same as its file name without .yaml")
    description: Line = Field(description="one line on what the cluster is")
    mpi: HostMpi
    launcher: LauncherSettings
    container: Container = Field(default_factory=Container)
    export: list[EnvName] = Field(default_factory=list, description="variables forwarded from the launching shell")
    env: dict[EnvName, Scalar] = Field(default_factory=dict, description="variables set in every rank")
    mca: dict[McaName, Scalar] = Field(default_factory=dict, description="Open MPI MCA parameters for every rank")
    wrappers: list[Annotated[list[str], Field(min_length=1)]] = Field(
        default_factory=list, description="per-rank commands around the program"
    )
    node: Node
    network: Network
    slurm: Slurm = Field(default_factory=Slurm)
    gate: Gate = Field(default_factory=Gate)
    faults: Faults = Field(default_factory=Faults)
    torch: Torch = Field(default_factory=Torch)
    why: dict[str, str] = Field(default_factory=dict, description="site key -> one line of why, shown by --explain")
    _where: str = PrivateAttr(default="")

    @property
    def where(self) -> str:
        """The file the site came from (for error messages)."""
        return self._where or f"site {self.name}"

    def problem(self, key: str, problem: str, fix: str = "") -> UserError:
        """A UserError at `key` of this site's file."""
        return UserError.at(self.where, key, problem, fix)


def read_site(ref: str, sites_dir: Path) -> Site:
    """Read a site by name or path and validate its shape; its `name` must match the file name.

    Shape only: hpcbundle.rules.loading.load_site reads it and also refuses the combinations the rules fail.
    """
    path = named_file(ref, sites_dir, "site")
    site = validate(Site, read_yaml(path), str(path))
    site._where = str(path)
    if site.name != path.stem:
        raise site.problem(
            "name", f"is {site.name!r} but the file is {path.name}", f"set name: {path.stem} or rename the file"
        )
    return site
