#!/usr/bin/env bash
# Build (once) and install a CPU Horovod wheel with PyTorch, TensorFlow, MPI and Gloo into the
# virtualenv VENV, then check it with `horovodrun --check-build`. The Horovod version, its sdist's
# sha256 and its patch come from recipes/cpu-local.yaml (scripts/setup/pins.py), as for the image.
#
# Horovod 0.28.1 (the last release) compiles against torch >= 2.x only as C++17, but its sdist
# sets CMAKE_CXX_STANDARD 14 in BOTH CMakeLists.txt and horovod/torch/CMakeLists.txt. Patching
# only the torch one fails at link time (gloo built as C++14:
# "multiple definition of gloo::rendezvous::Store::kDefaultTimeout"), so both become 17.
#
# The wheel is cached under ${HPCBUNDLE_CACHE:-$HOME/.cache/hpcbundle}/horovod/<key>/ where
#   <key> = horovod<V>-torch<V>-tf<V>-ompi<V>-py<M.m>-cxx17.<hash8>
# and hash8 covers the sdist sha256, the patch and the build flags. A warm cache installs in
# seconds; a cold one builds (~7 min on 2 cores). The build runs in a temp dir inside the cache
# and is renamed into place only when complete, so an interrupted build leaves no half wheel.
#
# Usage: scripts/setup/horovod-wheel.sh [VENV]      (VENV defaults to <repo>/.venv and must
#        already hold torch and tensorflow: run scripts/setup/python-env.sh first)
# Env:   HPCBUNDLE_CACHE   cache root (default $HOME/.cache/hpcbundle)
#        MAKEFLAGS         passed to the build (default -j<number of CPUs>)
set -euo pipefail

PATCH_FILES=(CMakeLists.txt horovod/torch/CMakeLists.txt)
PATCH_FROM='set(CMAKE_CXX_STANDARD 14)'
PATCH_TO='set(CMAKE_CXX_STANDARD 17)'
PATCH_ID=cxx17
BUILD_FLAGS=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1
             HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1)

log() { printf 'horovod-wheel: %s\n' "$*"; }
die() { printf 'horovod-wheel: error: %s\n' "$*" >&2; exit 1; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/../.." && pwd)
VENV=${1:-$repo_root/.venv}
[[ -x $VENV/bin/python ]] || die "no virtualenv at $VENV (run scripts/setup/python-env.sh first)"
VENV=$(cd "$VENV" && pwd)
PY=$VENV/bin/python

# HOROVOD_VERSION, HOROVOD_SDIST_SHA256 (of the sdist as published on PyPI), HOROVOD_PATCHES, ...
pins=$("$PY" "$script_dir/pins.py") || die "cannot read the pins from recipes/cpu-local.yaml (see above)"
eval "$pins"
[[ $HOROVOD_PATCHES == "$PATCH_ID" ]] \
    || die "recipes/cpu-local.yaml asks for Horovod patches '$HOROVOD_PATCHES'; this script applies '$PATCH_ID' only"
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-3}

# ---- versions that make up the cache key ------------------------------------------------
dist_version() {  # first installed distribution among the names given, or nothing
    "$PY" - "$@" <<'EOF'
import sys
from importlib import metadata
for name in sys.argv[1:]:
    try:
        print(metadata.version(name))
        break
    except metadata.PackageNotFoundError:
        pass
EOF
}
torch_v=$(dist_version torch)
[[ -n $torch_v ]] || die "torch is not installed in $VENV (run scripts/setup/python-env.sh first)"
tf_v=$(dist_version tensorflow-cpu tensorflow tensorflow-intel)
[[ -n $tf_v ]] || die "tensorflow is not installed in $VENV (run scripts/setup/python-env.sh first)"
py_v=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
command -v mpirun >/dev/null 2>&1 || die "mpirun not found (run scripts/setup/host-packages.sh first)"
mpi_line=$(mpirun --version 2>&1 | head -n 1)
[[ $mpi_line =~ Open\ MPI\)?\ ([0-9][0-9.]*) ]] || die "mpirun is not Open MPI ('$mpi_line'); install openmpi-bin libopenmpi-dev"
ompi_v=${BASH_REMATCH[1]}
command -v cmake >/dev/null 2>&1 || die "cmake not found (run scripts/setup/host-packages.sh first)"

recipe_hash=$(printf '%s\n' "$HOROVOD_SDIST_SHA256" "${PATCH_FILES[*]}" "$PATCH_FROM" "$PATCH_TO" \
    "${BUILD_FLAGS[*]}" "$(uname -m)" | sha256sum | cut -c1-8)
key="horovod${HOROVOD_VERSION}-torch${torch_v}-tf${tf_v}-ompi${ompi_v}-py${py_v}-${PATCH_ID}.${recipe_hash}"
cache_root=${HPCBUNDLE_CACHE:-$HOME/.cache/hpcbundle}/horovod
entry=$cache_root/$key
installed_stamp=$VENV/.hpcbundle-horovod-key

cached_wheel() { compgen -G "$entry/horovod-${HOROVOD_VERSION}-*.whl" | head -n 1 || true; }

# ---- build into the cache (cold path) ----------------------------------------------------
build_wheel() {
    local tmp src logf start rc=0
    tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
    # shellcheck disable=SC2064  # expand $tmp now: it is local
    trap "rm -rf '$tmp'" EXIT
    trap 'exit 130' INT TERM  # so the EXIT trap also cleans up when interrupted
    logf=$tmp/build.log
    start=$SECONDS

    log "downloading horovod==$HOROVOD_VERSION sdist"
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$tmp/sdist" \
        || die "pip download horovod==$HOROVOD_VERSION failed"
    local sdist=$tmp/sdist/horovod-$HOROVOD_VERSION.tar.gz
    [[ -f $sdist ]] || die "pip download did not produce $(basename "$sdist")"
    echo "$HOROVOD_SDIST_SHA256  $sdist" | sha256sum --check --status \
        || die "sha256 mismatch for $(basename "$sdist"): got $(sha256sum "$sdist" | cut -d' ' -f1), want $HOROVOD_SDIST_SHA256"

    tar -xzf "$sdist" -C "$tmp" || die "cannot unpack $(basename "$sdist")"
    src=$tmp/horovod-$HOROVOD_VERSION
    local f
    for f in "${PATCH_FILES[@]}"; do
        grep -qF "$PATCH_FROM" "$src/$f" || die "C++17 patch: '$PATCH_FROM' not found in $f (sdist changed?)"
        sed -i "s/$PATCH_FROM/$PATCH_TO/" "$src/$f"  # no BRE metacharacters in either
        grep -qF "$PATCH_FROM" "$src/$f" && die "C++17 patch: '$PATCH_FROM' still present in $f"
        grep -qF "$PATCH_TO" "$src/$f" || die "C++17 patch: '$PATCH_TO' missing in $f after patching"
        log "patched $f: CMAKE_CXX_STANDARD 14 -> 17"
    done

    local cmake_v
    cmake_v=$(cmake --version | head -n 1 | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n 1)
    if [[ ${cmake_v%%.*} -ge 4 ]]; then
        export CMAKE_POLICY_VERSION_MINIMUM=3.5
        log "cmake $cmake_v (>= 4): exporting CMAKE_POLICY_VERSION_MINIMUM=3.5"
    fi
    export MAKEFLAGS=${MAKEFLAGS:--j$(nproc)}
    export "${BUILD_FLAGS[@]}"

    log "building $key (MAKEFLAGS=$MAKEFLAGS; ~7 min on 2 cores; full log: $logf)"
    # pip -v streams cmake/make output (indented by pip); keep all of it in the log and show
    # configure/link/target lines, plus make's latest progress line every 30 s.
    "$PY" -m pip wheel -v --no-deps --no-build-isolation -w "$tmp/dist" "$src" 2>&1 \
        | {
            last=$SECONDS
            while IFS= read -r line; do
                printf '%s\n' "$line" >>"$logf"
                line=${line#"${line%%[![:space:]]*}"}
                if [[ $line =~ ^\[\ *[0-9]+%\]\ (Built\ target|Linking) \
                      || $line == "-- Configuring done"* || $line == "-- Generating done"* ]] \
                   || { [[ $line =~ ^\[\ *[0-9]+%\] ]] && ((SECONDS - last >= 30)); }; then
                    printf '  [%4ds] %s\n' "$((SECONDS - start))" "${line:0:110}"
                    last=$SECONDS
                fi
            done
        } || rc=$?
    if ((rc != 0)); then
        mkdir -p "$cache_root"
        cp "$logf" "$cache_root/last-failed-build.log" 2>/dev/null || true
        tail -n 30 "$logf" >&2 || true
        die "building horovod failed (exit $rc); full log: $cache_root/last-failed-build.log"
    fi

    local whl
    whl=$(compgen -G "$tmp/dist/horovod-${HOROVOD_VERSION}-*.whl" | head -n 1) \
        || die "pip wheel finished but produced no horovod wheel"
    mkdir "$tmp/entry"
    mv "$whl" "$tmp/entry/"
    gzip -c "$logf" >"$tmp/entry/build.log.gz"
    {
        echo "key=$key"
        echo "sdist_sha256=$HOROVOD_SDIST_SHA256"
        echo "patch=${PATCH_FILES[*]}: $PATCH_FROM -> $PATCH_TO"
        echo "flags=${BUILD_FLAGS[*]}"
        echo "cmake=$cmake_v"
        echo "cxx=$(c++ --version | head -n 1)"
        echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start))s"
    } >"$tmp/entry/BUILD-INFO"
    mv -T "$tmp/entry" "$entry" || die "cannot move the wheel into $entry"
    log "built and cached in $((SECONDS - start))s: $entry"
    rm -rf "$tmp"
    trap - EXIT INT TERM
}

mkdir -p "$cache_root" || die "cannot create cache dir $cache_root"
if [[ -z $(cached_wheel) ]]; then
    # One builder per key: a second concurrent run waits, then finds the wheel.
    exec 9>"$cache_root/$key.lock"
    if ! flock -n 9; then
        log "another build of $key is running; waiting for it"
        flock 9
    fi
    if [[ -z $(cached_wheel) ]]; then
        build_wheel
    fi
    flock -u 9
    exec 9>&-
else
    log "cache hit: $entry"
fi
wheel=$(cached_wheel)
[[ -n $wheel ]] || die "no wheel in $entry after build"

# ---- install into VENV and verify -------------------------------------------------------
# `horovodrun --check-build` loads every extension (15-30 s), so it runs after an install; the
# venv's stamp is written only when it passed.
if [[ -f $installed_stamp && $(<"$installed_stamp") == "$key" ]] \
    && "$PY" -m pip show --quiet horovod >/dev/null 2>&1; then
    log "horovod $key already installed and checked in $VENV"
    exit 0
fi
log "installing $(basename "$wheel") into $VENV"
rm -f "$installed_stamp"
"$PY" -m pip uninstall --quiet --yes horovod >/dev/null 2>&1 || true
"$PY" -m pip install --quiet "$wheel" || die "pip install of $(basename "$wheel") failed"

log "verifying with horovodrun --check-build"
check=$(horovodrun --check-build 2>&1) || die "horovodrun --check-build failed: $(tail -n 1 <<<"$check")"
missing=()
for want in TensorFlow PyTorch MPI Gloo; do
    grep -qE "^[[:space:]]*\[X\] ${want}[[:space:]]*\$" <<<"$check" || missing+=("$want")
done
if ((${#missing[@]})); then
    printf '%s\n' "$check" >&2
    die "horovod in $VENV lacks: ${missing[*]} (delete $entry to rebuild)"
fi
printf '%s\n' "$key" >"$installed_stamp"
log "horovodrun --check-build: TensorFlow PyTorch MPI Gloo all [X]"
