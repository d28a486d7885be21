"""The building-block base class and its registry: what a block may contribute to an image.

A block reads recipe keys (through the `ImageSpec`) and returns, per stage, the snippets it runs
(containers/common/<name>.sh.j2 with the values it fills in) and the apt packages it needs. The
renderer lays the same snippets out as a Dockerfile, a .def or the install script, so every format
runs the same steps in `position` order. A block also says what the runtime stage gets of it (hpccm's
`environment_variables` and `runtime()`): the prefix it copies, its PATH and LD_LIBRARY_PATH entries,
its variables and its rows in the manifest, gathered from every block in `path_order`; so no list
anywhere names the blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Mapping, NamedTuple

from ...registry import Registry
from ..spec import ImageSpec


class Packages(NamedTuple):
    """apt packages for the build stage and for the runtime stage."""

    build: tuple[str, ...] = ()
    runtime: tuple[str, ...] = ()


@dataclass(frozen=True)
class Apt:
    """apt packages a block needs: installed, installed at an exact version (`pinned`), removed (`purged`)."""

    install: Packages = Packages()
    pinned: Packages = Packages()
    purged: Packages = Packages()

    @staticmethod
    def merge(*parts: Apt) -> Apt:
        """All parts' packages: installed ones sorted, pinned and purged ones in the parts' order.

        >>> Apt.merge(Apt(Packages(("b", "a"))), Apt(Packages(("a",)), pinned=Packages(("z=1",)))).install.build
        ('a', 'b')
        """

        def union(kind: str, order: bool) -> Packages:
            names = {
                stage: [p for part in parts for p in getattr(getattr(part, kind), stage)] for stage in Packages._fields
            }
            return Packages(*(tuple(sorted(set(n)) if order else dict.fromkeys(n)) for n in names.values()))

        return Apt(union("install", True), union("pinned", False), union("purged", False))


@dataclass(frozen=True)
class Snippet:
    """One step before rendering: a title for the reader, the snippet in containers/common/ it runs,
    the values the block fills in beside `recipe` and `spec`, and the ShellCheck findings the
    Dockerfile tells hadolint to accept in it (each one a step's own, e.g. SC2016 for shell text it
    writes into a file)."""

    title: str
    name: str
    values: Mapping[str, object] = field(default_factory=dict)
    lint_ignore: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceBuild:
    """An autotools package built from a pinned, sha256-checked tarball into `prefix`."""

    name: str
    url: str
    sha256: str
    configure: str
    options: tuple[str, ...]
    prefix: str

    @property
    def tarball(self) -> str:
        """The file name: 'https://.../openmpi-4.1.6.tar.bz2' -> 'openmpi-4.1.6.tar.bz2'."""
        return self.url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class Paths:
    """A block's directories on PATH and LD_LIBRARY_PATH and the variables that say where it is: set for the
    build steps after it (Horovod's build) and in the runtime stage."""

    bin: tuple[str, ...] = ()
    lib: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


MPI_PREFIX = "/opt/openmpi"
"""Where a source-built MPI goes (Open MPI's or MPICH's: one MPI per image)."""

FETCH_PACKAGES = Packages(("build-essential", "bzip2", "ca-certificates", "curl"))
"""What a source build needs to fetch, unpack and compile its tarball."""


class Block:
    """One image component. Subclasses set `name` and `position` (where its steps run, ascending)
    and override what they contribute; each stage's default is nothing.

    `on_host`: whether the bare-metal install script runs the block's steps too (OS packages and
    source builds it asks the host for instead).
    """

    name: ClassVar[str]
    position: ClassVar[int]
    on_host: ClassVar[bool] = True
    shell: ClassVar[tuple[str, ...]] = ()
    """The snippets its steps run, containers/common/<name>.sh.j2 (shared ones too: pip, autotools)."""
    path_order: ClassVar[int] = 50
    """Where its prefix, search paths and manifest rows go among the other blocks' (ascending, then `position`).
    Not the build order: UCX builds before the MPI that links it, yet the MPI's bin/ comes first on PATH."""

    def apt(self, spec: ImageSpec) -> Apt:
        """The apt packages this block needs (the apt block installs them all)."""
        return Apt()

    def source(self, spec: ImageSpec) -> SourceBuild | None:
        """The tarball this block builds from source, if it does."""
        return None

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        """Steps of the build stage."""
        return ()

    def slim(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        """Steps that drop what only building needs before the runtime stage copies the results."""
        return ()

    def runtime(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        """Steps of the runtime stage."""
        return ()

    def prefix(self, spec: ImageSpec) -> str | None:
        """The directory it installs into, which the runtime stage copies from the build (None: none of its own)."""
        return None

    def paths(self, spec: ImageSpec) -> Paths:
        """Its search-path entries: its prefix's bin/ and lib/ in an image (the install script's host has its own)."""
        prefix = self.prefix(spec)
        if prefix is None or spec.layout.host:
            return Paths()
        return Paths((f"{prefix}/bin",), (f"{prefix}/lib",))

    def runtime_env(self, spec: ImageSpec) -> Mapping[str, str]:
        """Variables the runtime stage alone sets (not the build)."""
        return {}

    def manifest(self, spec: ImageSpec) -> Mapping[str, str | None]:
        """Its rows in the manifest's `layout`, where `doctor` and people look for it (e.g. ucx_prefix)."""
        return {}


class SourceBlock(Block):
    """A block that builds its `source()` with the shared autotools snippet (fetch tools included)."""

    on_host = False
    shell = ("autotools",)

    def apt(self, spec: ImageSpec) -> Apt:
        return Apt(FETCH_PACKAGES) if self.source(spec) else Apt()

    def prefix(self, spec: ImageSpec) -> str | None:
        built = self.source(spec)
        return built.prefix if built else None

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        built = self.source(spec)
        if built is None:
            return ()
        return (Snippet(f"{built.name} from {built.tarball} into {built.prefix}", "autotools", {"build": built}),)


class MpiBlock(SourceBlock):
    """An MPI built from its pinned tarball into MPI_PREFIX (mpi.install: source) or taken from the
    distribution's `distro_packages` (mpi.install: distro), for recipes whose mpi.flavour is `flavour`."""

    flavour: ClassVar[str]
    distro_packages: ClassVar[Packages]
    path_order = 20

    def manifest(self, spec: ImageSpec) -> Mapping[str, str | None]:
        """mpi_prefix, where the recipe's MPI is this one (None: the distribution's)."""
        return {"mpi_prefix": self.prefix(spec)} if self.is_ours(spec) else {}

    def is_ours(self, spec: ImageSpec) -> bool:
        """Whether the recipe's MPI is this flavour (a recipe without mpi has none)."""
        return spec.recipe.mpi is not None and spec.recipe.mpi.flavour == self.flavour

    def options(self, spec: ImageSpec) -> tuple[str, ...]:
        """The configure options: the recipe's mpi.configure."""
        return tuple(spec.recipe.mpi.configure) if spec.recipe.mpi else ()

    def source(self, spec: ImageSpec) -> SourceBuild | None:
        mpi = spec.recipe.mpi
        if mpi is None or mpi.flavour != self.flavour or mpi.install != "source":
            return None
        assert mpi.source is not None  # guaranteed by the mpi-install rule
        return SourceBuild(
            mpi.flavour, mpi.source.url, mpi.source.sha256, "./configure", self.options(spec), MPI_PREFIX
        )

    def apt(self, spec: ImageSpec) -> Apt:
        mpi = spec.recipe.mpi
        if mpi is not None and mpi.flavour == self.flavour and mpi.install == "distro":
            return Apt(self.distro_packages)
        return super().apt(spec)


class BlockRegistry(Registry[Block]):
    """The blocks by name; `ordered()` gives them in the order their steps run."""

    def ordered(self) -> list[Block]:
        return sorted(self.all(), key=lambda block: (block.position, block.name))

    def on_paths(self) -> list[Block]:
        """The blocks in the order their prefixes, search paths and manifest rows go (`Block.path_order`)."""
        return sorted(self.all(), key=lambda block: (block.path_order, block.position, block.name))


BLOCKS = BlockRegistry("image block")


def apt_packages(spec: ImageSpec) -> Apt:
    """Every block's apt packages, merged."""
    return Apt.merge(*(block.apt(spec) for block in BLOCKS.ordered()))


def source_builds(spec: ImageSpec) -> tuple[SourceBuild, ...]:
    """What the image builds from source, in build order (e.g. UCX, then Open MPI against it)."""
    return tuple(built for block in BLOCKS.ordered() if (built := block.source(spec)))


def search_env(spec: ImageSpec, first_bins: tuple[str, ...] = (), first_libs: tuple[str, ...] = ()) -> dict[str, str]:
    """PATH / LD_LIBRARY_PATH and the blocks' variables: the venv's bin/ first, then a build step's own
    `first_bins` and `first_libs`, then every block's `paths` in `path_order`.

    Values keep what the base image or the container runtime set (Apptainer's --nv adds to
    LD_LIBRARY_PATH), so they use shell/Dockerfile `${VAR}` syntax and must be double-quoted.
    """
    parts = [block.paths(spec) for block in BLOCKS.on_paths()]
    bins = [f"{spec.venv}/bin", *first_bins, *(path for part in parts for path in part.bin)]
    libs = [*first_libs, *(path for part in parts for path in part.lib)]
    env = {"PATH": ":".join(bins) + ":${PATH}"}
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    for part in parts:
        env |= part.env
    return env
