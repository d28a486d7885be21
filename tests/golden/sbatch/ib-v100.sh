#!/bin/bash
# ib-v100: 4 nodes f1..f4, 2x V100 each, InfiniBand (NCCL) + IPoIB (MPI over TCP), Open MPI 4.1 mpirun, Singularity --nv
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=20
#SBATCH --mem=0
#SBATCH --time=02:00:00
#SBATCH --partition=gpu
#SBATCH --gres=gpu:2
#SBATCH --chdir=/home/user/project
#SBATCH --exclusive
set -euo pipefail

# Module scripts are not nounset-safe, so -u is off while they run.
set +u
module load singularity
set -u

# 4 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
mpirun -np 4 -bind-to none -map-by slot -x LD_LIBRARY_PATH -x PATH -x HOROVOD_CYCLE_TIME=0.1 -mca btl self,vader,tcp -mca pml ob1 -x OMP_NUM_THREADS=20 -mca btl_tcp_if_include ib0 -mca oob_tcp_if_include ib0 -x NCCL_SOCKET_IFNAME=ib0 -x NCCL_NET=IB \
    singularity exec --nv horovod.sif \
    python /examples/keras_train.py
