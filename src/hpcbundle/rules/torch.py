"""Rules over a torch.distributed launch (`--torch`): ranks that meet by env:// at MASTER_ADDR:MASTER_PORT, one
per GPU, started by the site's own launcher (launch/torchwiring.py). Judged before anything starts: a torch
job that cannot meet, or would start workers twice, or would cost NCCL its P2P path, is refused in one line.

The rules over the request SKIP a Horovod request; torch-port and gloo-ifname judge the site's values alone.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Mapping

from ..knowledge.compat import KnowledgeBase
from ..knowledge.launching import LAUNCHERS_KNOWN
from ..knowledge.torchenv import is_address
from .engine import Facts, LaunchRequest, Verdict, refusal, request_refusal, rule
from .request import REQUEST, spans_nodes

EPHEMERAL_PORTS = range(32768, 61000)
"""Linux's default ephemeral ports (net.ipv4.ip_local_port_range 32768 60999): any outgoing connection may hold one."""
PORT_FIX = "pick a port from 1024 to 32767 or from 61000 to 65535 (torch's default is 29500)"
TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
"""The modules that start torch workers themselves (`python -m torch.distributed.run` is torchrun)."""
NARROWING = re.compile(r"--gpus-per-task(=.*)?|--gpu-bind=(.*,)?(single:|map_gpu|mask_gpu).*")
"""Per-task GPU narrowing (srun(1) --gpus-per-task, --gpu-bind single:N, map_gpu:..., mask_gpu:...)."""


def _horovod(request: LaunchRequest) -> Verdict | None:
    """The SKIP of a rule over a torch request when the request is not one."""
    if request.wiring != "horovod":
        return None
    return Verdict("SKIP", "the ranks meet through Horovod (no --torch or --torchrun)")


def _not_torchrun(request: LaunchRequest) -> Verdict | None:
    """The SKIP of a rule over a torchrun request when the request is not one."""
    if request.wiring == "torchrun":
        return None
    return _horovod(request) or Verdict("SKIP", "--torch: the launcher starts every worker itself (no torchrun)")


def node_shape(hosts: Mapping[str, int] | None, request: LaunchRequest) -> tuple[int, int] | None:
    """(nodes, workers per node) of a torchrun job: from its workers per named host, else from the job's nodes;
    None where they differ between hosts or do not divide --np (torchrun starts as many on every node) or the
    nodes are unknown. `hosts` are the ranks per host as the plan counts them (LaunchPlan.ranks_per_host).

    >>> node_shape({"f1": 2, "f2": 2}, LaunchRequest(np=4)), node_shape({"f1": 2, "f2": 1}, LaunchRequest(np=3))
    ((2, 2), None)
    >>> node_shape({"each node": 4}, LaunchRequest(np=8, nodes=2, tasks_per_node=4))
    (2, 4)
    >>> node_shape(None, LaunchRequest(np=8)) is None
    True
    """
    np_, nodes = request.np or 0, request.nodes
    if hosts and request.tasks_per_node is None:
        counts = set(hosts.values())
        return (len(hosts), counts.pop()) if len(counts) == 1 else None
    if nodes and np_ % nodes == 0:
        return nodes, np_ // nodes
    return None


@rule("torch-launcher", needs=REQUEST, on_load=True, superseded_by=("launcher-known",))
def torch_launcher(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The site's launcher can start torch.distributed ranks: hpcbundle-torchenv reads its rank variables."""
    site = facts.site
    if skip := _horovod(facts.request):
        return [skip]
    if LAUNCHERS_KNOWN[site.launcher.name].torch_ranks:
        return []
    able = [name for name, known in sorted(LAUNCHERS_KNOWN.items()) if known.torch_ranks]
    problem = f"{site.launcher.name} (launcher.name of site {site.name}) cannot start torch.distributed ranks"
    fix = f"use a site whose launcher is {', '.join(able[:-1])} or {able[-1]}"
    return [request_refusal(f"--{facts.request.wiring}", problem, fix)]


@rule("torch-interface", needs=REQUEST, on_load=True)
def torch_interface(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A torch job over several nodes has network.interfaces: the head's data address (MASTER_ADDR) is found there."""
    site, request = facts.site, facts.request
    if skip := _horovod(request):
        return [skip]
    if not (spans_nodes(site, request) or (request.nodes or 0) > 1 or len(facts.hosts or {}) > 1):
        return [Verdict("SKIP", "every rank runs on one node: they meet at 127.0.0.1")]
    if site.network.interfaces:
        return []
    problem = f"missing on site {site.name}: a torch job over several nodes has no way to pick the head's data address"
    return [refusal("network.interfaces", problem, "name the data interface, e.g. network.interfaces: [ib0]")]


def _is_python(word: str) -> bool:
    """Whether `word` names a Python interpreter (python, python3, /opt/venv/bin/python3.11)."""
    return re.fullmatch(r"python[0-9.]*", PurePosixPath(word).name) is not None


def _double_launcher(program: tuple[str, ...]) -> str | None:
    """The launcher of torch workers `program` runs (torchrun, python -m torch.distributed.run, accelerate launch,
    deepspeed), else None."""
    first = PurePosixPath(program[0]).name
    if first in ("torchrun", "deepspeed"):
        return first
    if first == "accelerate" and program[1:2] == ("launch",):
        return "accelerate launch"
    if not _is_python(first):
        return None
    words = iter(program[1:])
    for word in words:
        module = next(words, None) if word == "-m" else word[2:] if word.startswith("-m") else None
        if module is not None:
            return f"{first} -m {module}" if module in TORCH_MODULES else None
        if word in ("-W", "-X"):
            next(words, None)
        elif not word.startswith("-"):
            return None
    return None


def python_program(program: tuple[str, ...]) -> bool:
    """Whether `program` is `PYTHON SCRIPT ...` or `PYTHON -m MODULE ...`, the form torchrun runs on each worker.

    >>> python_program(("python3", "train.py")), python_program(("/opt/venv/bin/python", "-m", "pkg"))
    (True, True)
    >>> python_program(("python", "-u", "train.py")), python_program(("./train.sh",))
    (False, False)
    """
    if len(program) < 2 or not _is_python(program[0]):
        return False
    return program[1] == "-m" and len(program) > 2 or not program[1].startswith("-")


@rule("torchrun-program", needs=REQUEST, on_load=True, superseded_by=("torch-program",))
def torchrun_program(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Under --torchrun the program is `PYTHON SCRIPT ARGS` or `PYTHON -m MODULE ARGS`, what torchrun runs per worker.

    torchrun runs the script in each worker with that Python (and -u), and takes no interpreter options."""
    request = facts.request
    if skip := _not_torchrun(request):
        return [skip]
    if not request.program:
        return [Verdict("SKIP", "no PROGRAM")]
    if python_program(request.program):
        return []
    problem = f"{' '.join(request.program[:3])[:60]} is not PYTHON SCRIPT: torchrun runs a Python script on each worker"
    fix = "give -- python train.py ARGS (or -- python -m MODULE ARGS); torchrun runs it with -u"
    return [request_refusal("PROGRAM", problem, fix)]


@rule("torch-world", needs=REQUEST, on_load=True, superseded_by=("srun-allocation",))
def torch_world(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A torchrun job starts as many workers on every node (one --nproc-per-node), on nodes it can count."""
    request = facts.request
    if skip := _not_torchrun(request):
        return [skip]
    if not request.np:
        return [Verdict("SKIP", "no ranks asked for")]
    if node_shape(facts.hosts, request):
        return []
    if facts.hosts and request.tasks_per_node is None:
        shown = ", ".join(f"{count} on {host}" for host, count in facts.hosts.items())
        problem = f"--np {request.np} puts {shown}, but torchrun starts as many workers on every node"
        flag = "--hostfile" if request.hostfile else "--hosts"
        return [request_refusal(flag, problem, "give every host the same slots and --np = hosts x slots")]
    if request.nodes:
        problem = f"{request.np} workers do not share out over {request.nodes} nodes (torchrun starts as many on each)"
        return [request_refusal("--np", problem, f"give a multiple of {request.nodes}")]
    problem = "the nodes are SLURM's to place and their number is unknown here: torchrun needs one agent per node"
    fix = "run it inside an allocation (salloc), submit it with sbatch --torchrun, or name the hosts with --hosts"
    return [request_refusal("--torchrun", problem, fix)]


@rule("torch-program", needs=REQUEST, on_load=True)
def torch_program(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The program of a torch job with several ranks is the training script, not a launcher of workers (torchrun)."""
    request = facts.request
    if skip := _horovod(request):
        return [skip]
    if not request.program or not request.np or request.np < 2:
        return [Verdict("SKIP", "no PROGRAM, or one rank: it may start its workers itself")]
    launcher = _double_launcher(request.program)
    if launcher is None:
        return []
    problem = (
        f"{launcher} starts workers itself, so each of the {request.np} ranks would start its own (a double launch)"
    )
    fix = (
        "give the training script itself (-- python train.py): hpcbundle starts one rank per GPU (--torch) "
        "with RANK/WORLD_SIZE set, or one torchrun per node (--torchrun)"
    )
    return [request_refusal("PROGRAM", problem, fix)]


@rule("torch-port", needs=("site",), on_load=True)
def torch_port(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """torch.port is neither privileged (below 1024) nor in Linux's ephemeral range 32768-60999."""
    port = facts.site.torch.port
    if port < 1024:
        return [refusal("torch.port", f"{port} is privileged (below 1024): rank 0 may not listen on it", PORT_FIX)]
    if port in EPHEMERAL_PORTS:
        problem = (
            f"{port} is in Linux's ephemeral range 32768-60999: an outgoing connection may hold it as rank 0 listens"
        )
        return [refusal("torch.port", problem, PORT_FIX)]
    return []


@rule("gloo-ifname", needs=("site",), on_load=True)
def gloo_ifname(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """env.GLOO_SOCKET_IFNAME names interfaces: Gloo takes no NCCL `^` exclusion or `=` exact-match prefix."""
    value = facts.site.env.get("GLOO_SOCKET_IFNAME")
    if value is None:
        return [
            Verdict("SKIP", "the site sets no env.GLOO_SOCKET_IFNAME (a torch job derives it from network.interfaces)")
        ]
    syntax = {item[:1] for item in str(value).split(",")} & {"^", "="}
    if not syntax:
        return []
    shown = " and ".join(sorted(syntax))
    problem = (
        f"{str(value)!r} uses NCCL's {shown} syntax, but Gloo takes interface names only "
        "(aws-samples/aws-do-eks#51: Unable to find address for: ^lo)"
    )
    fix = "name the interfaces, e.g. ib0, or drop it (derived from network.interfaces)"
    return [refusal("env.GLOO_SOCKET_IFNAME", problem, fix)]


@rule("torch-head-by-name", needs=REQUEST, on_load=True)
def torch_head_by_name(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A torch job's MASTER_ADDR is an IPv4 address: a host name may resolve elsewhere on some node (WARN)."""
    request = facts.request
    if skip := _horovod(request):
        return [skip]
    if request.batch or request.head is None:
        return [Verdict("SKIP", "the head's address on network.interfaces is found where the job starts")]
    if not is_address(request.head):
        problem = (
            f"MASTER_ADDR is the host name {request.head}: torch and every node resolve it, and it may resolve to "
            "another network or 127.0.x.1"
        )
        fix = (
            "run it with launch --exec (the head's address on network.interfaces is put there) "
            "or submit with sbatch --torch"
        )
        return [Verdict("WARN", problem, fix)]
    return []


def _narrowing(words: list[str]) -> list[tuple[int, str]]:
    """(index, option) of each per-task GPU narrowing among launcher options (`--gpu-bind X` read as one)."""
    joined = [
        f"{word}={words[i + 1]}" if word == "--gpu-bind" and i + 1 < len(words) else word
        for i, word in enumerate(words)
    ]
    return [(i, word) for i, word in enumerate(joined) if NARROWING.fullmatch(word)]


@rule("torch-gpu-narrowing", needs=REQUEST, on_load=True)
def torch_gpu_narrowing(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A torch job on a GPU site sees every GPU of its node: no per-task narrowing (NCCL would lose P2P)."""
    site = facts.site
    if skip := _horovod(facts.request):
        return [skip]
    if not site.node.gpus:
        return [Verdict("SKIP", f"site {site.name} has no GPUs (node.gpus)")]
    loses = "NCCL loses P2P between the ranks of a node (NVIDIA/nccl#1066)"
    fix = "drop it: each rank takes cuda:LOCAL_RANK, every GPU of its node visible"
    found = [
        refusal(f"{key}[{i}]", f"{option} narrows each task to its own GPUs: {loses}", fix)
        for key, words in (("launcher.args", site.launcher.args), ("slurm.options", site.slurm.options))
        for i, option in _narrowing(words)
    ]
    if "CUDA_VISIBLE_DEVICES" in site.env:
        found.append(
            refusal("env.CUDA_VISIBLE_DEVICES", f"set by the site, it narrows the GPUs every rank sees: {loses}", fix)
        )
    return found


@rule("torch-backend", needs=(*REQUEST, "image"), on_load=True)
def torch_backend(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A torch job on a GPU site has a CUDA build of torch: a CPU-only one (+cpu) has no NCCL and trains on CPUs."""
    request, site = facts.request, facts.site
    if skip := _horovod(request):
        return [skip]
    version = (facts.image or {}).get("pytorch")
    if not site.node.gpus or not version:
        return [Verdict("SKIP", "a CPU site, or the image's torch is not known here")]
    if not version.endswith("+cpu"):
        return []
    problem = (
        f"torch {version} ({facts.image_source or 'the image'}) is a CPU-only build, but site {site.name} has "
        f"{site.node.gpus} GPUs per node: no CUDA, no NCCL"
    )
    return [request_refusal("--image", problem, "use an image built from a CUDA recipe (e.g. recipes/*cuda*)")]


HEAD = ("site", "observed", "head")
"""What the rules over a torch job's head read: doctor's observation of it (diagnose/head.py observe_head)."""
STORE_WAITS = (
    "torch's store client would wait until its timeout rather than fail "
    "(env:// against a closed port had not failed after 150 s, measured)"
)


def _os_words(why: str) -> str:
    """The OS's error text as a clause: 'Address already in use' -> 'address already in use'."""
    return why[:1].lower() + why[1:]


@rule("torch-head-address", needs=HEAD)
def torch_head_address(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A torch job's head (the first host) has an IPv4 address on network.interfaces[0]: the ranks meet there."""
    head = facts.head
    if head.address:
        return [Verdict("PASS", f"{head.host} has {head.address} on {head.interface}")]
    if head.host not in facts.ok_nodes():
        return [Verdict("SKIP", f"{head.host} did not answer (rule node-reach says why)")]
    problem = (
        f"{head.host} has no IPv4 address on {head.interface} (network.interfaces[0] of {facts.site.where}): "
        "MASTER_ADDR, where the ranks meet, is the first host's address there"
    )
    fix = (
        f"give {head.interface} an address on {head.host}, or name one that has an address first in network.interfaces"
    )
    return [Verdict("FAIL", problem, fix)]


@rule("torch-port-free", needs=HEAD)
def torch_port_free(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """MASTER_PORT is free on the head: doctor listens on it there as rank 0's TCP store would."""
    head = facts.head
    if not head.bound:
        return [Verdict("SKIP", "not tried: the head's address is not known (rule torch-head-address)")]
    if head.bound == "ok":
        return [Verdict("PASS", f"port {head.port} is free on {head.host}: doctor listened on it")]
    held = "in use" if "in use" in head.bound else "not to be had"
    problem = (
        f"port {head.port} is {held} on {head.host} ({_os_words(head.bound)}): rank 0's store cannot listen at "
        f"{head.address}:{head.port} ({head.interface})"
    )
    return [Verdict("FAIL", problem, f"set torch.port in {facts.site.where}")]


@rule("torch-head-reach", needs=HEAD)
def torch_head_reach(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Every node reaches the head at MASTER_ADDR:MASTER_PORT: doctor listens there and connects from each node."""
    head = facts.head
    if head.bound != "ok":
        return [Verdict("SKIP", "nothing listened on the head's port (rules torch-head-address, torch-port-free)")]
    target = f"{head.address}:{head.port}"
    answered = facts.ok_nodes()
    reached = {host: why for host, why in head.reached.items() if host in answered}
    failed = {host: why for host, why in reached.items() if why != "ok"}
    if not failed:
        return [Verdict("PASS", f"{', '.join(reached)} reached {head.host} {target} ({head.interface})")]
    fix = (
        f"let the nodes reach {target} over {head.interface} (a firewall, a link down?), or name the interface "
        f"that joins them first in network.interfaces of {facts.site.where}"
    )
    return [
        Verdict(
            "FAIL", f"{host} cannot reach {head.host} {target} ({head.interface}): {_os_words(why)}; {STORE_WAITS}", fix
        )
        for host, why in failed.items()
    ]


LIGHTNING = ("lightning", "pytorch_lightning")
"""PyTorch Lightning's import names: it picks its own cluster environment from what it finds at start."""


@rule("torch-lightning", needs=(*REQUEST, "program", "observed"))
def torch_lightning(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A Lightning program under --torch is started by srun, or run with --torchrun (WARN otherwise).

    Lightning takes its world from torchrun's variables (TorchElasticEnvironment) or SLURM's (SLURMEnvironment,
    which reads MASTER_ADDR). Started by mpirun or mpiexec it picks MPIEnvironment where mpi4py imports, which
    meets at rank 0's host name on a free port, not at MASTER_ADDR on network.interfaces; else it reads the node
    rank from NODE_RANK/GROUP_RANK, which nothing sets there, so every node thinks it is node 0.
    """
    request, site = facts.request, facts.site
    if skip := _horovod(request):
        return [skip]
    if request.wiring != "torch":
        return [Verdict("SKIP", f"--{request.wiring}: Lightning takes torchrun's world")]
    source = LAUNCHERS_KNOWN[site.launcher.name].torch_ranks
    imports = (facts.program or {}).get("imports") or {}
    found = sorted(set(LIGHTNING) & {*imports.get("required", ()), *imports.get("optional", ())})
    if not found:
        return [Verdict("SKIP", "the program does not import Lightning")]
    if source == "slurm":
        return [Verdict("PASS", f"{found[0]} under srun takes SLURM's world and MASTER_ADDR (SLURMEnvironment)")]
    problem = (
        f"{imports.get('program', 'the program')} imports {found[0]}, which under {site.launcher.name} picks "
        "MPIEnvironment where mpi4py imports (rank 0's host name and a free port, not MASTER_ADDR on "
        "network.interfaces), else sees node rank 0 on every node"
    )
    return [Verdict("WARN", problem, "launch it with --torchrun: Lightning then takes torchrun's world")]
