#!/bin/bash
# Elastic Horovod host discovery for site eth-cpu-elastic, written by hpcbundle 0.1.0.
# horovodrun runs it every second (--host-discovery-script) and takes the HOST:SLOTS lines it
# prints as the hosts the job may use now: a host that leaves the list loses its ranks, a host
# that joins it is taken in at the job's next commit. Regenerate it rather than edit it.
set -uo pipefail
# The hosts of this hostfile (read again at each run) whose ssh port answers within 2 s: a node that
# is down is left out before horovodrun tries to start ranks there. Its lines follow the grammar
# `hpcbundle launch` parses with (hpcbundle.launch.hostfile, rendered here): `host`, `host:N` or
# `host slots=N`, ASCII spaces and tabs, `#` comments; a line it refuses is skipped and named on stderr.
export LC_ALL=C
hostfile=/cluster/job/hosts
port=22
skip_re=$'^[ \t]*(#.*)?$'
host_re=$'^[ \t]*([A-Za-z0-9][-A-Za-z0-9._]{0,252})(:([1-9][0-9]{0,5})|[ \t]+slots=([1-9][0-9]{0,5}))?([ \t]+#.*|[ \t]*)$'
if ! [ -r "$hostfile" ]; then
    echo "hpcbundle discovery: cannot read the hostfile $hostfile" >&2
    exit 1
fi
number=0
while IFS= read -r line || [ -n "$line" ]; do
    number=$((number + 1))
    line=${line%$'\r'}
    [[ $line =~ $skip_re ]] && continue
    host='' slots=0
    if [[ $line =~ $host_re ]]; then
        host=${BASH_REMATCH[1]} slots=${BASH_REMATCH[3]:-${BASH_REMATCH[4]:-1}}
    fi
    if ((slots < 1 || slots > 100000)); then
        echo "hpcbundle discovery: skipped line $number of $hostfile: not HOST, HOST:N or HOST slots=N (N 1 to 100000)" >&2
        continue
    fi
    # shellcheck disable=SC2016  # $1 and $2 are the probe's arguments: the host is data, never code
    if timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$host" "$port" 2>/dev/null; then
        echo "$host:$slots"
    fi
done < <(tr '\000' '\001' <"$hostfile")
exit 0
