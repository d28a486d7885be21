"""Rules for containers: the runtime on the nodes, the same image on every node, its metadata, user-namespace traps."""

from __future__ import annotations

from typing import Any

from ..config.fields import major_minor, parse_version
from ..knowledge.compat import KnowledgeBase
from ..knowledge.labels import NVIDIA_CONTAINER_ENV, NVIDIA_ENV_LABELS
from ..knowledge.launching import (
    LAUNCHERS_KNOWN,
    RUNTIMES_KNOWN,
    cwd_unbound_by,
    in_container,
    in_user_namespace,
    ptrace_refused,
    runtime_behind,
)
from .engine import Facts, Verdict, rule
from .mpi import without_mpi


@rule("container-runtime", needs=("site", "nodes", "observed"))
def container_runtime(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The site's container runtime is on every node: its --version answers, or srun --help lists pyxis's option.

    Which test applies is the runtime row's detect_option (knowledge/launching.py)."""
    name = facts.site.container.runtime
    if not in_container(facts.site):
        return Verdict("SKIP", f"container.runtime: {name} (the host's own software)")
    known = RUNTIMES_KNOWN.get(name)
    command = facts.site.container.command or getattr(known, "command", name)
    nodes = facts.ok_nodes()
    missing = [h for h, n in nodes.items() if name not in n.get("runtimes", {})]
    if missing:
        status = "WARN" if facts.scope == "login" else "FAIL"
        if known and known.detect_option:
            unseen = f"`{known.command} --help` lists no {known.detect_option}"
            why = "; ".join(f"{h}: {nodes[h].get('runtimes_missing', {}).get(name, unseen)}" for h in missing)
            return Verdict(
                status,
                f"{name} is a plugin of {known.command}, not a binary: {why}",
                f"install {known.install} on those nodes (then `{known.command} --help` lists {known.detect_option}), "
                "or pick another container.runtime in the site",
            )
        return Verdict(
            status,
            f"`{command} --version` fails or is not on PATH on {', '.join(missing)}",
            f"install {(known and known.install) or name} there or set container.runtime/command in the site",
        )
    versions = sorted({n["runtimes"][name] for n in nodes.values()})
    return Verdict(
        "PASS" if len(versions) == 1 else "WARN",
        f"{name}: {' | '.join(versions)}",
        "" if len(versions) == 1 else "install the same version on every node",
    )


@rule("image", needs=("site", "nodes", "observed"))
def image_on_nodes(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The image exists at the same path on every node, whole (a SIF's layout holds), with the same checksum."""
    path = facts.image_path
    if not path:
        return Verdict("SKIP", "no --image: the program runs on the host", subject="present")
    seen = {h: n.get("image") or {} for h, n in facts.ok_nodes().items()}
    engine = getattr(RUNTIMES_KNOWN.get(facts.site.container.runtime), "named_images", False)
    if seen and (
        engine
        and not any(i.get("exists") for i in seen.values())
        or all(i.get("kind") == "name" for i in seen.values())
    ):
        return Verdict("SKIP", f"{path} is not a path (a registry/Docker name): not checked", subject="present")
    missing = [h for h, i in seen.items() if not i.get("exists")]
    if missing:
        return Verdict(
            "WARN" if facts.scope == "login" else "FAIL",
            f"{path} does not exist on {', '.join(missing)}",
            "copy the image to the same path on every node (or put it on a shared file system)",
            "present",
        )
    damaged = _per_host(seen, "damaged")
    if damaged:
        return Verdict(
            "FAIL",
            f"{path} is damaged on {damaged}",
            "copy the image again from a node where it is whole, then compare with sha256sum",
            "intact",
        )
    if not facts.checksum:
        return Verdict("PASS", f"{path} exists on {', '.join(seen)} (checksum not compared)", subject="present")
    unhashed = _per_host(seen, "sha256_error")
    if unhashed:
        return Verdict(
            "WARN",
            f"{path}: checksum not compared, {unhashed}",
            "raise doctor's --timeout (hashing reads the whole image on every node), or pass --no-checksum",
            "checksum",
        )
    sums: dict[str, list[str]] = {}
    for host, info in seen.items():
        sums.setdefault(info.get("sha256", "?"), []).append(host)
    if len(sums) > 1:
        detail = "; ".join(f"sha256 {s[:12]}… on {', '.join(h)}" for s, h in sums.items())
        return Verdict(
            "FAIL",
            f"{path} differs between nodes: {detail}",
            "copy the same image to every node (rsync/cp from one source) and compare with sha256sum",
            "checksum",
        )
    return Verdict("PASS", f"{path}: sha256 {next(iter(sums))[:12]}… on {', '.join(seen)}", subject="checksum")


@rule("image-metadata", needs=("site", "nodes", "observed"))
def image_metadata(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The image's recipe metadata can be read: its manifest (directory or SIF), else a SIF's labels.

    A SIF's manifest is read from its SquashFS and its org.hpcbundle.* labels from its JSON metadata:
    the image is not run."""
    if not facts.image_path:
        return []
    if facts.image is not None:
        return [Verdict("PASS", f"read {facts.image_source}")]
    infos = [n.get("image") or {} for n in facts.ok_nodes().values()]
    kinds = {i.get("kind") for i in infos if i.get("exists")}
    errors = [i["manifest_error"] for i in infos if i.get("manifest_error")]
    if "file" in kinds:
        return [
            Verdict(
                "WARN",
                f"{facts.image_path} is a file image but no SIF (SquashFS, ext3) that doctor cannot open here: "
                "MPI and CUDA of the image unchecked",
                "build the image as a SIF or a directory (`apptainer build IMAGE.sif ...`)",
            )
        ]
    if errors:
        return [Verdict("WARN", errors[0], "the image was not built by hpcbundle, or its manifest is damaged")]
    return []


@rule("nvidia-container-env", needs=("image", "site"))
def nvidia_container_env(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A GPU image run by enroot/pyxis or Docker/podman sets NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES."""
    site, image = facts.site, facts.image or {}
    runtime = site.container.runtime
    reads = getattr(RUNTIMES_KNOWN.get(runtime), "gpus_from_image_env", None)
    if not (site.node.gpus or site.container.gpu) or reads is None or "cuda" not in image:
        return Verdict("SKIP", f"no GPU image that {runtime} gives GPUs by the image's NVIDIA_* variables")
    if image.get("cuda.source") != "wheels":
        return Verdict("PASS", "the image's nvidia/cuda base sets " + " and ".join(NVIDIA_CONTAINER_ENV))
    values = {name: image.get(label) for name, label in NVIDIA_ENV_LABELS.items()}
    capabilities = set((values["NVIDIA_DRIVER_CAPABILITIES"] or "").split(","))
    if values["NVIDIA_VISIBLE_DEVICES"] not in (None, "", "void", "none") and capabilities & {"compute", "all"}:
        shown = " ".join(f"{name}={value}" for name, value in values.items())
        return Verdict("PASS", f"the image sets {shown}")
    wanted = " ".join(f"{name}={value}" for name, value in NVIDIA_CONTAINER_ENV.items())
    hook = "enroot's nvidia hook" if reads == "always" else f"the NVIDIA container toolkit ({runtime} without --gpus)"
    return Verdict(
        "FAIL" if reads == "always" else "WARN",
        f"{facts.image_source or 'the image'} (a plain OS base, gpu.source: wheels) does not set {wanted}: "
        f'{hook} gives its containers no GPU ("Found no NVIDIA driver")',
        f"rebuild the image with this hpcbundle (its Dockerfile and .def set them), or add `ENV {wanted}`",
    )


@rule("userns-vader", needs=("site",))
def userns_vader(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """Open MPI 4's vader single-copy (CMA) fails across user namespaces and in Docker/podman unless switched off.

    A user namespace hangs large messages; Docker's and podman's containers lack CAP_SYS_PTRACE, so the ranks in
    one container have their process_vm_readv refused (`Read -1, expected N, errno = 1`). `singularity` may be
    Apptainer's compatibility name, whose containers run in user namespaces: doctor reads `singularity --version`."""
    site = facts.site
    image = facts.image or {}
    flavour = image.get("mpi.flavour") or site.mpi.flavour
    version = image.get("mpi.version") or site.mpi.version
    if skip := without_mpi(facts):
        return skip
    runtime, answered = site.container.runtime, _answered_by_another(facts)
    known = RUNTIMES_KNOWN.get(runtime)
    userns, no_ptrace = in_user_namespace(site, answered), ptrace_refused(site)
    open_mpi_4 = flavour == "openmpi" and parse_version(version).major < 5
    if open_mpi_4 and not (userns or no_ptrace) and getattr(known, "no_ptrace", False):
        return Verdict("PASS", f"container.args give {runtime}'s containers CAP_SYS_PTRACE, which CMA needs")
    alias_of = getattr(known, "alias_of", "")
    if open_mpi_4 and alias_of and not userns and site.container.userns is None and not facts.observed:
        return Verdict(
            "SKIP",
            f"not known here whether {runtime} is {alias_of}'s compatibility name, whose containers run in user "
            f"namespaces: doctor reads `{runtime} --version` (or set container.userns)",
        )
    if not open_mpi_4 or not (userns or no_ptrace):
        return Verdict("SKIP", "no Open MPI 4 inside a user-namespace runtime or a Docker/podman container")
    if answered:
        runtime = f"{runtime} ({alias_of}'s compatibility name: `{runtime} --version` says {answered})"
    if site.node.slots == 1:
        return Verdict("SKIP", "one rank per node (node.slots): vader's single copy never runs")
    btl = site.mca.get("btl", "")
    if btl and not btl.startswith("^") and not {"vader", "sm"} & set(btl.split(",")):
        return Verdict("PASS", f"btl {btl} has no shared-memory btl, so vader's single copy never runs")
    where = "runs in a user namespace" if userns else "gives its containers no CAP_SYS_PTRACE"
    if site.mca.get("btl_vader_single_copy_mechanism") == "none":
        return Verdict("PASS", f"{runtime} {where} and the site sets btl_vader_single_copy_mechanism none")
    fix = "add `btl_vader_single_copy_mechanism: none` to the site's mca"
    if userns:
        return Verdict(
            "WARN",
            f"{runtime} runs ranks in user namespaces, where Open MPI {major_minor(version)}'s vader "
            "single-copy hangs large messages",
            fix,
        )
    return Verdict(
        "WARN",
        f"{runtime} runs the ranks of a node in one container without CAP_SYS_PTRACE, where Open MPI "
        f"{major_minor(version)}'s vader single copy (CMA) is refused: `Read -1, expected N, errno = 1`",
        f"{fix}, or `--cap-add SYS_PTRACE` to container.args",
    )


@rule("contained-workdir", needs=("site",))
def contained_workdir(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """Apptainer/Singularity bind the working directory unless container.args say not (--contain, --no-mount cwd).

    Without it a rank starts in the container's own (empty) home or /, so relative data paths find nothing and
    relative checkpoints are written inside the container, where they vanish with it."""
    site = facts.site
    runtime = site.container.runtime
    if not getattr(RUNTIMES_KNOWN.get(runtime), "contain_args", None):
        return Verdict("SKIP", f"{runtime} is not Apptainer/Singularity (launch mounts the working directory itself)")
    option = cwd_unbound_by(site)
    if option is None:
        return Verdict("PASS", f"{runtime} binds the working directory (container.args: no --contain, --no-mount cwd)")
    workdir = facts.request.workdir if facts.request else None
    holding = site.container.bind_holding(workdir) if workdir else None
    if holding is not None:
        return Verdict("PASS", f"container.args has {option}, but container.binds[{holding}] holds {workdir}")
    return Verdict(
        "WARN",
        f"has {option}, so {runtime} does not bind the working directory: a rank starts in the container's own "
        "home or /, relative data paths find nothing and relative checkpoints vanish with the container",
        "bind the directory users run from (container.binds, e.g. the project file system) or drop " + option,
        key="container.args",
    )


@rule("pmix-container", needs=("site",))
def pmix_container(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """srun --mpi=pmix into a container: the ranks' PMIx client must reach slurmstepd's PMIx server.

    The server keeps its shared-memory job data (gds dstore) in PMIX_SERVER_TMPDIR, a directory
    under SlurmdSpoolDir that containers do not see: bind it, and use PMIx's hash store
    (PMIX_MCA_gds=hash), the two fixes users report (apptainer/singularity#5195; NVIDIA enroot's
    extra/50-slurm-pmi.sh hook binds the server directory for the same reason: on pyxis sites that hook,
    or container.pmix_spool_mount where it is not enabled, mounts it). torch.distributed ranks are no PMIx clients.
    """
    if skip := without_mpi(facts):
        return skip
    site = facts.site
    launcher = site.launcher
    plugin = "pmi" in getattr(LAUNCHERS_KNOWN.get(launcher.name), "options", ())  # srun --mpi: SLURM's MPI plugin
    if not plugin or not (launcher.pmi or "").startswith("pmix") or not in_container(site):
        return Verdict("SKIP", "no srun --mpi=pmix into a container")
    spool = site.slurm.spool_dir.rstrip("/")
    bound = [b.split(":", 1)[0].rstrip("/") for b in site.container.binds]
    missing = []
    if site.env.get("PMIX_MCA_gds") != "hash":
        missing.append(("PMIX_MCA_gds is not hash", 'add env PMIX_MCA_gds: "hash"'))
    enroot = getattr(RUNTIMES_KNOWN.get(site.container.runtime), "enroot", False)  # its PMIx hook mounts it
    if not enroot and not any(spool == b or spool.startswith(f"{b}/") for b in bound):
        missing.append(
            (
                f"SlurmdSpoolDir {spool} (slurm.spool_dir) is not bound into the container",
                f"add {spool} to container.binds (`scontrol show config | grep SlurmdSpoolDir` gives the directory)",
            )
        )
    if missing:
        return Verdict(
            "FAIL",
            f"srun --mpi={launcher.pmi} starts ranks in {site.container.runtime} containers but "
            + " and ".join(m[0] for m in missing)
            + ": the ranks' PMIx client cannot read the server's job data (PMIX ERROR in gds_ds12/ds21)",
            "; ".join(m[1] for m in missing),
        )
    if enroot:
        how = "container.pmix_spool_mount" if site.container.pmix_spool_mount else "enroot's PMIx hook"
        return Verdict(
            "PASS", f"PMIX_MCA_gds=hash, and {how} mounts the PMIx server's directory ({site.container.runtime})"
        )
    return Verdict("PASS", f"PMIX_MCA_gds=hash and {spool} bound into {site.container.runtime}")


def _answered_by_another(facts: Facts) -> str:
    """The first line of `RUNTIME --version` that doctor read on a node where another runtime answers to the site's
    runtime's command (Apptainer's `singularity`: `apptainer version 1.3.4`), else ''."""
    runtime = facts.site.container.runtime
    seen = sorted({n.get("runtimes", {}).get(runtime, "") for n in facts.ok_nodes().values()} - {""})
    return next((line for line in seen if runtime_behind(runtime, line) != runtime), "")


def _per_host(seen: dict[str, dict[str, Any]], key: str) -> str:
    """`host: value; ...` for the hosts whose image facts hold `key` ('' when none does)."""
    return "; ".join(f"{host}: {info[key]}" for host, info in seen.items() if info.get(key))
