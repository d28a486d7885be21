"""`hpcbundle site detect`: a draft site YAML, with comments, from what was observed on one node (pure).

`observe()` (the edge) gathers the facts; `draft_site(observed, name)` turns them into the text.
Lines the user must check are marked CONFIRM. The data interface is chosen, in this order, as:

1. the interface the routes to the given --hosts go through (the one the nodes share);
2. the interface holding the address this node's own host name resolves to (the address its
   peers, resolving the same name, will dial);
3. the interface of the default route;
4. the only candidate left.

lo, docker*, virbr*, veth* and interfaces without an IPv4 address are never candidates.
"""

from __future__ import annotations

import json
import os
import re
import socket
from typing import Any

from ..config.sites import PROGRAM_ENV
from ..knowledge.knobs import GPU_CYCLE_TIME, GPU_CYCLE_TIME_WHY
from ..knowledge.launching import LAUNCHERS_KNOWN, runtime_detection
from .resolve import resolve_all
from .topo import parse_topo

EXCLUDED = re.compile(r"^(lo|docker\d*|virbr\d*|veth.*)$")


def _q(value: Any) -> str:
    """A YAML scalar (JSON strings are valid YAML)."""
    return json.dumps(value)


def candidates(observed: dict[str, Any]) -> list[dict[str, Any]]:
    """Interfaces that could carry MPI traffic: up, with IPv4, not loopback/container/VM bridges."""
    return [i for i in observed.get("interfaces", []) if i["up"] and i["ipv4"] and not EXCLUDED.match(i["name"])]


def choose_interface(observed: dict[str, Any]) -> tuple[str | None, str]:
    """(interface, why) by the rules in the module docstring; (None, why) when it cannot tell."""
    names = [i["name"] for i in candidates(observed)]
    routes = {h: dev for h, dev in (observed.get("host_routes") or {}).items() if dev and dev != "lo"}
    if routes:
        devs = set(routes.values())
        if len(devs) == 1 and (dev := next(iter(devs))) in names:
            return dev, f"the routes to {', '.join(routes)} go through {dev}"
    own = observed.get("hostname_interface")
    if own in names:
        return (
            own,
            f"this node's name {observed.get('host')} resolves to {observed.get('hostname_address')}, on {own}: "
            "its peers dial that address",
        )
    default = observed.get("default_route")
    if default in names:
        return default, f"{default} carries the default route"
    if len(names) == 1:
        return names[0], f"{names[0]} is the only candidate"
    return None, "several candidates and no route, host name or default route to tell them apart"


def _gpu_model(name: str, known: list[str]) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'A100' when the knowledge base knows it (longest match)."""
    hits = [k for k in known if re.search(rf"\b{re.escape(k)}\b", name)]
    return max(hits, key=len) if hits else name.replace(" ", "_")


DRAFT_STALL_SECONDS = 600


def draft_site(observed: dict[str, Any], name: str, known_gpus: list[str] | None = None) -> str:
    """The draft site text for `observed` (see observe()); valid against the site schema."""
    host = observed.get("host", "this node")
    mpi = observed.get("mpi") or None
    flavour = mpi["flavour"] if mpi and mpi["flavour"] != "unknown" else "openmpi"
    version = mpi["version"] if mpi and mpi.get("version") else "4.1.6"
    gpu = observed.get("gpu") or {}
    gpus_text = f"{len(gpu.get('gpus', []))} GPUs" if gpu.get("present") else "no GPU"
    description = f"draft from site detect on {host}: {flavour} {version}, {observed.get('cpus', 1)} CPUs, {gpus_text}"
    lines = [
        f"# Draft site for the nodes like {host}, written by `hpcbundle site detect`.",
        "# Check every line marked CONFIRM, then run `hpcbundle doctor --site THIS_FILE --hosts A,B`",
        "# on a compute node: it proves the interfaces carry traffic between the nodes.",
        f"name: {name}",
        f"description: {_q(description)}",
    ]
    mpi_note = (
        f"from {mpi['evidence']}" if mpi else "CONFIRM: no mpirun/mpiexec found on PATH (load the MPI module and rerun)"
    )
    lines += ["mpi:", f"  flavour: {flavour}  # {mpi_note}", f"  version: {_q(version)}"]
    launcher = _launcher(flavour, version)
    lines += _launcher_lines(launcher, flavour == "openmpi", observed.get("uid") == 0)
    lines += _container_lines(observed.get("runtimes") or {})
    lines += _export_lines(observed.get("program_env") or {}, launcher)
    ompi_env = observed.get("ompi_env") or {}
    if flavour == "openmpi" and ompi_env:
        lines.append("mca:")
        lines += [
            f"  {k}: {_q(v)}  # from OMPI_MCA_{k} in the environment detect ran in" for k, v in sorted(ompi_env.items())
        ]
    lines += _gpu_env_lines(gpu)
    lines += _node_lines(observed, known_gpus or [])
    iface, why = choose_interface(observed)
    lines += _network_lines(observed, iface, why)
    lines += _slurm_lines(observed.get("slurm") or {})
    lines += STALL_LINES
    whys = {"env.HOROVOD_CYCLE_TIME": GPU_CYCLE_TIME_WHY} if gpu.get("present") else {}
    whys |= {"network.interfaces": why} if iface else {}
    if whys:
        lines += ["why:", *(f"  {key}: {_q(line)}" for key, line in whys.items())]
    return "\n".join(lines) + "\n"


def _gpu_env_lines(gpu: dict[str, Any]) -> list[str]:
    """The draft's env: on a GPU node, HOROVOD_CYCLE_TIME (knowledge/knobs.py GPU_CYCLE_TIME), to re-tune here."""
    if not gpu.get("present"):
        return []
    return [
        "env:",
        f"  HOROVOD_CYCLE_TIME: {_q(GPU_CYCLE_TIME)}  # CONFIRM: Horovod's 1 ms default cost 1.03-1.07 ms per "
        "allreduce call on one NVIDIA H200 (2026-11-27), 0.157 ms with 0.1 at 4 KiB; re-tune on these nodes: "
        "hpcbundle tune --site THIS_FILE --np 2 --hosts A:1,B:1 --knobs cycle",
    ]


STALL_LINES = [
    "faults:",
    f"  stall_seconds: {DRAFT_STALL_SECONDS}  # CONFIRM: above the program's longest silent phase (an epoch without a"
    " line, a checkpoint, the first data load): this many seconds without output ends the job (a lost link, a"
    " stopped rank) where otherwise it waits for launcher.timeout",
]
"""The draft's stall bound: without one a job whose data link died waits for launcher.timeout (3600 s);
with one it ends the bound after its last line, the node named (measured: 30 s with a 15 s bound)."""


def _launcher(flavour: str, version: str) -> str:
    """The launcher a draft names for the MPI found: the one that MPI installs (its row's mpi_own), for Open MPI
    the one that speaks its major's syntax: mpirun (mpirun5 for Open MPI 5), else hydra.

    >>> _launcher("openmpi", "4.1.6"), _launcher("openmpi", "5.0.3"), _launcher("mpich", "4.1")
    ('mpirun', 'mpirun5', 'mpiexec.hydra')
    """

    def speaks(syntax: int | None) -> bool:
        return syntax is None or syntax == (5 if int(version.split(".")[0]) >= 5 else 4)

    return next(
        name
        for name, known in LAUNCHERS_KNOWN.items()
        if known.mpi_own and flavour in known.flavours and speaks(known.openmpi_syntax)
    )


def _launcher_lines(launcher: str, is_ompi: bool, root: bool) -> list[str]:
    """The draft's launcher: section."""
    lines = ["launcher:", f"  name: {launcher}  # CONFIRM: srun under SLURM if srun --mpi=pmix works here"]
    if is_ompi:
        if root:
            lines.append("  allow_run_as_root: true  # detect ran as root")
        lines.append("  bind_to: none  # Horovod's default; bind with wrappers (taskset/numactl) if you need it")
    lines.append("  timeout: 3600  # seconds `launch --exec` waits before killing a hung job")
    return lines


def _container_lines(found: dict[str, str]) -> list[str]:
    """The draft's container: section: no runtime, with the ones found on PATH named to CONFIRM."""
    note = (
        "CONFIRM: found " + "; ".join(f"{k} ({v})" for k, v in found.items()) + ": set runtime to run images"
        if found
        else "no container runtime found on PATH"
    )
    return ["container:", f"  runtime: none  # {note}"]


def _node_lines(observed: dict[str, Any], known_gpus: list[str]) -> list[str]:
    """The draft's node: section: cores, and the GPUs nvidia-smi lists (model, driver, NUMA map)."""
    gpu = observed.get("gpu") or {}
    lines = ["node:", *_core_lines(observed.get("cpus", 1), observed.get("threads_per_core") or {})]
    if not gpu.get("present"):
        return lines + [f"  gpus: 0  # {gpu.get('note') or 'no GPU'}"]
    model = _gpu_model(gpu["gpus"][0]["name"], known_gpus)
    lines += [f"  gpus: {len(gpu['gpus'])}", f"  gpu_model: {_q(model)}  # nvidia-smi: {gpu['gpus'][0]['name']}"]
    if gpu.get("driver") and re.match(r"^\d+(\.\d+){0,3}$", gpu["driver"]):
        lines.append(f"  driver: {_q(gpu['driver'])}")
    sysfs = (observed.get("gpu_numa") or {}).get("nodes") or []
    return lines + [_gpu_numa_line(observed.get("gpu_topology"), len(gpu["gpus"]), sysfs)]


def _core_lines(cpus: int, threads: dict[str, Any]) -> list[str]:
    """node.cores, and node.threads_per_core where a core has several hardware threads (the CPUs seen are threads)."""
    per_core = threads.get("threads") or 1
    if per_core == 1 or cpus % per_core:
        return [f"  cores: {cpus}  # CPUs seen here; CONFIRM for the compute nodes"]
    cores = cpus // per_core
    return [
        f"  cores: {cores}  # {cpus} CPUs seen here, {per_core} hardware threads per core; CONFIRM for the compute "
        "nodes",
        f"  threads_per_core: {per_core}  # {threads.get('evidence')}; CONFIRM: SLURM counts each thread as a CPU "
        f"(slurm.conf ThreadsPerCore={per_core}): srun -c and --cpus-per-task then ask {per_core} per core, "
        "OMP_NUM_THREADS counts cores",
    ]


def _network_lines(observed: dict[str, Any], iface: str | None, why: str) -> list[str]:
    """The draft's network: section: the fabric, and the data interface chosen (`iface`, because `why`)
    with the other candidates to CONFIRM against."""
    others = [f"{i['name']} ({', '.join(i['ipv4'])})" for i in candidates(observed) if i["name"] != iface]
    ib = observed.get("infiniband") or []
    fabric = "infiniband" if ib else "ethernet" if iface else "loopback"
    lines = [
        "network:",
        f"  fabric: {fabric}  # "
        + (f"/sys/class/infiniband: {', '.join(ib)}; CONFIRM mca pml: ucx" if ib else "no InfiniBand device"),
    ]
    if iface:
        return lines + [
            f"  interfaces: [{iface}]  # CONFIRM: {why}"
            + (f"; other candidates: {', '.join(others)}" if others else "")
        ]
    return lines + [
        f"  interfaces: []  # CONFIRM: {why}; name the data interface among: {', '.join(others) or 'none found'}"
    ]


def _slurm_lines(slurm: dict[str, Any]) -> list[str]:
    """The draft's slurm: section where sinfo showed a default partition, else a line to CONFIRM it."""
    if slurm.get("partition"):
        return ["slurm:", f"  partition: {slurm['partition']}  # the default partition sinfo shows"]
    if slurm.get("sinfo"):
        return ["# SLURM: sinfo is here but showed no partition; CONFIRM slurm.partition"]
    return []


def _gpu_numa_line(topology: str | None, gpus: int, sysfs: list[int | None]) -> str:
    """node.gpu_numa from `nvidia-smi topo -m` when it maps every GPU, else from sysfs numa_node of each GPU's PCI
    device (`sysfs`, probes.gpu_numa) when the kernel names one for every GPU, else a comment saying why not."""
    confirm = "CONFIRM: each rank then runs on its GPU's NUMA node (gpu-numa wrapper)"
    if sysfs and len(sysfs) == gpus and all(node is not None for node in sysfs):
        from_sysfs = (
            f"  gpu_numa: [{', '.join(map(str, sysfs))}]  # sysfs numa_node of each GPU's PCI device; {confirm}"
        )
    else:
        from_sysfs = None
    if not topology:
        return from_sysfs or "  # gpu_numa: not drafted (nvidia-smi topo -m printed nothing)"
    found = parse_topo(topology)
    if found.nodes is None:
        return from_sysfs or f"  # gpu_numa: not drafted ({found.why})"
    if len(found.nodes) != gpus:
        return from_sysfs or (
            f"  # gpu_numa: not drafted (nvidia-smi topo -m shows {len(found.nodes)} GPUs, nvidia-smi lists {gpus})"
        )
    return f"  gpu_numa: [{', '.join(map(str, found.nodes))}]  # {found.why}; {confirm}"


def _export_lines(program_env: dict[str, str], launcher: str) -> list[str]:
    """`export:` of the program environment the launching shell holds (PROGRAM_ENV order), marked CONFIRM."""
    names = [name for name in PROGRAM_ENV if program_env.get(name)]
    if not names:
        return []
    known = LAUNCHERS_KNOWN[launcher]
    how = f"{known.command} {known.export_option}" if known.export_option else f"{launcher} forwards its environment"
    lines = [
        f"export:  # CONFIRM: what the launching shell holds ({how}): over ssh a rank otherwise gets the "
        "login PATH, not your venv; the same paths must exist on every node"
    ]
    for name in names:
        value = program_env[name]
        shown = value if len(value) <= 60 else value[:57] + "..."
        lines.append(f"  - {name}  # {_q(shown)[1:-1]}")
    return lines


def observe(hosts: list[str]) -> dict[str, Any]:
    """Gather the facts draft_site needs, on this node (the edge: runs ip, nvidia-smi, mpirun, sinfo)."""
    from . import probes

    found = probes.facts(detection=runtime_detection())
    addresses = resolve_all(hosts)
    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        address = None
    own = next(
        (i["name"] for i in found["interfaces"] if address and any(a.split("/")[0] == address for a in i["ipv4"])), None
    )
    return {
        **found,
        "hostname_address": address,
        "hostname_interface": own,
        "default_route": probes.default_route_interface(),
        "host_routes": {h: probes.route_interface(a) if a else None for h, a in addresses.items()},
        "unresolved": [h for h, a in addresses.items() if a is None],
        "slurm": probes.slurm(),
        "gpu_topology": probes.gpu_topology(),
        "ompi_env": {k.removeprefix("OMPI_MCA_"): v for k, v in os.environ.items() if k.startswith("OMPI_MCA_")},
        "program_env": {name: os.environ[name] for name in PROGRAM_ENV if os.environ.get(name)},
    }
