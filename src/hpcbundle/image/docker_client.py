"""Build, tag, inspect and export Docker images through the Docker SDK for Python (no CLI parsing).

The engine is whatever ``DOCKER_HOST`` names (else the local socket). A build sends a context
that holds exactly what the rendered Dockerfile COPYs (examples/ and wheelhouse/) plus the
Dockerfile itself, unchanged, and streams the engine's build log to a progress callback::

    client = connect()
    context = build_context(dockerfile_text, {"examples": bundle.examples_dir,
                                              "wheelhouse": Path("wheelhouse")})
    info = build(client, context, tag="hpcbundle/cpu-local:latest",
                 buildargs={"BUILD_IMAGE": "local/debian:bookworm",
                            "RUNTIME_IMAGE": "local/debian:bookworm"},
                 progress=lambda line: print(line, end=""))
    info.labels["org.hpcbundle.recipe"], format_size(info.size)

The SDK talks to the engine's /build endpoint, i.e. the classic builder, so templates must not
need BuildKit-only syntax (RUN --mount, heredocs).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from ..config.errors import UserError

Progress = Callable[[str], None]
# Never sent to the engine: they only bust the COPY cache.
_SKIP_NAMES = {"__pycache__", ".git", ".pytest_cache", ".ipynb_checkpoints"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


class BuildFailed(Exception):
    """The engine refused the build or a step failed; `log` holds the build log so far."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.log = log

    def tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the build log (what a user needs to see the failing step)."""
        return "\n".join(self.log.rstrip("\n").splitlines()[-lines:])


@dataclass(frozen=True)
class ImageInfo:
    """What an image is, as the engine reports it."""

    id: str
    tags: tuple[str, ...]
    labels: dict[str, str]
    size: int  # bytes, the image with all its parents' layers
    layers: int  # file-system layers
    history: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def short_id(self) -> str:
        return self.id.split(":", 1)[-1][:12]


def connect(base_url: str | None = None, timeout: int = 1800) -> Any:
    """A docker.DockerClient for `base_url`, else for DOCKER_HOST / the local socket.

    Raises UserError (one line, exit 2) when no engine answers, naming the address tried.
    """
    try:
        import docker
        import requests
    except ImportError:  # pragma: no cover - a dependency of the package
        raise UserError("the Docker SDK for Python is not installed (pip install docker)") from None
    where = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = (
            docker.DockerClient(base_url=base_url, timeout=timeout) if base_url else docker.from_env(timeout=timeout)
        )
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(
            f"no Docker engine answers at {where}: {reason} (start dockerd, or point DOCKER_HOST at a running engine)"
        ) from None
    return client


def build_context(dockerfile: str, directories: Mapping[str, Path], dockerfile_name: str = "Dockerfile") -> IO[bytes]:
    """A tar build context: `dockerfile` (text, sent unchanged) plus each directory under its name.

    The rendered Dockerfiles COPY only examples/ and wheelhouse/ (the repository's .dockerignore
    keeps the same two), so this is the whole context, whatever else the checkout holds. Owners are
    normalised to root so the layer cache does not depend on who checked the files out. Returns a
    rewound temporary file (a torch wheel alone is ~200 MB; it is not held in memory).
    """
    for name, path in directories.items():
        if not Path(path).is_dir():
            raise UserError.at(
                str(path),
                "",
                f"not a directory (the build context's {name}/)",
                f"create it, or pass another directory for {name}/",
            )
    out = tempfile.TemporaryFile(prefix="hpcbundle-context-")
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo(dockerfile_name)
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
        for name, path in sorted(directories.items()):
            for src, arcname in _walk(Path(path), name):
                tar.add(src, arcname=arcname, recursive=False, filter=_as_root)
    out.seek(0)
    return out


def _walk(root: Path, arcroot: str) -> Iterable[tuple[Path, str]]:
    yield root, arcroot
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_NAMES)
        rel = Path(dirpath).relative_to(root)
        for name in sorted(dirnames) + sorted(f for f in filenames if not f.endswith(_SKIP_SUFFIXES)):
            yield Path(dirpath) / name, str(Path(arcroot) / rel / name)


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def build(
    client: Any,
    context: IO[bytes],
    *,
    tag: str | None = None,
    target: str | None = None,
    buildargs: Mapping[str, str] | None = None,
    network_mode: str | None = None,
    nocache: bool = False,
    progress: Progress | None = None,
) -> ImageInfo:
    """Build the context with the engine, streaming its log to `progress` line by line.

    Returns the built image's ImageInfo; raises BuildFailed (with the log) when a step fails.
    `target` builds up to that stage (e.g. "build"); `network_mode` is `docker build --network`.
    """
    import docker.errors
    import requests.exceptions

    log: list[str] = []
    image_id = None
    try:
        stream = client.api.build(
            fileobj=context,
            custom_context=True,
            dockerfile="Dockerfile",
            tag=tag,
            target=target,
            buildargs=dict(buildargs or {}),
            network_mode=network_mode,
            nocache=nocache,
            rm=True,
            forcerm=True,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                raise BuildFailed(f"docker build failed: {detail.strip()}", "".join(log))
            text = chunk.get("stream") or _status_line(chunk)
            if text:
                log.append(text)
                if progress:
                    progress(text)
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = aux["ID"]
    except docker.errors.APIError as exc:
        raise BuildFailed(f"docker build refused: {exc.explanation or exc}", "".join(log)) from None
    except requests.exceptions.RequestException as exc:  # engine gone, or silent past the client timeout
        raise BuildFailed(f"lost the Docker engine during the build: {exc}", "".join(log)) from None
    if image_id is None:  # engines that only print "Successfully built <id>"
        for line in reversed(log):
            if line.startswith("Successfully built "):
                image_id = line.split()[-1]
                break
    if image_id is None:
        raise BuildFailed("docker build ended without an image id", "".join(log))
    return inspect(client, image_id)


def _status_line(chunk: Mapping[str, Any]) -> str:
    status = chunk.get("status")
    if not status:
        return ""
    return f"{status} {chunk.get('progress', '')}".rstrip() + "\n"


def tag(client: Any, image: str, ref: str) -> ImageInfo:
    """Tag `image` (id or name) as `ref` ("repo:tag"; ":latest" when no tag is given)."""
    repo, tag_ = _split_ref(ref)
    client.images.get(image).tag(repo, tag_)
    return inspect(client, ref)


def _split_ref(ref: str) -> tuple[str, str]:
    name, sep, tag_ = ref.rpartition(":")
    if not sep or "/" in tag_:  # "registry:5000/x" has a colon but no tag
        return ref, "latest"
    return name, tag_


def inspect(client: Any, ref: str) -> ImageInfo:
    """Labels, size, layers and history of image `ref` as the engine reports them."""
    image = client.images.get(ref)
    attrs = image.attrs
    return ImageInfo(
        id=image.id,
        tags=tuple(image.tags),
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
        size=int(attrs.get("Size") or 0),
        layers=len((attrs.get("RootFS") or {}).get("Layers") or []),
        history=tuple(image.history()),
    )


def read_file(client: Any, ref: str, path: str) -> bytes:
    """The content of file `path` inside image `ref` (read from a created, never started,
    container), e.g. the recipe manifest at /etc/hpcbundle/manifest.json."""
    container = client.containers.create(ref, command=["true"])
    try:
        chunks, _stat = container.get_archive(path)
        buf = io.BytesIO(b"".join(chunks))
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=buf) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        if member is None:
            raise FileNotFoundError(f"{ref}:{path} is not a regular file")
        handle = tar.extractfile(member)
        assert handle is not None
        return handle.read()


def read_json(client: Any, ref: str, path: str) -> Any:
    """`read_file` parsed as JSON."""
    return json.loads(read_file(client, ref, path))


def export_rootfs(client: Any, ref: str, dest: BinaryIO) -> int:
    """Write image `ref`'s flattened root file system as a tar to `dest` (what `docker export`
    gives: the input of Charliecloud's ch-convert or `tar -x` into a directory image).
    Returns the number of bytes written."""
    container = client.containers.create(ref, command=["true"])
    written = 0
    try:
        for chunk in container.export(chunk_size=1 << 20):
            dest.write(chunk)
            written += len(chunk)
    finally:
        container.remove(force=True)
    return written


def save(client: Any, ref: str, dest: BinaryIO) -> int:
    """Write image `ref` as a docker-archive (`docker save`) to `dest`, the input of
    `apptainer build x.sif docker-archive://x.tar` on a host without a Docker engine."""
    written = 0
    for chunk in client.images.get(ref).save(chunk_size=1 << 20, named=True):
        dest.write(chunk)
        written += len(chunk)
    return written


def format_size(size: int) -> str:
    """Bytes as people read image sizes: '1.23 GB', '456.7 MB'."""
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"
