#!/bin/sh
# Host packages the man-page test needs (crates/tierd/tests/gen.rs renders `tierd man` with
# groff and fails on any warning), for a fresh Debian 12 machine (run as root).
#   groff-base : groff with the man macros
# Idempotent: apt-get install is a no-op when everything is present.
set -eu
if ! dpkg-query -W -f='${Status}' groff-base 2>/dev/null | grep -q 'install ok installed'; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends groff-base
fi
groff --version | head -1
