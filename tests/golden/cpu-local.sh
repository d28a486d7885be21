#!/usr/bin/env bash
# Rendered by hpcbundle 0.1.0 from recipe cpu-local; do not edit, re-render:
#   hpcbundle render cpu-local --format shell
# Debian 12, Open MPI 4.1.4 (distro), PyTorch 2.13 CPU + TensorFlow CPU 2.15.1, Horovod 0.28.1 (C++17 patch)
#
# The recipe's stack without a container runtime: a venv with its wheels, Horovod built and
# checked (`horovodrun --check-build`), from the same steps as the Dockerfile and the .def.
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
# the Python headers and venv module, the MPI compiler wrappers (mpicc); on Debian/Ubuntu:
#   apt-get install build-essential cmake libopenmpi-dev openmpi-bin python3-dev python3-venv
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
    echo "install.sh: not found: $python (Debian/Ubuntu: apt-get install build-essential cmake libopenmpi-dev openmpi-bin python3-dev python3-venv)" >&2
    exit 1
fi
python_version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# A Horovod wheel already in the cache for this Python (e.g. a wheelhouse from `make gpu-wheelhouse` as
# HPCBUNDLE_CACHE): nothing is compiled, so a node without compilers or Python headers installs it.
HPCBUNDLE_PYVER="$python_version"
prebuilt="$(find "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-d9397a8cd4ff-py${HPCBUNDLE_PYVER}" -maxdepth 1 -name 'horovod-*.whl' -print -quit 2>/dev/null || true)"
build_tools=(c++ make cmake mpicc)
if [ -n "$prebuilt" ]; then build_tools=(); fi
missing=()
for tool in ${build_tools[@]+"${build_tools[@]}"}; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ -n "${missing[*]}" ]; then
    echo "install.sh: not found: ${missing[*]} (Debian/Ubuntu: apt-get install build-essential cmake libopenmpi-dev openmpi-bin python3-dev python3-venv; or a prebuilt Horovod wheel in HPCBUNDLE_CACHE)" >&2
    exit 1
fi
if "$python" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))'; then
    echo "install.sh: Python $python_version: Horovod 0.28.1 imports distutils, which Python >= 3.12 lacks, without the py312 patch (add py312 to horovod.patches of recipe cpu-local, re-render)" >&2
    exit 1
fi
if [ -z "$prebuilt" ]; then
    python_headers="$("$python" -c 'import pathlib, sysconfig; print(pathlib.Path(sysconfig.get_paths()["include"], "Python.h"))')"
    if [ ! -f "$python_headers" ]; then
        echo "install.sh: Python $python_version has no headers ($python_headers): Horovod's build compiles against them (Debian/Ubuntu: apt-get install python3-dev)" >&2
        exit 1
    fi
    gcc_major="$(c++ -dumpversion | cut -d. -f1)"
    if [ "$gcc_major" -ge 13 ]; then
        echo "install.sh: GCC $gcc_major: Horovod 0.28.1 does not compile with GCC >= 13 without the gcc13 patch (add gcc13 to horovod.patches of recipe cpu-local, re-render)" >&2
        exit 1
    fi
fi

printf '\n==> [%d/%d] %s\n' 1 4 'Python 3.11 venv at '"${HPCBUNDLE_VENV}"' with Horovod'"'"'s build helpers'
if [ ! -x "${HPCBUNDLE_VENV}/bin/python" ]; then "$python" -m venv ${venv_args[@]+"${venv_args[@]}"} "${HPCBUNDLE_VENV}"; fi
HPCBUNDLE_SITE="$("${HPCBUNDLE_VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
HPCBUNDLE_PYVER="$("${HPCBUNDLE_VENV}/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
"${HPCBUNDLE_VENV}/bin/python" -m pip install wheel==0.43.0 packaging==24.0 psutil==5.9.8 PyYAML==6.0.1 cloudpickle==3.0.0 cffi==2.1.1

printf '\n==> [%d/%d] %s\n' 2 4 frameworks
if [ -f "/etc/pip/constraint.txt" ]; then frozen="/etc/pip/constraint.txt"; else frozen=""; fi
"${HPCBUNDLE_VENV}/bin/python" -m pip install ${frozen:+-c "$frozen"} tensorflow-cpu==2.15.1 torch==2.13.0+cpu

printf '\n==> [%d/%d] %s\n' 3 4 'Horovod 0.28.1 (the cached wheel for these versions, or built from its sdist), then horovodrun --check-build'
mkdir -p "${HPCBUNDLE_BUILD}" "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-d9397a8cd4ff-py${HPCBUNDLE_PYVER}"
hvd_wheel="$(find "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-d9397a8cd4ff-py${HPCBUNDLE_PYVER}" -maxdepth 1 -name 'horovod-*.whl' -print -quit)"
if [ -n "$hvd_wheel" ]; then echo "Horovod: the cached wheel $hvd_wheel (no build)"; fi
if [ -z "$hvd_wheel" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip download --no-deps --no-binary horovod --no-build-isolation --dest "${HPCBUNDLE_BUILD}" horovod==0.28.1; fi
if [ -z "$hvd_wheel" ]; then echo "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0  ${HPCBUNDLE_BUILD}/horovod-0.28.1.tar.gz" | sha256sum -c -; fi
if [ -z "$hvd_wheel" ]; then tar -xzf "${HPCBUNDLE_BUILD}/horovod-0.28.1.tar.gz" -C "${HPCBUNDLE_BUILD}"; fi
if [ -z "$hvd_wheel" ]; then for f in CMakeLists.txt horovod/torch/CMakeLists.txt; do grep -q 'CMAKE_CXX_STANDARD 14' "${HPCBUNDLE_BUILD}/horovod-0.28.1/$f" || { echo "cxx17 patch: no CMAKE_CXX_STANDARD 14 in $f" >&2; exit 1; }; sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "${HPCBUNDLE_BUILD}/horovod-0.28.1/$f"; done; fi
export PATH="${HPCBUNDLE_VENV}/bin:${PATH}"
export HOROVOD_WITH_TENSORFLOW="1"
export HOROVOD_WITH_PYTORCH="1"
export HOROVOD_WITHOUT_MXNET="1"
export HOROVOD_WITH_MPI="1"
export HOROVOD_WITH_GLOO="1"
export CMAKE_POLICY_VERSION_MINIMUM="3.5"
if [ -z "$hvd_wheel" ]; then echo "Horovod: building 0.28.1 (several minutes; compiler lines follow)"; fi
if [ -z "$hvd_wheel" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip wheel --no-deps --no-build-isolation --verbose --wheel-dir "${HPCBUNDLE_BUILD}/dist" "${HPCBUNDLE_BUILD}/horovod-0.28.1"; fi
if [ -z "$hvd_wheel" ]; then hvd_wheel="$(find "${HPCBUNDLE_BUILD}/dist" -name 'horovod-*.whl' -print -quit)"; fi
"${HPCBUNDLE_VENV}/bin/python" -m pip install --no-deps --force-reinstall "$hvd_wheel"
if [ "$(dirname "$hvd_wheel")" != "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-d9397a8cd4ff-py${HPCBUNDLE_PYVER}" ]; then cp "$hvd_wheel" "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-d9397a8cd4ff-py${HPCBUNDLE_PYVER}/.partial"; mv "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-d9397a8cd4ff-py${HPCBUNDLE_PYVER}/.partial" "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-d9397a8cd4ff-py${HPCBUNDLE_PYVER}/$(basename "$hvd_wheel")"; fi
find "${HPCBUNDLE_SITE}/horovod" -name '*.so' -exec strip --strip-debug {} +
report="$(mktemp)"
horovodrun --check-build | tee "$report"
built="$(awk '/^Available /{section = substr($0, 11)} /\[X\]/{print section, $2}' "$report")"
rm -f "$report"
for want in 'Frameworks: TensorFlow' 'Frameworks: PyTorch' 'Controllers: MPI' 'Controllers: Gloo' 'Tensor Operations: MPI' 'Tensor Operations: Gloo'; do printf '%s\n' "$built" | grep -qxF "$want" || { echo "horovodrun --check-build: $want is not built" >&2; exit 1; }; done
python -c 'import horovod.tensorflow, horovod.torch'
rm -rf "${HPCBUNDLE_BUILD}"

printf '\n==> [%d/%d] %s\n' 4 4 'the environment to run it, and the recipe for doctor'
# shellcheck disable=SC2016  # ${PATH} and ${LD_LIBRARY_PATH} are for the shell that sources the file
{
    echo "# Written by install.sh (hpcbundle recipe cpu-local): source it to run Horovod from this venv."
    printf 'export PATH="%s"\n' "${HPCBUNDLE_VENV}"'/bin:${PATH}'
} > "$HPCBUNDLE_VENV/hpcbundle-env.sh"
# The recipe, where `hpcbundle doctor --image VENV` reads an image's (driver vs CUDA, GPU archs, MPI).
mkdir -p "$HPCBUNDLE_VENV"/etc/hpcbundle
printf '%s\n' '{"hpcbundle_version": "0.1.0", "recipe": {"name": "cpu-local", "description": "Debian 12, Open MPI 4.1.4 (distro), PyTorch 2.13 CPU + TensorFlow CPU 2.15.1, Horovod 0.28.1 (C++17 patch)", "base": {"os": "debian12", "build_image": "debian:bookworm", "runtime_image": "debian:bookworm"}, "python": "3.11", "gpu": null, "mpi": {"flavour": "openmpi", "version": "4.1.4", "install": "distro", "source": null, "configure": []}, "ucx": null, "fabric_libs": [], "frameworks": {"tensorflow": {"version": "2.15.1", "package": "tensorflow-cpu"}, "pytorch": {"version": "2.13.0", "variant": "cpu", "torchvision": false, "torchaudio": null}}, "horovod": {"version": "0.28.1", "sdist_sha256": "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0", "patches": ["cxx17"], "controllers": ["mpi", "gloo"], "tensor_operations": ["mpi", "gloo"], "build_env": {}}}, "layout": {"venv": "/opt/venv", "mpi_prefix": null, "ucx_prefix": null, "examples": "/examples"}, "labels": {"org.hpcbundle.recipe": "cpu-local", "org.hpcbundle.hpcbundle-version": "0.1.0", "org.hpcbundle.os": "debian12", "org.hpcbundle.python": "3.11", "org.hpcbundle.mpi.flavour": "openmpi", "org.hpcbundle.mpi.version": "4.1.4", "org.hpcbundle.mpi.install": "distro", "org.hpcbundle.horovod": "0.28.1", "org.hpcbundle.horovod.controllers": "mpi,gloo", "org.hpcbundle.horovod.tensor-operations": "mpi,gloo", "org.hpcbundle.frameworks": "tensorflow,pytorch", "org.hpcbundle.manifest": "/etc/hpcbundle/manifest.json", "org.hpcbundle.mpi.transports": "openib,ucx", "org.hpcbundle.fabric-libs": "psm2,verbs", "org.hpcbundle.ucx.transports": "ib,rdmacm", "org.hpcbundle.tensorflow": "2.15.1", "org.hpcbundle.pytorch": "2.13.0+cpu"}}' > "$HPCBUNDLE_VENV"/etc/hpcbundle/manifest.json
echo "done: source $HPCBUNDLE_VENV/hpcbundle-env.sh, then e.g. mpirun -np 2 python examples/pytorch_train.py"
echo "check the nodes: hpcbundle doctor --site SITE --image $HPCBUNDLE_VENV --hosts NODE1,NODE2"
