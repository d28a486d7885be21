"""Rules over a torch.distributed launch (`--torch`): ranks that meet by env:// at MASTER_ADDR:MASTER_PORT, one
per GPU, started by the site's own launcher (launch/torchwiring.py). Judged before anything starts: a torch
job that cannot meet, or would start workers twice, or would cost NCCL its P2P path, is refused in one line.

The rules over the request SKIP a Horovod request; torch-port and gloo-ifname judge the site's values alone.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

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
    return None if request.wiring == "torch" else Verdict("SKIP", "the ranks meet through Horovod (no --torch)")


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
    return [request_refusal("--torch", problem, f"use a site whose launcher is {', '.join(able[:-1])} or {able[-1]}")]


@rule("torch-interface", needs=REQUEST, on_load=True)
def torch_interface(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A torch job over several nodes has network.interfaces: the head's data address (MASTER_ADDR) is found there."""
    site, request = facts.site, facts.request
    if skip := _horovod(request):
        return [skip]
    if not (spans_nodes(site, request) or (request.nodes or 0) > 1):
        return [Verdict("SKIP", "every rank runs on one node: they meet at 127.0.0.1")]
    if site.network.interfaces:
        return []
    problem = f"missing on site {site.name}: a torch job over several nodes has no way to pick the head's data address"
    return [refusal("network.interfaces", problem, "name the data interface, e.g. network.interfaces: [ib0]")]


def _double_launcher(program: tuple[str, ...]) -> str | None:
    """The launcher of torch workers `program` runs (torchrun, python -m torch.distributed.run, accelerate launch,
    deepspeed), else None."""
    first = PurePosixPath(program[0]).name
    if first in ("torchrun", "deepspeed"):
        return first
    if first == "accelerate" and program[1:2] == ("launch",):
        return "accelerate launch"
    if not re.fullmatch(r"python[0-9.]*", first):
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
        "with RANK/WORLD_SIZE set"
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
