#!/usr/bin/env bash
# Rendered by hpcbundle 0.1.0 from recipe cuda13.0-torch2.11-ompi5; do not edit, re-render:
#   hpcbundle render cuda13.0-torch2.11-ompi5 --format shell
# CUDA 13.0 (PyPI wheels), cuDNN 9.19, NCCL 2.28.9, UCX 1.15 + Open MPI 5.0.10, PyTorch 2.11.0, Horovod 0.28.1, T4/A100/L40/H100/B200
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
#   HPCBUNDLE_CUDA_HOME=DIR           a CUDA 13.0 toolkit already on the host (DIR/bin/nvcc, e.g.
#                                     /usr/local/cuda or a `module load cuda`'s): used instead of the
#                                     toolkit wheels (its nvcc must be release 13.0)
#
# The host provides what the images get from their OS packages: a C++ compiler, make,
# the Python headers and venv module, the MPI compiler wrappers (mpicc); on Debian/Ubuntu:
#   apt-get install build-essential bzip2 ca-certificates cmake curl libibverbs-dev libnuma-dev librdmacm-dev python3-dev python3-venv
# and openmpi 5.0.10 (the images build it from source; here the host's is used:
# keep its major.minor the same as the cluster's mpirun).
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
    echo "install.sh: not found: $python (Debian/Ubuntu: apt-get install build-essential bzip2 ca-certificates cmake curl libibverbs-dev libnuma-dev librdmacm-dev python3-dev python3-venv)" >&2
    exit 1
fi
python_version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# A Horovod wheel already in the cache for this Python (e.g. a wheelhouse from `make gpu-wheelhouse` as
# HPCBUNDLE_CACHE): nothing is compiled, so a node without compilers or Python headers installs it.
HPCBUNDLE_PYVER="$python_version"
prebuilt="$(find "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-831780a6a936-py${HPCBUNDLE_PYVER}" -maxdepth 1 -name 'horovod-*.whl' -print -quit 2>/dev/null || true)"
build_tools=(c++ make mpicc)
if [ -n "$prebuilt" ]; then build_tools=(); fi
missing=()
for tool in ${build_tools[@]+"${build_tools[@]}"}; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ -n "${missing[*]}" ]; then
    echo "install.sh: not found: ${missing[*]} (Debian/Ubuntu: apt-get install build-essential bzip2 ca-certificates cmake curl libibverbs-dev libnuma-dev librdmacm-dev python3-dev python3-venv; or a prebuilt Horovod wheel in HPCBUNDLE_CACHE)" >&2
    exit 1
fi
if [ -z "$prebuilt" ]; then
    python_headers="$("$python" -c 'import pathlib, sysconfig; print(pathlib.Path(sysconfig.get_paths()["include"], "Python.h"))')"
    if [ ! -f "$python_headers" ]; then
        echo "install.sh: Python $python_version has no headers ($python_headers): Horovod's build compiles against them (Debian/Ubuntu: apt-get install python3-dev)" >&2
        exit 1
    fi
    gcc_major="$(c++ -dumpversion | cut -d. -f1)"
    if [ "$gcc_major" -gt 15 ]; then
        echo "install.sh: GCC $gcc_major: nvcc 13.0 accepts GCC <= 15 (put an older g++ first on PATH, or use a recipe with a newer CUDA)" >&2
        exit 1
    fi
fi
HPCBUNDLE_CUDA_HOME="${HPCBUNDLE_CUDA_HOME:-}"
if [ -n "$HPCBUNDLE_CUDA_HOME" ]; then
    nvcc_release="$({ "$HPCBUNDLE_CUDA_HOME/bin/nvcc" --version 2>/dev/null || true; } | sed -n 's/^.*release \([0-9]*\.[0-9]*\),.*$/\1/p')"
    if [ "$nvcc_release" != 13.0 ]; then
        echo "install.sh: HPCBUNDLE_CUDA_HOME=$HPCBUNDLE_CUDA_HOME: nvcc release ${nvcc_release:-not found there}, the recipe needs 13.0 (name a CUDA 13.0 toolkit, or unset HPCBUNDLE_CUDA_HOME to install the toolkit wheels)" >&2
        exit 1
    fi
fi

printf '\n==> [%d/%d] %s\n' 1 5 'Python 3.11 venv at '"${HPCBUNDLE_VENV}"' with Horovod'"'"'s build helpers'
if [ ! -x "${HPCBUNDLE_VENV}/bin/python" ]; then "$python" -m venv ${venv_args[@]+"${venv_args[@]}"} "${HPCBUNDLE_VENV}"; fi
HPCBUNDLE_SITE="$("${HPCBUNDLE_VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
HPCBUNDLE_PYVER="$("${HPCBUNDLE_VENV}/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
"${HPCBUNDLE_VENV}/bin/python" -m pip install wheel==0.43.0 packaging==24.0 psutil==5.9.8 PyYAML==6.0.1 cloudpickle==3.0.0 cffi==2.1.1
if [ -z "$prebuilt" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip install cmake==4.4.4; fi

printf '\n==> [%d/%d] %s\n' 2 5 'frameworks and the CUDA 13.0 toolkit wheels'
if [ -f "/etc/pip/constraint.txt" ]; then frozen="/etc/pip/constraint.txt"; else frozen=""; fi
"${HPCBUNDLE_VENV}/bin/python" -m pip install ${frozen:+-c "$frozen"} torch==2.11.0 torchvision==0.26.0
if [ -z "${HPCBUNDLE_CUDA_HOME}" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip install nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96; fi

printf '\n==> [%d/%d] %s\n' 3 5 'a CUDA home and an NCCL home from the NVIDIA wheels for Horovod'"'"'s build'
HPCBUNDLE_NCCL_DIR="$("${HPCBUNDLE_VENV}/bin/python" -c 'import importlib.metadata as m, pathlib; d = m.distribution("nvidia-nccl-cu13"); print(next(pathlib.Path(d.locate_file(f)).resolve().parent.parent for f in d.files if f.name == "libnccl.so.2"))')"
echo "NCCL (torch's wheel): ${HPCBUNDLE_NCCL_DIR}"
mkdir -p "${HPCBUNDLE_BUILD}/nccl/lib"
ln -sfn "${HPCBUNDLE_NCCL_DIR}/include" "${HPCBUNDLE_BUILD}/nccl/include"
ln -sf "${HPCBUNDLE_NCCL_DIR}/lib/libnccl.so.2" "${HPCBUNDLE_BUILD}/nccl/lib/libnccl.so"
if [ -z "${HPCBUNDLE_CUDA_HOME}" ]; then HPCBUNDLE_CUDA_HOME="$("${HPCBUNDLE_VENV}/bin/python" -c 'import importlib.metadata as m, pathlib; d = m.distribution("nvidia-cuda-nvcc"); print(next(pathlib.Path(d.locate_file(f)).resolve().parent.parent for f in d.files if f.name == "nvcc"))')"; fi
if [ ! -f "${HPCBUNDLE_CUDA_HOME}/include/cuda_runtime.h" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip install --no-deps --ignore-installed nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96; fi
echo "CUDA toolkit: ${HPCBUNDLE_CUDA_HOME}"
if [ ! -e "${HPCBUNDLE_CUDA_HOME}/lib64" ]; then ln -s lib "${HPCBUNDLE_CUDA_HOME}/lib64"; fi
if [ ! -e "${HPCBUNDLE_CUDA_HOME}/lib64/libcudart.so" ]; then ln -s libcudart.so.13 "${HPCBUNDLE_CUDA_HOME}/lib64/libcudart.so"; fi

printf '\n==> [%d/%d] %s\n' 4 5 'Horovod 0.28.1 (the cached wheel for these versions, or built from its sdist), then horovodrun --check-build'
mkdir -p "${HPCBUNDLE_BUILD}" "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-831780a6a936-py${HPCBUNDLE_PYVER}"
hvd_wheel="$(find "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-831780a6a936-py${HPCBUNDLE_PYVER}" -maxdepth 1 -name 'horovod-*.whl' -print -quit)"
if [ -n "$hvd_wheel" ]; then echo "Horovod: the cached wheel $hvd_wheel (no build)"; fi
if [ -z "$hvd_wheel" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip download --no-deps --no-binary horovod --no-build-isolation --dest "${HPCBUNDLE_BUILD}" horovod==0.28.1; fi
if [ -z "$hvd_wheel" ]; then echo "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0  ${HPCBUNDLE_BUILD}/horovod-0.28.1.tar.gz" | sha256sum -c -; fi
if [ -z "$hvd_wheel" ]; then tar -xzf "${HPCBUNDLE_BUILD}/horovod-0.28.1.tar.gz" -C "${HPCBUNDLE_BUILD}"; fi
if [ -z "$hvd_wheel" ]; then for f in CMakeLists.txt horovod/torch/CMakeLists.txt; do grep -q 'CMAKE_CXX_STANDARD 14' "${HPCBUNDLE_BUILD}/horovod-0.28.1/$f" || { echo "cxx17 patch: no CMAKE_CXX_STANDARD 14 in $f" >&2; exit 1; }; sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "${HPCBUNDLE_BUILD}/horovod-0.28.1/$f"; done; fi
if [ -z "$hvd_wheel" ]; then for f in horovod/common/common.h horovod/common/group_table.h horovod/torch/handle_manager.cc; do test -f "${HPCBUNDLE_BUILD}/horovod-0.28.1/$f" || { echo "gcc13 patch: $f is missing" >&2; exit 1; }; sed -i -e '1i #include <stdexcept>' -e '1i #include <string>' "${HPCBUNDLE_BUILD}/horovod-0.28.1/$f"; done; fi
if [ -z "$hvd_wheel" ] && ! { grep -q 'from distutils.sysconfig import get_python_inc; print(get_python_inc())' "${HPCBUNDLE_BUILD}/horovod-0.28.1/horovod/torch/CMakeLists.txt" && grep -qx 'from distutils.spawn import find_executable' "${HPCBUNDLE_BUILD}/horovod-0.28.1/horovod/runner/js_run.py"; }; then echo "py312 patch: the distutils imports are not where Horovod 0.28.1 had them" >&2; exit 1; fi
if [ -z "$hvd_wheel" ]; then sed -i "s/from distutils.sysconfig import get_python_inc; print(get_python_inc())/import sysconfig; print(sysconfig.get_paths()['include'])/" "${HPCBUNDLE_BUILD}/horovod-0.28.1/horovod/torch/CMakeLists.txt"; sed -i 's/^from distutils.spawn import find_executable$/from shutil import which as find_executable/' "${HPCBUNDLE_BUILD}/horovod-0.28.1/horovod/runner/js_run.py"; fi
export PATH="${HPCBUNDLE_VENV}/bin:${HPCBUNDLE_CUDA_HOME}/bin:${PATH}"
export LD_LIBRARY_PATH="${HPCBUNDLE_NCCL_DIR}/lib:${HPCBUNDLE_CUDA_HOME}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
export HOROVOD_WITHOUT_TENSORFLOW="1"
export HOROVOD_WITH_PYTORCH="1"
export HOROVOD_WITHOUT_MXNET="1"
export HOROVOD_WITH_MPI="1"
export HOROVOD_WITH_GLOO="1"
export HOROVOD_GPU_OPERATIONS="NCCL"
export HOROVOD_NCCL_LINK="SHARED"
export HOROVOD_CUDA_HOME="${HPCBUNDLE_CUDA_HOME}"
export HOROVOD_NCCL_HOME="${HPCBUNDLE_BUILD}/nccl"
export HOROVOD_BUILD_CUDA_CC_LIST="75,80,86,90,100,120"
export TORCH_CUDA_ARCH_LIST="7.5;8.0;8.6;9.0;10.0;12.0"
export CMAKE_POLICY_VERSION_MINIMUM="3.5"
if [ -z "$hvd_wheel" ]; then echo "Horovod: building 0.28.1 (several minutes; compiler lines follow)"; fi
if [ -z "$hvd_wheel" ]; then "${HPCBUNDLE_VENV}/bin/python" -m pip wheel --no-deps --no-build-isolation --verbose --wheel-dir "${HPCBUNDLE_BUILD}/dist" "${HPCBUNDLE_BUILD}/horovod-0.28.1"; fi
if [ -z "$hvd_wheel" ]; then hvd_wheel="$(find "${HPCBUNDLE_BUILD}/dist" -name 'horovod-*.whl' -print -quit)"; fi
"${HPCBUNDLE_VENV}/bin/python" -m pip install --no-deps --force-reinstall "$hvd_wheel"
if [ "$(dirname "$hvd_wheel")" != "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-831780a6a936-py${HPCBUNDLE_PYVER}" ]; then cp "$hvd_wheel" "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-831780a6a936-py${HPCBUNDLE_PYVER}/.partial"; mv "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-831780a6a936-py${HPCBUNDLE_PYVER}/.partial" "${HPCBUNDLE_CACHE}/horovod/horovod-0.28.1-831780a6a936-py${HPCBUNDLE_PYVER}/$(basename "$hvd_wheel")"; fi
find "${HPCBUNDLE_SITE}/horovod" -name '*.so' -exec strip --strip-debug {} +
report="$(mktemp)"
horovodrun --check-build | tee "$report"
built="$(awk '/^Available /{section = substr($0, 11)} /\[X\]/{print section, $2}' "$report")"
rm -f "$report"
for want in 'Frameworks: PyTorch' 'Controllers: MPI' 'Controllers: Gloo' 'Tensor Operations: NCCL' 'Tensor Operations: MPI' 'Tensor Operations: Gloo'; do printf '%s\n' "$built" | grep -qxF "$want" || { echo "horovodrun --check-build: $want is not built" >&2; exit 1; }; done
python -c 'import horovod.torch'
rm -rf "${HPCBUNDLE_BUILD}"

printf '\n==> [%d/%d] %s\n' 5 5 'the environment to run it, and the recipe for doctor'
# shellcheck disable=SC2016  # ${PATH} and ${LD_LIBRARY_PATH} are for the shell that sources the file
{
    echo "# Written by install.sh (hpcbundle recipe cuda13.0-torch2.11-ompi5): source it to run Horovod from this venv."
    printf 'export PATH="%s"\n' "${HPCBUNDLE_VENV}"'/bin:${PATH}'
    printf 'export LD_LIBRARY_PATH="%s"\n' "${HPCBUNDLE_NCCL_DIR}"/lib:"${HPCBUNDLE_CUDA_HOME}"'/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}'
} > "$HPCBUNDLE_VENV/hpcbundle-env.sh"
# The recipe, where `hpcbundle doctor --image VENV` reads an image's (driver vs CUDA, GPU archs, MPI).
mkdir -p "$HPCBUNDLE_VENV"/etc/hpcbundle
printf '%s\n' '{"hpcbundle_version": "0.1.0", "recipe": {"name": "cuda13.0-torch2.11-ompi5", "description": "CUDA 13.0 (PyPI wheels), cuDNN 9.19, NCCL 2.28.9, UCX 1.15 + Open MPI 5.0.10, PyTorch 2.11.0, Horovod 0.28.1, T4/A100/L40/H100/B200", "base": {"os": "debian12", "build_image": "debian:bookworm", "runtime_image": "debian:bookworm"}, "python": "3.11", "gpu": {"source": "wheels", "cuda": "13.0", "cudnn": "9.19", "nccl": "2.28.9", "archs": ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]}, "mpi": {"flavour": "openmpi", "version": "5.0.10", "install": "source", "source": {"url": "https://download.open-mpi.org/release/open-mpi/v5.0/openmpi-5.0.10.tar.bz2", "sha256": "0acecc4fc218e5debdbcb8a41d182c6b0f1d29393015ed763b2a91d5d7374cc6"}, "configure": []}, "ucx": {"version": "1.15.0", "source": {"url": "https://github.com/openucx/ucx/releases/download/v1.15.0/ucx-1.15.0.tar.gz", "sha256": "4b202087076bc1c98f9249144f0c277a8ea88ad4ca6f404f94baa9cb3aebda6d"}, "configure": ["--with-verbs", "--with-rdmacm", "--enable-mt"]}, "fabric_libs": ["verbs"], "frameworks": {"tensorflow": null, "pytorch": {"version": "2.11.0", "variant": "cu130", "torchvision": null, "torchaudio": null}}, "horovod": {"version": "0.28.1", "sdist_sha256": "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0", "patches": ["cxx17", "gcc13", "py312"], "controllers": ["mpi", "gloo"], "tensor_operations": ["nccl", "mpi", "gloo"], "build_env": {}}}, "layout": {"venv": "/opt/venv", "mpi_prefix": "/opt/openmpi", "ucx_prefix": "/opt/ucx", "examples": "/examples"}, "labels": {"org.hpcbundle.recipe": "cuda13.0-torch2.11-ompi5", "org.hpcbundle.hpcbundle-version": "0.1.0", "org.hpcbundle.os": "debian12", "org.hpcbundle.python": "3.11", "org.hpcbundle.mpi.flavour": "openmpi", "org.hpcbundle.mpi.version": "5.0.10", "org.hpcbundle.mpi.install": "source", "org.hpcbundle.horovod": "0.28.1", "org.hpcbundle.horovod.controllers": "mpi,gloo", "org.hpcbundle.horovod.tensor-operations": "nccl,mpi,gloo", "org.hpcbundle.frameworks": "pytorch", "org.hpcbundle.manifest": "/etc/hpcbundle/manifest.json", "org.hpcbundle.cuda": "13.0", "org.hpcbundle.cuda.source": "wheels", "org.hpcbundle.cudnn": "9.19", "org.hpcbundle.nccl": "2.28.9", "org.hpcbundle.gpu-archs": "7.5,8.0,8.6,9.0,10.0,12.0", "org.hpcbundle.nvidia.visible-devices": "all", "org.hpcbundle.nvidia.driver-capabilities": "compute,utility", "org.hpcbundle.ucx": "1.15.0", "org.hpcbundle.mpi.transports": "ucx", "org.hpcbundle.fabric-libs": "verbs", "org.hpcbundle.ucx.transports": "ib,rdmacm", "org.hpcbundle.pytorch": "2.11.0+cu130"}}' > "$HPCBUNDLE_VENV"/etc/hpcbundle/manifest.json
echo "done: source $HPCBUNDLE_VENV/hpcbundle-env.sh, then e.g. mpirun -np 2 python examples/pytorch_train.py"
echo "check the nodes: hpcbundle doctor --site SITE --image $HPCBUNDLE_VENV --hosts NODE1,NODE2"
