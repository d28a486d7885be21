"""Charliecloud directory images made from a built Docker image, and the environment ch-run needs.

A directory image is what `ch-convert` writes from a Docker image: its flattened file system in a
directory, plus `ch/environment` (the image's ENV, one VAR=value a line) that `ch-run --set-env`
reads. Here the file system comes out of the testbed's Docker engine through hpcbundle.image.docker_client
(the Docker SDK) and is untarred, so no Charliecloud builder and no registry are involved. The
pytest fixture over it is `ch_image` in hpcbundle_testbed.docker_plugin.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcbundle.image import docker_client

from .netns_cluster import unique_prefix

# ch-run refuses to start without $USER; mpirun passes its environment to the local ch-runs and,
# through the rsh agent, to the remote orted and their ch-runs.
RUN_ENV = {"USER": "root"}
# Where a directory image gets the testbed's big_allreduce.py (the user-namespace vader trap).
IN_IMAGE_TESTS = "/opt/hpcbundle-tests"
BIG_ALLREDUCE = Path(__file__).resolve().parent / "big_allreduce.py"


@dataclass(frozen=True)
class DirectoryImage:
    """A Charliecloud directory image: where it is, the size of the tar it came from, how long it took."""

    path: Path
    tar_bytes: int
    seconds: float


def export_directory_image(client: Any, tag: str, image: Path) -> int:
    """Write the Docker image `tag` as a Charliecloud directory image at `image` (a new directory):
    its file system untarred, `ch/environment` from the image's ENV, and big_allreduce.py under
    IN_IMAGE_TESTS. Returns the size of the exported tar stream in bytes."""
    image.mkdir()
    tar = subprocess.Popen(["tar", "-x", "-C", str(image)], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        written = docker_client.export_rootfs(client, tag, tar.stdin)
    finally:
        tar.stdin.close()
        try:
            tar.wait(120)
        except subprocess.TimeoutExpired:
            tar.kill()
            tar.wait()
    if tar.returncode != 0:
        raise RuntimeError(f"tar -x of {tag} into {image} failed: {tar.stderr.read().decode()[-2000:]}")
    env = client.images.get(tag).attrs["Config"]["Env"]
    (image / "ch").mkdir(exist_ok=True)
    (image / "ch" / "environment").write_text("".join(f"{kv}\n" for kv in env))
    tests_dir = image / IN_IMAGE_TESTS.lstrip("/")
    tests_dir.mkdir(parents=True)
    shutil.copy(BIG_ALLREDUCE, tests_dir)
    return written


@contextmanager
def directory_image(client: Any, tag: str) -> Iterator[DirectoryImage]:
    """The Docker image `tag` as a directory image in a temporary directory, removed on exit (and by
    netns_cluster.reap_stale() after a SIGKILL: the directory carries the testbed's name prefix)."""
    work = Path(tempfile.mkdtemp(prefix=f"{unique_prefix()}-"))
    image = work / tag.split("/")[-1].split(":")[0]
    try:
        t0 = time.monotonic()
        written = export_directory_image(client, tag, image)
        yield DirectoryImage(image, written, time.monotonic() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
