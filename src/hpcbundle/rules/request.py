"""Rules over the launch request on a site: the ranks and their hosts, the image, the program and the
launching shell, the knobs to tune, judged before anything starts (launch, sbatch, check --np/--hosts/--image,
doctor, tune).

Each rule is on_load: its FAIL refuses the launch in one line naming the flag (`--np 8: larger than the
4 slots of --hosts f1:2,f2:2 (lower --np or give more hosts or slots)`) or the site key, exit status 2.
A rule whose part of the request was not given SKIPs (doctor asks for no ranks, check runs no program).
"""

from __future__ import annotations

import re
from typing import Callable

from ..config.errors import clip
from ..config.fields import IMAGE_COMPONENT
from ..config.limits import MAX_RANKS
from ..config.sites import PROGRAM_ENV, Site, is_slurm_time
from ..knowledge.compat import KnowledgeBase
from ..knowledge.knobs import knob_sites
from ..knowledge.launching import LAUNCHERS_KNOWN, RUNTIMES_KNOWN, LauncherKnown, RuntimeKnown, image_env_kept
from ..knowledge.secrets import forwarded
from .engine import Facts, LaunchRequest, Verdict, refusal, request_refusal, rule

REQUEST: tuple[str, str] = ("site", "request")

_SQUASHFS = re.compile(r"/[A-Za-z0-9._+/-]*[A-Za-z0-9_+-]\.(sqsh|squashfs)")
"""A squashfs image on the nodes' file system (`enroot import` writes .sqsh), an absolute path."""
_ENROOT_URI = re.compile(
    rf"(?:[a-z0-9_.-]{{1,64}}@)?(?:[A-Za-z0-9.-]{{1,253}}(?::[0-9]{{1,5}})?#)?{IMAGE_COMPONENT}(?:/{IMAGE_COMPONENT}){{0,8}}"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
)
"""An image as enroot names it, [USER@][REGISTRY#]IMAGE[:TAG] (pyxis README),
e.g. registry.example.org#team/horovod:cuda13."""

_ACTIVATE = {
    "VIRTUAL_ENV": "activate the venv (source VENV/bin/activate)",
    "CONDA_PREFIX": "activate the conda env (conda activate ENV)",
}


def _skip(what: str) -> Verdict:
    return Verdict("SKIP", f"no {what} in this request")


def _parts(site: Site) -> tuple[LauncherKnown, RuntimeKnown]:
    """What the site's launcher and runtime can do (the rules that read it are superseded by launcher-known and
    runtime-known, which refuse an unknown name)."""
    return LAUNCHERS_KNOWN[site.launcher.name], RUNTIMES_KNOWN[site.container.runtime]


KNOWN_PARTS = ("launcher-known", "runtime-known")


def _bad_name(image: str) -> bool:
    """An --image no runtime could take: empty, or read as an option."""
    return not image or image.startswith("-")


def _image(request: LaunchRequest) -> str | None:
    """The request's image when it is a name a runtime could take, else None (image-name judges the rest)."""
    return request.image if request.image is not None and not _bad_name(request.image) else None


@rule("program-given", needs=REQUEST, on_load=True)
def program_given(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A launch names its program after --: without one the ranks have nothing to run."""
    program = facts.request.program
    if program is None:
        return [_skip("PROGRAM")]
    if program:
        return []
    return [request_refusal("PROGRAM", "missing", "give the program after --, e.g. -- python3 train.py")]


@rule("program-first", needs=REQUEST, on_load=True)
def program_first(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The program's first word is a command, not an option the launcher would read as its own."""
    program = facts.request.program
    if not program:
        return [_skip("PROGRAM")]
    if not program[0].startswith("-"):
        return []
    problem = f"{program[0]!r} starts with '-', so the launcher would read it as an option"
    return [request_refusal("PROGRAM", problem, "put the program (e.g. python3) first after --")]


@rule("image-name", needs=REQUEST, on_load=True)
def image_name(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """--image names an image: not empty, and not starting with '-' (the runtime would read it as an option)."""
    image = facts.request.image
    if image is None:
        return [_skip("--image")]
    if not _bad_name(image):
        return []
    fix = "name the image file, directory or tag (e.g. ./horovod.sif)"
    return [request_refusal("--image", f"{image!r} is not an image name", fix)]


@rule("image-form", needs=REQUEST, on_load=True)
def image_form(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """--image has the form the site's runtime takes (pyxis: an absolute squashfs path or an enroot reference).

    enroot reads a name without '#' as a Docker Hub image, so `nvcr.io/nvidia/pytorch:24.05-py3` makes
    every node look for an image `nvcr.io/nvidia/pytorch` there and fail; a .sif is Apptainer's format,
    which enroot cannot run; a relative .sqsh is read as a Docker Hub name too.
    """
    image = _image(facts.request)
    if image is None:
        return [_skip("--image")]
    if not getattr(RUNTIMES_KNOWN.get(facts.site.container.runtime), "enroot", False):
        return [Verdict("SKIP", f"{facts.site.container.runtime} takes any image name its engine can find")]
    problem = _pyxis_image_problem(image)
    return [request_refusal("--image", *problem)] if problem else []


def _pyxis_image_problem(image: str) -> tuple[str, str] | None:
    """(problem, fix) for an image pyxis cannot take, else None."""
    shown = repr(image[:80])
    if image.endswith(".sif"):
        fix = "convert it (enroot import -o horovod.sqsh dockerd://IMAGE) or use an apptainer/singularity site"
        return f"{shown} is an Apptainer image, which enroot cannot run", fix
    if image.startswith("/"):
        if _SQUASHFS.fullmatch(image):
            return None
        return f"{shown} is not a squashfs image path", "give /path/image.sqsh (letters, digits, ._+/-)"
    if image.endswith((".sqsh", ".squashfs")):
        problem = f"{shown} is a relative squashfs path, which enroot reads as a Docker Hub image name"
        return problem, "give the absolute path, e.g. /scratch/horovod.sqsh"
    host, slash, rest = image.partition("/")
    if "#" not in image and "://" not in image and slash and ("." in host or ":" in host or host == "localhost"):
        problem = f"{shown} names the registry {host} without '#', so enroot looks for it on Docker Hub"
        return problem, f"write {host}#{rest}"
    if _ENROOT_URI.fullmatch(image):
        return None
    fix = "write [USER@][REGISTRY#]IMAGE[:TAG], e.g. registry.example.org#team/horovod:cuda13, or /path/image.sqsh"
    return f"{shown} is not an enroot image reference", fix


@rule("image-built-once", needs=REQUEST, on_load=True)
def image_built_once(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Several ranks run a built image (a SIF), not a docker:// or oci: source the runtime converts on every start.

    Apptainer/Singularity build a SIF from such a source before each `exec`: every rank of the job does it at once,
    into one cache (the user's home, shared by the nodes), pulling every layer once per rank and racing on the cache.
    """
    request = facts.request
    image = _image(request)
    if image is None:
        return [_skip("--image")]
    runtime = facts.site.container.runtime
    sources = getattr(RUNTIMES_KNOWN.get(runtime), "converts", ())
    source = next((prefix for prefix in sources if image.startswith(prefix)), None)
    if source is None:
        if not sources:
            return [Verdict("SKIP", f"{runtime} converts no image source on every start")]
        return [Verdict("PASS", f"{runtime} runs {image[:80]} as it is (no docker:// or oci: source to convert)")]
    if request.np is not None and request.np < 2:
        return [Verdict("PASS", f"one rank converts {source} once")]
    ranks = f"{request.np} ranks" if request.np else "every rank"
    return [
        Verdict(
            "WARN",
            f"{image[:80]}: {ranks} would each build a SIF from {source} at once, into one {runtime} cache",
            f"build the SIF once (`{runtime} build horovod.sif {image[:80]}`) and pass --image horovod.sif",
            key="--image",
            flag=True,
        )
    ]


@rule("image-on-host", needs=REQUEST, on_load=True, superseded_by=KNOWN_PARTS)
def image_on_host(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """No --image on a site whose programs run on the host (container.runtime: none)."""
    site, parts = facts.site, _parts(facts.site)
    if _image(facts.request) is None:
        return [_skip("--image")]
    if parts[1].needs_image:
        return []
    problem = f"site {site.name} runs programs on the host (container.runtime: none)"
    return [request_refusal("--image", problem, "drop --image or pick a site with a container runtime")]


@rule("workdir-path", needs=REQUEST, on_load=True)
def workdir_path(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The working directory every rank starts in is an absolute path without control characters, and
    without the characters that split the site runtime's mount spec (':' for docker, podman and ch-run,
    also ',' for pyxis), which would mount another directory; a batch job's of visible characters (no bidi
    override or other invisible character in its #SBATCH --chdir line)."""
    workdir, runtime = facts.request.workdir, facts.site.container.runtime
    if workdir is None:
        return [_skip("working directory")]
    shown = repr(workdir[:80])
    if not workdir.startswith("/"):
        return [request_refusal("--workdir", f"{shown} is not an absolute path", "give it from /, e.g. $PWD/run")]
    if any(ord(char) < 32 or ord(char) == 127 for char in workdir):
        return [request_refusal("--workdir", f"{shown} has a control character", "use a plain directory name")]
    split = [char for char in getattr(RUNTIMES_KNOWN.get(runtime), "mount_separators", "") if char in workdir]
    if split:
        problem = f"{shown} has {split[0]!r}, which splits {runtime}'s mount of the working directory"
        fix = f"run from (or give --workdir) a directory without {split[0]!r}"
        return [request_refusal("--workdir", problem, fix)]
    hidden = [char for char in workdir if not char.isprintable()]
    if facts.request.batch and hidden:
        problem = f"{shown} has {hidden[0]!r}, which an #SBATCH --chdir line would carry unseen (or reordered)"
        return [request_refusal("--workdir", problem, "use a directory of visible characters")]
    return []


@rule("batch-time", needs=REQUEST, on_load=True)
def batch_time(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A batch job's --time is a SLURM time of at most a year (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])."""
    time = facts.request.time
    if time is None:
        return [_skip("--time")]
    if is_slurm_time(time):
        return []
    return [
        request_refusal(
            "--time", f"{clip(time)} is not a SLURM time of at most a year", "e.g. 30, 02:00:00 or 1-00:00:00"
        )
    ]


@rule("batch-cpus", needs=REQUEST, on_load=True, superseded_by=("np-bound", "ranks-per-node"))
def batch_cpus(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A batch job's --tasks-per-node x --cpus-per-task fit a node's CPUs (node.cores x node.threads_per_core).

    SLURM refuses a job that asks more CPUs of a node than it has at submit ("Requested node configuration
    is not available"), whatever launcher.oversubscribe says; only --overcommit (-O) in slurm.options lets it.
    """
    site, request = facts.site, facts.request
    if not request.batch or request.tasks_per_node is None or request.wiring == "torchrun":
        return [Verdict("SKIP", "no sbatch --tasks-per-node (a torchrun job runs one task per node)")]
    if {"--overcommit", "-O"} & set(site.slurm.options):
        return [Verdict("SKIP", "slurm.options has --overcommit: SLURM lets tasks share CPUs")]
    per_node, node = request.tasks_per_node, site.node
    cpus, held = node.cpus_for(per_node), node.cores * node.threads_per_core
    if per_node * cpus <= held:
        return []
    threads = f" x {node.threads_per_core} threads" if node.threads_per_core > 1 else ""
    problem = (
        f"{per_node} tasks x {cpus} CPUs each is more than the {held} CPUs of a site {site.name} node "
        f"(node.cores {node.cores}{threads}): SLURM refuses the job at submit"
    )
    return [request_refusal(f"--tasks-per-node {per_node}", problem, f"give at most {held // cpus} tasks per node")]


@rule("hosts-launcher", needs=REQUEST, on_load=True, superseded_by=KNOWN_PARTS)
def hosts_launcher(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """--hosts and --hostfile go to a launcher that takes hosts; srun places the ranks on the nodes SLURM allocated."""
    request, parts = facts.request, _parts(facts.site)
    if not (request.hosts or request.hostfile):
        return [_skip("--hosts or --hostfile")]
    if parts[0].takes_hosts:
        return []
    problem = f"{facts.site.launcher.name} places the ranks on the nodes SLURM allocated"
    fix = "drop --hosts/--hostfile and ask SLURM for nodes (hpcbundle sbatch --nodes N)"
    return [request_refusal("--hosts", problem, fix)]


@rule("np-bound", needs=REQUEST, on_load=True)
def np_bound(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The ranks asked for (--np, or sbatch's --nodes x --tasks-per-node) are at most 1,048,576 (MAX_RANKS)."""
    np_ = facts.request.np
    if np_ is None:
        return [_skip("--np")]
    if np_ <= MAX_RANKS:
        return []
    problem = f"{np_} ranks (--np, or --nodes x --tasks-per-node) are more than any job runs"
    return [request_refusal("--np", problem, f"ask for at most {MAX_RANKS} ranks")]


@rule("np-slots", needs=REQUEST, on_load=True, superseded_by=("hosts-launcher", "elastic-hosts", "elastic-np"))
def np_slots(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """--np fits the slots of --hosts or --hostfile (unless launcher.oversubscribe)."""
    site, request = facts.site, facts.request
    if request.np is None:
        return [_skip("--np")]
    slots = request.slots
    if slots is None:
        return [_skip("--hosts or --hostfile")]
    if request.np <= slots or site.launcher.oversubscribe:
        return []
    given = f"--hosts {_host_list(request)}" if request.hosts else f"--hostfile {request.hostfile}"
    return [
        request_refusal(
            f"--np {request.np}", f"larger than the {slots} slots of {given}", "lower --np or give more hosts or slots"
        )
    ]


@rule("np-nodes", needs=REQUEST, on_load=True, superseded_by=KNOWN_PARTS)
def np_nodes(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The ranks fit the SLURM job's nodes x ranks per node where the launcher places them on the allocation.

    srun always does, mpirun and mpiexec.hydra where no --hosts or --hostfile is given. Each node takes
    node.ranks_per_node, else one rank per GPU: srun is told --ntasks-per-node (more ranks would make SLURM
    spread them by CPUs, two to a GPU), Hydra's -ppn wraps round the nodes again (`-ppn 1 -n 8` on 2 nodes
    is 4 ranks on each), and mpirun fills each node's slots (SLURM_TASKS_PER_NODE, often its CPUs): over
    nodes x GPUs, some GPU takes two ranks (NCCL refuses them). A CPU site without node.ranks_per_node is
    placed by SLURM's CPUs (mpirun refuses more ranks than slots itself).
    """
    site, request, launcher = facts.site, facts.request, _parts(facts.site)[0]
    if request.np is None:
        return [_skip("--np")]
    if request.nodes is None:
        return [Verdict("SKIP", "the SLURM job's nodes are not known here")]
    if launcher.takes_hosts and (request.slots is not None or not launcher.reads_allocation):
        return [Verdict("SKIP", "the ranks go where --hosts or --hostfile say, or the launcher reads no allocation")]
    per_node = request.tasks_per_node or site.node.fixed_ranks
    if per_node is None:
        return [Verdict("SKIP", "a CPU site without node.ranks_per_node: SLURM places the ranks by CPUs")]
    if request.np <= request.nodes * per_node:
        return []
    key = (
        "--tasks-per-node"
        if request.tasks_per_node
        else "node.ranks_per_node"
        if site.node.ranks_per_node
        else "node.gpus"
    )
    most = request.nodes * per_node
    problem = f"more than the {request.nodes} nodes x {per_node} ranks per node ({key}) of this SLURM job"
    return [request_refusal(f"--np {request.np}", problem, f"give --np {most} or less, or ask SLURM for more nodes")]


@rule("srun-allocation", needs=REQUEST, on_load=True, superseded_by=("hosts-launcher", *KNOWN_PARTS))
def srun_allocation(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A line whose launcher takes the nodes from SLURM (srun) is for inside an allocation, or a batch script.

    Outside one, srun makes a job of its own with none of the site's slurm keys (gres, partition, account,
    time, options): a GPU-less job in the default partition. Adding them would make every printed line
    queue as its own job (the launch gate and the program probe too, each on nodes of their own), so the
    line is refused instead: run it inside salloc, or let hpcbundle sbatch write the job.
    """
    site, request, launcher = facts.site, facts.request, _parts(facts.site)[0]
    if request.np is None or request.batch:
        return [Verdict("SKIP", "no ranks asked for, or a batch job's script (it runs inside its allocation)")]
    if launcher.takes_hosts or request.in_allocation:
        return []
    slurm = site.slurm
    keys = (("partition", slurm.partition), ("account", slurm.account), ("gres", slurm.gres))
    salloc = " ".join(["salloc --nodes N", *(f"--{key}={value}" for key, value in keys if value)])
    problem = (
        f"not set: {site.launcher.name} (launcher.name of site {site.name}) would start a job of its own here, "
        "without the site's gres, partition, account or time"
    )
    fix = f"run it inside an allocation, e.g. {salloc}, or use hpcbundle sbatch"
    return [request_refusal("SLURM_JOB_ID", problem, fix)]


def _host_list(request: LaunchRequest) -> str:
    return ",".join(f"{host}:{slots}" for host, slots in request.hosts)


@rule("np-one-node", needs=REQUEST, on_load=True, superseded_by=("container-one-node", *KNOWN_PARTS))
def np_one_node(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """More ranks than one node's slots need hosts, or a SLURM allocation the launcher reads."""
    site, request, parts = facts.site, facts.request, _parts(facts.site)
    if request.np is None:
        return [_skip("--np")]
    if site.faults.elastic is not None:
        return [Verdict("SKIP", "an elastic site's hosts come from its discovery source (rule elastic-hosts)")]
    if request.np <= site.node.slots or site.launcher.oversubscribe:
        return []
    launcher = parts[0]
    if request.slots is not None or not launcher.takes_hosts:
        return []
    if request.in_allocation and launcher.reads_allocation:
        return []
    per, flag = site.node.slots, f"--np {request.np}"
    if request.in_allocation:
        problem = f"needs more than one node, and {site.launcher.name} does not read the SLURM allocation"
        return [request_refusal(flag, problem, "use mpirun or srun in batch jobs, or one node")]
    problem = f"needs more than one {site.name} node ({per} ranks each) but no hosts were given"
    fix = f"add --hosts node1:{per},node2:{per} or --hostfile FILE, or launch inside a SLURM allocation"
    return [request_refusal(flag, problem, fix)]


def spans_nodes(site: Site, request: LaunchRequest) -> bool:
    """Whether the request's ranks need more than one node: several hosts, a hostfile, or, where no host is
    named, more ranks than one node's slots (never with launcher.oversubscribe, which puts them all on one).
    `--hosts vm:2` is one node whatever its slots: ranks-per-node judges the count there."""
    if request.hosts or request.hostfile:
        return len(request.hosts) > 1 or bool(request.hostfile)
    return (request.np or 0) > site.node.slots and not site.launcher.oversubscribe


LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names that are this machine whatever it is called."""


@rule("default-site", needs=REQUEST, on_load=True)
def default_site(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """No --site (the default, local: this machine alone) inside a SLURM job or with other hosts.

    The local site runs every rank on this machine (mpirun --allow-run-as-root --oversubscribe). Inside a SLURM
    job, or with other hosts, that is a cluster's run on the wrong site, so it is refused until a site is named
    (`--site local` included): a WARN beside a line that runs would go unread, and the job would run
    oversubscribed on one node, as root where it can."""
    request = facts.request
    if not request.default_site:
        return [Verdict("SKIP", "the site is named (--site)")]
    others = [host for host, _ in request.hosts if host not in LOCAL_HOSTS]
    if request.shell_job is not None:
        where = f"this shell runs inside SLURM job {clip(request.shell_job, 20)}"
    elif others or request.hostfile:
        where = f"--hosts names {clip(others[0], 40)}" if others else "--hostfile names other hosts"
    else:
        return [Verdict("PASS", f"the default site {facts.site.name} runs every rank on this machine")]
    return [
        request_refusal(
            "--site",
            f"not given, so the default site {facts.site.name} would run every rank on this machine alone, but {where}",
            "name the cluster's site with --site NAME; `hpcbundle site detect` drafts one",
        )
    ]


@rule("export-image-env", needs=REQUEST, on_load=True)
def export_image_env(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """No exported variable of the program's environment (PATH, VIRTUAL_ENV, ...) replaces the image's own.

    Inside the container the image provides the program's environment (the runtime keeps some of it).
    """
    site = facts.site
    if _image(facts.request) is None:
        return [_skip("--image")]
    kept = image_env_kept(site)
    return _exports_refused(
        site,
        lambda name: name in PROGRAM_ENV and name not in kept,
        lambda name: (
            f"{name} of the launching shell would replace the image's own in {site.container.runtime} containers"
        ),
        lambda name: f"drop {name} from export: the image provides the program's environment",
    )


def _exports_refused(
    site: Site, refused: Callable[[str], bool], problem: Callable[[str], str], fix: Callable[[str], str]
) -> list[Verdict]:
    """One refusal at export[i] for every exported name that `refused` picks, with its problem and fix."""
    return [refusal(f"export[{i}]", problem(name), fix(name)) for i, name in enumerate(site.export) if refused(name)]


@rule("container-one-node", needs=REQUEST, on_load=True, superseded_by=KNOWN_PARTS)
def container_one_node(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A runtime that holds the launcher in one container (docker, podman) runs the job on one node."""
    site, request, parts = facts.site, facts.request, _parts(facts.site)
    if _image(request) is None:
        return [_skip("--image")]
    if not parts[1].wraps_launcher or not spans_nodes(site, request):
        return []
    flag = "--hosts" if request.hosts else f"--np {request.np}"
    problem = f"{site.container.runtime} runs the launcher inside one container on one node"
    return [request_refusal(flag, problem, "use singularity, apptainer or charliecloud for several nodes")]


@rule("export-set", needs=REQUEST, on_load=True)
def export_set(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Every variable the site forwards by name (export:, secret-looking env: names) is set in the launching shell.

    Judged where the launching shell is known (launch --exec, doctor). Else the ranks would miss it, or the
    launcher refuse the whole line. Where the image brings its own (the runtime
    keeps the image's PATH and LD_LIBRARY_PATH, e.g. `-x LD_LIBRARY_PATH` into Apptainer) it only WARNs: the ranks
    get the image's value, and a launcher that forwards it by name (mpirun -x) only warns that it is missing.
    """
    site, request = facts.site, facts.request
    if request.environment is None:
        return [_skip("launching shell")]
    kept = image_env_kept(site) if _image(request) is not None else frozenset()
    missing = [(key, name) for key, name in forwarded(site) if name not in request.environment]
    return [
        Verdict(
            "WARN",
            f"{name} is not set in the launching shell; {site.container.runtime} gives the ranks the image's own",
            f"drop {name} from export",
            key=key,
        )
        if name in kept
        else refusal(
            key,
            f"{name} is not set in the launching shell",
            f"{_ACTIVATE.get(name, f'set {name}')} in the launching shell, or drop {name} from export"
            if key.startswith("export")
            else f"set {name} in the launching shell: a secret-looking env: name is forwarded by name, its value "
            "in the site never written",
        )
        for key, name in missing
    ]


@rule("elastic-hosts", needs=REQUEST, on_load=True)
def elastic_hosts(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """An elastic site's hosts come from its discovery source: --hostfile, or the SLURM job (no --hosts).

    horovodrun reads them from a discovery script every second (faults.elastic.discovery says which).
    """
    site, request = facts.site, facts.request
    if request.np is None:
        return [_skip("--np")]
    elastic = site.faults.elastic
    if elastic is None:
        return [Verdict("SKIP", f"site {site.name} is not elastic (no faults.elastic)")]
    if request.hosts:
        problem = f"site {site.name} is elastic: horovodrun takes its hosts from a discovery script, read every second"
        fix = (
            "give --hostfile FILE (faults.elastic.discovery: hostfile) or submit with hpcbundle sbatch "
            "(discovery: slurm)"
        )
        return [request_refusal("--hosts", problem, fix)]
    if elastic.discovery == "hostfile" and not request.hostfile:
        problem = f"missing: site {site.name} finds its hosts in a hostfile (faults.elastic.discovery)"
        fix = "give --hostfile FILE with `host slots=N` lines; edit it to add or retire nodes while the job runs"
        return [request_refusal("--hostfile", problem, fix)]
    if elastic.discovery == "slurm" and (request.hostfile or not request.in_allocation):
        problem = f"site {site.name} finds its hosts in the SLURM job (faults.elastic.discovery: slurm)"
        flag = "--hostfile" if request.hostfile else "SLURM_JOB_ID"
        return [request_refusal(flag, problem, "submit it with hpcbundle sbatch, or set discovery: hostfile")]
    return []


@rule("elastic-np", needs=REQUEST, on_load=True)
def elastic_np(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """An elastic launch's --np lies within faults.elastic's [min_np, max_np]."""
    site, np = facts.site, facts.request.np
    if np is None:
        return [_skip("--np")]
    elastic = site.faults.elastic
    if elastic is None:
        return [Verdict("SKIP", f"site {site.name} is not elastic (no faults.elastic)")]
    high = elastic.max_np or np
    if elastic.min_np <= np <= high:
        return []
    problem = f"outside faults.elastic's [min_np, max_np] = [{elastic.min_np}, {high}] of site {site.name}"
    return [request_refusal(f"--np {np}", problem, f"give --np from {elastic.min_np} to {high}")]


@rule("knob-site", needs=REQUEST, on_load=True)
def knob_site(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Every knob tune --knobs names applies to the site (Open MPI's knobs need Open MPI ranks), and the
    site is not elastic (tune times a fixed set of ranks; an elastic job's ranks come and go)."""
    site, knobs = facts.site, facts.request.knobs
    if not knobs:
        return [_skip("--knobs")]
    if site.faults.elastic is not None:
        problem = f"site {site.name} is elastic: tune times a fixed set of ranks, an elastic job's ranks come and go"
        return [refusal("faults.elastic", problem, "tune a copy of the site without faults.elastic, then add it back")]
    return [
        refusal("launcher", f"knob {name!r} is for {knob_sites(name).sites}", "drop it from --knobs")
        for name in knobs
        if not knob_sites(name).applies(site)
    ]
