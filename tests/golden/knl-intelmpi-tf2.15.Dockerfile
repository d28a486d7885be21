# Rendered by hpcbundle 0.1.0 from recipe knl-intelmpi-tf2.15; do not edit, re-render:
#   hpcbundle render knl-intelmpi-tf2.15 --format docker
# Ubuntu 22.04, Intel MPI 2021.13 (MPICH ABI), TensorFlow CPU 2.15.1 (Keras 2), Horovod 0.28.1, for KNL
#
# Build context: a directory with examples/ and wheelhouse/ (maybe empty; wheels, the Horovod sdist
# and source tarballs found there are used before the network; a Horovod wheel built for exactly
# these versions in wheelhouse/horovod/horovod-0.28.1-a1bb312c604d/ is installed instead of
# building one). Build arguments:
#   BUILD_IMAGE / RUNTIME_IMAGE  another (e.g. locally imported) base image of the same OS
#   PIP_NO_INDEX=1               fully offline: pip installs only from wheelhouse/
#   PIP_EXTRA_INDEX_URL=URL      a wheel index for framework builds that are not on PyPI
ARG BUILD_IMAGE=ubuntu:22.04
ARG RUNTIME_IMAGE=ubuntu:22.04

# ---- build: compilers, frameworks, Horovod ----
FROM ${BUILD_IMAGE} AS build
ARG PIP_NO_INDEX=0
ARG PIP_EXTRA_INDEX_URL=
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
COPY wheelhouse/ /wheelhouse/

# OS packages for building
RUN apt-get update && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends build-essential cmake python3-dev python3-venv && \
    apt-get clean && \
    rm -rf /var/lib/apt/lists/*

# Python 3.10 venv at /opt/venv with Horovod's build helpers
RUN python3 -m venv /opt/venv && \
    /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse wheel==0.43.0 packaging==24.0 psutil==5.9.8 PyYAML==6.0.1 cloudpickle==3.0.0 cffi==2.1.1

# Intel MPI wheels into the venv
RUN /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse impi-devel==2021.13.1 impi-rt==2021.13.1

# frameworks
RUN if [ -f "/etc/pip/constraint.txt" ]; then frozen="/etc/pip/constraint.txt"; else frozen=""; fi && \
    /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse ${frozen:+-c "$frozen"} tensorflow-cpu==2.15.1

# Horovod 0.28.1 (the cached wheel for these versions, or built from its sdist), then horovodrun --check-build
RUN mkdir -p "/tmp/build" "/wheelhouse/horovod/horovod-0.28.1-a1bb312c604d" && \
    hvd_wheel="$(find "/wheelhouse/horovod/horovod-0.28.1-a1bb312c604d" -maxdepth 1 -name 'horovod-*.whl' -print -quit)" && \
    if [ -n "$hvd_wheel" ]; then echo "Horovod: the cached wheel $hvd_wheel (no build)"; fi && \
    if [ -z "$hvd_wheel" ]; then /opt/venv/bin/python -m pip download --no-cache-dir --find-links /wheelhouse --no-deps --no-binary horovod --no-build-isolation --dest "/tmp/build" horovod==0.28.1; fi && \
    if [ -z "$hvd_wheel" ]; then echo "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0  /tmp/build/horovod-0.28.1.tar.gz" | sha256sum -c -; fi && \
    if [ -z "$hvd_wheel" ]; then tar -xzf "/tmp/build/horovod-0.28.1.tar.gz" -C "/tmp/build"; fi && \
    export PATH="/opt/venv/bin:${PATH}" && \
    export LD_LIBRARY_PATH="/opt/venv/lib:/opt/venv/lib/libfabric${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" && \
    export I_MPI_ROOT="/opt/venv" && \
    export FI_PROVIDER_PATH="/opt/venv/lib/libfabric/prov" && \
    export HOROVOD_WITH_TENSORFLOW="1" && \
    export HOROVOD_WITHOUT_PYTORCH="1" && \
    export HOROVOD_WITHOUT_MXNET="1" && \
    export HOROVOD_WITH_MPI="1" && \
    export HOROVOD_WITH_GLOO="1" && \
    export CMAKE_POLICY_VERSION_MINIMUM="3.5" && \
    if [ -z "$hvd_wheel" ]; then echo "Horovod: building 0.28.1 (several minutes; compiler lines follow)"; fi && \
    if [ -z "$hvd_wheel" ]; then /opt/venv/bin/python -m pip wheel --no-cache-dir --find-links /wheelhouse --no-deps --no-build-isolation --verbose --wheel-dir "/tmp/build/dist" "/tmp/build/horovod-0.28.1"; fi && \
    if [ -z "$hvd_wheel" ]; then hvd_wheel="$(find "/tmp/build/dist" -name 'horovod-*.whl' -print -quit)"; fi && \
    /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse --no-deps --force-reinstall "$hvd_wheel" && \
    if [ "$(dirname "$hvd_wheel")" != "/wheelhouse/horovod/horovod-0.28.1-a1bb312c604d" ]; then cp "$hvd_wheel" "/wheelhouse/horovod/horovod-0.28.1-a1bb312c604d/.partial"; mv "/wheelhouse/horovod/horovod-0.28.1-a1bb312c604d/.partial" "/wheelhouse/horovod/horovod-0.28.1-a1bb312c604d/$(basename "$hvd_wheel")"; fi && \
    find "/opt/venv/lib/python3.10/site-packages/horovod" -name '*.so' -exec strip --strip-debug {} + && \
    report="$(mktemp)" && \
    horovodrun --check-build | tee "$report" && \
    built="$(awk '/^Available /{section = substr($0, 11)} /\[X\]/{print section, $2}' "$report")" && \
    rm -f "$report" && \
    for want in 'Frameworks: TensorFlow' 'Controllers: MPI' 'Controllers: Gloo' 'Tensor Operations: MPI' 'Tensor Operations: Gloo'; do printf '%s\n' "$built" | grep -qxF "$want" || { echo "horovodrun --check-build: $want is not built" >&2; exit 1; }; done && \
    python -c 'import horovod.tensorflow' && \
    rm -rf "/tmp/build"

# ---- slim: the build's results without what only building needs (the runtime copies from here) ----
FROM build AS slim

# drop what only building needs from the venv
RUN rm -rf /opt/venv/lib/python3.10/site-packages/tensorflow/include && \
    du -sh /opt/venv

# ---- runtime: only what runs ----
FROM ${RUNTIME_IMAGE} AS runtime
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]

# OS packages to run
RUN apt-get update && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1 libpsm2-2 openssh-client python3 && \
    apt-get clean && \
    rm -rf /var/lib/apt/lists/*

# hpcbundle-bind, the gpu-numa placement script, at /usr/local/bin/hpcbundle-bind
# hadolint ignore=SC2016
RUN printf '%s\n' '#!/bin/sh' '# hpcbundle-bind MAP PROGRAM [ARG...]: run one rank on the cores and memory of the NUMA node of its GPU.' '#' '# MAP is node.gpu_numa of the site: GPU index -> NUMA node, comma-separated (e.g. 0,0,1,1: GPUs 0-1' '# on node 0, GPUs 2-3 on node 1). The local rank comes from whatever launcher started the rank:' '# OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), MPI_LOCALRANKID or PMI_LOCAL_RANK (hydra), SLURM_LOCALID' '# (SLURM), in that order: mpirun and hydra inside a batch job still inherit SLURM_LOCALID.' '# The GPU of the rank is the one Horovod programs use (device local_rank): entry local_rank of' '# CUDA_VISIBLE_DEVICES when it lists several, the one it names when the launcher chose one, else' '# GPU local_rank. For that GPU on NUMA node N it execs PROGRAM under' '# `numactl --cpunodebind=N --preferred=N` (memory from node N while it has room, then from the' '# others: a full socket slows the rank, where a strict --membind would kill it) or, where numactl is' '# missing (slim images), under `taskset -c` over the CPUs of node N (memory then follows first' '# touch). CUDA_VISIBLE_DEVICES is left as it is, so `torch.cuda.set_device(hvd.local_rank())` still' '# finds the GPU.' '#' '# Images built by hpcbundle carry it at /usr/local/bin/hpcbundle-bind, and launch lines run it there;' '# on a host, `make install-bind` puts it there, and only a site with node.host_bind runs it on the host.' '# Elsewhere (an image built elsewhere: site key container.foreign_image; no image) launch lines run this' '# text inline, `sh -c TEXT hpcbundle-bind MAP PROGRAM...`, its commands joined with "; ": so every' '# line below is one complete command.' '# PROGRAM follows `--`, so one that starts with a dash is never read as an option of numactl or taskset.' '# Exit status 2, one line on stderr: no MAP or PROGRAM, a MAP that is not NUMA node numbers (at most 5 digits' '# each) separated by commas, no local rank, no GPU of the map for the rank, neither numactl nor taskset, or' '# (for taskset) a NUMA node that lists no CPUs here (none such, or memory only).' 'if [ "$#" -lt 2 ]; then echo "usage: hpcbundle-bind MAP PROGRAM [ARG...] (MAP: GPU index -> NUMA node, e.g. 0,0,1,1)" >&2; exit 2; fi' 'map=$1' 'shift' 'case $map in "" | *[!0-9,]* | ,* | *, | *,,* | *[0-9][0-9][0-9][0-9][0-9][0-9]*) echo "hpcbundle-bind: MAP is not NUMA node numbers separated by commas (node.gpu_numa, e.g. 0,0,1,1)" >&2; exit 2 ;; esac' '# nth LIST N: the N-th (from 0) entry of a comma-separated LIST, nothing past its end.' 'nth() { rest=$1, i=0; while [ -n "$rest" ]; do if [ "$i" -eq "$2" ]; then echo "${rest%%,*}"; return; fi; rest=${rest#*,}; i=$((i + 1)); done; }' 'rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${PMI_LOCAL_RANK:-${SLURM_LOCALID:-}}}}' 'case $rank in "" | *[!0-9]* | ??????*) echo "hpcbundle-bind: no local rank from Open MPI, hydra or SLURM (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK, SLURM_LOCALID)" >&2; exit 2 ;; esac' 'case ${CUDA_VISIBLE_DEVICES:-} in *,*) gpu=$(nth "$CUDA_VISIBLE_DEVICES" "$rank") ;; "") gpu=$rank ;; *) gpu=$CUDA_VISIBLE_DEVICES ;; esac' 'case $gpu in "" | *[!0-9]* | ??????*) numa="" ;; *) numa=$(nth "$map" "$gpu") ;; esac' 'if [ -z "$numa" ]; then echo "hpcbundle-bind: local rank $rank has no GPU in the map (node.gpu_numa: $map; CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES:-unset})" >&2; exit 2; fi' 'if command -v numactl >/dev/null 2>&1; then exec numactl --cpunodebind="$numa" --preferred="$numa" -- "$@"; fi' 'if ! command -v taskset >/dev/null 2>&1; then echo "hpcbundle-bind: neither numactl nor taskset is installed (install numactl where the rank runs)" >&2; exit 2; fi' 'cpus=$(cat "/sys/devices/system/node/node$numa/cpulist" 2>/dev/null)' 'if [ -z "$cpus" ]; then echo "hpcbundle-bind: NUMA node $numa of GPU $gpu lists no CPUs in /sys/devices/system/node (node.gpu_numa: $map; hpcbundle site detect drafts it)" >&2; exit 2; fi' 'exec taskset -c -- "$cpus" "$@"' > /usr/local/bin/hpcbundle-bind && \
    chmod 0755 /usr/local/bin/hpcbundle-bind

# hpcbundle-torchenv, the torch ranks' shim, at /usr/local/bin/hpcbundle-torchenv
# hadolint ignore=SC2016
RUN printf '%s\n' '#!/bin/sh' '# hpcbundle-torchenv SOURCE PROGRAM [ARG...]: run PROGRAM as a torch.distributed rank (hpcbundle --torch):' '#   RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from the launcher SOURCE'"'"'s own variables (ompi: Open MPI'"'"'s' '#   OMPI_COMM_WORLD_*, slurm: srun'"'"'s SLURM_*, hydra: PMI_*/MPI_LOCAL*), overwriting stale ones, then exec PROGRAM.' '# hpcbundle-torchenv agent IFACE CONF PYTHON -m MODULE [ARG...]: run a torchrun agent (hpcbundle --torchrun): the' '#   outer launcher'"'"'s rank variables unset; unless IFACE is -, torchrun'"'"'s rendezvous options as its PET_* defaults:' '#   this node'"'"'s IPv4 address on IFACE as --local-addr (read by PYTHON, no ip tool needed), MASTER_ADDR:MASTER_PORT' '#   as the c10d endpoint, HPCBUNDLE_RUN_ID as its id, is_host=1 only where that address is MASTER_ADDR, and CONF' '#   (a MASTER_ADDR that is a host name, in a printed line, gets no is_host: torch matches it to this node'"'"'s names).' '#   The agent (PYTHON running MODULE, torch.distributed.run) passes USR1, SLURM'"'"'s time-limit warning, to each worker' '#   it started and goes on waiting for them, so it ends as they do: torchrun'"'"'s own --signals-to-handle would end it' '#   with exit 1 whatever they did, and kill them 30 s later.' '# Written by hpcbundle (knowledge/torchenv.py); a bad or missing variable is one line on stderr, exit 2.' 'set -eu' 'fail() { echo "hpcbundle-torchenv: $*" >&2; exit 2; }' '[ "$#" -ge 2 ] || fail "usage: hpcbundle-torchenv ompi|slurm|hydra PROGRAM [ARGS...], or agent IFACE CONF PYTHON ..."' 'source=$1' 'shift' 'case $source in' 'agent)' '    [ "$#" -ge 5 ] && [ "$4" = -m ] || fail "agent: expected IFACE CONF PYTHON -m MODULE [ARGS...] (a torchrun agent)"' '    iface=$1 conf=$2' '    shift 2' '    unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK' '    unset SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_NTASKS SLURM_NPROCS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE SLURM_STEP_NUM_TASKS SLURM_STEP_TASKS_PER_NODE SLURM_GTIDS' '    unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_NODE_RANK' '    unset PMIX_RANK PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS' '    if [ "$iface" != - ]; then' '        [ -n "${MASTER_ADDR-}" ] && [ -n "${MASTER_PORT-}" ] && [ -n "${HPCBUNDLE_RUN_ID-}" ] ||' '            fail "MASTER_ADDR, MASTER_PORT and HPCBUNDLE_RUN_ID must be set for a torchrun agent"' '        address=$("$1" -c '"'"'import fcntl, socket, struct, sys' 's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' 'try:' '    asked = struct.pack("256s", sys.argv[1][:15].encode())' '    print(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, asked)[20:24]))' 'except OSError:' '    sys.exit(1)' ''"'"' "$iface") || fail "$(uname -n) has no IPv4 address on $iface"' '        case $MASTER_ADDR in' '        *[!0-9.]*) PET_RDZV_CONF=$conf ;;' '        "$address") PET_RDZV_CONF=is_host=1${conf:+,$conf} ;;' '        *) PET_RDZV_CONF=is_host=0${conf:+,$conf} ;;' '        esac' '        PET_LOCAL_ADDR=$address PET_RDZV_ENDPOINT=$MASTER_ADDR:$MASTER_PORT PET_RDZV_ID=$HPCBUNDLE_RUN_ID' '        export PET_LOCAL_ADDR PET_RDZV_ENDPOINT PET_RDZV_ID PET_RDZV_CONF' '    fi' '    python=$1' '    shift 2' '    exec "$python" -c '"'"'import os, runpy, signal, sys' '' '' 'def forward(signum, frame):' '    for pid in [int(name) for name in os.listdir("/proc") if name.isdigit()]:' '        try:' '            with open(f"/proc/{pid}/stat") as stat:' '                parent = int(stat.read().rpartition(")")[2].split()[1])' '            if parent == os.getpid():' '                (os.killpg if os.getpgid(pid) == pid else os.kill)(pid, signum)' '        except (OSError, ValueError, IndexError):' '            pass' '' '' 'signal.signal(signal.SIGUSR1, forward)' 'runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)' ''"'"' "$@" ;;' 'ompi)' '    rank=${OMPI_COMM_WORLD_RANK-} size=${OMPI_COMM_WORLD_SIZE-}' '    local_rank=${OMPI_COMM_WORLD_LOCAL_RANK-} local_size=${OMPI_COMM_WORLD_LOCAL_SIZE-}' '    names=OMPI_COMM_WORLD_RANK,OMPI_COMM_WORLD_SIZE,OMPI_COMM_WORLD_LOCAL_RANK,OMPI_COMM_WORLD_LOCAL_SIZE ;;' 'slurm)' '    rank=${SLURM_PROCID-} size=${SLURM_NTASKS-} local_rank=${SLURM_LOCALID-}' '    local_size=${SLURM_NTASKS_PER_NODE-${SLURM_TASKS_PER_NODE-}}' '    local_size=${local_size%%[!0-9]*}' '    names=SLURM_PROCID,SLURM_NTASKS,SLURM_LOCALID,SLURM_NTASKS_PER_NODE ;;' 'hydra)' '    rank=${PMI_RANK-} size=${PMI_SIZE-} local_rank=${MPI_LOCALRANKID-} local_size=${MPI_LOCALNRANKS-}' '    names=PMI_RANK,PMI_SIZE,MPI_LOCALRANKID,MPI_LOCALNRANKS ;;' '*)' '    fail "unknown launcher '"'"'$source'"'"' (ompi, slurm, hydra or agent)" ;;' 'esac' 'for value in "$rank" "$size" "$local_rank" "$local_size"; do' '    case $value in' '    '"'"''"'"' | *[!0-9]*) fail "the launcher did not give this rank $names as numbers (started by $source?)" ;;' '    esac' 'done' 'RANK=$rank WORLD_SIZE=$size LOCAL_RANK=$local_rank LOCAL_WORLD_SIZE=$local_size' 'export RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE' 'exec "$@"' > /usr/local/bin/hpcbundle-torchenv && \
    chmod 0755 /usr/local/bin/hpcbundle-torchenv

# the recipe as JSON at /etc/hpcbundle/manifest.json
RUN mkdir -p "$(dirname /etc/hpcbundle/manifest.json)" && \
    printf '%s\n' '{"hpcbundle_version": "0.1.0", "recipe": {"name": "knl-intelmpi-tf2.15", "description": "Ubuntu 22.04, Intel MPI 2021.13 (MPICH ABI), TensorFlow CPU 2.15.1 (Keras 2), Horovod 0.28.1, for KNL", "base": {"os": "ubuntu22.04", "build_image": "ubuntu:22.04", "runtime_image": "ubuntu:22.04"}, "python": "3.10", "gpu": null, "mpi": {"flavour": "intelmpi", "version": "2021.13.1", "install": "pip", "source": null, "configure": []}, "ucx": null, "fabric_libs": ["psm2"], "frameworks": {"tensorflow": {"version": "2.15.1", "package": "tensorflow-cpu"}, "pytorch": null}, "horovod": {"version": "0.28.1", "sdist_sha256": "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0", "patches": [], "controllers": ["mpi", "gloo"], "tensor_operations": ["mpi", "gloo"], "build_env": {}}}, "layout": {"venv": "/opt/venv", "mpi_prefix": null, "ucx_prefix": null, "examples": "/examples"}, "labels": {"org.hpcbundle.recipe": "knl-intelmpi-tf2.15", "org.hpcbundle.hpcbundle-version": "0.1.0", "org.hpcbundle.os": "ubuntu22.04", "org.hpcbundle.python": "3.10", "org.hpcbundle.mpi.flavour": "intelmpi", "org.hpcbundle.mpi.version": "2021.13.1", "org.hpcbundle.mpi.install": "pip", "org.hpcbundle.horovod": "0.28.1", "org.hpcbundle.horovod.controllers": "mpi,gloo", "org.hpcbundle.horovod.tensor-operations": "mpi,gloo", "org.hpcbundle.frameworks": "tensorflow", "org.hpcbundle.manifest": "/etc/hpcbundle/manifest.json", "org.hpcbundle.mpi.transports": "ofi", "org.hpcbundle.fabric-libs": "psm2", "org.hpcbundle.tensorflow": "2.15.1"}}' > /etc/hpcbundle/manifest.json
COPY --from=slim /opt/venv /opt/venv
COPY examples/ /examples/
ENV PATH="/opt/venv/bin:${PATH}" \
    LD_LIBRARY_PATH="/opt/venv/lib:/opt/venv/lib/libfabric${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" \
    I_MPI_ROOT="/opt/venv" \
    FI_PROVIDER_PATH="/opt/venv/lib/libfabric/prov"
LABEL org.hpcbundle.recipe="knl-intelmpi-tf2.15" \
    org.hpcbundle.hpcbundle-version="0.1.0" \
    org.hpcbundle.os="ubuntu22.04" \
    org.hpcbundle.python="3.10" \
    org.hpcbundle.mpi.flavour="intelmpi" \
    org.hpcbundle.mpi.version="2021.13.1" \
    org.hpcbundle.mpi.install="pip" \
    org.hpcbundle.horovod="0.28.1" \
    org.hpcbundle.horovod.controllers="mpi,gloo" \
    org.hpcbundle.horovod.tensor-operations="mpi,gloo" \
    org.hpcbundle.frameworks="tensorflow" \
    org.hpcbundle.manifest="/etc/hpcbundle/manifest.json" \
    org.hpcbundle.mpi.transports="ofi" \
    org.hpcbundle.fabric-libs="psm2" \
    org.hpcbundle.tensorflow="2.15.1"
CMD ["horovodrun", "--check-build"]
