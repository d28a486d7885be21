#!/bin/bash
# slurm-pyxis-h100: SLURM + pyxis/enroot GPU cluster, 8x H100 per node, InfiniBand, srun --mpi=pmix --container-image
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=224
#SBATCH --mem=0
#SBATCH --time=04:00:00
#SBATCH --partition=gpu
#SBATCH --gres=gpu:8
#SBATCH --chdir=/home/user/project
#SBATCH --exclusive
set -euo pipefail

# torch.distributed (`hpcbundle sbatch --torchrun`): rank 0 runs on this node, the job's first. The ranks meet
# at its IPv4 address on ib0 (network.interfaces), never a host name, and at a port from the
# job id (61000 + SLURM_JOB_ID % 4536: above Linux's ephemeral ports, so jobs sharing a node do not collide).
MASTER_ADDR=$(ip -4 -o addr show dev ib0 scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
if [ -z "$MASTER_ADDR" ]; then
    echo "hpcbundle: $(hostname) has no IPv4 address on ib0 (network.interfaces of site slurm-pyxis-h100)" >&2
    exit 2
fi
MASTER_PORT=$((61000 + SLURM_JOB_ID % 4536))
export MASTER_ADDR MASTER_PORT
# The torchrun agents' rendezvous id: new for every requeued run of this job.
HPCBUNDLE_RUN_ID="$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"
export HPCBUNDLE_RUN_ID

# 16 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
env PMIX_MCA_gds=hash NCCL_IB_HCA==mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11 HOROVOD_CYCLE_TIME=0.1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=14 OMPI_MCA_btl_tcp_if_include=ib0 NCCL_SOCKET_IFNAME=ib0 NCCL_NET=IB GLOO_SOCKET_IFNAME=ib0 \
    srun --mpi=pmix -n 2 --kill-on-bad-exit=1 -c 224 --ntasks-per-node=1 --export=ALL \
    '--container-image=registry.example.org#team/horovod:cuda13' --container-mounts=/scratch:/scratch,/home/user/project:/home/user/project --container-workdir=/home/user/project --no-container-mount-home --container-env=PMIX_MCA_gds,NCCL_IB_HCA,HOROVOD_CYCLE_TIME,OMPI_MCA_pml,OMPI_MCA_btl,OMPI_MCA_btl_vader_single_copy_mechanism,OMP_NUM_THREADS,OMPI_MCA_btl_tcp_if_include,NCCL_SOCKET_IFNAME,NCCL_NET,GLOO_SOCKET_IFNAME \
    hpcbundle-torchenv agent ib0 join_timeout=300 python -m torch.distributed.run --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --max-restarts=0 train.py
