#!/usr/bin/env bash
# Rendered by hpcbundle 0.1.0 from recipe cpu-ddp; do not edit, re-render:
#   hpcbundle render cpu-ddp --format shell
# Debian 12, PyTorch 2.13 CPU, torch.distributed (Gloo) without Horovod or MPI
#
# The recipe's stack without a container runtime: a venv with its wheels (no Horovod: a
# torch.distributed stack), from the same steps as the Dockerfile and the .def.
#
#   bash install.sh [VENV]        the venv (default: $HPCBUNDLE_VENV, else ./horovod-venv); a re-run reuses it
#
# Environment:
#   HPCBUNDLE_SYSTEM_SITE_PACKAGES=1  the venv sees the host's packages (python3 -m venv
#                                     --system-site-packages): torch and the NVIDIA wheels already
#                                     there are used, not downloaded again (exact pins that are met
#                                     install nothing)
#   HPCBUNDLE_PYTHON=python3          the Python that makes the venv
#   HPCBUNDLE_CACHE=DIR               Horovod wheels, one per versions key (default ~/.cache/hpcbundle):
#                                     a wheel there is installed instead of building (minutes -> seconds)
#                                     and no compiler, make or Python headers are needed
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR offline, from a wheelhouse (pip reads its own variables)
#
# The host provides what the images get from their OS packages: a C++ compiler, make, cmake,
# the Python headers and venv module; on Debian/Ubuntu:
#   apt-get install python3-venv
set -euo pipefail

python="${HPCBUNDLE_PYTHON:-python3}"
HPCBUNDLE_VENV="${1:-${HPCBUNDLE_VENV:-./horovod-venv}}"
case "$HPCBUNDLE_VENV" in /*) ;; *) HPCBUNDLE_VENV="$PWD/$HPCBUNDLE_VENV" ;; esac
HPCBUNDLE_CACHE="${HPCBUNDLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpcbundle}"
HPCBUNDLE_BUILD="$(mktemp -d)"
trap 'rm -rf "$HPCBUNDLE_BUILD"' EXIT
venv_args=()
if [ "${HPCBUNDLE_SYSTEM_SITE_PACKAGES:-0}" = 1 ]; then venv_args+=(--system-site-packages); fi
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! command -v "$python" >/dev/null; then
    echo "install.sh: not found: $python (Debian/Ubuntu: apt-get install python3-venv)" >&2
    exit 1
fi

printf '\n==> [%d/%d] %s\n' 1 5 'Python 3.11 venv at '"${HPCBUNDLE_VENV}"
if [ ! -x "${HPCBUNDLE_VENV}/bin/python" ]; then "$python" -m venv ${venv_args[@]+"${venv_args[@]}"} "${HPCBUNDLE_VENV}"; fi

printf '\n==> [%d/%d] %s\n' 2 5 frameworks
if [ -f "/etc/pip/constraint.txt" ]; then frozen="/etc/pip/constraint.txt"; else frozen=""; fi
"${HPCBUNDLE_VENV}/bin/python" -m pip install ${frozen:+-c "$frozen"} torch==2.13.0+cpu

printf '\n==> [%d/%d] %s\n' 3 5 'torch.distributed is available, with Gloo'
"${HPCBUNDLE_VENV}/bin/python" -c 'import sys, torch, torch.distributed as dist; ok = dist.is_available() and dist.is_gloo_available(); print("torch", torch.__version__, "torch.distributed with gloo:", ok); sys.exit(not ok)'

printf '\n==> [%d/%d] %s\n' 4 5 'your own Python packages (1), the stack held fixed'
if [ -f "/etc/pip/constraint.txt" ]; then frozen="/etc/pip/constraint.txt"; else frozen=""; fi
printf '%s\n' torch==2.13.0+cpu > "${HPCBUNDLE_VENV}/hpcbundle-constraints.txt"
"${HPCBUNDLE_VENV}/bin/python" -m pip list --format=freeze >> "${HPCBUNDLE_VENV}/hpcbundle-constraints.txt"
if ! "${HPCBUNDLE_VENV}/bin/python" -m pip install -c "${HPCBUNDLE_VENV}/hpcbundle-constraints.txt" ${frozen:+-c "$frozen"} numpy==1.26.4; then echo "python_packages/requirements_file: a pin conflicts with the stack in ${HPCBUNDLE_VENV}/hpcbundle-constraints.txt (pip names both above): change or remove that pin" >&2; exit 1; fi

printf '\n==> [%d/%d] %s\n' 5 5 'the environment to run it, and the recipe for doctor'
# shellcheck disable=SC2016  # ${PATH} and ${LD_LIBRARY_PATH} are for the shell that sources the file
{
    echo "# Written by install.sh (hpcbundle recipe cpu-ddp): source it to run torch.distributed from this venv."
    printf 'export PATH="%s"\n' "${HPCBUNDLE_VENV}"'/bin:${PATH}'
} > "$HPCBUNDLE_VENV/hpcbundle-env.sh"
# The recipe, where `hpcbundle doctor --image VENV` reads an image's (driver vs CUDA, GPU archs, MPI).
mkdir -p "$HPCBUNDLE_VENV"/etc/hpcbundle
printf '%s\n' '{"hpcbundle_version": "0.1.0", "recipe": {"name": "cpu-ddp", "description": "Debian 12, PyTorch 2.13 CPU, torch.distributed (Gloo) without Horovod or MPI", "base": {"os": "debian12", "build_image": "debian:bookworm", "runtime_image": "debian:bookworm"}, "python": "3.11", "gpu": null, "mpi": null, "ucx": null, "fabric_libs": [], "frameworks": {"tensorflow": null, "pytorch": {"version": "2.13.0", "variant": "cpu", "torchvision": false, "torchaudio": null}}, "horovod": null, "python_packages": ["numpy==1.26.4"]}, "layout": {"venv": "/opt/venv", "ucx_prefix": null, "examples": "/examples"}, "labels": {"org.hpcbundle.recipe": "cpu-ddp", "org.hpcbundle.hpcbundle-version": "0.1.0", "org.hpcbundle.os": "debian12", "org.hpcbundle.python": "3.11", "org.hpcbundle.mpi.flavour": "none", "org.hpcbundle.horovod": "none", "org.hpcbundle.frameworks": "pytorch", "org.hpcbundle.manifest": "/etc/hpcbundle/manifest.json", "org.hpcbundle.mpi.transports": "none", "org.hpcbundle.fabric-libs": "none", "org.hpcbundle.pytorch": "2.13.0+cpu"}}' > "$HPCBUNDLE_VENV"/etc/hpcbundle/manifest.json
echo "done: source $HPCBUNDLE_VENV/hpcbundle-env.sh, then e.g. torchrun --nproc-per-node 2 YOUR_DDP_PROGRAM.py"
echo "check the nodes: hpcbundle doctor --site SITE --image $HPCBUNDLE_VENV --hosts NODE1,NODE2"
