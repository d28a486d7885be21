#!/bin/bash
# seed-v100: the seed's 4-node V100 InfiniBand cluster as documented (Open MPI 3.1 openib, Singularity --nv); ib-v100 is the recommended site
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
mpirun -np 4 -x LD_LIBRARY_PATH -x PATH -x HOROVOD_MPI_THREADS_DISABLE=1 -x 'NCCL_SOCKET_IFNAME=^virbr0,lo' -mca btl openib,self -mca pml ob1 -x OMP_NUM_THREADS=20 \
    singularity exec --nv horovod.sif \
    python /examples/keras_train.py
