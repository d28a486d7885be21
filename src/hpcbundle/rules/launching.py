"""Rules over a site's launcher and container runtime: known names, and what each can do with the site
(knowledge/launching.py says what each can do)."""

from __future__ import annotations

import difflib

from ..config.fields import parse_version
from ..config.sites import LauncherSettings
from ..knowledge.compat import KnowledgeBase
from ..knowledge.launching import COMMON_KEYS, LAUNCHERS_KNOWN, RUNTIMES_KNOWN, gloo_capable
from .engine import Facts, Verdict, refusal, rule


def _unknown(kind: str, name: str, names: list[str], key: str) -> Verdict:
    """An unknown launcher or runtime name, with the nearest known one."""
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    fix = f"did you mean {near[0]}?" if near else f"known {kind}s: " + ", ".join(names)
    return refusal(key, f"unknown {kind} {name!r}", fix)


@rule("launcher-known", needs=("site",), on_load=True)
def launcher_known(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """launcher.name is a launcher hpcbundle knows, and it starts ranks of the site's MPI."""
    site = facts.site
    known = LAUNCHERS_KNOWN.get(site.launcher.name)
    if known is None:
        return [_unknown("launcher", site.launcher.name, sorted(LAUNCHERS_KNOWN), "launcher.name")]
    if site.mpi.flavour not in known.flavours:
        fits = [name for name, other in sorted(LAUNCHERS_KNOWN.items()) if site.mpi.flavour in other.flavours]
        return [
            refusal(
                "launcher.name",
                f"{site.launcher.name} cannot start {site.mpi.flavour} ranks (mpi.flavour)",
                "use one of: " + ", ".join(fits),
            )
        ]
    return []


@rule("launcher-options", needs=("site",), on_load=True, superseded_by=("launcher-known",))
def launcher_options(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Every launcher.* key the site sets is one its launcher honours."""
    site = facts.site
    known = LAUNCHERS_KNOWN[site.launcher.name]
    defaults = LauncherSettings.model_fields
    return [
        refusal(f"launcher.{key}", f"{site.launcher.name} has no such option", "drop it or pick a launcher that has it")
        for key in defaults
        if key not in COMMON_KEYS | known.options and getattr(site.launcher, key) != defaults[key].default
    ]


@rule("open-mpi-syntax", needs=("site",), on_load=True, superseded_by=("launcher-known",))
def open_mpi_syntax(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The launcher spells options as the host Open MPI reads them: mpirun for 3/4, mpirun5 for 5."""
    site = facts.site
    if site.mpi.flavour != "openmpi":
        return [Verdict("SKIP", f"the site's MPI is {site.mpi.flavour}, not Open MPI (mpi.flavour)")]
    name, major = site.launcher.name, parse_version(site.mpi.version).major
    known = LAUNCHERS_KNOWN[name]
    if known.openmpi_syntax is not None and (major >= 5) != (known.openmpi_syntax == 5):
        other = next(n for n, k in LAUNCHERS_KNOWN.items() if k.openmpi_syntax not in (None, known.openmpi_syntax))
        speaks = "5" if known.openmpi_syntax == 5 else "3/4"
        return [
            refusal(
                "launcher.name",
                f"{name} speaks Open MPI {speaks} syntax; this site has Open MPI {site.mpi.version}",
                f"use name: {other}",
            )
        ]
    if major >= 5 and known.single_dash_only and not site.launcher.gloo:
        return [
            refusal(
                "launcher.name",
                f"{name} passes -bind-to none -map-by slot, which Open MPI 5 rejects",
                "set launcher.gloo: true or use name: mpirun5",
            )
        ]
    if known.openmpi_syntax == 5 and site.launcher.single_dash:
        return [
            refusal(
                "launcher.single_dash",
                "Open MPI 5's mpirun rejects single-dash long options such as -bind-to",
                "drop single_dash",
            )
        ]
    return []


@rule("launcher-mca", needs=("site",), on_load=True, superseded_by=("launcher-known",))
def launcher_mca(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The site sets no MCA parameter its launcher passes itself (the launcher's would win)."""
    site = facts.site
    known = LAUNCHERS_KNOWN[site.launcher.name]
    if not known.own_mca:
        return [Verdict("SKIP", f"{site.launcher.name} passes no MCA parameter of its own")]
    return [
        refusal(
            f"mca.{param}",
            f"{site.launcher.name} passes its own -mca pml ob1 -mca btl ^openib, which win over this",
            "use name: mpirun to choose them",
        )
        for param in known.own_mca
        if param in site.mca
    ]


@rule("launcher-interfaces", needs=("site",), on_load=True, superseded_by=("launcher-known",))
def launcher_interfaces(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The launcher can confine traffic to network.interfaces as the site names them, and no site key contradicts it."""
    site = facts.site
    if not site.network.interfaces:
        return [Verdict("SKIP", "the site names no network.interfaces")]
    name = site.launcher.name
    known = LAUNCHERS_KNOWN[name]
    found = []
    if known.max_interfaces is not None and len(site.network.interfaces) > known.max_interfaces:
        found.append(refusal("network.interfaces", "hydra's -iface takes one interface", "name one"))
    if site.mpi.flavour != "openmpi" and "mca.btl_tcp_if_include" in known.interface_keys:
        found.append(
            refusal(
                "network.interfaces",
                f"{name} confines traffic through Open MPI parameters; this site's MPI is {site.mpi.flavour}",
                "set the MPI's own variable in env",
            )
        )
    if known.interface_flag:  # then the launcher's own settings from its interface option win
        gloo_or_mpi = "env.HOROVOD_GLOO_IFACE" if site.launcher.gloo else "mca.btl_tcp_if_include"
        for key in ("env.NCCL_SOCKET_IFNAME", gloo_or_mpi):
            section, variable = key.split(".")
            if variable in getattr(site, section):
                found.append(
                    refusal(
                        key,
                        f"{name} sets it from --network-interface (network.interfaces), which wins over this",
                        f"drop {key}, or network.interfaces, or use name: mpirun",
                    )
                )
    return found


@rule("srun-plugin-runtime", needs=("site",), on_load=True, superseded_by=("runtime-known",))
def srun_plugin_runtime(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A runtime that is srun's plugin (pyxis): the srun launcher, PMIx or PMI2, binds without commas.

    The plugin's command is the launcher it plugs into (pyxis: srun), so that launcher's row has the same command."""
    site = facts.site
    name = site.container.runtime
    known = RUNTIMES_KNOWN[name]
    if not known.srun_plugin:
        return [Verdict("SKIP", f"container.runtime {name} is not srun's plugin")]
    host = known.command
    found = []
    if getattr(LAUNCHERS_KNOWN.get(site.launcher.name), "command", None) != host:
        found.append(
            refusal(
                "launcher.name", f"{name}'s options are {host}'s: {site.launcher.name} cannot take them", f"use {host}"
            )
        )
    elif not (site.launcher.pmi or "").startswith(("pmix", "pmi2")):
        found.append(
            refusal(
                "launcher.pmi",
                f"srun starts {name} ranks without PMIx or PMI2, so MPI cannot wire them",
                "set launcher.pmi: pmix (and an image MPI built with PMIx support)",
            )
        )
    found += [
        refusal(f"container.binds[{index}]", "a comma would split --container-mounts", "rename the path without ','")
        for index, bind in enumerate(site.container.binds)
        if "," in bind
    ]
    return found


@rule("runtime-known", needs=("site",), on_load=True)
def runtime_known(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """container.runtime is a runtime hpcbundle knows, and it can give the container the site's GPUs."""
    site = facts.site
    known = RUNTIMES_KNOWN.get(site.container.runtime)
    if known is None:
        return [_unknown("container runtime", site.container.runtime, sorted(RUNTIMES_KNOWN), "container.runtime")]
    if site.container.gpu and known.gpu_instead:
        return [
            refusal("container.gpu", f"{known.command} has no GPU flag", f"{known.gpu_instead} and drop container.gpu")
        ]
    return []


@rule("elastic-horovodrun", needs=("site",), on_load=True)
def elastic_horovodrun(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """faults.elastic runs under horovodrun with Gloo, min_np <= max_np, and cooldown is [min, max].

    Elastic Horovod needs horovodrun's Gloo rendezvous: an MPI job cannot lose a rank and go on."""
    site = facts.site
    elastic = site.faults.elastic
    if elastic is None:
        return [Verdict("SKIP", "the site sets no faults.elastic")]
    found = []
    gloo = gloo_capable(site.launcher.name)
    if not (gloo and site.launcher.gloo):
        found.append(
            refusal(
                "faults.elastic",
                f"elastic Horovod runs under horovodrun with Gloo, not {site.launcher.name}"
                + (" with MPI" if gloo else ""),
                "set launcher: {name: horovodrun, gloo: true}, or drop faults.elastic",
            )
        )
    if elastic.max_np is not None and elastic.min_np > elastic.max_np:
        found.append(
            refusal(
                "faults.elastic.min_np",
                f"{elastic.min_np} is above max_np {elastic.max_np}",
                "set min_np <= max_np (the job shrinks to min_np and grows to max_np)",
            )
        )
    low, high = elastic.cooldown
    if low > high:
        found.append(refusal("faults.elastic.cooldown", f"[{low}, {high}] is not [min, max]", f"write [{high}, {low}]"))
    return found
