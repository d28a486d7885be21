#!/usr/bin/env bash
# The `apptainer build` flags that work for this user on this host, for `make build-sif`:
#   root                                   -> nothing (root builds as itself; --fakeroot would need
#                                             an /etc/subuid entry for root, and Apptainer refuses)
#   a user with entries in /etc/subuid and /etc/subgid (by name or uid) -> --fakeroot
#   anyone else                            -> one line on stderr saying what to pass, exit 2
# Usage: sif-build-flags.sh [UID [USER [SUBUID_FILE [SUBGID_FILE]]]] (defaults: this user, /etc/sub[ug]id).
set -euo pipefail

uid=${1:-$(id -u)}
user=${2:-$(id -un)}
subuid=${3:-/etc/subuid}
subgid=${4:-/etc/subgid}

# has_entry FILE: FILE has a line `USER:START:COUNT` or `UID:START:COUNT` with a count above 0.
has_entry() {
  [[ -r $1 ]] && awk -F: -v user="$user" -v uid="$uid" \
    '($1 == user || $1 == uid) && $3 > 0 { found = 1 } END { exit !found }' "$1"
}

if [[ $uid == 0 ]]; then
  echo ""
elif has_entry "$subuid" && has_entry "$subgid"; then
  echo "--fakeroot"
else
  echo "make build-sif: $user (uid $uid) is not root and --fakeroot needs entries for it in $subuid and $subgid:" \
    "build as root, or with sudo (make build-sif SIF_SUDO=sudo SIF_FLAGS=), or ask an admin for entries" \
    "(usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $user)" >&2
  exit 2
fi
