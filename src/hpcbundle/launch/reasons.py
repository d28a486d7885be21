"""One line of why for the flags hpcbundle generates; a site's own `why:` entry overrides these."""

from __future__ import annotations

LAUNCHER: dict[str, str] = {
    "allow_run_as_root": "this machine runs jobs as root, which mpirun refuses without it",
    "oversubscribe": "more ranks than the node has cores are allowed",
    "bind_to": "Horovod's background thread and the framework's threads must not share one pinned core",
    "map_by": "ranks fill each host's slots in order",
    "tag_output": "each output line starts with the rank that wrote it",
    "pmi": "the SLURM MPI plugin that wires the ranks together (PMIx for Open MPI)",
    "gloo": "Horovod's own Gloo controller instead of MPI",
}

ENV: dict[str, str] = {
    "LD_LIBRARY_PATH": "remote ranks get the launching shell's library path",
    "PATH": "remote ranks find the same programs (the runtime, python) as the launching shell: "
    "over ssh a rank starts with the login shell's PATH, without the launching shell's venv",
    "VIRTUAL_ENV": "remote ranks run in the launching shell's virtualenv (the same path on every node)",
    "CONDA_PREFIX": "remote ranks run in the launching shell's conda env (the same path on every node)",
    "PYTHONPATH": "remote ranks import modules from the same places as the launching shell",
    "PYTHONHOME": "remote ranks use the launching shell's Python installation",
    "NCCL_SOCKET_IFNAME": "the interfaces NCCL's bootstrap and socket transport may use",
    "NCCL_IB_HCA": "the InfiniBand/RoCE adapters NCCL may use",
    "NCCL_NET": "the one network NCCL may use: IB fails at init where the adapters are not visible, "
    "instead of falling back to TCP sockets",
    "NCCL_IB_DISABLE": "NCCL moves data over sockets, not InfiniBand verbs",
    "HOROVOD_MPI_THREADS_DISABLE": "Horovod asks MPI for no thread support (the transport is not thread-safe)",
    "UCX_NET_DEVICES": "the adapter and port UCX may use",
    "NCCL_IB_GID_INDEX": "the RoCE GID (address and RoCE version) NCCL uses on each adapter port",
    "UCX_IB_GID_INDEX": "the RoCE GID (address and RoCE version) UCX uses on each adapter port",
    "NCCL_SOCKET_NTHREADS": "CPU threads per NCCL socket connection (1-16, NCCL's default 1: too few for 100G)",
    "NCCL_NSOCKS_PERTHREAD": "sockets each NCCL socket thread opens (threads x sockets at most 64)",
    "PMIX_MCA_gds": "the PMIx store the ranks read the job's data from (hash works across a container boundary)",
    "TF_NUM_INTRAOP_THREADS": "TensorFlow's threads within one op",
    "TF_NUM_INTEROP_THREADS": "TensorFlow's ops run at the same time",
    "OMP_NUM_THREADS": "OpenMP threads per rank",
    "KMP_BLOCKTIME": "milliseconds an Intel OpenMP thread spins before it sleeps",
    "KMP_AFFINITY": "how Intel OpenMP pins its threads inside the rank's CPU set",
    "PYTHONUNBUFFERED": "Python writes each line as it is printed, not when its buffer fills",
}

MCA: dict[str, str] = {
    "btl": "the byte-transfer layers MPI may use",
    "pml": "the point-to-point messaging layer",
    "btl_vader_single_copy_mechanism": "Open MPI 4's shared-memory single copy (CMA) hangs across user namespaces",
    "btl_tcp_if_include": "MPI's TCP traffic stays on these interfaces (a wrong one hangs the job)",
    "oob_tcp_if_include": "the launcher's daemons talk over these interfaces (a wrong one hangs the launch)",
    "plm_rsh_agent": "how mpirun reaches the other nodes",
    "btl_openib_allow_ib": "Open MPI >= 4.0 uses the openib btl on InfiniBand ports only when this is set",
}

# A secret-looking env: name (rule secret-env), forwarded by name rather than written.
SECRET = (
    "its name looks secret, so the site's value is not written (ps shows a line to anyone): "
    "set it in the launching shell"
)

# The user's working directory given as --workdir, on the launcher's option (or why not).
CHDIR = (
    "every rank starts in the user's working directory, wherever the line is run from (remote ranks too): "
    "relative data and checkpoint paths resolve there"
)
NO_CHDIR = (
    "{launcher} has no option for the ranks' directory: they start in the one it is run from (remote ranks "
    "too), so run the line from there (cd to it first)"
)

# CPUs per rank in batch jobs (node.cpus_per_rank, else node.cores over the ranks per node).
SRUN_CPUS = (
    "CPUs each rank gets, as #SBATCH --cpus-per-task asks: srun of SLURM 22.05 to 23.02 does not inherit it "
    "from the batch job (23.11 reads SLURM_CPUS_PER_TASK again), so without -c each rank would get one CPU there"
)
SRUN_EXPORT = (
    "every rank gets srun's environment, the variables set in front of it included: a job submitted with "
    "sbatch --export=NONE passes NONE on to its steps (SLURM_EXPORT_ENV), which would drop them all"
)
SRUN_PER_GPU = (
    "one rank per GPU on each node: without it SLURM spreads the ranks by CPUs, and two ranks on one GPU "
    "stop NCCL (Duplicate GPU detected)"
)
SRUN_GPU_SOCKETS = (
    "each rank next to its GPU: a rank takes GPU LOCAL_RANK (SLURM_LOCALID), and a node numbers its GPUs socket "
    "by socket, while SLURM's default deals a node's tasks out to its sockets in turn (srun --distribution, "
    "after the colon: cyclic), which puts local ranks 1, 3, ... on the far socket from GPUs 1, 3, ...; block:block "
    "fills the first socket's cores with local ranks 0, 1, ... (SLURM's task/affinity binds each to its -c CPUs)"
)
SRUN_THREADS = (
    "SLURM counts each of a core's {threads} hardware threads as a CPU (node.threads_per_core), so -c {cpus} is "
    "{cores} whole cores: a -c of node.cores over the ranks would give each rank half of them"
)
THREADS = (
    "threads per rank to match the CPUs each rank gets (the examples size their intra-op threads by it): "
    "without it OpenMP starts one thread per core in every rank, ranks x cores threads on a node; the ranks "
    "are not pinned to CPUs (mpirun keeps --bind-to none, Horovod's advice: a rank pinned to one core starves "
    "its background thread; --map-by slot:PE=N would bind them), the gpu-numa wrapper (node.gpu_numa) binds "
    "per NUMA node instead"
)
UNBUFFERED = (
    "the stall watchdog (launch --exec and the sbatch relay) counts lines as they are written: a Python "
    "print to a pipe waits in its buffer otherwise, and a healthy rank looks silent"
)
_BIND_DOES = (
    "the rank's local rank (from Open MPI, hydra or SLURM) picks its GPU (CUDA_VISIBLE_DEVICES) and that "
    "GPU's NUMA node's cores, with memory preferred from it (numactl --cpunodebind=N --preferred=N: a full "
    "node spills over instead of killing the rank; taskset over the node's CPUs where numactl is missing); "
    "the map is its only argument"
)
GPU_NUMA = {
    "host": (
        "per-rank placement by hpcbundle-bind MAP on the host, where node.host_bind says every node has it "
        "(`make install-bind`; doctor looks on every node, the batch script on its first): CPU affinity and "
        f"memory policy are inherited through exec into a container: {_BIND_DOES}"
    ),
    "image": (
        "per-rank placement by hpcbundle-bind MAP inside the container, where every image built here carries "
        f"it at /usr/local/bin (the hosts need nothing installed; node.host_bind runs it there): {_BIND_DOES}"
    ),
    "inline": (
        "per-rank placement by hpcbundle-bind's own text run inline by sh -c, where no file of it is known to "
        "exist (an image built elsewhere: container.foreign_image; ranks on a host without node.host_bind): "
        f"{_BIND_DOES}"
    ),
}

# How --explain marks an interface setting (hpcbundle.knowledge.network.interface_settings): derived
# from network.interfaces, or set by the site's own key where network.interfaces would have
# derived it. NCCL_SOCKET_IFNAME is derived on GPU sites only: NCCL runs nowhere else, so on a CPU
# site it would be harmless but a word in every command that nothing reads.
SHIM_NAMED = "hpcbundle-torchenv, which images built here carry"
SHIM_INLINE = (
    "hpcbundle-torchenv's text inline (sh -c), as the image was built elsewhere (container.foreign_image) or "
    "the ranks run on the host"
)
TORCHENV = (
    "sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from the launcher's own variables (a stale value "
    "from the launching shell is overwritten), then execs the program: torch's env:// reads them"
)
GLOO = "the interfaces torch's Gloo backend (CPU tensors, the rendezvous store's peers) may use, by name"
MASTER_ADDR = (
    "where every rank meets rank 0 (torch env://): an address on the data interface, never a host name, "
    "which torch and the nodes may resolve to another network"
)
MASTER_ADDR_NAME = (
    "a host name, as this line is printed to run elsewhere: launch --exec (or sbatch) puts the head's "
    "address on network.interfaces here instead"
)
MASTER_PORT = "the port rank 0 listens on for the others (torch.port)"
FROM_SCRIPT = (
    "set by the batch script on the job's first node (its address on network.interfaces, a port from the "
    "job id), forwarded by name"
)
AGENT_SHIM = (
    "the torchrun agent's rendezvous: the outer launcher's rank variables unset (workers read torchrun's), "
    "this node's address on the data interface as --local-addr, MASTER_ADDR:MASTER_PORT as the c10d endpoint, "
    "HPCBUNDLE_RUN_ID as its id, and is_host=1 only on the node whose address is MASTER_ADDR (torch would "
    "match host names, which may resolve to another network; a host name there, in a printed line, is left to "
    "torch to match); join_timeout (torch.join_timeout) is how long the agents wait for every node"
)
AGENT_SHIM_ONE_NODE = "the outer launcher's rank variables unset, so the workers read torchrun's"
AGENT_USR1 = (
    "; the agent passes USR1 (SLURM's time-limit warning) on to its workers and waits for them, so it ends as they "
    "do (torchrun's own --signals-to-handle would end it with exit 1 and kill them 30 s later)"
)
TORCHRUN = (
    "torchrun as a module of the rank's own Python (the torchrun script's shebang may name another), starting "
    "{per_node} workers on this node with RANK, LOCAL_RANK, WORLD_SIZE and MASTER_ADDR set; one failing ends "
    "the agent and the launcher ends the others"
)
NO_NUMA_TORCHRUN = (
    "not applied under --torchrun: the node's one agent would be bound, and every worker it starts with it, to "
    "the first GPU's NUMA node (--torch binds each rank to its own GPU's)"
)
RUN_ID = (
    "the rendezvous id the agents share: launch --exec makes one per run, so an agent still shutting down from "
    "the run before never joins this one (a batch job takes JOBID.RESTARTS)"
)
DERIVED = ", derived from network.interfaces"
OVERRIDES = ", set by the site over network.interfaces"
# NCCL's socket threads on a GPU site whose NCCL goes over TCP, from network.link_gbps
# (hpcbundle.knowledge.network.derived_socket_threads: >= 100 Gbit/s 4 x 4, >= 25 Gbit/s 2 x 2).
DERIVED_LINK = ", derived from network.link_gbps (NCCL's docs: 100G networks want more than one socket thread)"
DERIVED_NET = ", derived from network.fabric (network.nccl_require_ib: false lets NCCL fall back to sockets)"
OVERRIDES_LINK = ", set by the site over what network.link_gbps derives"


def env(name: str) -> str:
    return ENV.get(name, "set in every rank by the site")


def export(name: str) -> str:
    return ENV.get(name, "forwarded to every rank from the launching shell")


def mca(name: str) -> str:
    return MCA.get(name, "an Open MPI parameter the site sets")
