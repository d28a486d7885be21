"""A private, real Docker engine for tests, and a registry-free Debian base image for it.

No registry is reachable on the project's machines, so nothing is pulled: the base image is a
debootstrapped Debian minbase (from the mirror this machine's own apt sources name, read at run
time; ``$HPCBUNDLE_DEBIAN_MIRROR`` overrides) imported as ``local/debian-rootfs:<suite>``, plus one
layer with what makes it work here the way the machine itself works (its apt sources for the
suite, and CAs it trusts beyond Debian's, e.g. a TLS-intercepting egress proxy's, with pip's
``cert`` pointing at them): ``local/debian:<suite>``. Nothing machine-specific is in the project.
Both slow parts are cached under ``${HPCBUNDLE_CACHE:-~/.cache/hpcbundle}``:

    debootstrap/<suite>-<variant>-<arch>-f<N>.tar  the root file system (35-90 s cold, 0 s warm)
    docker/<dockerd version>-overlay2-<arch>/      a data root, so layer caches survive runs

The engine is ``dockerd`` with its own data root, exec root, socket, pidfile and config file, in
its own mount namespace, with no bridge and no iptables rules (builds and containers use the host
network), so a system Docker is never touched. Every process it starts lives in one cgroup, its
containers in another; it is stopped by PID, and what is left of it is killed and removed.
``python -m hpcbundle_testbed.docker_engine -- CMD ...`` runs CMD against such an engine.

Modules: `host` (tools, cache root, mounts), `apt_sources` (the machine's apt entries -> the mirror),
`rootfs` (the cached debootstrap tarball), `base_image` (its import plus this machine's layer),
`wheels` (wheels no index serves), `engine` (the dockerd process), `__main__` (the command).

Why caching the data root is safe (and where it is not):
- One engine at a time: an exclusive flock on ``<data root>.lock`` is held by the test process
  *and inherited by dockerd*, so even a daemon orphaned by a SIGKILLed run keeps it. A second
  run that finds it locked uses a fresh temporary data root instead (cold, but correct).
- Versioned: the key holds dockerd's version, the storage driver and the architecture; another
  docker.io gets another directory. A root the daemon cannot start on is wiped and recreated.
- Leftovers of a crashed run (containers) are removed at start; dangling images at stop.
- The layer cache only reuses a step whose instruction, build args and COPYed files are
  unchanged, and the base image is re-imported whenever the rootfs tarball changes, so a template
  change always rebuilds from the changed step. What it cannot see: a RUN step that downloads
  (apt-get, pip) is not re-run when the mirror or index changes. The proof that a template
  builds from scratch is a cold run: ``HPCBUNDLE_DOCKER_CACHE=0`` (or a fresh CI machine).
"""
