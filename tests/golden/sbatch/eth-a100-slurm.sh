#!/bin/bash
# eth-a100-slurm: Ethernet GPU cluster under SLURM, 4x A100 per node, 100 GbE (no RDMA), srun --mpi=pmix + Apptainer --nv
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=01:00:00
#SBATCH --partition=gpu
#SBATCH --account=ml
#SBATCH --gres=gpu:4
#SBATCH --exclusive
set -euo pipefail

# Module scripts are not nounset-safe, so -u is off while they run.
set +u
module load apptainer
set -u

# Site prologue (slurm.prologue)
nvidia-smi -L

# 8 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
env NCCL_IB_DISABLE=1 PMIX_MCA_gds=hash OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=16 OMPI_MCA_btl_tcp_if_include=eth0 NCCL_SOCKET_IFNAME=eth0 NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4 \
    srun --mpi=pmix -n 8 --kill-on-bad-exit=1 -c 16 \
    apptainer exec --nv --bind /scratch --bind /var/spool/slurmd horovod.sif \
    python train.py --lr '0.1 * $WORLD'
