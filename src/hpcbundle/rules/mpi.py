"""Rules for MPI: the image's ABI family, the host MPI that launches it, and the host MPI the site declares."""

from __future__ import annotations

from ..config.fields import major_minor, parse_version
from ..knowledge.compat import KnowledgeBase
from ..knowledge.labels import NONE
from ..knowledge.launching import ranks_use_mpi
from .engine import Facts, Verdict, rule

NO_MPI_IMAGE = Verdict("SKIP", "the image has no MPI: its ranks must start with launch --torch or --torchrun")


def without_mpi(facts: Facts) -> Verdict | None:
    """SKIP for ranks that do not talk over MPI (horovodrun --gloo, or a --torch/--torchrun request): no MPI rule
    applies."""
    if facts.request is not None and facts.request.wiring != "horovod":
        return Verdict("SKIP", f"no MPI between torch.distributed ranks (--{facts.request.wiring})")
    if facts.site is None or ranks_use_mpi(facts.site):
        return None
    return Verdict("SKIP", "the ranks talk over Gloo (horovodrun with launcher.gloo), not MPI")


@rule("mpi-abi", needs=("recipe",))
def mpi_abi(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The image's MPI must belong to a known ABI family so a host MPI can be matched to it."""
    mpi = facts.recipe.mpi
    if mpi is None:
        return NO_MPI_IMAGE
    abi = kb.mpi_abi.get(mpi.flavour)
    if abi is None:
        return Verdict("FAIL", f"MPI flavour {mpi.flavour} has no ABI family in compat.yaml")
    if abi.family == "by_major_minor":
        series = major_minor(mpi.version)
        if series not in abi.known:
            return Verdict("FAIL", f"Open MPI {series} is not a known series (known: {', '.join(abi.known)})")
        return Verdict("PASS", f"ABI family openmpi-{series}: the host needs Open MPI {series}.x")
    if abi.min is not None and parse_version(mpi.version) < parse_version(abi.min):
        return Verdict("FAIL", f"{mpi.flavour} {mpi.version} predates the MPICH ABI ({mpi.flavour} >= {abi.min})")
    return Verdict(
        "PASS", f"ABI family {abi.family}: any MPICH-ABI host MPI (MPICH >= 3.1, Intel MPI >= 5) can launch it"
    )


@rule("mpi-abi-host", needs=("image", "site", "nodes"))
def mpi_abi_host(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The host MPI launches ranks that load the image's MPI: both must be one ABI family.

    For Open MPI that is one major.minor.
    """
    image = facts.image
    if skip := without_mpi(facts):
        return skip
    if not image.get("mpi.flavour"):
        return Verdict("SKIP", "image MPI unknown (see image-metadata)")
    if image["mpi.flavour"] == NONE:
        return NO_MPI_IMAGE
    seen = [n["mpi"] for n in facts.ok_nodes().values() if n.get("mpi")]
    host = seen[0] if seen else {"flavour": facts.site.mpi.flavour, "version": facts.site.mpi.version}
    hflavour, hversion, iflavour, iversion = (
        host["flavour"],
        host["version"],
        image["mpi.flavour"],
        image.get("mpi.version", ""),
    )
    host_abi, image_abi = kb.mpi_abi.get(hflavour), kb.mpi_abi.get(iflavour)
    if host_abi is None or image_abi is None:
        return Verdict(
            "FAIL",
            f"no ABI family known for {hflavour if host_abi is None else iflavour}",
            "add it to compat.yaml mpi_abi",
        )
    if host_abi.family != image_abi.family:
        return Verdict(
            "FAIL",
            f"{next(iter(facts.ok_nodes()), 'the host')} launches with {hflavour} {hversion}; "
            f"the image has {iflavour} {iversion}, another ABI family",
            "use an image built with the host's MPI family, or a site whose host MPI matches the image",
        )
    if host_abi.family == "by_major_minor" and major_minor(hversion) != major_minor(iversion):
        hmajor, imajor = parse_version(hversion).major, parse_version(iversion).major
        why = (
            f"; Open MPI {hmajor}'s mpirun is PRRTE, and Open MPI {imajor}'s ranks are made for ORTE's daemons, "
            "a pair neither series supports"
            if hmajor >= 5 > imajor
            else ""
        )
        return Verdict(
            "FAIL",
            f"host Open MPI {hversion} and image Open MPI {iversion} are different series; "
            f"the hybrid model needs the same major.minor ({major_minor(hversion)}.x in the image){why}",
            f"rebuild the image with Open MPI {major_minor(hversion)}.x (recipe mpi.version) "
            f"or load Open MPI {major_minor(iversion)} on the host",
        )
    if (
        hflavour == iflavour
        and host_abi.launcher_from
        and (unjudged := _across(hflavour, hversion, iversion, host_abi.launcher_from))
    ):
        return unjudged
    return Verdict("PASS", f"host {hflavour} {hversion} and image {iflavour} {iversion} share an ABI")


def _across(flavour: str, host: str, image: str, split: str) -> Verdict | None:
    """A WARN where the host's `flavour` and the image's lie on two sides of the release `split` that replaced its
    launcher and process manager (compat.yaml mpi_abi launcher_from): one ABI, but a pair no manual covers."""
    host_older = parse_version(host) < parse_version(split)
    if host_older == (parse_version(image) < parse_version(split)):
        return None
    newer = (
        f"load {flavour} {split} or later on the host"
        if host_older
        else (f"build the image with {flavour} {split} or later (recipe mpi.version)")
    )
    return Verdict(
        "WARN",
        f"host {flavour} {host} and image {flavour} {image} share the MPICH ABI of the library, but {flavour} "
        f"{split} replaced the launcher and its process manager: whether the host's launcher starts the image's "
        "ranks is in no manual, so it is not judged here",
        f"{newer}, or prove the pair with `hpcbundle doctor` and a two-node job",
    )


@rule("host-mpi", needs=("site", "nodes", "observed"))
def host_mpi(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The host MPI on every node is the one the site declares (flavour and version)."""
    if skip := without_mpi(facts):
        return skip
    site = facts.site.mpi
    found = {h: n.get("mpi") for h, n in facts.ok_nodes().items()}
    absent = [h for h, m in found.items() if not m]
    if absent and facts.scope == "login":
        return Verdict("SKIP", "no mpirun/mpiexec on this login node: checked in the job (after its modules load)")
    if absent:
        return Verdict(
            "FAIL",
            f"no mpirun/mpiexec on PATH on {', '.join(absent)}",
            f"load the MPI module or install {site.flavour} {site.version}",
        )
    wrong = {h: m for h, m in found.items() if m["flavour"] != site.flavour}
    if wrong:
        h, m = next(iter(wrong.items()))
        return Verdict(
            "FAIL",
            f"{h}: {m['evidence']}; the site says {site.flavour} {site.version}",
            "fix mpi.flavour/version in the site or put the right MPI first on PATH",
        )
    versions = sorted({m["version"] for m in found.values()})
    if versions != [site.version]:
        return Verdict(
            "WARN",
            f"{', '.join(versions)} found; the site says {site.flavour} {site.version}",
            f'set mpi.version: "{versions[0]}" in the site (or load that version)',
        )
    return Verdict("PASS", f"{site.flavour} {site.version} on {', '.join(found)}")


# Open MPI's shared-memory btls: vader (1.8 to 4.x), sm (5.x, and an alias of vader in 4.x).
SHARED_MEMORY_BTLS = ("vader", "sm")


@rule("btl-shared-memory", needs=("site",))
def btl_shared_memory(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """An Open MPI btl list on a site with several ranks per node names a shared-memory btl (vader or sm)."""
    if skip := without_mpi(facts):
        return skip
    site = facts.site
    btl, pml = site.mca.get("btl", ""), site.mca.get("pml", "")
    if site.mpi.flavour != "openmpi" or not btl or btl.startswith("^") or pml == "ucx":
        return Verdict("SKIP", "no Open MPI btl list for the ob1 pml")
    per_node = max((facts.hosts or {}).values(), default=site.node.slots)
    listed_btls = [name.strip() for name in btl.split(",")]
    if any(name in SHARED_MEMORY_BTLS for name in listed_btls):
        return Verdict("PASS", f"btl {btl} carries same-node messages through shared memory")
    if per_node < 2:
        return Verdict("SKIP", f"btl {btl}: one rank per node, no same-node messages")
    return Verdict(
        "WARN",
        f"btl {btl} has no shared-memory btl, so the {per_node} ranks of a node send to each other through "
        f"{'the HCA' if 'openib' in listed_btls or 'uct' in listed_btls else 'the network stack'}",
        f"add vader (Open MPI < 5; sm on 5.x) to mca.btl, e.g. {btl.replace('self', 'vader,self')}",
        key="mca.btl",
    )
