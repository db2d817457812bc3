#!/bin/sh
# What the package test (scripts/package-test.sh) needs on a fresh Debian 12 machine (run as
# root): cargo-deb to build the .deb, and systemd for `systemd-analyze verify` on its unit.
#   cargo-deb : `cargo install cargo-deb --locked --version 3.8.0` (about 3 minutes on two cores)
#   systemd   : systemd-analyze
# Idempotent: with both present it installs nothing.
set -eu
"$(dirname "$0")/apt-install.sh" systemd
if ! command -v cargo-deb >/dev/null 2>&1; then
  # Pinned: the asset rules scripts/package.sh relies on are those of this version.
  cargo install cargo-deb --locked --version 3.8.0
fi
cargo deb --version
systemd-analyze --version | head -1
