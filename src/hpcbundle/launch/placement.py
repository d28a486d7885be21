"""The gpu-numa placement wrapper: each rank on the CPUs and memory of its GPU's NUMA node (pure).

A site with node.gpu_numa (GPU index -> NUMA node) runs every rank under one inline POSIX sh
script, `sh -c SCRIPT gpu-numa MAP PROGRAM...`. It reads the rank's local rank from whatever
launcher started it (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, hydra's MPI_LOCALRANKID or
PMI_LOCAL_RANK, SLURM's SLURM_LOCALID, in that order: mpirun and hydra inside a batch job still
inherit the batch step's SLURM_LOCALID), takes the GPU Horovod programs give that rank (device
`local_rank`: the rank-th entry of CUDA_VISIBLE_DEVICES when it lists several, the one given when
the launcher chose one, else GPU `local_rank`), and execs the program under `numactl
--cpunodebind=N --membind=N` for that GPU's node N, or, where numactl is missing (slim images),
`taskset -c` over the node's CPUs (memory then follows first touch).

It leaves CUDA_VISIBLE_DEVICES as it is, so `torch.cuda.set_device(hvd.local_rank())`, the line
every Horovod program has, still finds its GPU. Inline rather than a file: it needs only sh, so it
runs on the host and inside any image (images do not carry hpcbundle), and the map, validated
integers, is its only argument: nothing from the site runs as code.
"""

from __future__ import annotations

from typing import Sequence

LINES = (
    "map=$1",
    "shift",
    'nth() { rest=$1, i=0; while [ -n "$rest" ]; do if [ "$i" -eq "$2" ]; then echo "${rest%%,*}"; return; fi;'
    " rest=${rest#*,}; i=$((i + 1)); done; }",
    "rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${PMI_LOCAL_RANK:-${SLURM_LOCALID:-}}}}",
    'case $rank in "" | *[!0-9]* | ??????*) echo "gpu-numa: no local rank from Open MPI, hydra or SLURM'
    ' (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK, SLURM_LOCALID)" >&2; exit 2 ;; esac',
    'case ${CUDA_VISIBLE_DEVICES:-} in *,*) gpu=$(nth "$CUDA_VISIBLE_DEVICES" "$rank") ;;'
    ' "") gpu=$rank ;; *) gpu=$CUDA_VISIBLE_DEVICES ;; esac',
    'case $gpu in "" | *[!0-9]* | ??????*) numa="" ;; *) numa=$(nth "$map" "$gpu") ;; esac',
    'if [ -z "$numa" ]; then echo "gpu-numa: local rank $rank has no GPU in the map'
    ' (node.gpu_numa: $map; CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES:-unset})" >&2; exit 2; fi',
    'if command -v numactl >/dev/null 2>&1; then exec numactl --cpunodebind="$numa" --membind="$numa" "$@"; fi',
    'exec taskset -c "$(cat "/sys/devices/system/node/node$numa/cpulist")" "$@"',
)
SCRIPT = "; ".join(LINES)
"""The wrapper's sh text: $1 is the map ('0,0,1,1'), the rest the command it execs."""
NAME = "gpu-numa"


def gpu_numa_wrapper(gpu_numa: Sequence[int]) -> list[str]:
    """The argv words in front of a rank's command for the map `gpu_numa` (GPU index -> NUMA node).

    >>> gpu_numa_wrapper([0, 0, 1, 1])[3:]
    ['gpu-numa', '0,0,1,1']
    """
    return ["sh", "-c", SCRIPT, NAME, ",".join(str(int(node)) for node in gpu_numa)]
