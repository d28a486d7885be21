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

# Elastic Horovod (faults.elastic): horovodrun runs on this node's host, outside the image, so the
# host needs a Python with Horovod (a module in slurm.modules, or pip install horovod).
if ! command -v horovodrun >/dev/null; then
    echo "hpcbundle: horovodrun is not on PATH on $(hostname): elastic Horovod (faults.elastic of site eth-cpu-elastic) runs it on the host, outside the image; install Horovod in a host Python or load its module (slurm.modules)" >&2
    exit 2
fi
# horovodrun runs the discovery script every second to learn which of the
# job's nodes it may use. Written whole (a temp file, then a rename): jobs sharing this directory
# write the same text.
discovery_tmp="$(mktemp ./.hpcbundle-discover-hosts.XXXXXX)"
cat >"$discovery_tmp" <<'HPCBUNDLE_DISCOVERY'
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
# (faults.elastic.discovery_interval) and kept in a file of this node: horovodrun runs this script every
# second, and a sinfo per second per job would load the controller.
hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST") || exit 1
cache="${TMPDIR:-/tmp}/hpcbundle-node-states.${SLURM_JOB_ID:-$PPID}"
age=$(($(date +%s) - $(stat -c %Y "$cache" 2>/dev/null || echo 0)))
if ((age >= 30)); then
    sinfo -h -N -n "$SLURM_JOB_NODELIST" -t down,drain,fail,no_respond -o %N >"$cache.$$" || exit 1
    mv -f "$cache.$$" "$cache"
fi
gone=$(cat "$cache") || exit 1
for host in $hosts; do
    if ! grep -qxF "$host" <<<"$gone"; then
        echo "$host:$slots"
    fi
done
exit 0
HPCBUNDLE_DISCOVERY
chmod 755 "$discovery_tmp"
mv -f "$discovery_tmp" ./hpcbundle-discover-hosts.sh

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
    horovodrun -np 3 --min-np 2 --max-np 8 --host-discovery-script ./hpcbundle-discover-hosts.sh --blacklist-cooldown-range 60 600 --gloo --network-interface eth0 \
    apptainer exec --bind /scratch horovod.sif \
    python /examples/pytorch_train.py
