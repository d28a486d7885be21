#!/bin/bash
# eth-cpu-elastic: Ethernet CPU cluster under SLURM, elastic Horovod (horovodrun --gloo, 2 to 8 nodes), Apptainer
# Written by hpcbundle 0.1.0 (`hpcbundle sbatch`); regenerate it rather than edit it.
#SBATCH --job-name=horovod
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=48
#SBATCH --mem=0
#SBATCH --time=12:00:00
#SBATCH --partition=cpu
#SBATCH --chdir=/home/user/project
#SBATCH --no-kill
#SBATCH --exclusive
set -euo pipefail

# This job's private directory on this node (mktemp -d: mode 0700, a name no one can guess or take
# first in a shared /tmp), removed when the script exits, holds:
#   the elastic discovery script and its node-state cache
job_tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpcbundle.XXXXXXXX")
trap 'rm -rf "$job_tmp"' EXIT

# Elastic Horovod (faults.elastic): horovodrun runs on this node's host, outside the image, so the
# host needs a Python with Horovod (a module in slurm.modules, or pip install horovod).
if ! command -v horovodrun >/dev/null; then
    echo "hpcbundle: horovodrun is not on PATH on $(hostname): elastic Horovod (faults.elastic of site eth-cpu-elastic) runs it on the host, outside the image; install Horovod in a host Python or load its module (slurm.modules)" >&2
    exit 2
fi
# horovodrun runs the discovery script every second to learn which of the job's nodes it may use:
# this job's own, in its private directory.
cat >"$job_tmp/discover-hosts.sh" <<'HPCBUNDLE_DISCOVERY'
#!/bin/bash
# Elastic Horovod host discovery for site eth-cpu-elastic, written by hpcbundle 0.1.0.
# horovodrun runs it every second (--host-discovery-script) and takes the HOST:SLOTS lines it
# prints as the hosts the job may use now: a host that leaves the list loses its ranks, a host
# that joins it is taken in at the job's next commit. Regenerate it rather than edit it.
set -uo pipefail
# The nodes of this SLURM job that SLURM does not mark down, drained or not responding (the job
# runs with --no-kill, so it keeps its other nodes when one fails).
slots=${SLURM_NTASKS_PER_NODE:-1}
slots=${slots%%(*}
# SLURM's node states are asked at most once per 30 s
# (faults.elastic.discovery_interval) and kept in a file beside this script (its job's own: the batch
# script's private directory, or a name with the site and job): horovodrun runs this script every
# second, and a sinfo per second per job would load the controller.
hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST") || exit 1
cache="$0.states"
age=$(($(date +%s) - $(stat -c %Y "$cache" 2>/dev/null || echo 0)))
if ((age >= 30)); then
    fresh=$(mktemp "$cache.XXXXXX") || exit 1
    sinfo -h -N -n "$SLURM_JOB_NODELIST" -t down,drain,fail,no_respond -o %N >"$fresh" || { rm -f "$fresh"; exit 1; }
    mv -f "$fresh" "$cache"
fi
gone=$(cat "$cache") || exit 1
for host in $hosts; do
    if ! grep -qxF "$host" <<<"$gone"; then
        echo "$host:$slots"
    fi
done
exit 0
HPCBUNDLE_DISCOVERY
chmod 700 "$job_tmp/discover-hosts.sh"

# horovodrun --gloo writes every exported variable of this shell onto each ssh command line it runs (readable
# through ps on every node): only what the job needs stays exported for it (the site's export: among them).
while IFS= read -r name; do
    case $name in
        PATH | HOME | USER | LOGNAME | SHELL | LANG | LC_* | TZ | TMPDIR | LD_LIBRARY_PATH | PYTHONPATH | PYTHONHOME | VIRTUAL_ENV | SSH_AUTH_SOCK | SLURM_* | HOROVOD_* | APPTAINER* | SINGULARITY*) ;;
        *) export -n "${name?}" ;;
    esac
done < <(compgen -e)

# 3 ranks; `hpcbundle launch --explain` says where each word comes from. Words are
# single-quoted on purpose: the program gets them exactly as given, $ and all.
# shellcheck disable=SC2016
env HOROVOD_GLOO_TIMEOUT_SECONDS=10 OMP_NUM_THREADS=48 \
    horovodrun -np 3 --min-np 2 --max-np 8 --host-discovery-script "$job_tmp/discover-hosts.sh" --blacklist-cooldown-range 60 600 --gloo --network-interface eth0 \
    apptainer exec --bind /scratch horovod.sif \
    python /examples/pytorch_train.py
