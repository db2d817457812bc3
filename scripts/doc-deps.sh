#!/bin/sh
# Host packages the man-page test needs (crates/tierd/tests/gen.rs renders `tierd man` with
# groff and fails on any warning), for a fresh Debian 12 machine (run as root).
#   groff-base : groff with the man macros
# Idempotent (scripts/apt-install.sh installs only what is missing).
set -eu
"$(dirname "$0")/apt-install.sh" groff-base
groff --version | head -1
