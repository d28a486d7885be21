"""pyxis (NVIDIA's SPANK plugin for SLURM) with enroot: srun's own --container-* options."""

from __future__ import annotations

import re

from ...config.fields import IMAGE_COMPONENT
from ...config.sites import Site
from ..base import RUNTIMES, Runtime
from ..command import Parts

_SQUASHFS = re.compile(r"/[A-Za-z0-9._+/-]*[A-Za-z0-9_+-]\.(sqsh|squashfs)")
"""A squashfs image on the nodes' file system (`enroot import` writes .sqsh), an absolute path."""
_ENROOT_URI = re.compile(
    rf"(?:[a-z0-9_.-]{{1,64}}@)?(?:[A-Za-z0-9.-]{{1,253}}(?::[0-9]{{1,5}})?#)?{IMAGE_COMPONENT}(?:/{IMAGE_COMPONENT}){{0,8}}"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
)
"""An image as enroot names it, [USER@][REGISTRY#]IMAGE[:TAG] (pyxis README),
e.g. registry.example.org#team/horovod:cuda13."""


@RUNTIMES.register
class Pyxis(Runtime):
    """One enroot container per rank, started by srun itself (pyxis's options are srun's)::

        env PMIX_MCA_gds=hash srun --mpi=pmix -n 16 --kill-on-bad-exit=1 --container-image=/shared/horovod.sqsh \\
            --container-mounts=/var/spool/slurmd:/var/spool/slurmd --container-env=PMIX_MCA_gds python train.py

    The image is a squashfs file (`enroot import -o horovod.sqsh dockerd://horovod:cuda13`) or an
    image reference enroot pulls (`registry.example.org#team/horovod:cuda13`). container.binds become one
    --container-mounts=SRC:DST[,...] (a bare path is SRC:SRC). The image's environment wins over
    the host's, so the variables the site sets in front of srun are named in --container-env.
    GPUs come from enroot's nvidia hook, which reads the image's NVIDIA_VISIBLE_DEVICES.
    """

    name = "pyxis"
    summary = "srun's pyxis plugin starts one enroot container per rank; MPI wires the ranks through PMIx"

    def image_problem(self, image: str) -> tuple[str, str] | None:
        if image.startswith("/"):
            if _SQUASHFS.fullmatch(image):
                return None
            return f"{image[:80]!r} is not a squashfs image path", "give /path/image.sqsh (letters, digits, ._+/-)"
        if _ENROOT_URI.fullmatch(image):
            return None
        return (
            f"{image[:80]!r} is not an enroot image reference",
            "write [USER@][REGISTRY#]IMAGE[:TAG], e.g. registry.example.org#team/horovod:cuda13, or /path/image.sqsh",
        )

    def parts(self, site: Site, image: str | None, out: Parts) -> None:
        out.add([f"--container-image={image or ''}"], "flag --image", "the image every rank runs (pyxis)")
        if site.container.gpu:
            out.site(
                "container.gpu", [], "enroot's nvidia hook mounts the driver and GPUs the image's NVIDIA_* ask for"
            )
        binds = [bind if ":" in bind else f"{bind}:{bind}" for bind in site.container.binds]
        if binds:
            out.site("container.binds", [f"--container-mounts={','.join(binds)}"], "host directories in the container")
        self.add_args(site, out)

    def environment(self, site: Site, names: list[str], out: Parts) -> None:
        if names:
            out.add(
                [f"--container-env={','.join(names)}"],
                "default of pyxis",
                "the image's environment wins over srun's unless named here: the site's variables win",
            )
