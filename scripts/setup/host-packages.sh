#!/usr/bin/env bash
# Install the Debian (bookworm) packages hpcbundle needs on the host: Open MPI and a C++
# toolchain to build Horovod, SLURM + munge for the SLURM tests, namespace tools, container
# engines (Docker, Charliecloud, what Apptainer needs) and linters.
#
# Idempotent: when every package is already installed (checked with dpkg-query) it returns
# at once without touching apt. Otherwise it runs `apt-get update` once, then one install.
# Both wait for the dpkg lock (up to 600 s) because other installs may run at the same time.
#
# Usage: scripts/setup/host-packages.sh          (as root, or with password-less sudo)
set -euo pipefail

log() { printf 'host-packages: %s\n' "$*"; }
die() { printf 'host-packages: error: %s\n' "$*" >&2; exit 1; }

PACKAGES=(
    # Open MPI + toolchain to build Horovod (python3-dev: Python.h; python3-venv: ensurepip;
    # python3-yaml: scripts/setup/pins.py reads the versions from the recipe before the venv exists)
    openmpi-bin libopenmpi-dev cmake g++ make python3-dev python3-venv python3-yaml
    # SLURM tests
    slurm-wlm munge
    # fake clusters from network namespaces (ip, nsenter, unshare), bandwidth checks, a real sshd per node
    iproute2 util-linux iperf3 openssh-server openssh-client
    # linters and base-image bootstrap
    shellcheck debootstrap
    # container engines; what scripts/setup/apptainer.sh's Apptainer needs (mksquashfs, newuidmap)
    # and uses to run it on glibc 2.36 (patchelf)
    docker.io charliecloud charliecloud-builders squashfuse squashfs-tools uidmap patchelf
    # process tools used by the tests (pgrep, pkill by pid file, fuser); numactl, a per-rank wrapper
    procps psmisc numactl
)

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script targets Debian bookworm"

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
    [[ $status == ii* ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
    log "all ${#PACKAGES[@]} packages already installed"
    exit 0
fi

SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "not root and sudo not found; run as root to install: ${missing[*]}"
    SUDO=(sudo -n)
fi

APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)

log "missing ${#missing[@]} package(s): ${missing[*]}"
log "running apt-get update"
"${APT[@]}" update || die "apt-get update failed (is the Debian mirror reachable?)"
log "running apt-get install -y ${missing[*]}"
"${APT[@]}" install -y "${missing[@]}" || die "apt-get install failed for: ${missing[*]}"

still=()
for pkg in "${missing[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
    [[ $status == ii* ]] || still+=("$pkg")
done
((${#still[@]} == 0)) || die "still not installed after apt-get: ${still[*]}"
log "installed: ${missing[*]}"
