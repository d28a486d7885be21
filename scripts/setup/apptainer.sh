#!/usr/bin/env bash
# Give the virtualenv VENV a real Apptainer (`apptainer` and `singularity` in VENV/bin) where the host
# has neither command; a host's own is used as it is.
#
# Debian 12 has no apptainer package, so this takes Debian sid's: `apt-get download` with a private
# apt configuration (its own sources list, lists and cache in a temp dir: the system's apt state is
# not touched), from the Debian mirror the host's own apt uses (`apt-get indextargets`), suite sid.
# The package is unpacked under $HPCBUNDLE_CACHE/apptainer/<version>-<arch>-<glibc>.<hash8>/, with
# the links Apptainer's relocatable layout needs (it finds etc/ and var/ beside the prefix it derives
# from where its binaries are: usr/ for `apptainer`, usr/lib/ for the starter).
#
# sid's binaries need glibc 2.38 for two symbols only, __isoc23_strtol and __isoc23_strtoul (C23's
# strtol/strtoul, which also read 0b binary literals). On an older glibc (Debian 12: 2.36) a shim
# library defines them by calling strtol/strtoul, patchelf clears the two symbols' version and links
# the shim, and elf_versions.py points the GLIBC_2.38 requirement at a version the host has. If the
# package needs anything else beyond the host's glibc, this refuses, naming it. Where glibc has them
# (Debian 13: 2.41) nothing is patched.
#
# Idempotent: when VENV/bin/apptainer runs, it returns at once; a cached entry is linked without a
# download. Installs are checked with `apptainer version` and moved into the cache only when whole.
#
# Usage: scripts/setup/apptainer.sh [VENV]     (VENV defaults to <repo>/.venv)
# Env:   HPCBUNDLE_CACHE          cache root (default $HOME/.cache/hpcbundle)
#        HPCBUNDLE_DEBIAN_MIRROR  the Debian mirror to use instead of the host's own
set -euo pipefail

PACKAGE=apptainer
SUITE=sid
SHIM_SYMBOLS=(__isoc23_strtol __isoc23_strtoul)
SHIM_LIBRARY=libhpcbundle-isoc23.so
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

log() { printf 'apptainer: %s\n' "$*"; }
die() { printf 'apptainer: error: %s\n' "$*" >&2; exit 1; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/../.." && pwd)
VENV=${1:-$repo_root/.venv}
[[ -d $VENV/bin ]] || die "no virtualenv at $VENV (run scripts/setup/python-env.sh first)"
VENV=$(cd "$VENV" && pwd)
start=$SECONDS

if "$VENV/bin/apptainer" version >/dev/null 2>&1; then
    log "$("$VENV/bin/apptainer" version) already in $VENV/bin"
    exit 0
fi
for command in apptainer singularity; do
    found=$(command -v "$command" || true)
    if [[ -n $found && $found != "$VENV/bin/$command" ]]; then
        log "using the host's $command ($found): nothing to install"
        exit 0
    fi
done

# ---- what this host needs: the glibc it has, and where its Debian mirror is --------------------------
glibc=$(getconf GNU_LIBC_VERSION) || die "getconf GNU_LIBC_VERSION failed: not a glibc system"
glibc=${glibc#glibc }
arch=$(dpkg --print-architecture) || die "dpkg not found: this script targets Debian"

newer_than_host() {  # true when glibc version $1 is newer than the host's
    [[ $1 != "$glibc" && $(printf '%s\n%s\n' "$1" "$glibc" | sort -V | tail -n 1) == "$1" ]]
}

debian_mirror() {  # the URI the host's apt uses for its own release's main component
    if [[ -n ${HPCBUNDLE_DEBIAN_MIRROR:-} ]]; then
        printf '%s\n' "$HPCBUNDLE_DEBIAN_MIRROR"
        return
    fi
    local codename
    codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
    # shellcheck disable=SC2016  # $(...) is apt's field syntax, not the shell's
    apt-get indextargets --format '$(RELEASE) $(COMPONENT) $(REPO_URI)' 'Identifier: Packages' \
        | awk -v suite="$codename" '$1 == suite && $2 == "main" { print $3; exit }'
}

# ---- sid's package index, read with a private apt configuration ---------------------------------------
apt_options=()
private_apt() {  # DIR: apt_options for a configuration of its own in DIR (the mirror's sid), updated
    local dir=$1 mirror signed_by=""
    mirror=$(debian_mirror)
    [[ -n $mirror ]] || die "no Debian mirror in this host's apt sources: set HPCBUNDLE_DEBIAN_MIRROR to one"
    [[ -f $KEYRING ]] && signed_by="[signed-by=$KEYRING] "
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/parts"
    printf 'deb %s%s %s main\n' "$signed_by" "$mirror" "$SUITE" >"$dir/sources.list"
    apt_options=(-q
        -o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/parts"
        -o "Dir::Etc::Preferences=$dir/preferences" -o "Dir::Etc::PreferencesParts=$dir/parts"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache"
        -o "APT::Sandbox::User=$(id -un)")
    log "reading $SUITE's package index from $mirror (a private apt configuration)"
    apt-get "${apt_options[@]}" update >"$dir/apt.log" 2>&1 || die "apt-get update of $SUITE failed: $(tail -n 1 "$dir/apt.log")"
}

# ---- the glibc symbols the package needs beyond the host's ---------------------------------------
elf_files() {  # every ELF file under $1
    local file
    while IFS= read -r -d '' file; do
        [[ $(head -c 4 "$file" | od -An -c | tr -d ' ') == 177ELF ]] && printf '%s\n' "$file"
    done < <(find "$1" -type f -print0)
}

newer_symbols() {  # FILE: "symbol GLIBC_x.y" for each symbol FILE takes from a glibc newer than the host's
    local symbol version
    objdump -T "$1" | awk '/\*UND\*/ { for (i = 1; i < NF; i++) if ($i ~ /^\(GLIBC_[0-9.]+\)$/)
        print $NF, substr($i, 8, length($i) - 8) }' \
        | while read -r symbol version; do
            if newer_than_host "$version"; then printf '%s GLIBC_%s\n' "$symbol" "$version"; fi
        done
}

shim() {  # ROOT: make the package under ROOT run on the host's glibc
    local root=$1 file line symbol version needed=() patched=() missing=()
    while IFS= read -r file; do
        mapfile -t needed < <(newer_symbols "$file")
        ((${#needed[@]})) && patched+=("$file")
        for line in "${needed[@]}"; do
            read -r symbol version <<<"$line"
            [[ " ${SHIM_SYMBOLS[*]} " == *" $symbol "* ]] || missing+=("$symbol@$version (${file#"$root"/})")
        done
    done < <(elf_files "$root")
    ((${#missing[@]} == 0)) || die "$PACKAGE now needs ${missing[*]} beyond this host's glibc $glibc," \
        "which the shim does not provide: extend the shim (SHIM_SYMBOLS) in scripts/setup/apptainer.sh, or" \
        "install Apptainer from your distribution"
    if ((${#patched[@]} == 0)); then
        log "glibc $glibc has every symbol $PACKAGE needs: no shim"
        return
    fi
    command -v patchelf >/dev/null 2>&1 || die "patchelf not found (run scripts/setup/host-packages.sh first)"
    command -v gcc >/dev/null 2>&1 || die "gcc not found (run scripts/setup/host-packages.sh first)"
    local shim_dir=$root/usr/lib/hpcbundle-shim
    mkdir -p "$shim_dir"
    {
        echo '#include <stdlib.h>'
        echo 'long __isoc23_strtol(const char *s, char **end, int base) { return strtol(s, end, base); }'
        echo 'unsigned long __isoc23_strtoul(const char *s, char **end, int base) { return strtoul(s, end, base); }'
    } >"$shim_dir/isoc23.c"
    gcc -shared -fPIC -O2 -o "$shim_dir/$SHIM_LIBRARY" "$shim_dir/isoc23.c" || die "cannot compile the shim"
    for file in "${patched[@]}"; do
        mapfile -t needed < <(newer_symbols "$file")
        local clear=() versions=()
        for line in "${needed[@]}"; do
            read -r symbol version <<<"$line"
            clear+=(--clear-symbol-version "$symbol")
            [[ " ${versions[*]} " == *" $version "* ]] || versions+=("$version")
        done
        # One change per patchelf call: patchelf 0.14 garbles the run path when given several.
        patchelf "${clear[@]}" "$file"
        patchelf --add-needed "$SHIM_LIBRARY" "$file"
        patchelf --add-rpath "\$ORIGIN/$(realpath --relative-to="$(dirname "$file")" "$shim_dir")" "$file"
        python3 "$script_dir/elf_versions.py" "$file" "${versions[@]}" >/dev/null \
            || die "cannot rewrite the glibc version requirements of ${file#"$root"/}"
        log "shimmed ${file#"$root"/}: ${needed[*]}"
    done
}

# ---- unpack, shim, check, and move into the cache ------------------------------------------------------
install_entry() {  # DEB ENTRY: unpack DEB into the cache entry ENTRY (via $work, removed on exit)
    local deb=$1 entry=$2 root=$work/root
    dpkg-deb -x "$deb" "$root" || die "cannot unpack $(basename "$deb")"
    # The relocatable layout: `apptainer` (usr/bin) takes usr/ as its prefix, the starter
    # (usr/lib/<triplet>/apptainer/bin) takes usr/lib/; both look for etc/ and var/ beside it.
    ln -s ../etc "$root/usr/etc"
    ln -s ../var "$root/usr/var"
    ln -s ../../etc "$root/usr/lib/etc"
    ln -s ../../var "$root/usr/lib/var"
    shim "$root"
    "$root/usr/bin/apptainer" version >/dev/null 2>"$work/version.err" \
        || die "the unpacked $PACKAGE does not run: $(tail -n 1 "$work/version.err")"
    mv -T "$root" "$entry" || die "cannot move $PACKAGE into $entry"
}

cache_root=${HPCBUNDLE_CACHE:-$HOME/.cache/hpcbundle}/apptainer
mkdir -p "$cache_root" || die "cannot create cache dir $cache_root"
exec 9>"$cache_root/.lock"
flock 9
work=$(mktemp -d "$cache_root/.fetch.XXXXXX")
# shellcheck disable=SC2064  # expand $work now
trap "rm -rf '$work'" EXIT
trap 'exit 130' INT TERM

private_apt "$work/apt"
version=$(apt-cache "${apt_options[@]}" show --no-all-versions "$PACKAGE" 2>/dev/null | sed -n 's/^Version: //p')
[[ -n $version ]] || die "$SUITE has no $PACKAGE package for $arch"
recipe_hash=$(cat "$script_dir/apptainer.sh" "$script_dir/elf_versions.py" | sha256sum | cut -c1-8)
entry=$cache_root/$version-$arch-glibc$glibc.$recipe_hash
if [[ -x $entry/usr/bin/apptainer ]]; then
    log "cache hit: $entry"
else
    mkdir "$work/deb"
    (cd "$work/deb" && apt-get "${apt_options[@]}" download "$PACKAGE") >>"$work/apt/apt.log" 2>&1 \
        || die "apt-get download $PACKAGE failed: $(tail -n 1 "$work/apt/apt.log")"
    log "installing $PACKAGE $version for glibc $glibc into $entry"
    install_entry "$work/deb/${PACKAGE}_"*.deb "$entry"
fi

for command in apptainer singularity; do
    ln -sfn "$entry/usr/bin/apptainer" "$VENV/bin/$command"
done
log "$("$VENV/bin/apptainer" version) in $VENV/bin (apptainer, singularity) in $((SECONDS - start))s"
