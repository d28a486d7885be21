#!/bin/bash
# stampede2-knl: historical (Stampede2 is retired) TACC Stampede2 KNL flat-quadrant (68-core Xeon Phi 7250, no GPU), Intel MPI 18 mpiexec.hydra, 1 rank/node, taskset + numactl
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=272
#SBATCH --time=02:00:00
#SBATCH --partition=flat-quadrant
#SBATCH --chdir=/home/user/project
set -euo pipefail

# Module scripts are not nounset-safe, so -u is off while they run.
set +u
module load intel/18.0.2
module load impi/18.0.2
module load tacc-singularity
set -u

# 2 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
env TF_NUM_INTRAOP_THREADS=64 TF_NUM_INTEROP_THREADS=3 FI_PROVIDER=psm2 \
    mpiexec.hydra -l -ppn 1 -n 2 \
    taskset -c 0-63,68-131,136-199,204-267 numactl -p 1 \
    python scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py --model resnet50 --batch_size 128 --variable_update horovod --data_format NCHW --num_intra_threads 64 --num_inter_threads 3 --distortions=False --num_batches 200
