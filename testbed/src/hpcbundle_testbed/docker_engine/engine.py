"""The private dockerd: own data root (cached, leased by flock), exec root, socket and cgroups, in its
own mount namespace with host networking only; stopped by PID, its leftovers reaped."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cache import cache_dir
from ..netns_cluster import unique_prefix
from ..procs import Managed, ProcessTracker, cgroup_root, kill_pids, pid_alive, wait_until
from .base_image import BaseImage, ensure_base_image
from .host import EngineError, dockerd_version, dpkg_arch, ensure_tools, log_tail, mounts_under, remove_tree
from .rootfs import debootstrap_tarball

_STALE = re.compile(r"^hbt(\d+)x\d+-(docker|ctr)\b")
_CGROUP_HIERARCHIES = Path("/sys/fs/cgroup")


class DockerEngine(Managed):
    """A private dockerd: own data root, exec root, socket, pidfile; host networking only.

    Use as a context manager (stopped on the way out, also on failure)::

        with DockerEngine.cached() as engine:
            client = engine.client()
            base = engine.base_image()            # local/debian:bookworm, no registry
            client.images.build(...)

    `data_root` None means a fresh temporary one (removed at stop). `DockerEngine.cached()`
    leases the cached data root under the cache dir when it is free.
    """

    def __init__(
        self,
        data_root: Path | None = None,
        *,
        lock_fd: int | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.prefix = unique_prefix()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-docker-"))
        self.exec_root = self.workdir / "exec"
        self.socket = self.workdir / "docker.sock"
        self.pidfile = self.workdir / "dockerd.pid"
        self.log = self.workdir / "dockerd.log"
        self.config = self.workdir / "daemon.json"
        self.cached_root = data_root is not None
        self.data_root = data_root or self.workdir / "data"
        self.cgroup_parent = f"{self.prefix}-ctr"
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._lock_fd = lock_fd
        self._tracker: ProcessTracker | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._client: Any = None
        self.start_seconds = 0.0

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def cached(cls, cache: Path | None = None, **kwargs: Any) -> DockerEngine:
        """An engine on the cached data root (layer caches survive), or on a fresh one when the
        cache is disabled (HPCBUNDLE_DOCKER_CACHE=0) or another live engine holds it."""
        if os.environ.get("HPCBUNDLE_DOCKER_CACHE", "1") == "0":
            return cls(**kwargs)
        tools = ensure_tools(["dockerd"])
        reap_stale()  # an engine orphaned by a SIGKILLed run still holds the lock
        key = f"{dockerd_version(tools['dockerd'])}-overlay2-{dpkg_arch()}"
        root = (cache or cache_dir()) / "docker" / key
        root.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(root.parent / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return cls(**kwargs)
        root.mkdir(mode=0o710, exist_ok=True)
        return cls(root, lock_fd=fd, **kwargs)

    @property
    def host(self) -> str:
        """The engine's address for DOCKER_HOST / docker.DockerClient(base_url=...)."""
        return f"unix://{self.socket}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def env(self) -> dict[str, str]:
        """Environment that points docker clients (CLI, SDK, hpcbundle) at this engine."""
        return {"DOCKER_HOST": self.host}

    def client(self) -> Any:
        """A docker.DockerClient for this engine (one per engine, closed at stop)."""
        import docker

        if self._client is None:
            self._client = docker.DockerClient(base_url=self.host, timeout=3600)
        return self._client

    # -- life cycle ---------------------------------------------------------------------------

    def argv(self, dockerd: str = "dockerd") -> list[str]:
        """The command line: dockerd in a private mount namespace (its mounts die with it)."""
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            dockerd,
            "--config-file",
            str(self.config),
            "--data-root",
            str(self.data_root),
            "--exec-root",
            str(self.exec_root),
            "--host",
            self.host,
            "--pidfile",
            str(self.pidfile),
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-masq=false",
            "--cgroup-parent",
            f"/{self.cgroup_parent}",
            "--exec-opt",
            "native.cgroupdriver=cgroupfs",
            "--storage-driver",
            "overlay2",
            "--shutdown-timeout",
            "10",
        ]

    def start(self) -> None:
        """Start dockerd and wait (bounded) until it answers; on a cached root that will not
        start, wipe it and start fresh once."""
        if os.geteuid() != 0:
            raise EngineError("the test Docker engine needs root (dockerd with its own data root)")
        tools = ensure_tools(["dockerd", "unshare"])
        reap_stale()
        t0 = time.monotonic()
        try:
            self._launch(tools["dockerd"])
        except EngineError:
            if not self.cached_root:
                raise
            self._halt()
            remove_tree(self.data_root)
            self.data_root.mkdir(mode=0o710)
            self._launch(tools["dockerd"])
        self.start_seconds = time.monotonic() - t0
        if self.cached_root:  # leftovers of a run that died
            for container in self.client().containers.list(all=True):
                container.remove(force=True)

    def _launch(self, dockerd: str) -> None:
        self.config.write_text("{}\n")
        self.exec_root.mkdir(exist_ok=True)
        self._tracker = ProcessTracker(f"{self.prefix}-docker")
        with self.log.open("ab") as log:
            self._proc = self._tracker.popen(
                self.argv(dockerd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(self._lock_fd,) if self._lock_fd is not None else (),
            )

        def answers() -> bool:
            if self._proc is None or self._proc.poll() is not None:
                raise EngineError(
                    f"dockerd exited ({self._proc and self._proc.returncode}) before answering: {log_tail(self.log)}"
                )
            try:
                return bool(self.client().ping())
            except Exception:  # noqa: BLE001 - not up yet: connection refused, no socket
                return False

        if not wait_until(answers, self.start_timeout, interval=0.1):
            raise EngineError(
                f"dockerd did not answer on {self.socket} within {self.start_timeout:.0f} s: {log_tail(self.log)}"
            )

    def prune(self) -> None:
        """Drop stopped containers and dangling images (keeps a cached root from growing)."""
        client = self.client()
        client.containers.prune()
        client.images.prune(filters={"dangling": True})

    def _halt(self) -> None:
        """Stop dockerd by PID (SIGTERM, then SIGKILL), then everything left in its cgroups."""
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
        if self._tracker is not None:
            self._tracker.close()  # containerd and shims, if dockerd left them
            self._tracker = None
        _remove_cgroup_everywhere(self.cgroup_parent)
        self._proc = None

    def _open(self) -> None:
        self.start()

    def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the engine and remove everything it made outside the cached data root."""
        errors = []
        if self.cached_root and self._proc is not None and self._proc.poll() is None:
            try:
                self.prune()
            except Exception as exc:  # noqa: BLE001 - pruning is housekeeping, stopping is not
                errors.append(f"prune: {exc}")
        self._halt()
        stray = mounts_under(self.workdir) + (mounts_under(self.data_root) if self.data_root.exists() else [])
        if stray:
            subprocess.run(["umount", "-l", *sorted(set(stray), reverse=True)], check=False)
            errors.append(f"mounts left behind (unmounted lazily): {stray}")
        if self.workdir.exists():
            remove_tree(self.workdir)  # exec root, socket, log, and a temporary data root
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if errors:
            raise EngineError(f"{self.prefix} teardown: " + "; ".join(errors))

    # -- what tests need ----------------------------------------------------------------------

    def base_image(self, suite: str = "bookworm", variant: str = "minbase", tag: str | None = None) -> BaseImage:
        """``local/debian:<suite>`` from the cached debootstrap tarball (made when missing)."""
        rootfs = debootstrap_tarball(suite, variant)
        record = self.data_root.parent / f"{self.data_root.name}.base-images.json" if self.cached_root else None
        return ensure_base_image(self.client(), rootfs, tag or f"local/debian:{suite}", record, suite)

    def run(self, image: str, argv: Sequence[str], *, timeout: float = 600.0, **kwargs: Any) -> tuple[int, str]:
        """Run `argv` in a fresh container of `image` (host network, 1 GiB /dev/shm); return
        (exit status, combined output). The container is removed; on timeout it is killed and
        EngineError carries the output so far."""
        import requests.exceptions

        client = self.client()
        container = client.containers.create(image, list(argv), network_mode="host", shm_size="1g", **kwargs)
        try:
            container.start()
            try:
                status = container.wait(timeout=timeout)["StatusCode"]
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                container.kill()
                raise EngineError(
                    f"{' '.join(argv)} in {image}: no exit within {timeout:.0f} s; "
                    f"output: {container.logs().decode(errors='replace')[-3000:]}"
                ) from None
            return status, container.logs().decode(errors="replace")
        finally:
            container.remove(force=True)


def _remove_cgroup_everywhere(name: str) -> None:
    """Kill what is left in cgroup `name` (containers' cgroup parent) and remove it in every
    hierarchy (cgroups v1 has one directory per controller)."""
    for hierarchy in _CGROUP_HIERARCHIES.iterdir() if _CGROUP_HIERARCHIES.is_dir() else ():
        path = hierarchy / name
        if not path.is_dir():
            continue
        kill_pids(
            lambda p=path: [int(x) for procs in p.rglob("cgroup.procs") for x in _read_or_empty(procs).split()],
            grace=2.0,
        )
        for sub in sorted((p for p in path.rglob("*") if p.is_dir()), reverse=True):
            sub.rmdir()
        path.rmdir()


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def reap_stale() -> list[str]:
    """Stop engines of fixture runs whose process is dead (SIGKILL) and remove their cgroups and
    work directories. Names of live processes are never touched. Returns what was removed."""
    removed = []
    try:
        root = cgroup_root()
    except RuntimeError:
        root = None
    if root is not None:
        for path in root.glob("hbt*-docker"):
            m = _STALE.match(path.name)
            if m and not pid_alive(int(m.group(1))):
                ProcessTracker.adopt(path).close()
                removed.append(f"cgroup {path}")
    if _CGROUP_HIERARCHIES.is_dir():
        for hierarchy in _CGROUP_HIERARCHIES.iterdir():
            for path in hierarchy.glob("hbt*-ctr") if hierarchy.is_dir() else ():
                m = _STALE.match(path.name)
                if m and not pid_alive(int(m.group(1))):
                    _remove_cgroup_everywhere(path.name)
                    removed.append(f"cgroup {path.name}")
    for path in Path(tempfile.gettempdir()).glob("hbt*-docker-*"):
        m = _STALE.match(path.name)
        if m and not pid_alive(int(m.group(1))) and not mounts_under(path):
            remove_tree(path)
            removed.append(f"dir {path}")
    return removed
