"""Assemble a launch command from a site, a layout, an image and a program (pure: no I/O, no judgement).

The rules judged the plan first (launch/plan.py): a launch that cannot work was refused in one line
naming the flag or site key before any token is assembled, so assembly never refuses."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..config.sites import Site
from ..knowledge import network
from ..knowledge.launching import image_env_kept
from ..knowledge.secrets import forwarded, secret_env, settings
from ..knowledge.torchenv import agent_words, is_address, torchenv_words
from . import launchers as _launchers  # noqa: F401  (registers every launcher)
from . import reasons
from . import runtimes as _runtimes  # noqa: F401  (registers every runtime)
from .base import LAUNCHERS, RUNTIMES, Launcher, Runtime
from .command import Command, Part, Parts
from .layout import RankLayout
from .placement import gpu_numa_placement
from .torchwiring import TorchWiring, agent_layout, gloo_interfaces, torchrun_words
from .workdir import WorkDir

_WRAPPER_WHY = {
    "host": "per-rank wrapper: each rank's program runs under it",
    "outside": (
        "per-rank wrapper on the host, before the container starts: CPU affinity and memory policy "
        "are inherited through exec into the container, and the host has the tool where a slim image may not"
    ),
    "inside": (
        "per-rank wrapper inside the container: its processes descend from the daemon, "
        "so host-side settings would not reach them"
    ),
    "plugin": "per-rank wrapper inside the container srun's plugin starts for each rank: the image must have the tool",
}


# Variables that size a rank's threads: where a site sets one, it sizes them itself.
THREAD_COUNTS = frozenset({"OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"})


def cpus_source(site: Site, per_node: int) -> str:
    """Where a rank's CPUs come from, for --explain: node.cpus_per_rank, else the node shared out."""
    if site.node.cpus_per_rank:
        return "node.cpus_per_rank"
    threads = f" x {site.node.threads_per_core} threads" if site.node.threads_per_core > 1 else ""
    return f"node.cores {site.node.cores}{threads} / {per_node} ranks"


def cpu_sized(site: Site, launcher: Launcher, layout: RankLayout) -> RankLayout:
    """`layout` with each rank's CPUs, derived as sbatch derives them (node.cpus_per_rank, else the node
    shared out among the ranks on its fullest node), where the caller (a batch job) did not size them.

    The ranks per node are the named hosts' (repeats added up), else all on this node, else (SLURM or
    the allocation places them) the site's node.slots, at most --np. Inside an allocation the node's CPUs are
    the allocation's (`node_cpus`), or each rank's are SLURM_CPUS_PER_TASK (read at the edge into
    `cpus_per_rank`): srun refuses a step asking more than the job holds ("More processors requested than
    permitted").
    """
    if layout.cpus_per_rank:
        return layout
    placed = layout.ranks_per_host()
    if placed:
        per_node = max(ranks for _, ranks in placed)
    elif launcher.takes_hosts and not layout.in_allocation and not layout.hostfile:
        per_node = layout.np
    else:
        per_node = min(layout.np, site.node.slots)
    if layout.node_cpus:
        source = f"SLURM_JOB_CPUS_PER_NODE {layout.node_cpus} / {per_node} ranks"
        return replace(layout, cpus_per_rank=max(1, layout.node_cpus // per_node), cpus_source=source)
    return replace(layout, cpus_per_rank=site.node.cpus_for(per_node), cpus_source=cpus_source(site, per_node))


def build_command(
    site: Site,
    layout: RankLayout,
    program: Sequence[str],
    image: str | None = None,
    workdir: WorkDir | None = None,
    torch: TorchWiring | None = None,
) -> Command:
    """The launch command for `program` on `site`, every token explained; with `workdir` (read by the
    caller), every rank starts in that directory, mounted where the runtime would not see it; with `torch`,
    the ranks meet by torch.distributed's env:// or torchrun's agents (launch/torchwiring.py) instead of through
    Horovod.
    The site and layout are the ones a LaunchPlan judged (launch/plan.py).

    >>> from pathlib import Path
    >>> from hpcbundle.config.bundle import find_bundle
    >>> from hpcbundle.launch import RankLayout, build_command, load_site
    >>> site = load_site("ib-v100", find_bundle(None, Path.cwd()).sites_dir)
    >>> command = build_command(site, RankLayout(4, (("f1", 2), ("f2", 2))), ["python", "t.py"], "h.sif")
    >>> command.argv[:5]
    ['mpirun', '-np', '4', '-H', 'f1:2,f2:2']
    >>> command.argv[-6:]
    ['singularity', 'exec', '--nv', 'h.sif', 'python', 't.py']
    """
    launcher, runtime = LAUNCHERS.get(site.launcher.name), RUNTIMES.get(site.container.runtime)
    assert launcher is not None and runtime is not None, "the plan's judgement refuses an unknown name"
    layout = cpu_sized(site, launcher, layout)
    agents = torch.agents if torch else None
    env, main = Parts(site, "env"), Parts(site, "launcher")
    launcher.head(site, agent_layout(site, layout, agents) if agents else layout, main)
    if workdir is not None and workdir.elsewhere and not (image and runtime.sets_workdir):
        _start_in(site, launcher, workdir, main)
    _exports(site, launcher, runtime, image, main)
    _settings(site, launcher, layout, main, env)
    if torch is not None:
        _torch_settings(site, launcher, torch, main, env)
    launcher.tail(site, main)
    if site.launcher.args:
        main.site("launcher.args", site.launcher.args, "extra launcher options from the site")
    _env_in_front(launcher, env)
    container = _container(site, runtime, image, env, workdir)
    in_container = bool(image) and runtime.wraps_launcher
    place = "inside" if in_container else "plugin" if image and runtime.srun_plugin else "outside" if image else "host"
    placement, on_host = _placement(site, bool(image), torchrun=bool(agents))
    wrappers = _wrappers(site, place)
    body = _body(site, launcher, program, torch, inline=not image or site.container.foreign_image)
    if in_container:
        order = [container, env, main, placement, wrappers, body]
    elif runtime.srun_plugin:  # srun's own options: the wrappers run inside the container
        order = [env, main, container, placement, wrappers, body]
    elif on_host:
        order = [env, main, placement, wrappers, container, body]
    else:  # the site's wrappers on the host, the placement inside the container (or inline) where it exists
        order = [env, main, wrappers, container, placement, body]
    return Command(tuple(part for parts in order for part in parts.items))


def _body(site: Site, launcher: Launcher, program: Sequence[str], torch: TorchWiring | None, inline: bool) -> Parts:
    """What every rank runs: the program; under --torch behind the shim that names its rank; under --torchrun,
    torchrun started with it, behind the shim that gives the agent its rendezvous. The shim by its name in an
    image built here, else (`inline`: an image built elsewhere, or no image) its text."""
    body = Parts(site, "program")
    agents = torch.agents if torch else None
    shim = reasons.SHIM_INLINE if inline else reasons.SHIM_NAMED
    if agents is None:
        if torch is not None:
            body.add(torchenv_words(launcher.torch_ranks, inline), "flag --torch", f"{shim}: {reasons.TORCHENV}")
        body.add(program, "PROGRAM (after --)", "what every rank runs")
        return body
    interface = None if agents.standalone else site.network.interfaces[0]
    why = (reasons.AGENT_SHIM if interface else reasons.AGENT_SHIM_ONE_NODE) + reasons.AGENT_USR1
    conf = f"join_timeout={site.torch.join_timeout}" if interface else ""
    body.add(agent_words(interface, conf, inline), "flag --torchrun", f"{shim}: {why}")
    words, why = torchrun_words(program, agents), reasons.TORCHRUN.format(per_node=agents.per_node)
    body.add(words[: len(words) - len(program) + 1], "flag --torchrun", why)
    body.add(words[len(words) - len(program) + 1 :], "PROGRAM (after --)", "what every worker runs")
    return body


def _start_in(site: Site, launcher: Launcher, workdir: WorkDir, main: Parts) -> None:
    """The launcher's option that starts every rank in `workdir` (given as --workdir: the line may be run from
    elsewhere), where the runtime starts the program where the rank starts (none, singularity, apptainer)."""
    tokens = launcher.chdir(site, workdir.path)
    if tokens:
        main.add(tokens, workdir.source, reasons.CHDIR)
    else:
        main.add([], f"{workdir.source} {workdir.path}", reasons.NO_CHDIR.format(launcher=launcher.name))


def _exports(site: Site, launcher: Launcher, runtime: Runtime, image: str | None, main: Parts) -> None:
    """The variables the site exports from the launching shell, then its secret-looking env: names (forwarded by
    name too: their values stay off the line), each on the launcher's option if it has one."""
    for key, name in forwarded(site):
        tokens = launcher.export(site, name)
        why = reasons.export(name) if tokens else f"{launcher.name} passes the launching environment to every rank"
        if key.startswith("env."):
            why += f"; {reasons.SECRET}"
        if image and name in image_env_kept(site):
            why += f"; on the host only: {runtime.name} keeps the image's own {name} inside"
        main.site(key, tokens, why)


def _settings(site: Site, launcher: Launcher, layout: RankLayout, main: Parts, env: Parts) -> None:
    """The site's own variables and MCA parameters in its order, the threads per rank, then what
    network.interfaces and the link derive."""
    derivable = set(network.derived_interfaces(site)) & launcher.interface_keys
    from_link = network.derived_socket_threads(site)
    set_by_site = [(f"env.{name}", value) for name, value in settings(site).items()]
    set_by_site += [(f"mca.{name}", value) for name, value in site.mca.items()]
    for key, value in set_by_site:
        how = reasons.OVERRIDES if key in derivable else reasons.OVERRIDES_LINK if key in from_link else ""
        _place(main, env, key, *_setting(site, launcher, key, value), how)
    threads = max(1, (layout.cpus_per_rank or 0) // site.node.threads_per_core)
    if layout.cpus_per_rank and not THREAD_COUNTS & (set(site.env) | set(site.export)):
        option, assignment, _ = _setting(site, launcher, "env.OMP_NUM_THREADS", str(threads))
        _place_derived(main, env, option, assignment, layout.cpus_source, reasons.THREADS)
    if site.faults.stall_seconds and not {"PYTHONUNBUFFERED"} & (set(site.env) | set(site.export)):
        option, assignment, _ = _setting(site, launcher, "env.PYTHONUNBUFFERED", "1")
        _place_derived(main, env, option, assignment, "faults.stall_seconds", reasons.UNBUFFERED)
    interfaces_why = site.why.get("network.interfaces")
    for key, (value, source) in network.interface_settings(site).items():
        if source == "network.interfaces" and key in launcher.interface_keys:
            option, assignment, why = _setting(site, launcher, key, value)
            why = f"{why}; {interfaces_why}" if interfaces_why else why
            _place(main, env, key, option, assignment, why, reasons.DERIVED)
    for key, value in from_link.items():
        if key.split(".", 1)[1] not in site.env:
            _place(main, env, key, *_setting(site, launcher, key, value), reasons.DERIVED_LINK)
    for key, value in network.derived_nccl_net(site).items():
        _place(main, env, key, *_setting(site, launcher, key, value), reasons.DERIVED_NET)


def _torch_settings(site: Site, launcher: Launcher, torch: TorchWiring, main: Parts, env: Parts) -> None:
    """GLOO_SOCKET_IFNAME from network.interfaces, then MASTER_ADDR and MASTER_PORT: set on the line, or, in a
    batch job, forwarded by name from the script that found them."""
    gloo = gloo_interfaces(site)
    if gloo:
        option, assignment, _ = _setting(site, launcher, "env.GLOO_SOCKET_IFNAME", gloo)
        _place_derived(main, env, option, assignment, "network.interfaces", reasons.GLOO)
    if torch.agents and torch.agents.standalone:
        return
    head_why = reasons.MASTER_ADDR if torch.head is None or is_address(torch.head) else reasons.MASTER_ADDR_NAME
    port = str(torch.port) if torch.port is not None else None
    settings = [
        ("MASTER_ADDR", torch.head, torch.head_source, head_why),
        ("MASTER_PORT", port, "torch.port", reasons.MASTER_PORT),
    ]
    if torch.agents:
        run_id = None if torch.head is None else torch.run_id
        settings.append(("HPCBUNDLE_RUN_ID", run_id, "flag --torchrun", reasons.RUN_ID))
    for name, value, source, why in settings:
        if value is None:
            main.add(launcher.export(site, name), "the batch script", f"{name}: {reasons.FROM_SCRIPT}")
        else:
            option, assignment, _ = _setting(site, launcher, f"env.{name}", value)
            _place_derived(main, env, option, assignment, source, why)


def _env_in_front(launcher: Launcher, env: Parts) -> None:
    """`env` in front of the launcher when any variable is set there."""
    if env.items:
        env.items.insert(
            0,
            Part(
                ("env",),
                f"default of {launcher.name}",
                f"{launcher.name} passes its environment to every rank, so the site's variables are set in front of it",
                "env",
            ),
        )


def _container(site: Site, runtime: Runtime, image: str | None, env: Parts, workdir: WorkDir | None) -> Parts:
    """The words that start the container (none without an image: the program runs on the host)."""
    container = Parts(site, "runtime")
    if image or not runtime.needs_image:
        runtime.parts(site, image, workdir, container)
        names = [part.tokens[0].split("=", 1)[0] for part in env.items[1:]]
        runtime.environment(site, names + secret_env(site), container)
    else:
        container.add(
            [],
            "flag --image (not given)",
            f"no image: the program runs on the host (with --image, in {runtime.name} containers)",
        )
    return container


def _placement(site: Site, image: bool, torchrun: bool) -> tuple[Parts, bool]:
    """The GPU-NUMA placement (node.gpu_numa) and whether it runs on the host in front of the container (the site
    says the hosts have it: node.host_bind); under --torchrun none: it would bind the node's one agent, and with it
    every worker, to the first GPU's NUMA node."""
    placement = Parts(site, "wrapper")
    if site.node.gpu_numa and torchrun:
        placement.add([], f"site {site.name} node.gpu_numa", reasons.NO_NUMA_TORCHRUN)
    elif site.node.gpu_numa:
        tokens, source, why, where = gpu_numa_placement(site, image)
        placement.add(tokens, source, why)
        return placement, where == "host"
    return placement, False


def _wrappers(site: Site, place: str) -> Parts:
    """The site's per-rank wrappers, explained for where they run."""
    wrappers = Parts(site, "wrapper")
    for index, wrapper in enumerate(site.wrappers):
        own = site.why.get(f"wrappers[{index}]")
        why = f"{own}; {_WRAPPER_WHY[place]}" if own else _WRAPPER_WHY[place]
        wrappers.add(wrapper, f"site {site.name} wrappers[{index}]", why)
    return wrappers


def _setting(site: Site, launcher: Launcher, key: str, value: str) -> tuple[tuple[str, ...], str, str]:
    """Site setting `key` ('env.X' or 'mca.x') = value: the launcher's option, the assignment, the why."""
    section, name = key.split(".", 1)
    if section == "env":
        return launcher.setenv(site, name, value), f"{name}={value}", reasons.env(name)
    return launcher.mca(site, name, value), f"OMPI_MCA_{name}={value}", reasons.mca(name)


def _place(
    main: Parts, env: Parts, key: str, option: tuple[str, ...], assignment: str, why: str, how: str = ""
) -> None:
    """A variable goes on the launcher's option when it has one, else in front of the launcher."""
    if option:
        main.site(key, option, why, how)
    else:
        env.site(key, [assignment], why, how)


def _place_derived(main: Parts, env: Parts, option: tuple[str, ...], assignment: str, source: str, why: str) -> None:
    """A variable hpcbundle derives (not a site key): on the launcher's option, else in front of it."""
    if option:
        main.add(option, source, why)
    else:
        env.add([assignment], source, why)
