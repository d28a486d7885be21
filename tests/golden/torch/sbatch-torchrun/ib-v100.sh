#!/bin/bash
# ib-v100: 4 nodes f1..f4, 2x V100 each, InfiniBand (NCCL) + IPoIB (MPI over TCP), Open MPI 4.1 mpirun, Singularity --nv
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=40
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

# torch.distributed (`hpcbundle sbatch --torchrun`): rank 0 runs on this node, the job's first. The ranks meet
# at its IPv4 address on ib0 (network.interfaces), never a host name, and at a port from the
# job id (61000 + SLURM_JOB_ID % 4536: above Linux's ephemeral ports, so jobs sharing a node do not collide).
MASTER_ADDR=$(ip -4 -o addr show dev ib0 scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
if [ -z "$MASTER_ADDR" ]; then
    echo "hpcbundle: $(hostname) has no IPv4 address on ib0 (network.interfaces of site ib-v100)" >&2
    exit 2
fi
MASTER_PORT=$((61000 + SLURM_JOB_ID % 4536))
export MASTER_ADDR MASTER_PORT
# The torchrun agents' rendezvous id: new for every requeued run of this job.
HPCBUNDLE_RUN_ID="$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"
export HPCBUNDLE_RUN_ID

# 4 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
mpirun -np 2 -bind-to none -map-by slot -x LD_LIBRARY_PATH -x PATH -x HOROVOD_CYCLE_TIME=0.1 -mca btl self,vader,tcp -mca pml ob1 -x OMP_NUM_THREADS=20 -mca btl_tcp_if_include ib0 -mca oob_tcp_if_include ib0 -x NCCL_SOCKET_IFNAME=ib0 -x NCCL_NET=IB -x GLOO_SOCKET_IFNAME=ib0 -x MASTER_ADDR -x MASTER_PORT -x HPCBUNDLE_RUN_ID \
    singularity exec --nv horovod.sif \
    hpcbundle-torchenv agent ib0 join_timeout=300 python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --max-restarts=0 /examples/keras_train.py
