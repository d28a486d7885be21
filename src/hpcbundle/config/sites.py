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

Loading checks the schema and the combinations a site can judge alone; the launcher and
runtime registries add theirs (hpcbundle.launch.load_site).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, NamedTuple

from pydantic import AfterValidator, BeforeValidator, Field, PositiveInt, PrivateAttr

from .errors import UserError, clip
from .fields import Line, Name, Version
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
SlurmTime = Annotated[str, _matching(SLURM_TIME, "a SLURM time like 30, 02:00:00 or 1-00:00:00")]


# The variables that choose a program's interpreter, its modules and their libraries: what a
# launching shell with an activated venv or conda env holds, and what a rank on another node lacks
# unless the launcher forwards it (site `export`). `site detect` drafts the ones that are set;
# exported into a container they would replace the image's own.
PROGRAM_ENV = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME")


class Problem(NamedTuple):
    """One bad combination: the site key, what is wrong, how to fix it."""

    key: str
    problem: str
    fix: str = ""


class HostMpi(StrictModel):
    """The MPI installed on the cluster, whose launcher starts the ranks."""

    flavour: Literal["openmpi", "intelmpi", "mpich", "mvapich2"]
    version: Version


class Launcher(StrictModel):
    """Which registered launcher starts the ranks, and its options (each launcher honours its own)."""

    name: str = Field(min_length=1, description="mpirun, mpirun5, mpiexec.hydra, srun, horovodrun")
    command: Word | None = Field(None, description="the executable, when not the launcher's usual name")
    tag_output: bool = Field(False, description="prefix each output line with its rank")
    allow_run_as_root: bool = False
    oversubscribe: bool = Field(False, description="more ranks than cores on a node")
    bind_to: Word | None = None
    map_by: Word | None = None
    single_dash: bool = Field(False, description="Open MPI <= 4 spellings -mca/-bind-to/-map-by")
    pmi: Word | None = Field(None, description="srun --mpi plugin, e.g. pmix")
    gloo: bool = Field(False, description="horovodrun --gloo instead of MPI")
    args: list[str] = Field(default_factory=list, description="extra launcher options, verbatim")
    timeout: PositiveInt = Field(
        3600, le=7 * 24 * 3600, description="seconds `launch --exec` may run before the job is killed"
    )


class Container(StrictModel):
    """The container runtime that runs one image per rank (or none: the host's own software)."""

    runtime: str = "none"
    command: Word | None = None
    gpu: bool = Field(False, description="expose the host's NVIDIA driver and GPUs (--nv, --gpus all)")
    userns: bool | None = Field(None, description="runs unprivileged in a user namespace (default: the runtime's)")
    binds: list[Bind] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)


class Node(StrictModel):
    """One compute node: what it has, and how many ranks go on it."""

    cores: PositiveInt
    gpus: int = Field(0, ge=0)
    gpu_model: str | None = None
    driver: Version | None = Field(None, description="NVIDIA driver version on the nodes")
    ranks_per_node: PositiveInt | None = Field(None, description="default: one rank per GPU, else per core")
    numa_memory: list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        description="the NUMA nodes that have memory (`numactl -H`), e.g. [0] on KNL in cache mode, "
        "[0, 1] in flat-quadrant mode (node 1 is MCDRAM)",
    )

    @property
    def slots(self) -> int:
        """Ranks one node takes: ranks_per_node, else one per GPU, else one per core."""
        return self.ranks_per_node or self.gpus or self.cores


class Network(StrictModel):
    """The fabric, and the interfaces MPI and NCCL talk over (see interface_settings)."""

    fabric: Literal["infiniband", "roce", "ethernet", "omnipath", "loopback"]
    interfaces: list[Word] = Field(
        default_factory=list,
        description="TCP interfaces MPI and NCCL may use: "
        "btl/oob_tcp_if_include and NCCL_SOCKET_IFNAME unless the site sets them",
    )
    link_gbps: float | None = Field(
        None,
        gt=0,
        le=100_000,
        allow_inf_nan=False,
        description="the data link's rated speed in Gbit/s, which the launch gate's busbw is judged against",
    )


class Gate(StrictModel):
    """The launch gate (`launch --gate`, `sbatch --gate`): a short allreduce that proves the fabric first."""

    threshold: float = Field(
        0.5, allow_inf_nan=False, description="the least busbw the gate accepts, as a fraction of network.link_gbps"
    )
    timeout: PositiveInt = Field(
        30, le=3600, description="seconds the gate may take before it is killed (a hung interface)"
    )


class Slurm(StrictModel):
    """#SBATCH settings and what the batch script runs before launching."""

    job_name: Word = "horovod"
    partition: Word | None = None
    account: Word | None = None
    qos: Word | None = None
    time: SlurmTime | None = Field(None, description="e.g. 02:00:00 or 1-00:00:00")
    gres: Word | None = None
    constraint: Word | None = None
    options: list[Word] = Field(default_factory=list, description="more #SBATCH options, e.g. --exclusive")
    modules: list[Word] = Field(default_factory=list)
    prologue: list[str] = Field(default_factory=list, description="shell lines run before the launch")
    spool_dir: AbsPath = Field(
        "/var/spool/slurmd",
        description="slurmd's SlurmdSpoolDir (`scontrol show config`), where srun --mpi=pmix puts "
        "the PMIx server's directory (PMIX_SERVER_TMPDIR) that containers must see",
    )


class Site(StrictModel):
    """One cluster. See site_configs/*.yaml for complete examples."""

    name: Name
    description: Line
    mpi: HostMpi
    launcher: Launcher
    container: Container = Field(default_factory=Container)
    export: list[EnvName] = Field(default_factory=list, description="variables forwarded from the launching shell")
    env: dict[EnvName, Scalar] = Field(default_factory=dict, description="variables set in every rank")
    mca: dict[McaName, Scalar] = Field(default_factory=dict)
    wrappers: list[Annotated[list[str], Field(min_length=1)]] = Field(
        default_factory=list, description="per-rank commands around the program"
    )
    node: Node
    network: Network
    slurm: Slurm = Field(default_factory=Slurm)
    gate: Gate = Field(default_factory=Gate)
    why: dict[str, str] = Field(default_factory=dict, description="site key -> one line of why, shown by --explain")
    _where: str = PrivateAttr(default="")

    @property
    def where(self) -> str:
        """The file the site came from (for error messages)."""
        return self._where or f"site {self.name}"

    def problem(self, key: str, problem: str, fix: str = "") -> UserError:
        """A UserError at `key` of this site's file."""
        return UserError.at(self.where, key, problem, fix)


def site_problems(site: Site) -> list[Problem]:
    """Combinations a site can judge alone (the registries add launcher and runtime ones)."""
    found = [
        Problem(f"env.{k}", "a value cannot hold a newline", "put it on one line")
        for k, v in site.env.items()
        if "\n" in v
    ]
    if "plm_rsh_agent" in site.mca and _unsplittable(site.mca["plm_rsh_agent"]):
        found.append(
            Problem("mca.plm_rsh_agent", "has an unbalanced quote or backslash", "write the agent as shell words")
        )
    if site.mca and site.mpi.flavour != "openmpi":
        found.append(
            Problem(
                "mca",
                f"MCA parameters are Open MPI's; this site's MPI is {site.mpi.flavour}",
                "set the MPI's own variables in env",
            )
        )
    for key in sorted(set(site.export) & set(site.env)):
        found.append(Problem(f"export.{key}", "is both exported and set in env", "keep it in one of them"))
    if site.node.gpus and site.node.gpu_model is None:
        found.append(
            Problem(
                "node.gpu_model", f"node.gpus is {site.node.gpus} but no GPU model is given", "add e.g. gpu_model: A100"
            )
        )
    if not site.node.gpus and (site.node.gpu_model or site.node.driver or site.container.gpu):
        key = "container.gpu" if site.container.gpu else "node.gpu_model" if site.node.gpu_model else "node.driver"
        found.append(Problem(key, "the site has no GPUs (node.gpus: 0)", "set node.gpus or drop it"))
    for index, wrapper in enumerate(site.wrappers):
        if wrapper[0].startswith("-"):
            found.append(
                Problem(
                    f"wrappers[{index}]",
                    f"starts with an option ({wrapper[0]!r}), not a command",
                    "e.g. [taskset, -c, 0-63]",
                )
            )
    found += fabric_problems(site)
    if not 0 < site.gate.threshold <= 1:
        found.append(
            Problem(
                "gate.threshold",
                f"{site.gate.threshold:g} is outside (0, 1]",
                "give the least busbw the gate accepts as a fraction of network.link_gbps, e.g. 0.5",
            )
        )
    data = site.model_dump()
    for key in site.why:
        if not _has_key(data, key):
            found.append(
                Problem(
                    f"why.{key}",
                    "names no key of this site",
                    "use a dotted key such as env.NCCL_SOCKET_IFNAME or wrappers[0]",
                )
            )
    return found


TCP_FABRICS = ("ethernet", "loopback")
RDMA_ENV = ("NCCL_IB_", "UCX_IB_", "UCX_RC_", "UCX_DC_", "UCX_UD_")
RDMA_MCA = ("btl_openib_",)


def fabric_problems(site: Site) -> list[Problem]:
    """Settings of an RDMA fabric (verbs adapters, the openib btl) on a site whose fabric is TCP.

    NCCL_IB_DISABLE is the one NCCL_IB_* variable that fits a TCP fabric; UCX_NET_DEVICES may name
    a TCP interface (eth0) there, never an adapter port (mlx5_0:1).
    """
    fabric = site.network.fabric
    if fabric not in TCP_FABRICS:
        return []
    but = f"but network.fabric is {fabric}"
    fix = "drop it, or set network.fabric to infiniband or roce if the nodes have that fabric"
    found = [
        Problem(f"env.{name}", f"is an InfiniBand/RoCE adapter setting, {but}", fix)
        for name in site.env
        if name.startswith(RDMA_ENV) and name != "NCCL_IB_DISABLE"
    ]
    ports = [d.strip() for d in site.env.get("UCX_NET_DEVICES", "").split(",") if re.fullmatch(r"\w+:\d+", d.strip())]
    if ports:
        found.append(
            Problem(
                "env.UCX_NET_DEVICES",
                f"names the adapter port {ports[0]}, {but}",
                f"name a TCP interface such as eth0, or {fix}",
            )
        )
    found += [
        Problem(f"mca.{name}", f"is a setting of the openib btl (InfiniBand verbs), {but}", fix)
        for name in site.mca
        if name.startswith(RDMA_MCA)
    ]
    if "openib" in site.mca.get("btl", "").split(","):
        found.append(
            Problem("mca.btl", f"selects the openib btl (InfiniBand verbs), {but}", f"use self,vader,tcp, or {fix}")
        )
    return found


def _unsplittable(words: str) -> bool:
    """Whether `words` cannot be split as shell words (an unbalanced quote, a trailing backslash)."""
    try:
        shlex.split(words)
    except ValueError:
        return True
    return False


# Site keys that name network interfaces, in the order interface_settings reports them.
INTERFACE_KEYS = (
    "network.interfaces",
    "mca.btl_tcp_if_include",
    "mca.oob_tcp_if_include",
    "env.NCCL_SOCKET_IFNAME",
    "env.GLOO_SOCKET_IFNAME",
    "env.HOROVOD_GLOO_IFACE",
)


class Setting(NamedTuple):
    """An effective site value and the site key it came from: the key itself, or network.interfaces."""

    value: str
    source: str


def derived_interfaces(site: Site) -> dict[str, str]:
    """The settings network.interfaces gives a site that does not set them itself (key -> value).

    btl_tcp_if_include and oob_tcp_if_include on Open MPI sites only (Intel MPI and MPICH have
    no such parameters), NCCL_SOCKET_IFNAME on GPU sites only (NCCL runs nowhere else). The Gloo
    variables are never derived: horovodrun sets HOROVOD_GLOO_IFACE itself from its own flag.
    """
    names = ",".join(site.network.interfaces)
    derived: dict[str, str] = {}
    if names and site.mpi.flavour == "openmpi":
        derived |= {"mca.btl_tcp_if_include": names, "mca.oob_tcp_if_include": names}
    if names and site.node.gpus:
        derived["env.NCCL_SOCKET_IFNAME"] = names
    return derived


def interface_settings(site: Site) -> dict[str, Setting]:
    """Every interface setting of a site in INTERFACE_KEYS order, key -> (value, source).

    ONE source: a key the site sets itself (mca.*, env.*) wins and is its own source; otherwise
    it is derived from network.interfaces (see derived_interfaces) and says so. Keys that are
    neither set nor derived are left out. Launchers pass the derived ones they need (srun starts no
    daemons, so no oob_tcp_if_include; hydra and horovodrun have their own interface option), and
    `launch --explain` names the source of each. Example: a GPU site that moves only the
    launcher's daemons to another interface::

        >>> site = Site.model_validate({"name": "demo", "description": "2 GPU nodes on eth0",
        ...     "mpi": {"flavour": "openmpi", "version": "4.1.6"}, "launcher": {"name": "mpirun"},
        ...     "node": {"cores": 8, "gpus": 2, "gpu_model": "A100"},
        ...     "network": {"fabric": "ethernet", "interfaces": ["eth0"]},
        ...     "mca": {"oob_tcp_if_include": "eth1"}})
        >>> for key, (value, source) in interface_settings(site).items():
        ...     print(f"{key:23} {value}  <- {source}")
        network.interfaces      eth0  <- network.interfaces
        mca.btl_tcp_if_include  eth0  <- network.interfaces
        mca.oob_tcp_if_include  eth1  <- mca.oob_tcp_if_include
        env.NCCL_SOCKET_IFNAME  eth0  <- network.interfaces
    """
    explicit = {f"mca.{k}": v for k, v in site.mca.items()} | {f"env.{k}": v for k, v in site.env.items()}
    if site.network.interfaces:
        explicit["network.interfaces"] = ",".join(site.network.interfaces)
    derived = derived_interfaces(site)
    found: dict[str, Setting] = {}
    for key in INTERFACE_KEYS:
        if key in explicit:
            found[key] = Setting(explicit[key], key)
        elif key in derived:
            found[key] = Setting(derived[key], "network.interfaces")
    return found


def _has_key(data: Any, dotted: str) -> bool:
    """Whether `dotted` ('env.X', 'wrappers[0]', 'launcher.name') names a key present in `data`."""
    node = data
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", dotted):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(node, list) or index >= len(node):
                return False
            node = node[index]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False
    return True


def load_site(ref: str, sites_dir: Path, checks: Callable[[Site], list[Problem]] | None = None) -> Site:
    """Load a site by name or path: schema, name = file name, site_problems and `checks`; all errors at once."""
    path = named_file(ref, sites_dir, "site")
    site = validate(Site, read_yaml(path), str(path))
    site._where = str(path)
    found = site_problems(site) + (checks(site) if checks else [])
    if site.name != path.stem:
        found.insert(
            0,
            Problem(
                "name", f"is {site.name!r} but the file is {path.name}", f"set name: {path.stem} or rename the file"
            ),
        )
    raise_problems(site, found)
    return site


def raise_problems(site: Site, found: list[Problem]) -> None:
    """Raise every problem as one UserError line each (nothing when the list is empty)."""
    if found:
        raise UserError(*(site.problem(*p).lines[0] for p in found))
