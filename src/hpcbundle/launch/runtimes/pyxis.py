"""pyxis (NVIDIA's SPANK plugin for SLURM) with enroot: srun's own --container-* options."""

from __future__ import annotations

from ...config.sites import Site
from ..base import RUNTIMES, Runtime
from ..command import Parts
from ..workdir import WorkDir


@RUNTIMES.register
class Pyxis(Runtime):
    """One enroot container per rank, started by srun itself (pyxis's options are srun's)::

        env PMIX_MCA_gds=hash srun --mpi=pmix -n 16 --kill-on-bad-exit=1 --container-image=/shared/horovod.sqsh \\
            --container-mounts=/scratch:/scratch --no-container-mount-home --container-env=PMIX_MCA_gds python train.py

    The image is a squashfs file (`enroot import -o horovod.sqsh dockerd://horovod:cuda13`) or an
    image reference enroot pulls (`registry.example.org#team/horovod:cuda13`). container.binds become one
    --container-mounts=SRC:DST[,...] (a bare path is SRC:SRC). The PMIx server's directory comes from
    enroot's PMIx hook (50-slurm-pmi.sh), or with container.pmix_spool_mount from slurm.spool_dir.
    The image's environment wins over the host's, so the variables the site sets in front of srun are named
    in --container-env. The user's working directory is mounted at its own path and every rank starts in it
    (--container-workdir): otherwise a rank starts in / of the read-only image.
    GPUs come from enroot's nvidia hook, which reads the image's NVIDIA_VISIBLE_DEVICES.
    """

    name = "pyxis"
    summary = "srun's pyxis plugin starts one enroot container per rank; MPI wires the ranks through PMIx"

    def parts(self, site: Site, image: str | None, workdir: WorkDir | None, out: Parts) -> None:
        out.add([f"--container-image={image or ''}"], "flag --image", "the image every rank runs (pyxis)")
        if site.container.gpu:
            out.site(
                "container.gpu", [], "enroot's nvidia hook mounts the driver and GPUs the image's NVIDIA_* ask for"
            )
        self._mounts(site, workdir, out)
        if workdir is not None:
            why = "every rank starts in the user's working directory, not in / of the read-only image"
            out.add([f"--container-workdir={workdir.path}"], workdir.source, why)
        home = "--container-mount-home" if site.container.mount_home else "--no-container-mount-home"
        out.site("container.mount_home", [home], "the host's home (~/.local packages, dotfiles) stays out unless asked")
        self.add_args(site, out)

    def _mounts(self, site: Site, workdir: WorkDir | None, out: Parts) -> None:
        """One --container-mounts (pyxis keeps only the last one given): the binds, the PMIx spool where
        the site asks, the working directory where no bind holds it."""
        mounts = [bind if ":" in bind else f"{bind}:{bind}" for bind in site.container.binds]
        key, why = "container.binds", "host directories in the container"
        if site.container.pmix_spool_mount:
            mounts.append(f"{site.slurm.spool_dir}:{site.slurm.spool_dir}")
            key, why = "container.pmix_spool_mount", "slurmstepd's PMIx server keeps its job data under SlurmdSpoolDir"
        source, why = f"site {site.name} {key}", site.why.get(key, why)
        if workdir is not None and site.container.bind_holding(workdir.path) is None:
            mounts.append(f"{workdir.path}:{workdir.path}")
            source += f" and {workdir.source}"
            why += "; the user's working directory at its own path, where relative paths resolve"
        if mounts:
            out.add([f"--container-mounts={','.join(mounts)}"], source, why)

    def environment(self, site: Site, names: list[str], out: Parts) -> None:
        if names:
            out.add(
                [f"--container-env={','.join(names)}"],
                "default of pyxis",
                "the image's environment wins over srun's unless named here: the site's variables win",
            )
