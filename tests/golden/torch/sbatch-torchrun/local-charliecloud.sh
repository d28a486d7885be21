#!/bin/bash
# local-charliecloud: this machine with Charliecloud ch-run (unprivileged), Debian's Open MPI 4.1.4 outside, one container per rank
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=00:10:00
#SBATCH --partition=debug
#SBATCH --chdir=/home/user/project
set -euo pipefail

# torch.distributed (`hpcbundle sbatch --torchrun`): rank 0 runs on this node, the job's first. The ranks meet
# on this node (one node: the site names no network.interfaces), at a port from the job id (61000 + SLURM_JOB_ID % 4536).
MASTER_ADDR=127.0.0.1
MASTER_PORT=$((61000 + SLURM_JOB_ID % 4536))
export MASTER_ADDR MASTER_PORT
# The torchrun agents' rendezvous id: new for every requeued run of this job.
HPCBUNDLE_RUN_ID="$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"
export HPCBUNDLE_RUN_ID

# 2 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
mpirun --allow-run-as-root -np 1 --oversubscribe --bind-to none --map-by slot --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1 \
    ch-run -b /home/user/project --cd=/home/user/project --set-env /var/tmp/cpu-local -- \
    hpcbundle-torchenv agent - '' python3 -m torch.distributed.run --standalone --nproc-per-node=2 --max-restarts=0 /examples/pytorch_train.py
