"""SLURM batch scripts: #SBATCH lines from the site and the flags, then the site's launch line.

The launch line is the same explained argv `hpcbundle launch` prints, built for a run inside
the allocation (srun, or mpirun taking the hosts from SLURM); the template quotes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Sequence

import jinja2

from .. import __version__
from ..config.errors import UserError
from ..config.sites import Site, Wiring
from ..knowledge.bind import BIND_NAME, bind_place
from ..knowledge.secrets import horovodrun_allowlist
from ..quoting import shell_quote
from ..templating import strict_environment
from . import elastic
from .assemble import cpus_source
from .layout import RankLayout
from .plan import LaunchPlan
from .torchwiring import BATCH_PORT, BATCH_RUN_ID
from .workdir import JOB_SOURCE, WorkDir

TEMPLATE = "sbatch.sh.j2"


@dataclass(frozen=True)
class BatchJob:
    """What the sbatch flags ask for; `tasks_per_node` None means the site's node.slots.

    `job_name` replaces the site's slurm.job_name, `output` is the job's output file (SLURM's
    default, slurm-%j.out in the submit directory, when None), `dependency` e.g. "singleton", `workdir`
    the directory the job and every rank start in (--chdir; SLURM's default, the submit directory, when None),
    `wiring` how its ranks meet (horovod; torch or torchrun: the script finds MASTER_ADDR and MASTER_PORT first;
    torchrun: one task per node, its agent, which starts `tasks_per_node` workers).
    """

    nodes: int
    tasks_per_node: int | None = None
    time: str | None = None
    job_name: str | None = None
    output: str | None = None
    dependency: str | None = None
    workdir: WorkDir | None = None
    wiring: Wiring = "horovod"


@dataclass(frozen=True)
class GateStep:
    """The launch gate the script runs before the job (`sbatch --gate`): the probe as a program, which
    the site's launch line starts like the job's, and the lines the script prints when it hangs: after
    a rank printed `started_mark` (the transfer hung), else (no rank started in time)."""

    program: tuple[str, ...]
    hang_line: str
    start_line: str
    started_mark: str


def script_environment(scripts_dir: Path) -> jinja2.Environment:
    """The templates in scripts/, with a `shquote` filter for words that reach the shell."""
    env = strict_environment(scripts_dir)
    env.filters["shquote"] = shell_quote
    env.filters["job_word"] = job_word
    return env


def job_word(word: str) -> str:
    """A launch-line word as the batch script writes it: single-quoted, except the job's discovery script,
    whose private directory is known only when the job runs.

    >>> print(job_word("python"), job_word("my file"), job_word(elastic.BATCH_SCRIPT))
    python 'my file' "$job_tmp/discover-hosts.sh"
    """
    return f'"{word}"' if word == elastic.BATCH_SCRIPT else shell_quote(word)


def directives(site: Site, job: BatchJob) -> list[str]:
    """The #SBATCH options, e.g. ['--job-name=horovod', '--nodes=2', '--ntasks-per-node=2', '--cpus-per-task=20', ...].

    faults.signal_before_end adds --signal=B:USR1@N (to the batch shell, which passes it to the ranks);
    faults.requeue adds --requeue and --open-mode=append (a requeued run appends to the first run's output);
    faults.elastic adds --no-kill (a failed node leaves the job its other nodes, where elastic Horovod goes on).

    --cpus-per-task is node.cpus_per_rank, else the node's hardware threads (node.cores x
    node.threads_per_core) over the ranks per node: without it a job confined by cgroups gives each rank
    one CPU (SLURM's default) and its data loading starves. --mem is slurm.mem, else 0 (all of each node's
    memory) with --exclusive in slurm.options, where SLURM would otherwise hand out DefMemPerCPU.
    Each value is written as sbatch_word, so SLURM reads back the same text (a --chdir of /tmp/exp#3 included).
    --chdir is the user's working directory. Under --torchrun each node runs one task, its agent, with all of its CPUs.
    """
    slurm = site.slurm
    time = job.time or slurm.time  # its form judged by rule batch-time, with the plan
    lead = site.faults.signal_before_end
    chdir = job.workdir.path if job.workdir else None  # printable: rule workdir-path
    per_node = 1 if job.wiring == "torchrun" else job.tasks_per_node or site.node.slots
    values = {
        "job-name": job.job_name or slurm.job_name,
        "nodes": str(job.nodes),
        "ntasks-per-node": str(per_node),
        "cpus-per-task": str(site.node.cpus_for(per_node)),
        "mem": slurm.mem or ("0" if "--exclusive" in slurm.options else None),
        "time": time,
        "partition": slurm.partition,
        "account": slurm.account,
        "qos": slurm.qos,
        "gres": slurm.gres,
        "constraint": slurm.constraint,
        "output": job.output,
        "dependency": job.dependency,
        "chdir": chdir,
        "signal": f"B:USR1@{lead}" if lead is not None else None,
    }
    requeue = ["--requeue", "--open-mode=append"] if site.faults.requeue else []
    no_kill = ["--no-kill"] if site.faults.elastic else []
    words = [f"--{key}={sbatch_word(value)}" for key, value in values.items() if value is not None]
    return words + requeue + no_kill + list(slurm.options)


def sbatch_word(value: str) -> str:
    r"""`value` as SLURM's #SBATCH parser reads it back whole, in its releases old and new: a backslash before
    each of \ " ' # (an unescaped # ends the line, in older releases even inside quotes), and in double
    quotes where it has whitespace (a backslash does not keep a blank). A line break cannot be carried.

    >>> print(sbatch_word("/tmp/exp#3 it's"))
    "/tmp/exp\#3 it\'s"
    """
    escaped = re.sub(r"""([\\"'#])""", r"\\\1", value)
    return f'"{escaped}"' if re.search(r"\s", value) else escaped


def job_layout(site: Site, job: BatchJob) -> RankLayout:
    """The ranks a batch job runs: nodes x tasks per node, inside the allocation, each asking SLURM for
    its CPUs (node.cpus_per_rank, else node.cores over the ranks per node); an elastic site's horovodrun
    reads its hosts from the job's discovery script."""
    per_node = job.tasks_per_node or site.node.slots
    return RankLayout(
        np=job.nodes * per_node,
        in_allocation=True,
        np_source=f"flags --nodes {job.nodes} x --tasks-per-node {per_node}",
        cpus_per_rank=site.node.cpus_for(per_node),
        cpus_source=cpus_source(site, per_node),
        nodes=job.nodes,
        tasks_per_node=job.tasks_per_node,
        discovery_script=elastic.BATCH_SCRIPT if site.faults.elastic else None,
    )


def batch_plan(site: Site, job: BatchJob, program: Sequence[str], image: str | None) -> LaunchPlan:
    """The plan of a batch job running `program`: what `sbatch` (and each point of a scaling study) judges
    once before the script is written."""
    layout = job_layout(site, job)
    return LaunchPlan(site, layout, tuple(program), image, job.workdir, time=job.time, batch=True, wiring=job.wiring)


def sbatch_script(plan: LaunchPlan, job: BatchJob, env: jinja2.Environment, gate: GateStep | None = None) -> str:
    r"""The whole batch script text (strict mode, modules, site prologue, launch line) of a judged `plan`
    (batch_plan): assembly only.

    >>> from pathlib import Path
    >>> from hpcbundle.config.bundle import find_bundle
    >>> from hpcbundle.launch import load_site
    >>> bundle = find_bundle(None, Path.cwd())  # this checkout: site_configs/, scripts/, ...
    >>> site = load_site("eth-a100-slurm", bundle.sites_dir)
    >>> env, job = script_environment(bundle.scripts_dir), BatchJob(nodes=2)
    >>> lines = sbatch_script(batch_plan(site, job, ["python", "train.py"], "horovod.sif"), job, env).splitlines()
    >>> launch = next(i for i, line in enumerate(lines) if line.startswith("    srun "))
    >>> for line in lines[4:6] + lines[launch : launch + 3]:
    ...     print(line)
    #SBATCH --nodes=2
    #SBATCH --ntasks-per-node=4
        srun --mpi=pmix -n 8 --kill-on-bad-exit=1 -c 16 --ntasks-per-node=4 --distribution=block:block --export=ALL \
        apptainer exec --nv --bind /scratch --bind /var/spool/slurmd horovod.sif \
        python train.py &
    """
    site, program = plan.site, plan.program or ()
    discovery = None
    if site.faults.elastic:
        discovery = elastic.discovery_script(site, env, None, job.tasks_per_node or site.node.slots)
    in_job = (
        replace(plan, workdir=replace(plan.workdir, source=JOB_SOURCE)) if plan.workdir else plan
    )  # it starts there
    command = in_job.command()
    gate_segments = in_job.command(gate.program).segments() if gate else None
    return env.get_template(TEMPLATE).render(
        site=site,
        directives=directives(site, job),
        segments=command.segments(),
        np=plan.layout.np if plan.layout else 0,
        version=__version__,
        gate=gate,
        gate_segments=gate_segments,
        discovery=discovery,
        discovery_script=elastic.BATCH_SCRIPT,
        keep_env=horovodrun_allowlist(site),
        job_dir=elastic.JOB_DIR,
        bind_on_host=BIND_NAME if _bind_on_host(plan) else None,
        torch=_torch_block(plan),
        wiring=plan.wiring,
        program_name=PurePosixPath(program[0]).name,
        program_args="\n".join(program[1:]),
    )


def _bind_on_host(plan: LaunchPlan) -> bool:
    """Whether the job's line runs hpcbundle-bind on the host (node.host_bind): the script then tests for it first."""
    site = plan.site
    return bool(site.node.gpu_numa) and plan.wiring != "torchrun" and bind_place(site, bool(plan.image)) == "host"


def _torch_block(plan: LaunchPlan) -> dict[str, str | None] | None:
    """What the script's torch block needs (None for Horovod): the data interface whose address is rank 0's
    (None on one node without one), the port's formula and, under --torchrun, the rendezvous id's."""
    if plan.wiring == "horovod":
        return None
    interfaces = plan.site.network.interfaces
    run_id = BATCH_RUN_ID if plan.wiring == "torchrun" else None
    return {"interface": interfaces[0] if interfaces else None, "port": BATCH_PORT, "run_id": run_id}


def parse_job_id(stdout: str) -> str:
    """The job id from `sbatch --parsable` output ('123' or '123;cluster')."""
    match = re.match(r"^\s*(\d+)", stdout)
    if not match:
        raise UserError.at(
            "", "sbatch", f"printed no job id: {stdout.strip()[:200]!r}", "check the SLURM configuration on this host"
        )
    return match.group(1)
