"""The two registries and the base classes every launcher and container runtime file subclasses.

A launcher turns (site, layout) into its own options; a runtime turns (site, image) into the
words that start one container. Each is a small class in its own file, registered by name:

    @LAUNCHERS.register
    class Srun(Launcher):
        name, summary = "srun", "SLURM starts every rank itself, in the allocation"
        ...

Adding one is adding a file to launchers/ or runtimes/ (they are imported on start-up) and its
row to knowledge/launching.py (what it can do, which the rules read too).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from ..config.sites import Site
from ..knowledge.launching import LAUNCHERS_KNOWN, RUNTIMES_KNOWN
from ..registry import Registry
from . import reasons
from .command import Parts
from .layout import RankLayout
from .workdir import WorkDir


def _take_known(cls: type, known: Any) -> None:
    """Set a launch class's attributes from its row in knowledge/launching.py (stated there once)."""
    for field in fields(known):
        setattr(cls, field.name, getattr(known, field.name))


class Launcher:
    """Starts the ranks. Subclasses set `name`, `summary` and write `head`; what the launcher can do
    (command, flavours, options, interface_keys, ...) comes from its LAUNCHERS_KNOWN row.

    `interface_keys`: the settings derived from network.interfaces that this launcher passes
    (hpcbundle.knowledge.network.interface_settings); one with its own interface option passes that in `tail`.
    """

    name: ClassVar[str]
    command: ClassVar[str]
    flavours: ClassVar[frozenset[str]]
    summary: ClassVar[str]
    options: ClassVar[frozenset[str]]
    interface_keys: ClassVar[frozenset[str]]
    reads_allocation: ClassVar[bool]
    takes_hosts: ClassVar[bool]
    torch_ranks: ClassVar[str]
    export_option: ClassVar[str]
    workdir_option: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _take_known(cls, LAUNCHERS_KNOWN[cls.name])

    def head(self, site: Site, layout: RankLayout, out: Parts) -> None:
        """The executable and the options that place the ranks."""
        raise NotImplementedError

    def start(self, site: Site, out: Parts) -> None:
        """The executable, from launcher.command or the launcher's usual name."""
        key = "launcher.command" if site.launcher.command else "launcher.name"
        out.site(key, [site.launcher.command or self.command], self.summary)

    def export(self, site: Site, name: str) -> tuple[str, ...]:
        """Option that forwards variable `name` from the launching shell (empty: forwarded anyway)."""
        return (self.export_option, name) if self.export_option else ()

    def setenv(self, site: Site, name: str, value: str) -> tuple[str, ...]:
        """Option that sets `name=value` in every rank (empty: set it in front of the launcher)."""
        return ()

    def mca(self, site: Site, name: str, value: str) -> tuple[str, ...]:
        """Option that sets an MCA parameter (empty: pass it as an OMPI_MCA_ variable)."""
        return ()

    def chdir(self, site: Site, path: str) -> tuple[str, ...]:
        """Option that starts every rank in directory `path` (empty: none; the ranks start where it runs)."""
        option = self.workdir_option
        if not option:
            return ()
        return (f"{option}{path}",) if option.endswith("=") else (option, path)

    def tail(self, site: Site, out: Parts) -> None:
        """Options after env and MCA (interfaces for launchers with their own flag)."""

    def add_flags(self, site: Site, out: Parts, flags: dict[str, str]) -> None:
        """Boolean launcher options that are on: {key: flag} in the order given."""
        for key, flag in flags.items():
            if getattr(site.launcher, key):
                out.site(f"launcher.{key}", [flag], reasons.LAUNCHER[key])

    def add_values(self, site: Site, out: Parts, flags: dict[str, str]) -> None:
        """Launcher options with a value that are set: {key: flag}."""
        for key, flag in flags.items():
            value = getattr(site.launcher, key)
            if value is not None:
                out.site(f"launcher.{key}", [flag, value], reasons.LAUNCHER[key])

    def add_hosts(self, layout: RankLayout, out: Parts, hosts_flag: str, hostfile_flag: str) -> None:
        if layout.hosts:
            out.add([hosts_flag, layout.host_list()], "flag --hosts", "the hosts and how many ranks each takes")
        elif layout.hostfile:
            out.add([hostfile_flag, layout.hostfile], "flag --hostfile", "the hosts and their slots, from a file")


class Runtime:
    """Starts one container per rank (or, with `wraps_launcher`, one container holding the launcher).
    Subclasses set `name`, `summary` and write `parts`; the rest comes from the RUNTIMES_KNOWN row.

    `userns`: runs unprivileged in a user namespace by default (site container.userns overrides).
    `image_keeps`: variables of the launching environment that never reach the program inside the
    container (the image's own value wins; knowledge.launching.image_env_kept adds what the site's
    container.args keep); every other exported variable replaces the image's.
    """

    name: ClassVar[str]
    command: ClassVar[str]
    summary: ClassVar[str]
    needs_image: ClassVar[bool]
    userns: ClassVar[bool]
    wraps_launcher: ClassVar[bool]
    image_keeps: ClassVar[frozenset[str]]
    srun_plugin: ClassVar[bool]
    sets_workdir: ClassVar[bool]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _take_known(cls, RUNTIMES_KNOWN[cls.name])

    def parts(self, site: Site, image: str | None, workdir: WorkDir | None, out: Parts) -> None:
        """The words before the program: command, options, image (None only for runtime none); with
        `workdir`, the words that start the program in the user's working directory."""
        raise NotImplementedError

    def environment(self, site: Site, names: list[str], out: Parts) -> None:
        """Options that let the variables set in front of the launcher (`names`) win over the image's."""

    def start(self, site: Site, out: Parts, *words: str) -> None:
        key = "container.command" if site.container.command else "container.runtime"
        out.site(key, [site.container.command or self.command, *words], self.summary)

    def add_binds(self, site: Site, out: Parts, flag: str, both_sides: bool = False) -> None:
        """One `flag SRC[:DST]` per site bind; `both_sides` writes a bare path as SRC:SRC."""
        for index, bind in enumerate(site.container.binds):
            value = bind if ":" in bind or not both_sides else f"{bind}:{bind}"
            out.site(f"container.binds[{index}]", [flag, value], "host directory visible inside the container")

    def add_workdir_bind(self, site: Site, workdir: WorkDir, out: Parts, flag: str, both_sides: bool = True) -> None:
        """`flag DIR:DIR` (or `flag DIR`) for the working directory, unless a site bind holds it already."""
        covering = site.container.bind_holding(workdir.path)
        if covering is not None:
            why = f"{self.name} mounts nothing more: container.binds[{covering}] holds it already"
            out.add([], workdir.source, why)
            return
        value = f"{workdir.path}:{workdir.path}" if both_sides else workdir.path
        out.add([flag, value], workdir.source, "the user's working directory, at the same path inside")

    def add_args(self, site: Site, out: Parts) -> None:
        if site.container.args:
            out.site("container.args", site.container.args, "extra runtime options from the site")


LAUNCHERS: Registry[Launcher] = Registry("launcher")
RUNTIMES: Registry[Runtime] = Registry("container runtime")
