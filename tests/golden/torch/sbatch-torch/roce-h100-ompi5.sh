#!/bin/bash
# roce-h100-ompi5: RoCE GPU cluster, 8x H100 per node, Open MPI 5.0 mpirun (prterun syntax) + UCX, Apptainer --nv
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --mem=0
#SBATCH --time=08:00:00
#SBATCH --partition=h100
#SBATCH --gres=gpu:8
#SBATCH --chdir=/home/user/project
#SBATCH --exclusive
set -euo pipefail

# Module scripts are not nounset-safe, so -u is off while they run.
set +u
module load openmpi/5.0.3
module load apptainer
set -u

# torch.distributed (`hpcbundle sbatch --torch`): rank 0 runs on this node, the job's first. The ranks meet
# at its IPv4 address on eth0 (network.interfaces), never a host name, and at a port from the
# job id (61000 + SLURM_JOB_ID % 4536: above Linux's ephemeral ports, so jobs sharing a node do not collide).
MASTER_ADDR=$(ip -4 -o addr show dev eth0 scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
if [ -z "$MASTER_ADDR" ]; then
    echo "hpcbundle: $(hostname) has no IPv4 address on eth0 (network.interfaces of site roce-h100-ompi5)" >&2
    exit 2
fi
MASTER_PORT=$((61000 + SLURM_JOB_ID % 4536))
export MASTER_ADDR MASTER_PORT

# 16 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
mpirun -n 16 --bind-to none --map-by slot -x LD_LIBRARY_PATH -x PATH -x NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7 -x NCCL_IB_TC=106 -x NCCL_IB_SL=3 -x UCX_NET_DEVICES=mlx5_0:1 -x UCX_IB_TRAFFIC_CLASS=106 -x UCX_IB_SL=3 -x HOROVOD_CYCLE_TIME=0.1 --mca pml ucx -x OMP_NUM_THREADS=12 --mca btl_tcp_if_include eth0 --prtemca oob_tcp_if_include eth0 -x NCCL_SOCKET_IFNAME=eth0 -x NCCL_NET=IB -x GLOO_SOCKET_IFNAME=eth0 -x MASTER_ADDR -x MASTER_PORT \
    apptainer exec --nv horovod.sif \
    hpcbundle-bind 0,0,0,0,1,1,1,1 \
    hpcbundle-torchenv ompi python train.py
