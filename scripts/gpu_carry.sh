#!/bin/bash
# Prepares .gpu/ (git-ignored, local to this checkout) for a machine with a GPU that has no
# network and may lack brigade's system libraries. Run it HERE (Debian 12, x86-64, network),
# then copy the tree with .gpu to the GPU machine and run scripts/gpu_session.sh there (see docs/backends.md).
#   .gpu/debs/*.deb   Debian 12 packages: Open MPI (mpirun, mpicc, libmpi + the libraries its
#                     components load), libconfig, Criterion, OpenBLAS, pkgconf, and the shared
#                     libraries they need that are not glibc / libgcc / libstdc++ / zlib /
#                     zstd / xz / bzip2; found by ldd over every ELF file of those packages
#                     on this machine (they get installed here first, by scripts/deps.sh)
#   .gpu/kjv.txt.gz   the default corpus (data/kjv.txt) that the GPU training test reads
#   .gpu/MANIFEST     package, version and size of each .deb, and the total
# gpu_session.sh unpacks the .debs with dpkg -x into a private prefix (never into /).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=.gpu

die() { echo "gpu_carry: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || die "this machine is $(uname -m); the device is x86-64: run this on an x86-64 Debian 12"
command -v apt-get >/dev/null && command -v dpkg-query >/dev/null || die "needs apt-get and dpkg (Debian 12)"
grep -q 'VERSION_ID="12"' /etc/os-release || echo "gpu_carry: warning: not Debian 12 ($(. /etc/os-release; echo "$PRETTY_NAME")); the packages come from this system's archive" >&2

# the checkout's own ignore list (works in a worktree too)
excl=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$excl")"
grep -qx '/.gpu/' "$excl" 2>/dev/null || echo '/.gpu/' >> "$excl"

# brigade's packages installed here (apt-get), so that ldd can see what they need
sh scripts/deps.sh

TOP="openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libconfig9 libconfig-dev
     libcriterion3 libcriterion-dev libopenblas0 libopenblas0-pthread libopenblas-dev
     libopenblas-pthread-dev libgfortran5 libquadmath0 pkgconf pkgconf-bin libpkgconf3 make"
# present on every glibc system the device could be, and tied to its compilers: never carried
BASE="libc6 libgcc-s1 libstdc++6 zlib1g libzstd1 liblzma5 libbz2-1.0 libcrypt1"

is_base() { case " $BASE " in *" $1 "*) return 0;; esac; return 1; }
declare -A owners=()
owner() { # package owning a file (tries the /usr and / spellings: merged /usr); cached
  local f=$1 p g
  [ -n "${owners[$f]:-}" ] && { echo "${owners[$f]}"; return; }
  for g in "$f" "$(readlink -f "$f")" "${f#/usr}" "/usr${f}"; do
    p=$(dpkg-query -S "$g" 2>/dev/null | head -1 | cut -d: -f1 || true)
    [ -n "$p" ] && { owners[$f]=$p; echo "$p"; return; }
  done
}

declare -A want=() seen=()
queue=""
for p in $TOP; do want[$p]=1; queue="$queue $p"; done
for p in $TOP; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || die "$p is not installed here (apt-get install $p)"
done
# closure over the shared libraries that the packages' ELF files load
while [ -n "${queue// /}" ]; do
  next=""
  for p in $queue; do
    for f in $(dpkg-query -L "$p" 2>/dev/null); do
      [ -f "$f" ] && [ ! -L "$f" ] || continue
      head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
      for lib in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'); do
        [ -n "${seen[$lib]:-}" ] && continue
        owner "$lib" >/dev/null; q=${owners[$lib]:-}; seen[$lib]=1
        [ -n "$q" ] || { echo "gpu_carry: warning: no package owns $lib (needed by $f)" >&2; continue; }
        is_base "$q" && continue
        [ -n "${want[$q]:-}" ] && continue
        want[$q]=1; next="$next $q"
        echo "gpu_carry: + $q (for $(basename "$f") -> $(basename "$lib"))"
      done
    done
  done
  queue=$next
done

rm -rf "$DIR/debs"; mkdir -p "$DIR/debs"
chmod 0777 "$DIR/debs" # apt-get download fetches as the user _apt
pkgs=$(printf '%s\n' "${!want[@]}" | sort)
# the version installed here (what the closure above looked at) where the archive still has
# it, else the archive's candidate
fetch() { # package
  local v; v=$(dpkg-query -W -f='${Version}' "$1")
  (cd "$DIR/debs" && { apt-get download -q "$1=$v" 2>/dev/null || apt-get download -q "$1"; }) >/dev/null
}
updated=0
for p in $pkgs; do
  fetch "$p" && continue
  if [ $updated = 0 ]; then
    echo "gpu_carry: apt-get download $p failed; running apt-get update and trying again" >&2
    apt-get update -qq; updated=1
    fetch "$p" && continue
  fi
  die "apt-get download $p failed"
done

# the corpus the tests train on
make -s data/kjv.txt >/dev/null
gzip -9c data/kjv.txt > "$DIR/kjv.txt.gz"

{
  echo "# made by scripts/gpu_carry.sh on $(date -u +%Y-%m-%dT%H:%MZ), $(. /etc/os-release; echo "$PRETTY_NAME"), $(uname -m)"
  for f in "$DIR"/debs/*.deb; do printf '%s\t%s\n' "$(du -k "$f" | cut -f1)K" "$(basename "$f")"; done
  echo "total: $(du -sh "$DIR" | cut -f1) in $(ls "$DIR"/debs/*.deb | wc -l) .deb files + kjv.txt.gz"
} > "$DIR/MANIFEST"
cat "$DIR/MANIFEST"
echo "gpu_carry: ready: $ROOT/$DIR ($(du -sh "$DIR" | cut -f1)). In the device call: carry [\".gpu\"], command: sh scripts/gpu_session.sh"
