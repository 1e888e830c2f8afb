#!/bin/sh
# Installs brigade's build and test dependencies from Debian packages when they are missing.
# Run by the Makefile before anything is compiled; safe to run again (it checks first).
set -e
# BRIGADE_DEPS=skip: the libraries come from elsewhere (scripts/gpu_session.sh's prefix)
if [ "${BRIGADE_DEPS:-}" = skip ]; then echo "brigade: BRIGADE_DEPS=skip: no packages installed" >&2; exit 0; fi
PKGS="libopenmpi-dev openmpi-bin libconfig-dev libcriterion-dev libopenblas-dev pkg-config bible-kjv-text bible-kjv"
need=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
[ -z "$need" ] && exit 0
echo "brigade: installing missing packages:$need" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >&2
