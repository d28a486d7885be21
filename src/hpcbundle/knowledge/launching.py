"""What each launcher and container runtime can do, stated once: the rules judge a site by it, and
the launch classes (launch/launchers/, launch/runtimes/) take their attributes from it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..config.sites import Site
from .network import DERIVABLE_KEYS

ALL_FLAVOURS = frozenset({"openmpi", "intelmpi", "mpich", "mvapich2"})
# launcher.* keys every launcher reads; the rest are honoured only by launchers listing them.
COMMON_KEYS = frozenset({"name", "command", "args", "timeout"})
OPEN_MPI_OPTIONS = frozenset({"allow_run_as_root", "tag_output", "oversubscribe", "bind_to", "map_by", "single_dash"})


@dataclass(frozen=True)
class LauncherKnown:
    """One launcher: the MPI flavours it starts, the launcher.* keys it honours, the interface settings it
    takes from network.interfaces, and its fixed habits.

    command          the executable it runs (launcher.command overrides it)
    flavours         the host MPI flavours whose ranks it starts (mpi.flavour)
    options          the launcher.* keys it honours besides the common ones (name, command, args, timeout)
    interface_keys   the settings derived from network.interfaces that it passes
    reads_allocation it places the ranks on the nodes of the SLURM allocation it runs in
    takes_hosts      it takes the hosts from --hosts or --hostfile (srun takes the allocation's)
    openmpi_syntax   the Open MPI major whose mpirun spelling it speaks (None: not an Open MPI mpirun)
    single_dash_only it passes Open MPI options with single dashes itself (Open MPI 5 rejects them)
    own_mca          MCA parameters it passes itself, which win over the site's
    interface_flag   it confines MPI and NCCL to network.interfaces with its own option
    max_interfaces   how many interfaces that option takes (None: any number)
    openmpi_daemons  with Open MPI ranks it starts Open MPI's daemons (orted, prted) on the nodes over ssh,
                     whose out-of-band channel picks any interface up
    mpi_own          it is the launcher an MPI library installs (what `site detect` drafts for the host MPI)
    rank_env         the variables that give each rank it starts its rank (the program probe reads one)
    local_rank_env   the variables that give each rank its rank on its node (hpcbundle-bind reads one)
    torch_ranks      where hpcbundle-torchenv reads a rank's RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE
                     (knowledge/torchenv.py: ompi, slurm, hydra); "": it cannot start torch.distributed ranks
    export_option    the option that forwards a variable of the launching shell ("": it forwards them all)
    workdir_option   the option that starts every rank in a directory ("": none, the ranks start where it
                     runs; ending in "=": the path is joined to it)
    env_on_ssh_lines with launcher.gloo it writes every exported variable of its shell onto each ssh command
                     line it runs (readable through ps on every node)

    Whether the ranks talk MPI, and through which SLURM MPI plugin, are the keys it honours: launcher.gloo
    (gloo_rendezvous below) and launcher.pmi.
    """

    command: str
    flavours: frozenset[str]
    options: frozenset[str] = frozenset()
    interface_keys: frozenset[str] = DERIVABLE_KEYS
    reads_allocation: bool = True
    takes_hosts: bool = True
    openmpi_syntax: Literal[4, 5] | None = None
    single_dash_only: bool = False
    own_mca: tuple[str, ...] = ()
    interface_flag: bool = False
    max_interfaces: int | None = None
    openmpi_daemons: bool = False
    mpi_own: bool = False
    rank_env: tuple[str, ...] = ()
    local_rank_env: tuple[str, ...] = ()
    torch_ranks: str = ""
    export_option: str = ""
    workdir_option: str = ""
    env_on_ssh_lines: bool = False


@dataclass(frozen=True)
class RuntimeKnown:
    """One container runtime: its command, whether ranks run in a user namespace by default, whether it
    needs an image, whether one container holds the launcher, the variables whose image value always
    wins, and how GPUs reach the container when it has no GPU flag (`gpu_instead`).

    command              the executable it runs ("": none, the program runs on the host)
    userns               its containers run in a user namespace by default (container.userns overrides it)
    needs_image          it runs an image: False only where the program runs on the host's software
    wraps_launcher       one container on the launching node holds the launcher and all its ranks
    image_keeps          variables whose image value always wins over the launching shell's
    gpu_instead          how GPUs reach its containers where it has no GPU option (container.gpu is refused)
    gpus_from_image_env  when its NVIDIA hook reads the image's NVIDIA_VISIBLE_DEVICES and
                         NVIDIA_DRIVER_CAPABILITIES: "always" (enroot: no GPU without them) or
                         "without --gpus" (the NVIDIA container toolkit under Docker/podman)
    srun_plugin          its options are srun's own (a SPANK plugin such as pyxis): only the srun launcher
                         takes them, and they come right after srun's options
    detect_option        how doctor finds it on a node: "" when `command --version` answers; else the option
                         that `command --help` lists when it is installed (a plugin with no binary of its own)
    install              what a node needs for it (default: the runtime's name), for doctor's fix
    userns_args          its options that run the container in a user namespace whatever its default
    image_keeps_with     (option, variables): with that option in container.args it also keeps those
                         variables' image values (ch-run --set-env applies the image's environment)
    sets_workdir         it starts the program in the user's working directory itself (pyxis
                         --container-workdir, docker -w, ch-run --cd); otherwise the program starts
                         where the launcher starts the rank
    contain_args         its options that keep it from binding the directory it starts in (which it binds, and
                         starts the program in, by default); `--no-mount` too where its list names cwd
    no_ptrace            its containers lack CAP_SYS_PTRACE by default, so the kernel refuses CMA
                         (process_vm_readv) between the ranks in one container (Docker's and podman's defaults)
    mount_separators     the characters that split its mount of the working directory (docker -v SRC:DST,
                         ch-run -b SRC:DST, pyxis --container-mounts=SRC:DST,SRC:DST); "": it mounts none
    enroot               it runs enroot's images: --image is an absolute squashfs path or an enroot reference, and
                         enroot's PMIx hook (or container.pmix_spool_mount) mounts the PMIx server's directory
    named_images         --image may name an image in its engine's own store rather than a file on the nodes
    converts             the --image sources it converts into an image of its own on every start, in one cache
                         (Apptainer/Singularity build a SIF from docker://, oci: and the like)
    alias_of             the runtime that may install this one's command as its compatibility name (Apptainer
                         installs `singularity`): doctor tells them apart by the first word of `COMMAND --version`
    """

    command: str
    userns: bool = False
    needs_image: bool = True
    wraps_launcher: bool = False
    image_keeps: frozenset[str] = frozenset()
    gpu_instead: str = ""
    gpus_from_image_env: Literal["always", "without --gpus"] | None = None
    srun_plugin: bool = False
    detect_option: str = ""
    install: str = ""
    userns_args: frozenset[str] = frozenset()
    image_keeps_with: tuple[str, frozenset[str]] | None = None
    sets_workdir: bool = False
    contain_args: frozenset[str] = frozenset()
    no_ptrace: bool = False
    mount_separators: str = ""
    enroot: bool = False
    named_images: bool = False
    converts: tuple[str, ...] = ()
    alias_of: str = ""


MPIRUN = LauncherKnown(
    "mpirun",
    frozenset({"openmpi"}),
    OPEN_MPI_OPTIONS,
    openmpi_syntax=4,
    openmpi_daemons=True,
    mpi_own=True,
    rank_env=("OMPI_COMM_WORLD_RANK",),
    local_rank_env=("OMPI_COMM_WORLD_LOCAL_RANK",),
    torch_ranks="ompi",
    export_option="-x",
    workdir_option="--wdir",
)
"""Open MPI's mpirun, 3/4 spelling (rank variables: docs.open-mpi.org, "Environment variables set for MPI
applications"); Open MPI 5's is the same but for its spelling."""
LAUNCHERS_KNOWN: dict[str, LauncherKnown] = {
    # Horovod's gloo_run sets HOROVOD_RANK and HOROVOD_LOCAL_RANK; over MPI the mpirun it builds sets the MPI's own.
    "horovodrun": LauncherKnown(
        "horovodrun",
        ALL_FLAVOURS,
        frozenset({"gloo"}),
        interface_keys=frozenset(),  # --network-interface sets them
        reads_allocation=False,
        single_dash_only=True,
        own_mca=("pml", "btl"),
        interface_flag=True,
        openmpi_daemons=True,
        rank_env=("HOROVOD_RANK",),
        local_rank_env=("HOROVOD_LOCAL_RANK",),
        env_on_ssh_lines=True,  # runner/gloo_run.py: `env K=V ...` of its whole environment on each ssh line
    ),
    # Intel MPI's Hydra sets PMI_RANK and MPI_LOCALRANKID in every rank (its reference lists them among the
    # variables Hydra does not propagate); MPICH's Hydra the same.
    "mpiexec.hydra": LauncherKnown(
        "mpiexec.hydra",
        frozenset({"intelmpi", "mpich", "mvapich2"}),
        frozenset({"tag_output"}),
        interface_keys=frozenset({"env.NCCL_SOCKET_IFNAME"}),  # -iface for MPI; no Open MPI MCA
        max_interfaces=1,
        mpi_own=True,
        rank_env=("PMI_RANK",),
        local_rank_env=("MPI_LOCALRANKID",),
        torch_ranks="hydra",
        workdir_option="-wdir",
    ),
    "mpirun": MPIRUN,
    "mpirun5": replace(MPIRUN, openmpi_syntax=5),
    # srun sets SLURM_PROCID and SLURM_LOCALID in every task (srun(1), OUTPUT ENVIRONMENT VARIABLES).
    "srun": LauncherKnown(
        "srun",
        ALL_FLAVOURS,
        frozenset({"pmi", "tag_output"}),
        # No mpirun daemons, so no oob traffic: of the derived interface settings, btl and NCCL only.
        interface_keys=frozenset({"mca.btl_tcp_if_include", "env.NCCL_SOCKET_IFNAME"}),
        takes_hosts=False,
        rank_env=("SLURM_PROCID",),
        local_rank_env=("SLURM_LOCALID",),
        torch_ranks="slurm",
        workdir_option="--chdir=",
    ),
}

SINGULARITY_KEEPS = frozenset({"PATH", "LD_LIBRARY_PATH"})
# `exec --userns` (-u), and --fakeroot (-f), which maps the user to root inside a user namespace.
SINGULARITY_USERNS = frozenset({"--userns", "-u", "--fakeroot", "-f"})
# exec --contain (-c), --containall (-C): no host file systems but the binds named (Apptainer: Bind Paths and Mounts).
SINGULARITY_CONTAIN = frozenset({"--contain", "-c", "--containall", "-C"})
# The OCI sources `exec` builds a SIF from, in the user's cache, before it runs (Apptainer: Support for Docker and
# OCI Containers); library:// and oras:// fetch a SIF as it is.
SINGULARITY_CONVERTS = ("docker://", "docker-daemon:", "docker-archive:", "oci:", "oci-archive:")
DOCKER = RuntimeKnown(
    "docker",
    wraps_launcher=True,
    gpus_from_image_env="without --gpus",
    sets_workdir=True,
    no_ptrace=True,
    mount_separators=":",
    named_images=True,
)
"""Docker's engine; podman is the same but for its command."""
RUNTIMES_KNOWN: dict[str, RuntimeKnown] = {
    "apptainer": RuntimeKnown(
        "apptainer",
        userns=True,
        image_keeps=SINGULARITY_KEEPS,
        userns_args=SINGULARITY_USERNS,
        contain_args=SINGULARITY_CONTAIN,
        converts=SINGULARITY_CONVERTS,
    ),
    # ch-run passes the host environment; --set-env then applies the image's (its PATH at least).
    "charliecloud": RuntimeKnown(
        "ch-run",
        userns=True,
        gpu_instead="inject the driver once with `ch-fromhost --nvidia IMAGE`",
        image_keeps_with=("--set-env", frozenset({"PATH"})),
        sets_workdir=True,
        mount_separators=":",
    ),
    "docker": DOCKER,
    "none": RuntimeKnown("", needs_image=False),
    # pyxis (NVIDIA/pyxis README: --container-image, --container-mounts, --container-env), enroot underneath:
    # the image's environment wins over the host's unless --container-env names the variable. It has no
    # binary: its README shows `srun --help` listing its options once plugstack.conf loads it.
    "pyxis": RuntimeKnown(
        "srun",
        userns=True,
        image_keeps=SINGULARITY_KEEPS,
        gpus_from_image_env="always",
        srun_plugin=True,
        detect_option="--container-image",
        install="pyxis and enroot",
        sets_workdir=True,
        mount_separators=":,",
        enroot=True,
    ),
    "podman": replace(DOCKER, command="podman"),
    # Apptainer installs `singularity` as its compatibility name; SingularityCE's answers `singularity-ce version`.
    "singularity": RuntimeKnown(
        "singularity",
        image_keeps=SINGULARITY_KEEPS,
        userns_args=SINGULARITY_USERNS,
        contain_args=SINGULARITY_CONTAIN,
        converts=SINGULARITY_CONVERTS,
        alias_of="apptainer",
    ),
}


def runtime_detection() -> dict[str, list[str]]:
    """What the node probe looks for: runtime name -> [command, the option its --help lists, or "" for --version].

    >>> runtime_detection()["pyxis"], runtime_detection()["charliecloud"]
    (['srun', '--container-image'], ['ch-run', ''])
    """
    return {name: [known.command, known.detect_option] for name, known in RUNTIMES_KNOWN.items() if known.command}


def image_env_kept(site: Site) -> frozenset[str]:
    """The variables whose image value the program sees whatever the launching shell exports.

    >>> from hpcbundle.config.sites import Site
    >>> site = Site.model_validate({"name": "c", "description": "d", "mpi": {"flavour": "openmpi",
    ...     "version": "4.1.6"}, "launcher": {"name": "mpirun"}, "container": {"runtime": "charliecloud",
    ...     "args": ["--set-env"]}, "node": {"cores": 4}, "network": {"fabric": "ethernet"}})
    >>> sorted(image_env_kept(site))
    ['PATH']
    """
    known = RUNTIMES_KNOWN.get(site.container.runtime)
    if known is None:
        return frozenset()
    option, more = known.image_keeps_with or ("", frozenset())
    return known.image_keeps | more if option and option in site.container.args else known.image_keeps


def gloo_capable(name: str) -> bool:
    """Whether launcher `name` honours launcher.gloo: it can start the ranks over ssh through Gloo's rendezvous
    instead of MPI (horovodrun --gloo), which switches Horovod's controller and is what elastic Horovod needs."""
    known = LAUNCHERS_KNOWN.get(name)
    return known is not None and "gloo" in known.options


def ranks_use_mpi(site: Site) -> bool:
    """Whether the ranks talk over MPI, so that the MPI rules (host MPI, ABI match, btls) judge the site:
    every launcher does but one with launcher.gloo (gloo_capable), whose ranks Gloo's rendezvous wires
    (no mpirun, no MPI between ranks).
    """
    return not (site.launcher.gloo and gloo_capable(site.launcher.name))


def in_container(site: Site) -> bool:
    """Whether the site's programs run in a container: every runtime but the one that needs no image (none)."""
    known = RUNTIMES_KNOWN.get(site.container.runtime)
    return known is None or known.needs_image


def runtime_behind(name: str, version: str) -> str:
    """The runtime that answers to `name`, given the first line of its `--version` (what doctor reads): the one
    whose compatibility name it is where that line names it, else `name` itself.

    >>> runtime_behind("singularity", "apptainer version 1.3.4")
    'apptainer'
    >>> runtime_behind("singularity", "singularity-ce version 4.1.0")
    'singularity'
    """
    alias_of = getattr(RUNTIMES_KNOWN.get(name), "alias_of", "")
    return alias_of if alias_of and version.split()[:1] == [RUNTIMES_KNOWN[alias_of].command] else name


def in_user_namespace(site: Site, version: str = "") -> bool:
    """Whether the site's containers run in a user namespace: container.userns, else an option in
    container.args that asks for one (`singularity exec --userns`), else the default of the runtime that answers
    (runtime_behind: Apptainer's, where `singularity --version` printed `version`)."""
    if site.container.userns is not None:
        return site.container.userns
    known = RUNTIMES_KNOWN.get(runtime_behind(site.container.runtime, version))
    if known is None:
        return False
    return known.userns or any(arg.split("=", 1)[0] in known.userns_args for arg in site.container.args)


def cwd_unbound_by(site: Site) -> str | None:
    """The container.args option that keeps an Apptainer/Singularity site from binding the working directory
    (its contain_args, or `--no-mount` with cwd in its list), or None: then relative paths do not reach the host.

    >>> from hpcbundle.config.sites import Site
    >>> def site(*args):
    ...     return Site.model_validate({"name": "c", "description": "d", "mpi": {"flavour": "openmpi",
    ...         "version": "4.1.6"}, "launcher": {"name": "mpirun"}, "container": {"runtime": "apptainer",
    ...         "args": list(args)}, "node": {"cores": 4}, "network": {"fabric": "ethernet"}})
    >>> cwd_unbound_by(site("--cleanenv", "-C")), cwd_unbound_by(site("--no-mount", "tmp,cwd"))
    ('-C', '--no-mount tmp,cwd')
    >>> cwd_unbound_by(site("--no-mount=home")) is None
    True
    """
    known = RUNTIMES_KNOWN.get(site.container.runtime)
    if known is None or not known.contain_args:
        return None
    args = site.container.args
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in known.contain_args:
            return arg
        if name == "--no-mount":
            listed = value if equals else args[index + 1] if index + 1 < len(args) else ""
            if "cwd" in listed.split(","):
                return arg if equals else f"{arg} {listed}"
    return None


def ptrace_refused(site: Site) -> bool:
    """Whether the site's containers lack CAP_SYS_PTRACE (the runtime's no_ptrace), unless container.args grant it
    (`--cap-add SYS_PTRACE`, `--cap-add=ALL`, `--privileged`): then CMA between the ranks of one container fails.

    >>> from hpcbundle.config.sites import Site
    >>> def site(*args):
    ...     return Site.model_validate({"name": "c", "description": "d", "mpi": {"flavour": "openmpi",
    ...         "version": "4.1.6"}, "launcher": {"name": "mpirun"}, "container": {"runtime": "docker",
    ...         "args": list(args)}, "node": {"cores": 4}, "network": {"fabric": "ethernet"}})
    >>> ptrace_refused(site()), ptrace_refused(site("--cap-add", "SYS_PTRACE")), ptrace_refused(site("--cap-add=all"))
    (True, False, False)
    """
    known = RUNTIMES_KNOWN.get(site.container.runtime)
    if known is None or not known.no_ptrace:
        return False
    args = site.container.args
    added = [args[index + 1] for index, arg in enumerate(args[:-1]) if arg == "--cap-add"]
    added += [arg.split("=", 1)[1] for arg in args if arg.startswith("--cap-add=")]
    granted = {cap.upper().removeprefix("CAP_") for value in added for cap in value.split(",")}
    return "--privileged" not in args and not granted & {"SYS_PTRACE", "ALL"}
