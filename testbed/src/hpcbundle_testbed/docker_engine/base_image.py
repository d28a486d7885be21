"""The base image ``local/debian:<suite>``: the cached rootfs imported once per engine data root,
plus one layer that makes it work here the way the machine does (apt sources, extra trusted CAs)."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apt_sources import rootfs_sources
from .rootfs import RootfsTarball

# CA bundle and pip setting this machine uses; the test base image gets the same (see host_layer).
_HOST_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_DISTRO_CAS = Path("/usr/share/ca-certificates")
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)


def host_extra_cas(bundle: Path = _HOST_BUNDLE, distro: Path = _DISTRO_CAS) -> list[str]:
    """PEM certificates this machine trusts beyond the distribution's own set, e.g. the CA of a
    TLS-intercepting egress proxy. Without them pip in a build cannot reach its index here."""
    if not bundle.is_file():
        return []
    known = {"".join(p.split()) for f in distro.rglob("*.crt") for p in _PEM.findall(f.read_text(errors="replace"))}
    return [p for p in _PEM.findall(bundle.read_text(errors="replace")) if "".join(p.split()) not in known]


def host_layer(suite: str) -> dict[str, bytes]:
    """Files (path in the image -> content) that make the base image work on this machine the
    way the machine itself does, all read at run time, none written into the project:
    apt sources for the suite (+ -updates, -security) and, when the machine trusts extra CAs,
    those CAs (kept by update-ca-certificates when a build installs ca-certificates), the
    machine's bundle, and pip's `cert` setting pointing at it."""
    files: dict[str, bytes] = {}
    sources = rootfs_sources(suite)
    if sources:
        # This text is part of the base image: changing it changes the image id, and every cached layer above it.
        header = "# The build machine's apt sources (written by hpcbundle_testbed.docker_engine)\n"
        files["etc/apt/sources.list"] = (header + "".join(s.line() + "\n" for s in sources)).encode()
    extras = host_extra_cas()
    for n, pem in enumerate(extras):
        files[f"usr/local/share/ca-certificates/build-host-{n}.crt"] = (pem + "\n").encode()
    if extras:
        files["etc/ssl/certs/ca-certificates.crt"] = _HOST_BUNDLE.read_bytes()
        files["etc/pip.conf"] = b"[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"
    return files


@dataclass(frozen=True)
class BaseImage:
    """The base image (debootstrap rootfs + this machine's layer) and what making it cost."""

    tag: str
    id: str
    rootfs: RootfsTarball
    import_seconds: float
    imported: bool  # False when the engine already had that exact rootfs (cached data root)


def ensure_base_image(
    client: Any, rootfs: RootfsTarball, tag: str, record: Path | None, suite: str = "bookworm"
) -> BaseImage:
    """`tag` in the engine: the rootfs imported as ``<repo>-rootfs:<tag>`` (unless the engine
    already has that exact import) plus a layer with `host_layer`'s files.

    `record` (beside a cached data root) remembers which image id came from which tarball, so a
    warm run keeps the same base image id and therefore its whole layer cache. (docker import
    of the same tar gives a new id every time: the id covers the creation time. The host layer
    is a cached build step, so it keeps its id while the machine's files are unchanged.)
    """
    import docker.errors

    from hpcbundle.image import docker_client

    t0 = time.monotonic()
    repo, _, version = tag.rpartition(":")
    rootfs_tag = f"{repo}-rootfs:{version}"
    known = json.loads(record.read_text()) if record and record.is_file() else {}
    entry = known.get(rootfs_tag, {})
    imported = True
    if entry.get("rootfs_sha256") == rootfs.sha256:
        try:
            imported = client.images.get(rootfs_tag).id != entry.get("id")
        except docker.errors.ImageNotFound:
            pass
    if imported:
        client.api.import_image_from_file(
            str(rootfs.path), repository=f"{repo}-rootfs", tag=version, changes=['CMD ["bash"]']
        )
        if record:
            known[rootfs_tag] = {
                "id": client.images.get(rootfs_tag).id,
                "rootfs_sha256": rootfs.sha256,
                "rootfs": rootfs.key,
            }
            tmp = record.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=1))
            os.replace(tmp, record)
    with tempfile.TemporaryDirectory(prefix="hbt-host-layer-") as tmp:
        for rel, data in host_layer(suite).items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_bytes(data)
        context = docker_client.build_context(f"FROM {rootfs_tag}\nCOPY host/ /\n", {"host": Path(tmp)})
    info = docker_client.build(client, context, tag=tag)
    return BaseImage(tag, info.id, rootfs, time.monotonic() - t0, imported=imported)
