#!/bin/bash
# slurm-pyxis-h100: SLURM + pyxis/enroot GPU cluster, 8x H100 per node, InfiniBand, srun --mpi=pmix --container-image
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=28
#SBATCH --mem=0
#SBATCH --time=04:00:00
#SBATCH --partition=gpu
#SBATCH --gres=gpu:8
#SBATCH --chdir=/home/user/project
#SBATCH --exclusive
set -euo pipefail

# 16 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
env PMIX_MCA_gds=hash NCCL_IB_HCA==mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11 HOROVOD_CYCLE_TIME=0.1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=14 OMPI_MCA_btl_tcp_if_include=ib0 NCCL_SOCKET_IFNAME=ib0 NCCL_NET=IB \
    srun --mpi=pmix -n 16 --kill-on-bad-exit=1 -c 28 --ntasks-per-node=8 --distribution=block:block --export=ALL \
    '--container-image=registry.example.org#team/horovod:cuda13' --container-mounts=/scratch:/scratch,/home/user/project:/home/user/project --container-workdir=/home/user/project --no-container-mount-home --container-env=PMIX_MCA_gds,NCCL_IB_HCA,HOROVOD_CYCLE_TIME,OMPI_MCA_pml,OMPI_MCA_btl,OMPI_MCA_btl_vader_single_copy_mechanism,OMP_NUM_THREADS,OMPI_MCA_btl_tcp_if_include,NCCL_SOCKET_IFNAME,NCCL_NET \
    python train.py
