"""Assemble a launch command from a site, a layout, an image and a program (pure: no I/O)."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..config.errors import UserError
from ..config.sites import PROGRAM_ENV, Site
from ..knowledge import network
from ..rules.loading import refuse_site
from . import launchers as _launchers  # noqa: F401  (registers every launcher)
from . import reasons
from . import runtimes as _runtimes  # noqa: F401  (registers every runtime)
from .base import LAUNCHERS, RUNTIMES, Launcher, Runtime
from .command import Command, Part, Parts
from .elastic import check_elastic
from .layout import RankLayout
from .placement import gpu_numa_placement

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


def _parts_for(site: Site) -> tuple[Launcher, Runtime]:
    """The site's launcher and runtime, once the rules have passed the site (it may be built in code)."""
    refuse_site(site)
    launcher, runtime = LAUNCHERS.get(site.launcher.name), RUNTIMES.get(site.container.runtime)
    assert launcher is not None and runtime is not None
    return launcher, runtime


def check_layout(
    site: Site, launcher: Launcher, runtime: Runtime, layout: RankLayout, image: str | None, program: Sequence[str]
) -> None:
    """Refuse a launch that cannot work, naming the flag to change."""
    if not program:
        raise UserError.at("", "PROGRAM", "missing", "give the program after --, e.g. -- python3 train.py")
    if program[0].startswith("-"):
        raise UserError.at(
            "",
            "PROGRAM",
            f"{program[0]!r} starts with '-', so the launcher would read it as an option",
            "put the program (e.g. python3) first after --",
        )
    if image is not None and (not image or image.startswith("-")):
        raise UserError.at(
            "",
            "--image",
            f"{image!r} is not an image name",
            "name the image file, directory or tag (e.g. ./horovod.sif)",
        )
    check_elastic(site, layout)
    problem = runtime.image_problem(image) if image else None
    if problem:
        raise UserError.at("", "--image", *problem)
    if image and not runtime.needs_image:
        raise UserError.at(
            "",
            "--image",
            f"site {site.name} runs programs on the host (container.runtime: none)",
            "drop --image or pick a site with a container runtime",
        )
    if (layout.hosts or layout.hostfile) and not launcher.takes_hosts:
        raise UserError.at(
            "",
            "--hosts",
            f"{launcher.name} places the ranks on the nodes SLURM allocated",
            "drop --hosts/--hostfile and ask SLURM for nodes (hpcbundle sbatch --nodes N)",
        )
    slots, over = layout.slots, site.launcher.oversubscribe
    if slots is not None and layout.np > slots and not over:
        given = f"--hosts {layout.host_list()}" if layout.hosts else f"--hostfile {layout.hostfile}"
        raise UserError.at(
            "",
            f"--np {layout.np}",
            f"larger than the {slots} slots of {given}",
            "lower --np or give more hosts or slots",
        )
    from_slurm = layout.in_allocation and (launcher.reads_allocation or site.faults.elastic is not None)
    if slots is None and layout.np > site.node.slots and not over and launcher.takes_hosts and not from_slurm:
        per = site.node.slots
        if layout.in_allocation:
            raise UserError.at(
                "",
                f"--np {layout.np}",
                f"needs more than one node, and {launcher.name} does not read the SLURM allocation",
                "use mpirun or srun in batch jobs, or one node",
            )
        raise UserError.at(
            "",
            f"--np {layout.np}",
            f"needs more than one {site.name} node ({per} ranks each) but no hosts were given",
            f"add --hosts node1:{per},node2:{per} or --hostfile FILE, or launch inside a SLURM allocation",
        )
    for index, name in enumerate(site.export if image else ()):
        if name in PROGRAM_ENV and name not in runtime.keeps_image_env(site):
            raise site.problem(
                f"export[{index}]",
                f"{name} of the launching shell would replace the image's own in {runtime.name} containers",
                f"drop {name} from export: the image provides the program's environment",
            )
    if (
        image
        and runtime.wraps_launcher
        and (len(layout.hosts) > 1 or layout.hostfile or layout.np > site.node.slots and not over)
    ):
        raise UserError.at(
            "",
            "--hosts" if layout.hosts else f"--np {layout.np}",
            f"{runtime.name} runs the launcher inside one container on one node",
            "use singularity, apptainer or charliecloud for several nodes",
        )


# Variables that size a rank's threads: where a site sets one, it sizes them itself.
THREAD_COUNTS = frozenset({"OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"})

_ACTIVATE = {
    "VIRTUAL_ENV": "activate the venv (source VENV/bin/activate)",
    "CONDA_PREFIX": "activate the conda env (conda activate ENV)",
}


def check_environment(site: Site, environment: Mapping[str, str]) -> None:
    """Refuse a site that exports a variable the launching shell does not have (`environment`,
    read at the edge): the ranks would miss it, or the launcher refuse the whole line."""
    for index, name in enumerate(site.export):
        if name not in environment:
            fix = _ACTIVATE.get(name, f"set {name}")
            raise site.problem(
                f"export[{index}]",
                f"{name} is not set in the launching shell",
                f"{fix} in the launching shell, or drop {name} from export",
            )


def build_command(
    site: Site,
    layout: RankLayout,
    program: Sequence[str],
    image: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> Command:
    """The launch command for `program` on `site`, every token explained. With `environment`
    (the launching shell's, read by the caller), every variable the site exports must be set there.

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
    launcher, runtime = _parts_for(site)
    check_layout(site, launcher, runtime, layout, image, program)
    if environment is not None:
        check_environment(site, environment)
    env, main = Parts(site, "env"), Parts(site, "launcher")
    launcher.head(site, layout, main)
    for index, name in enumerate(site.export):
        tokens = launcher.export(site, name)
        why = reasons.export(name) if tokens else f"{launcher.name} passes the launching environment to every rank"
        if image and name in runtime.keeps_image_env(site):
            why += f"; on the host only: {runtime.name} keeps the image's own {name} inside"
        main.site(f"export[{index}]", tokens, why)
    # The site's own variables and MCA parameters in its order, then what network.interfaces derives.
    derivable = set(network.derived_interfaces(site)) & launcher.interface_keys
    from_link = network.derived_socket_threads(site)
    set_by_site = [(f"env.{name}", value) for name, value in site.env.items()]
    set_by_site += [(f"mca.{name}", value) for name, value in site.mca.items()]
    for key, value in set_by_site:
        how = reasons.OVERRIDES if key in derivable else reasons.OVERRIDES_LINK if key in from_link else ""
        _place(main, env, key, *_setting(site, launcher, key, value), how)
    threads = layout.cpus_per_rank
    if threads and not THREAD_COUNTS & (set(site.env) | set(site.export)):
        option, assignment, _ = _setting(site, launcher, "env.OMP_NUM_THREADS", str(threads))
        _place_derived(main, env, option, assignment, layout.cpus_source, reasons.THREADS)
    interfaces_why = site.why.get("network.interfaces")
    for key, (value, source) in network.interface_settings(site).items():
        if source == "network.interfaces" and key in launcher.interface_keys:
            option, assignment, why = _setting(site, launcher, key, value)
            why = f"{why}; {interfaces_why}" if interfaces_why else why
            _place(main, env, key, option, assignment, why, reasons.DERIVED)
    for key, value in from_link.items():
        if key.split(".", 1)[1] not in site.env:
            _place(main, env, key, *_setting(site, launcher, key, value), reasons.DERIVED_LINK)
    launcher.tail(site, main)
    if site.launcher.args:
        main.site("launcher.args", site.launcher.args, "extra launcher options from the site")
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
    container = Parts(site, "runtime")
    if image or not runtime.needs_image:
        runtime.parts(site, image, container)
        runtime.environment(site, [part.tokens[0].split("=", 1)[0] for part in env.items[1:]], container)
    else:
        container.add(
            [],
            "flag --image (not given)",
            f"no image: the program runs on the host (with --image, in {runtime.name} containers)",
        )
    in_container = bool(image) and runtime.wraps_launcher
    wrappers = Parts(site, "wrapper")
    place = "inside" if in_container else "plugin" if image and runtime.srun_plugin else "outside" if image else "host"
    if site.node.gpu_numa:
        tokens, source, why = gpu_numa_placement(site, in_container=place in ("inside", "plugin"))
        wrappers.add(tokens, source, f"{why}; {_WRAPPER_WHY[place]}")
    for index, wrapper in enumerate(site.wrappers):
        own = site.why.get(f"wrappers[{index}]")
        why = f"{own}; {_WRAPPER_WHY[place]}" if own else _WRAPPER_WHY[place]
        wrappers.add(wrapper, f"site {site.name} wrappers[{index}]", why)
    body = Parts(site, "program")
    body.add(program, "PROGRAM (after --)", "what every rank runs")
    if in_container:
        order = [container, env, main, wrappers, body]
    elif runtime.srun_plugin:  # srun's own options: the wrappers run inside the container
        order = [env, main, container, wrappers, body]
    else:
        order = [env, main, wrappers, container, body]
    return Command(tuple(part for parts in order for part in parts.items))


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
