#!/bin/sh
# Installs the Debian packages named as arguments that are not installed yet (run as root).
# Shared by vm-deps.sh, report-deps.sh and doc-deps.sh. Idempotent: with everything present
# it neither updates the package lists nor installs anything.
set -eu
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $missing
fi
