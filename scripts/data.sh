#!/bin/sh
# Prepares the default corpus: the King James Bible from Debian's bible-kjv (public domain),
# as plain ASCII text in data/kjv.txt. Installs the package first when it is missing.
set -e
out=${1:-data/kjv.txt}
[ -s "$out" ] && exit 0
command -v bible >/dev/null 2>&1 || sh "$(dirname "$0")/deps.sh"
mkdir -p "$(dirname "$out")"
bible -f -p /usr/lib 'Gen1:1-Rev22:21' > "$out.tmp" 2>/dev/null || bible -p /usr/lib 'Gen1:1-Rev22:21' > "$out.tmp"
mv "$out.tmp" "$out"
echo "brigade: prepared $out ($(wc -c < "$out") bytes)" >&2
