#!/bin/sh
# Host packages the HTML report's browser test needs (crates/tierd/tests/report.rs), for a
# fresh Debian 12 machine (run as root).
#   chromium          : renders the report headless (--dump-dom, --screenshot)
#   fonts-dejavu-core : a font for the page's text (the plots embed their own font; without
#                       any font Chromium draws the HTML text as empty boxes)
# Idempotent: apt-get install is a no-op when everything is present.
set -eu
PKGS="chromium fonts-dejavu-core"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $missing
fi
chromium --version
