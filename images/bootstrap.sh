#!/usr/bin/env bash
# Build a minimal Debian root filesystem as a tarball, offline from any container registry, using the
# host's own apt configuration (its sources files, or the mirror apt itself reports). No host name is
# written here: whatever the host's apt reaches, this reaches.
#
# usage: bootstrap.sh --output FILE.tar [--suite SUITE] [--tool auto|mmdebstrap|debootstrap] [--include a,b,c]
#
# The packages an image needs are included here (--include) so that the Dockerfile steps built on top
# run with no network at all. Exit status: 0 with the tarball written, nonzero with a reason on stderr.
set -euo pipefail

output="" suite="" tool="auto" include=""
while [ $# -gt 0 ]; do
    case "$1" in
        --output) output="$2"; shift 2 ;;
        --suite) suite="$2"; shift 2 ;;
        --tool) tool="$2"; shift 2 ;;
        --include) include="$2"; shift 2 ;;
        *) echo "bootstrap.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$output" ] || { echo "bootstrap.sh: --output is required" >&2; exit 2; }

host_suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$suite" ] || suite="$host_suite"
[ -n "$suite" ] || { echo "bootstrap.sh: the host names no release codename; pass --suite" >&2; exit 2; }
arch=$(dpkg --print-architecture)

# The first repository URI apt knows for the suite (apt parses one-line and deb822 sources alike and
# needs no network for this); an awk reading of the sources files is the fallback.
host_mirror() {
    local uri
    uri=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' "Release: $host_suite" \
        "Architecture: $arch" 2>/dev/null | head -n1 || true)
    if [ -z "$uri" ]; then
        uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
            | awk 'tolower($1)=="uris:" {print $2; exit}' || true)
    fi
    if [ -z "$uri" ] && [ -s /etc/apt/sources.list ]; then
        uri=$(awk '$1=="deb" { for (i=2;i<=NF;i++) if ($i !~ /^\[/ && $i !~ /\]$/) {print $i; exit} }' \
            /etc/apt/sources.list || true)
    fi
    [ -n "$uri" ] || { echo "bootstrap.sh: the host's apt configuration names no repository" >&2; return 1; }
    echo "${uri%/}"
}

if [ "$tool" = auto ]; then
    if command -v mmdebstrap >/dev/null 2>&1; then tool=mmdebstrap
    elif command -v debootstrap >/dev/null 2>&1; then tool=debootstrap
    else echo "bootstrap.sh: neither mmdebstrap nor debootstrap is installed; install one (apt-get install mmdebstrap)" >&2; exit 3
    fi
fi

mkdir -p "$(dirname "$output")"
case "$tool" in
    mmdebstrap)
        # Every existing file given as a mirror is pasted into the chroot's sources, so the host's own
        # files are the mirrors when the suite is the host's; another suite gets the host's mirror URI.
        srcs=()
        if [ "$suite" = "$host_suite" ]; then
            [ -s /etc/apt/sources.list ] && srcs+=(/etc/apt/sources.list)
            for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
                [ -e "$f" ] && srcs+=("$f")
            done
        fi
        [ ${#srcs[@]} -gt 0 ] || srcs=("deb $(host_mirror) $suite main")
        args=(--variant=minbase --mode=auto --format=tar)
        # Without the merged-usr hook minbase pulls usrmerge and perl (96 packages instead of 88).
        hooks=/usr/share/mmdebstrap/hooks/merged-usr
        [ -d "$hooks" ] && args+=(--hook-dir="$hooks")
        [ -n "$include" ] && args+=(--include="$include")
        mmdebstrap "${args[@]}" "$suite" "$output" "${srcs[@]}"
        ;;
    debootstrap)
        mirror=$(host_mirror)
        work=$(mktemp -d)
        trap 'rm -rf "$work"' EXIT
        args=(--variant=minbase --merged-usr)
        [ -n "$include" ] && args+=(--include="$include")
        debootstrap "${args[@]}" "$suite" "$work/root" "$mirror" >&2
        rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"* || true
        tar --numeric-owner -C "$work/root" -cf "$output" .
        ;;
    *) echo "bootstrap.sh: unknown tool $tool (auto, mmdebstrap or debootstrap)" >&2; exit 2 ;;
esac
echo "bootstrap.sh: $tool wrote $output ($suite, $arch)" >&2
