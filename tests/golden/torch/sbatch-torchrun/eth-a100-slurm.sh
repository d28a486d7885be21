#!/bin/bash
# eth-a100-slurm: Ethernet GPU cluster under SLURM, 4x A100 per node, 100 GbE (no RDMA), srun --mpi=pmix + Apptainer --nv
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=64
#SBATCH --mem=0
#SBATCH --time=01:00:00
#SBATCH --partition=gpu
#SBATCH --account=ml
#SBATCH --gres=gpu:4
#SBATCH --chdir=/home/user/project
#SBATCH --signal=B:USR1@600
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --exclusive
set -euo pipefail

# Module scripts are not nounset-safe, so -u is off while they run.
set +u
module load apptainer
set -u

# Site prologue (slurm.prologue)
nvidia-smi -L

# torch.distributed (`hpcbundle sbatch --torchrun`): rank 0 runs on this node, the job's first. The ranks meet
# at its IPv4 address on eth0 (network.interfaces), never a host name, and at a port from the
# job id (61000 + SLURM_JOB_ID % 4536: above Linux's ephemeral ports, so jobs sharing a node do not collide).
MASTER_ADDR=$(ip -4 -o addr show dev eth0 scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
if [ -z "$MASTER_ADDR" ]; then
    echo "hpcbundle: $(hostname) has no IPv4 address on eth0 (network.interfaces of site eth-a100-slurm)" >&2
    exit 2
fi
MASTER_PORT=$((61000 + SLURM_JOB_ID % 4536))
export MASTER_ADDR MASTER_PORT
# The torchrun agents' rendezvous id: new for every requeued run of this job.
HPCBUNDLE_RUN_ID="$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"
export HPCBUNDLE_RUN_ID

# 8 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# SLURM sends USR1 to this script 600 s before the time limit (faults.signal_before_end):
# it passes it to the launcher, which passes it to the ranks; they finish the epoch, checkpoint and stop.
stopping=0
trap 'stopping=1; echo "hpcbundle: SIGUSR1, the time limit is near: the ranks checkpoint and stop" >&2; kill -USR1 "$launch_pid" 2>/dev/null || true' USR1
# shellcheck disable=SC2016
env NCCL_IB_DISABLE=1 PMIX_MCA_gds=hash HOROVOD_CYCLE_TIME=0.1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=16 OMPI_MCA_btl_tcp_if_include=eth0 NCCL_SOCKET_IFNAME=eth0 NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4 GLOO_SOCKET_IFNAME=eth0 \
    srun --mpi=pmix -n 2 --kill-on-bad-exit=1 -c 64 --ntasks-per-node=1 --export=ALL \
    apptainer exec --nv --bind /scratch --bind /var/spool/slurmd horovod.sif \
    hpcbundle-torchenv agent eth0 join_timeout=300 python -m torch.distributed.run --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d --max-restarts=0 train.py --lr '0.1 * $WORLD' &
launch_pid=$!
launch_status=0
while :; do
    wait "$launch_pid" && launch_status=0 || launch_status=$?
    kill -0 "$launch_pid" 2>/dev/null || break  # a trapped signal ends wait early: wait again
done
if [ "$stopping" = 1 ] && [ "$launch_status" -eq 0 ]; then
    echo "hpcbundle: the ranks stopped at a checkpoint before the time limit; requeueing job ${SLURM_JOB_ID} to resume from it" >&2
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$launch_status"
