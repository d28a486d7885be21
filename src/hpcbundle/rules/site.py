"""Rules over a site alone: settings that contradict each other, so no launch of that site could work, or that leave
its batch jobs short of what its nodes have."""

from __future__ import annotations

import re
import shlex
from typing import Any

from ..config.errors import clip
from ..config.sites import slurm_seconds
from ..knowledge.compat import KnowledgeBase
from ..knowledge.knobs import GPU_CYCLE_TIME, GPU_CYCLE_TIME_WHY
from ..knowledge.secrets import horovodrun_allowlist, secret_env
from .engine import Facts, Verdict, refusal, request_refusal, rule


@rule("rsh-agent-words", needs=("site",), on_load=True)
def rsh_agent_words(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """mca.plm_rsh_agent is split into shell words by Open MPI, so its quotes must balance."""
    agent = facts.site.mca.get("plm_rsh_agent")
    if agent is None:
        return [Verdict("SKIP", "the site sets no mca.plm_rsh_agent")]
    try:
        shlex.split(agent)
    except ValueError:
        return [refusal("mca.plm_rsh_agent", "has an unbalanced quote or backslash", "write the agent as shell words")]
    return []


@rule("mca-open-mpi", needs=("site",), on_load=True)
def mca_open_mpi(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """MCA parameters are Open MPI's: another MPI ignores them."""
    site = facts.site
    if not site.mca:
        return [Verdict("SKIP", "the site sets no mca")]
    if site.mpi.flavour != "openmpi":
        return [
            refusal(
                "mca",
                f"MCA parameters are Open MPI's; this site's MPI is {site.mpi.flavour}",
                "set the MPI's own variables in env",
            )
        ]
    return []


@rule("export-or-env", needs=("site",), on_load=True)
def export_or_env(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A variable is either forwarded from the launching shell or set by the site, not both."""
    site = facts.site
    if not site.export:
        return [Verdict("SKIP", "the site sets no export")]
    return [
        refusal(f"export.{name}", "is both exported and set in env", "keep it in one of them")
        for name in sorted(set(site.export) & set(site.env))
    ]


@rule("secret-env", needs=("site",))
def secret_env_value(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A secret-looking env: name (HF_TOKEN, WANDB_API_KEY, DB_PASSWORD; not NCCL_IB_PKEY) is forwarded by name.

    Its value on a launch line (`env K=V srun`, `mpirun -x K=V`) is readable by anyone on the node through `ps`,
    and an sbatch script is kept by slurmctld. So the value is never written: the line forwards the name
    (`-x NAME`, `--container-env=NAME`, srun's --export=ALL) from the launching shell, as export: does, and
    `launch --exec` refuses when the shell lacks it. It WARNs rather than refuses: the site still runs the same
    way everywhere (launch, sbatch, the printed line), and only the value in the site file, which is itself
    shared, goes unused; refusing would stop a working site over a name that may be no secret.
    """
    names = secret_env(facts.site)
    if not names:
        return [Verdict("SKIP", "the site sets no secret-looking env: name")]
    gloo = "; horovodrun --gloo still writes it onto each ssh line it runs" if horovodrun_allowlist(facts.site) else ""
    return [
        Verdict(
            "WARN",
            f"{name} looks like a secret: its value here is never written on a line or into a script "
            f"(anyone reads those through ps); the launching shell's is forwarded by name{gloo}",
            f"move {name} from env: to export: and set it in the launching shell",
            key=f"env.{name}",
        )
        for name in names
    ]


@rule("gpu-model", needs=("site",), on_load=True)
def gpu_model(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A site with GPUs names their model (the GPU rules judge the image by it); one without has no GPU keys."""
    node, container = facts.site.node, facts.site.container
    if node.gpus and node.gpu_model is None:
        return [
            refusal("node.gpu_model", f"node.gpus is {node.gpus} but no GPU model is given", "add e.g. gpu_model: A100")
        ]
    if not node.gpus and (node.gpu_model or node.driver or container.gpu):
        key = "container.gpu" if container.gpu else "node.gpu_model" if node.gpu_model else "node.driver"
        return [refusal(key, "the site has no GPUs (node.gpus: 0)", "set node.gpus or drop it")]
    return []


@rule("wrapper-command", needs=("site",), on_load=True)
def wrapper_command(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A per-rank wrapper starts with a command: an option first would be read as the launcher's."""
    if not facts.site.wrappers:
        return [Verdict("SKIP", "the site has no wrappers")]
    return [
        refusal(
            f"wrappers[{index}]", f"starts with an option ({wrapper[0]!r}), not a command", "e.g. [taskset, -c, 0-63]"
        )
        for index, wrapper in enumerate(facts.site.wrappers)
        if wrapper[0].startswith("-")
    ]


@rule("gate-threshold", needs=("site",), on_load=True)
def gate_threshold(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The launch gate's threshold is a fraction of network.link_gbps in (0, 1]."""
    threshold = facts.site.gate.threshold
    if 0 < threshold <= 1:
        return []
    return [
        refusal(
            "gate.threshold",
            f"{threshold:g} is outside (0, 1]",
            "give the least busbw the gate accepts as a fraction of network.link_gbps, e.g. 0.5",
        )
    ]


@rule("cpus-per-rank", needs=("site",), on_load=True)
def cpus_per_rank(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """node.cpus_per_rank CPUs for each of the node's ranks fit in node.cores (SLURM refuses the job otherwise)."""
    node = facts.site.node
    if node.cpus_per_rank is None:
        return [Verdict("SKIP", "the site sets no node.cpus_per_rank")]
    if node.cpus_per_rank * node.slots <= node.cores * node.threads_per_core:
        return []
    return [
        refusal(
            "node.cpus_per_rank",
            f"{node.cpus_per_rank} CPUs x {node.slots} ranks per node is more than node.cores {node.cores}",
            f"set at most {max(1, node.cores // node.slots)}, or drop it (default: node.cores over the ranks per node)",
        )
    ]


@rule("gpu-numa-map", needs=("site",), on_load=True)
def gpu_numa_map(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """node.gpu_numa names one NUMA node for each of the node's GPUs, and only NUMA nodes the site has."""
    node = facts.site.node
    if node.gpu_numa is None:
        return [Verdict("SKIP", "the site sets no node.gpu_numa")]
    if len(node.gpu_numa) != node.gpus:
        return [
            refusal(
                "node.gpu_numa",
                f"maps {len(node.gpu_numa)} GPUs but node.gpus is {node.gpus}",
                "give one NUMA node per GPU, in GPU index order (`hpcbundle site detect` drafts it)",
            )
        ]
    known = node.numa_memory
    return [
        refusal(
            f"node.gpu_numa[{index}]",
            f"GPU {index} on NUMA node {numa}, which the site does not have (node.numa_memory: {known})",
            "use a NUMA node `numactl -H` lists, or fix node.numa_memory",
        )
        for index, numa in enumerate(node.gpu_numa)
        if known is not None and numa not in known
    ]


_KEY_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]{1,4}\])*")
"""A dotted key path, e.g. env.NCCL_SOCKET_IFNAME, wrappers[0] or launcher.bind_to."""


@rule("why-keys", needs=("site",), on_load=True)
def why_keys(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Every `why:` key is a key path the site sets (--explain shows the line beside that key).

    A path like env.NCCL_SOCKET_IFNAME or wrappers[0]; a default the site leaves alone has no why of its own."""
    if not facts.site.why:
        return [Verdict("SKIP", "the site has no why: keys")]
    data = facts.site.model_dump(exclude_unset=True)
    fix = "use a dotted key the site sets, such as env.NCCL_SOCKET_IFNAME or wrappers[0]"
    return [
        refusal(f"why.{key}" if _KEY_PATH.fullmatch(key) else "why", problem, fix)
        for key in facts.site.why
        for problem in [_why_key_problem(data, key)]
        if problem
    ]


def _why_key_problem(data: dict[str, Any], key: str) -> str:
    """Why `key` of `why:` explains nothing ('' when it names a key the site sets)."""
    if not _KEY_PATH.fullmatch(key):
        return f"{clip(key, 24)} is not a key path"
    return "" if _has_key(data, key) else "names no key this site sets"


def _has_key(data: Any, dotted: str) -> bool:
    """Whether `dotted` ('env.X', 'wrappers[0]', 'launcher.name'), a key path, names a key present in `data`."""
    node = data
    for part in re.findall(r"[^.\[\]]+|\[\d{1,9}\]", dotted):
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


@rule("signal-lead", needs=("site",), on_load=True, superseded_by=("batch-time",))
def signal_lead(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """faults.signal_before_end comes inside slurm.time, or inside the job's sbatch --time where given.

    At or above the time limit, SLURM would signal the job as it starts, and it would stop after its
    first epoch every time.
    """
    site = facts.site
    lead, time = site.faults.signal_before_end, site.slurm.time
    asked = facts.request.time if facts.request is not None else None
    if lead is None:
        return [Verdict("SKIP", "the site sets no faults.signal_before_end")]
    if asked is not None:  # the job's --time replaces slurm.time (batch-time refuses a malformed one)
        if lead < slurm_seconds(asked):
            return []
        problem = (
            f"{asked} is not longer than the site's faults.signal_before_end ({lead} s): "
            "SLURM would signal the job to stop as it starts"
        )
        return [request_refusal("--time", problem, f"ask for more than {lead} s")]
    if time is None:
        return [Verdict("SKIP", "no time limit to signal inside (slurm.time, --time)")]
    if lead < slurm_seconds(time):
        return []
    return [
        refusal(
            "faults.signal_before_end",
            f"{lead} s is not inside slurm.time {time} ({slurm_seconds(time)} s)",
            "set it to an epoch plus a checkpoint, well below the time limit",
        )
    ]


@rule("stall-bound", needs=("site",), on_load=True)
def stall_bound(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """faults.stall_seconds ends a silent job before launcher.timeout ends every job: at or above it, it never fires."""
    site = facts.site
    stall, limit = site.faults.stall_seconds, site.launcher.timeout
    if stall is None:
        return [Verdict("SKIP", "the site sets no faults.stall_seconds")]
    if stall < limit:
        return []
    return [
        refusal(
            "faults.stall_seconds",
            f"{stall} s is not below launcher.timeout ({limit} s), so it would never end a stalled job",
            f"set it below {limit} (longer than the program's quietest stretch), or raise launcher.timeout",
        )
    ]


@rule("batch-memory", needs=("site",))
def batch_memory(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A batch job that takes every GPU of its nodes asks for their memory too (slurm.mem, or --mem=0 with --exclusive).

    Without --mem SLURM gives a job DefMemPerCPU x its CPUs (or DefMemPerNode), and --exclusive alone gives every CPU
    and GPU of the node but only the memory asked for: a data loader or a large model then meets the OOM killer
    with the node's memory idle."""
    site = facts.site
    slurm, gpus = site.slurm, site.node.gpus
    asked = slurm.gres.rsplit(":", 1)[-1] if slurm.gres else ""
    if not gpus or not asked.isdigit() or int(asked) < gpus:
        return Verdict("SKIP", "the batch job does not take every GPU of its nodes (slurm.gres vs node.gpus)")
    if slurm.mem or "--exclusive" in slurm.options:
        mem = slurm.mem or "0 (all of each node's, with --exclusive)"
        return Verdict("PASS", f"the job takes all {gpus} GPUs of each node and asks for --mem={mem}")
    return Verdict(
        "WARN",
        f"the batch job takes all {gpus} GPUs of each node (slurm.gres {slurm.gres}) but asks for no memory: SLURM "
        "gives it DefMemPerCPU x its CPUs (or DefMemPerNode), which may be a fraction of the node's",
        "add --exclusive to slurm.options (the script then asks --mem=0, all of each node's memory) or set slurm.mem",
        key="slurm.mem",
    )


@rule("cycle-time-evidence", needs=("site",))
def cycle_time_evidence(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A GPU site's HOROVOD_CYCLE_TIME says what it rests on (its why): the drafted 0.1 ms stays marked to re-tune.

    The draft (knowledge/knobs.py GPU_CYCLE_TIME) was measured with one rank on one GPU; what it does to a
    multi-node job's allreduce is measured only by `hpcbundle tune --knobs cycle` on the site's nodes."""
    site = facts.site
    value = site.env.get("HOROVOD_CYCLE_TIME")
    if not site.node.gpus:
        return Verdict("SKIP", "no GPU site (the draft is for GPU nodes)")
    if value is None:
        return Verdict("SKIP", "the site leaves HOROVOD_CYCLE_TIME at Horovod's 1 ms default")
    why = site.why.get("env.HOROVOD_CYCLE_TIME")
    if why is None:
        return Verdict(
            "WARN",
            f"HOROVOD_CYCLE_TIME={value} with no why: nothing says what it was measured on",
            "run `hpcbundle tune --knobs cycle` on these nodes and write what it chose and measured under "
            "why env.HOROVOD_CYCLE_TIME",
            key="env.HOROVOD_CYCLE_TIME",
        )
    if (value, why) == (GPU_CYCLE_TIME, GPU_CYCLE_TIME_WHY):
        return Verdict(
            "PASS",
            f"HOROVOD_CYCLE_TIME={value} is the draft measured with 1 rank on one H200, marked to re-tune on these "
            "nodes (hpcbundle tune --knobs cycle)",
        )
    return Verdict("PASS", f"HOROVOD_CYCLE_TIME={value}: {why}")
