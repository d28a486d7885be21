#!/bin/bash
# ib-a100-ucx: InfiniBand GPU cluster, 4x A100 + 4 HCAs per node, Open MPI 4.1 mpirun + UCX (pml ucx), NCCL over IB, Singularity --nv
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --mem=0
#SBATCH --time=04:00:00
#SBATCH --partition=gpu
#SBATCH --gres=gpu:4
#SBATCH --chdir=/home/user/project
#SBATCH --exclusive
set -euo pipefail

# Module scripts are not nounset-safe, so -u is off while they run.
set +u
module load openmpi/4.1.6
module load singularity
set -u

# torch.distributed (`hpcbundle sbatch --torch`): rank 0 runs on this node, the job's first. The ranks meet
# at its IPv4 address on ib0 (network.interfaces), never a host name, and at a port from the
# job id (61000 + SLURM_JOB_ID % 4536: above Linux's ephemeral ports, so jobs sharing a node do not collide).
MASTER_ADDR=$(ip -4 -o addr show dev ib0 scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
if [ -z "$MASTER_ADDR" ]; then
    echo "hpcbundle: $(hostname) has no IPv4 address on ib0 (network.interfaces of site ib-a100-ucx)" >&2
    exit 2
fi
MASTER_PORT=$((61000 + SLURM_JOB_ID % 4536))
export MASTER_ADDR MASTER_PORT

# 8 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
mpirun -np 8 --bind-to none --map-by slot -x LD_LIBRARY_PATH -x PATH -x NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3 -x UCX_NET_DEVICES=mlx5_0:1 -x HOROVOD_CYCLE_TIME=0.1 --mca pml ucx --mca btl '^openib' -x OMP_NUM_THREADS=16 --mca btl_tcp_if_include ib0 --mca oob_tcp_if_include ib0 -x NCCL_SOCKET_IFNAME=ib0 -x NCCL_NET=IB -x GLOO_SOCKET_IFNAME=ib0 -x MASTER_ADDR -x MASTER_PORT \
    singularity exec --nv horovod.sif \
    hpcbundle-torchenv ompi python /examples/pytorch_train.py
